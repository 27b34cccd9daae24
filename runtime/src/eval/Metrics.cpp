//===- Metrics.cpp - Log-softmax, NLL, KL divergence, percentiles -------===//
// Implements llmc/metrics.h. All sums are in double; log-softmax subtracts
// the row maximum so that exp() never overflows whatever the logit scale.
//===----------------------------------------------------------------------===//
#include "llmc/metrics.h"
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace llmc::metrics {

void logSoftmax(const float *logits, int64_t n, double *out) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (n <= 0)
    return;
  double mx = -std::numeric_limits<double>::infinity();
  bool hasNan = false;
  for (int64_t i = 0; i < n; ++i) {
    double v = logits[i];
    if (std::isnan(v))
      hasNan = true;
    else if (v > mx)
      mx = v;
  }
  if (hasNan || !std::isfinite(mx)) {
    std::fill(out, out + n, nan);
    return;
  }
  double sum = 0;
  for (int64_t i = 0; i < n; ++i)
    sum += std::exp((double)logits[i] - mx); // exp(-inf) == 0
  // sum >= 1 (the max contributes 1). Shift first, then subtract log(sum):
  // adding log(sum) to a huge max would round it away.
  double logSum = std::log(sum);
  for (int64_t i = 0; i < n; ++i)
    out[i] = ((double)logits[i] - mx) - logSum;
}

std::vector<double> logSoftmax(const float *logits, int64_t n) {
  std::vector<double> out((size_t)std::max<int64_t>(n, 0));
  logSoftmax(logits, n, out.data());
  return out;
}

double nll(const float *logits, int64_t n, int32_t target) {
  if (target < 0 || target >= n)
    throw std::out_of_range("nll: target token " + std::to_string(target) +
                            " is outside the vocabulary (size " + std::to_string(n) + ")");
  std::vector<double> lp = logSoftmax(logits, n);
  return -lp[(size_t)target];
}

double klDivergence(const double *logp, const double *logq, int64_t n) {
  double kl = 0;
  for (int64_t i = 0; i < n; ++i) {
    double lp = logp[i];
    if (std::isnan(lp) || std::isnan(logq[i]))
      return std::numeric_limits<double>::quiet_NaN();
    if (lp == -std::numeric_limits<double>::infinity())
      continue; // p_i == 0: 0 * log(0 / q) == 0
    if (logq[i] == -std::numeric_limits<double>::infinity())
      return std::numeric_limits<double>::infinity();
    kl += std::exp(lp) * (lp - logq[i]);
  }
  return kl < 0 ? 0.0 : kl;
}

double klDivergenceFromLogits(const float *p_logits, const float *q_logits, int64_t n) {
  std::vector<double> lp = logSoftmax(p_logits, n), lq = logSoftmax(q_logits, n);
  return klDivergence(lp.data(), lq.data(), n);
}

int64_t argmax(const float *x, int64_t n) {
  int64_t best = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i]))
      continue;
    if (best < 0 || x[i] > x[best])
      best = i;
  }
  return best;
}

double percentileNearestRank(std::vector<double> values, double p) {
  if (values.empty())
    throw std::invalid_argument("percentile of an empty set of values");
  if (!(p >= 0.0 && p <= 100.0))
    throw std::invalid_argument("percentile must be in [0, 100], got " + std::to_string(p));
  const size_t n = values.size();
  size_t rank = (size_t)std::ceil(p / 100.0 * (double)n);
  // p/100*N can land a hair above an integer through rounding (e.g.
  // 0.99 * 100 = 99.00000000000001); snap to the integer in that case.
  double exact = p / 100.0 * (double)n;
  if (rank > 0 && std::fabs(exact - std::round(exact)) < 1e-9 * std::max(1.0, exact))
    rank = (size_t)std::llround(exact);
  rank = std::clamp<size_t>(rank, 1, n);
  // NaNs sort last so they only show up in the top percentiles.
  auto less = [](double a, double b) {
    if (std::isnan(a))
      return false;
    if (std::isnan(b))
      return true;
    return a < b;
  };
  std::nth_element(values.begin(), values.begin() + (rank - 1), values.end(), less);
  return values[rank - 1];
}

double perplexityFromMeanNll(double mean_nll) { return std::exp(mean_nll); }

EvalAccumulator::EvalAccumulator(int64_t vocab) : vocab_(vocab) {
  if (vocab <= 0)
    throw std::invalid_argument("EvalAccumulator: vocabulary size must be positive");
  lp_.resize((size_t)vocab);
  lq_.resize((size_t)vocab);
}

void EvalAccumulator::add(const float *model, const float *reference, int32_t target) {
  if (target < 0 || target >= vocab_)
    throw std::out_of_range("eval: target token " + std::to_string(target) +
                            " is outside the vocabulary (size " + std::to_string(vocab_) + ")");
  logSoftmax(model, vocab_, lq_.data());
  nllSum_ += -lq_[(size_t)target];
  ++count_;
  if (!reference)
    return;
  logSoftmax(reference, vocab_, lp_.data());
  refNllSum_ += -lp_[(size_t)target];
  kl_.push_back(klDivergence(lp_.data(), lq_.data(), vocab_));
  if (argmax(model, vocab_) == argmax(reference, vocab_))
    ++agree_;
  ++refCount_;
}

void EvalAccumulator::addRows(const float *model, const float *reference,
                              const int32_t *targets, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r)
    add(model + r * vocab_, reference ? reference + r * vocab_ : nullptr, targets[r]);
}

EvalSummary EvalAccumulator::summary() const {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EvalSummary s;
  s.positions = count_;
  s.nll_mean = count_ ? nllSum_ / (double)count_ : nan;
  s.ppl = perplexityFromMeanNll(s.nll_mean);
  s.has_reference = refCount_ > 0;
  if (s.has_reference) {
    s.ref_nll_mean = refNllSum_ / (double)refCount_;
    s.ref_ppl = perplexityFromMeanNll(s.ref_nll_mean);
    double sum = 0, mx = 0;
    for (double v : kl_) {
      sum += v;
      mx = std::isnan(v) || std::isnan(mx) ? nan : std::max(mx, v);
    }
    s.kld_mean = sum / (double)kl_.size();
    s.kld_p99 = percentileNearestRank(kl_, 99.0);
    s.kld_max = mx;
    s.top1 = 100.0 * (double)agree_ / (double)refCount_;
  } else {
    s.ref_nll_mean = s.ref_ppl = s.kld_mean = s.kld_p99 = s.kld_max = s.top1 = nan;
  }
  return s;
}

} // namespace llmc::metrics
