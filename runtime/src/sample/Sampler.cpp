//===- Sampler.cpp - Pick the next token from logits -----------------------===//
// Temperature 0 is greedy (argmax, lowest id on ties). Otherwise logits are
// divided by the temperature, optionally cut to the top k, turned into
// probabilities, optionally cut to the smallest set whose mass reaches top_p
// (nucleus), and one token is drawn with a deterministic generator seeded by
// the options (splitmix64), so a seed always reproduces a sequence.
// NaN logits are treated as -inf.
//===----------------------------------------------------------------------===//
#include "llmc/executor.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

namespace llmc {

namespace {

uint64_t splitmix64(uint64_t &state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// Uniform in [0, 1) with 53 random bits.
double uniform(uint64_t &state) { return double(splitmix64(state) >> 11) * 0x1.0p-53; }

inline float clean(float v) { return std::isnan(v) ? -INFINITY : v; }

/// The lowest id of the largest logit (NaN as -inf; all -inf or NaN: 0).
/// Two passes that vectorize, the maximum in 16 lanes (`v > m ? v : m`
/// skips NaN as MAXPS does) and then the first id that holds it, instead
/// of one loop with a branch per logit: the greedy pick of every sequence of
/// a batch runs on the engine's thread between steps.
int32_t argmax(const float *logits, int64_t vocab) {
  constexpr int kLanes = 16;
  float lane[kLanes];
  for (float &m : lane)
    m = -INFINITY;
  int64_t i = 0;
  for (; i + kLanes <= vocab; i += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const float v = logits[i + l];
      lane[l] = v > lane[l] ? v : lane[l];
    }
  float best = -INFINITY;
  for (; i < vocab; ++i)
    best = logits[i] > best ? logits[i] : best;
  for (float m : lane)
    best = m > best ? m : best;
  if (best == -INFINITY)
    return 0;
  for (int64_t k = 0; k < vocab; ++k)
    if (logits[k] == best)
      return int32_t(k);
  return 0; // not reached: best is one of the logits
}

struct Candidate {
  float logit;
  int32_t id;
};

/// Higher logit first; lower id first on ties.
inline bool before(const Candidate &a, const Candidate &b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

} // namespace

Sampler::Sampler(SamplerOptions o) : opts(o), state(o.seed) {}

double Sampler::distribution(const float *logits, int64_t vocab, std::vector<int32_t> &ids,
                             std::vector<double> &weights) const {
  ids.clear();
  weights.clear();
  std::vector<Candidate> cand(static_cast<size_t>(vocab));
  const float invT = 1.0f / opts.temperature;
  for (int64_t i = 0; i < vocab; ++i)
    cand[size_t(i)] = {clean(logits[i]) * invT, int32_t(i)};

  size_t n = cand.size();
  if (opts.top_k > 0 && size_t(opts.top_k) < n) {
    std::nth_element(cand.begin(), cand.begin() + (opts.top_k - 1), cand.end(), before);
    n = size_t(opts.top_k);
  }
  const bool nucleus = opts.top_p < 1.0f;
  if (nucleus) {
    std::sort(cand.begin(), cand.begin() + n, before);
  }

  float mx = -INFINITY;
  for (size_t i = 0; i < n; ++i)
    mx = std::max(mx, cand[i].logit);
  if (mx == -INFINITY)
    return 0.0;
  std::vector<double> prob(n);
  double total = 0;
  for (size_t i = 0; i < n; ++i)
    total += prob[i] = std::exp(double(cand[i].logit) - double(mx));

  if (nucleus) {
    // Keep the smallest prefix (by probability) whose mass reaches top_p.
    const double target = double(std::max(opts.top_p, 0.0f)) * total;
    double cum = 0;
    size_t keep = 0;
    while (keep < n) {
      cum += prob[keep++];
      if (cum >= target)
        break;
    }
    n = std::max<size_t>(keep, 1);
    total = 0;
    for (size_t i = 0; i < n; ++i)
      total += prob[i];
  }
  ids.resize(n);
  weights.assign(prob.begin(), prob.begin() + std::ptrdiff_t(n));
  for (size_t i = 0; i < n; ++i)
    ids[i] = cand[i].id;
  return total;
}

double Sampler::uniform01() { return uniform(state); }

int32_t Sampler::sample(const float *logits, int64_t vocab) {
  if (vocab <= 0 || !logits)
    throw std::runtime_error("Sampler::sample: empty logits");
  if (vocab > INT32_MAX)
    throw std::runtime_error("Sampler::sample: vocabulary too large");
  if (greedy())
    return argmax(logits, vocab);
  thread_local std::vector<int32_t> ids;
  thread_local std::vector<double> prob;
  const double total = distribution(logits, vocab, ids, prob);
  if (ids.empty()) // nothing finite: fall back to greedy
    return argmax(logits, vocab);
  const size_t n = ids.size();
  double r = uniform(state) * total;
  for (size_t i = 0; i < n; ++i) {
    r -= prob[i];
    if (r < 0)
      return ids[i];
  }
  // Rounding left r >= 0: return the last candidate with nonzero mass.
  for (size_t i = n; i-- > 0;)
    if (prob[i] > 0)
      return ids[i];
  return ids[0];
}

} // namespace llmc
