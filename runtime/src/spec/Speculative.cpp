//===- Speculative.cpp - Prompt-lookup drafts, greedy verification --------===//
#include "llmc/speculative.h"

#include <algorithm>
#include <stdexcept>

namespace llmc::spec {

std::vector<int32_t> ngramDraft(const std::vector<int32_t> &context, int max_draft, int max_n,
                                int min_n) {
  const int64_t L = int64_t(context.size());
  if (max_draft <= 0 || min_n <= 0)
    return {};
  for (int64_t n = std::min<int64_t>(max_n, L - 1); n >= min_n; --n) {
    // The latest start s < L - n whose n tokens equal the last n.
    for (int64_t s = L - n - 1; s >= 0; --s) {
      if (!std::equal(context.begin() + s, context.begin() + s + n, context.end() - n))
        continue;
      const int64_t from = s + n, to = std::min<int64_t>(L, from + max_draft);
      return std::vector<int32_t>(context.begin() + from, context.begin() + to);
    }
  }
  return {};
}

bool verifyDraft(Sampler &sampler, const float *row, int64_t vocab, int32_t d, int32_t &next) {
  if (sampler.greedy()) {
    next = sampler.sample(row, vocab);
    return next == d;
  }
  thread_local std::vector<int32_t> ids;
  thread_local std::vector<double> w;
  const double total = sampler.distribution(row, vocab, ids, w);
  if (ids.empty()) { // no finite logit: sample() is greedy there too
    next = sampler.sample(row, vocab);
    return next == d;
  }
  double pd = 0;
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] == d)
      pd = w[i];
  if (sampler.uniform01() * total < pd)
    return true;
  const double rest = total - pd;
  double r = sampler.uniform01() * rest;
  size_t last = ids.size();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == d || w[i] <= 0)
      continue;
    last = i;
    r -= w[i];
    if (r < 0) {
      next = ids[i];
      return false;
    }
  }
  // Rounding left r >= 0 (or only d had mass, which pd < 1 rules out).
  next = last < ids.size() ? ids[last] : d;
  return false;
}

int64_t generate(Executor &exec, std::vector<int32_t> context, std::vector<float> logits,
                 int64_t n, const std::vector<int32_t> &stops, const SpecOptions &opts,
                 Sampler &sampler, const std::function<bool(int32_t)> &emit, SpecStats &stats) {
  if (!exec.rewindable())
    throw std::runtime_error("speculative decoding needs KV caches that can drop their newest "
                             "entries (the full KV policy); this model's policy keeps more state");
  const int64_t vocab = exec.vocabSize();
  auto row = [&](size_t i) { return logits.data() + int64_t(i) * vocab; };
  auto isStop = [&](int32_t t) { return std::find(stops.begin(), stops.end(), t) != stops.end(); };
  int64_t emitted = 0;
  int32_t next = sampler.sample(row(0), vocab);
  // Adaptive draft length: halved after a pass that kept no draft, doubled
  // after one that kept them all (between 1 and max_draft), so text the
  // context does not predict costs little more than plain decoding.
  int64_t draftLen = std::max(1, opts.max_draft);
  while (emitted < n) {
    if (isStop(next) || !emit(next))
      break;
    ++emitted;
    context.push_back(next);
    if (emitted == n)
      break;
    // Drafts past the tokens still wanted or the context are not scored.
    const int64_t room = std::min(n - emitted, exec.maxContext() - exec.pos() - 1);
    std::vector<int32_t> draft =
        ngramDraft(context, int(std::min<int64_t>(draftLen, room)), opts.max_n, opts.min_n);
    const int64_t base = exec.pos(); // `next` goes here, the drafts after it
    std::vector<int32_t> step{next};
    step.insert(step.end(), draft.begin(), draft.end());
    logits = exec.forward(step, /*all_logits=*/!draft.empty());
    if (draft.empty()) {
      next = sampler.sample(row(0), vocab);
      continue;
    }
    ++stats.passes;
    stats.drafted += int64_t(draft.size());
    // Row i is the target's distribution after step[i]: keep draft[i]
    // while the rule accepts it; a rejection leaves the token to go on with.
    size_t kept = 0;
    bool stopped = false, rejected = false;
    for (; kept < draft.size(); ++kept) {
      int32_t instead = -1;
      if (!verifyDraft(sampler, row(kept), vocab, draft[kept], instead)) {
        next = instead;
        rejected = true;
        break;
      }
      if (isStop(draft[kept]) || !emit(draft[kept])) {
        stopped = true;
        break;
      }
      ++emitted;
      context.push_back(draft[kept]);
    }
    stats.accepted += int64_t(kept);
    if (stopped)
      break;
    exec.rewind(base + 1 + int64_t(kept)); // `next` and the kept drafts stay
    if (!rejected) // every draft kept: the target's own token after them
      next = sampler.sample(row(kept), vocab);
    if (kept == 0)
      draftLen = std::max<int64_t>(1, draftLen / 2);
    else if (kept == draft.size())
      draftLen = std::min<int64_t>(std::max(1, opts.max_draft), draftLen * 2);
  }
  return emitted;
}

} // namespace llmc::spec
