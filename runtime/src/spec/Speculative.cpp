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

int64_t generateGreedy(Executor &exec, std::vector<int32_t> context, std::vector<float> logits,
                       int64_t n, const std::vector<int32_t> &stops, const SpecOptions &opts,
                       const std::function<bool(int32_t)> &emit, SpecStats &stats) {
  if (!exec.rewindable())
    throw std::runtime_error("speculative decoding needs KV caches that can drop their newest "
                             "entries (the full KV policy); this model's policy keeps more state");
  const int64_t vocab = exec.vocabSize();
  Sampler greedy(SamplerOptions{}); // plain greedy decoding's choice, ties included
  auto pick = [&](size_t row) { return greedy.sample(logits.data() + int64_t(row) * vocab, vocab); };
  auto isStop = [&](int32_t t) { return std::find(stops.begin(), stops.end(), t) != stops.end(); };
  int64_t emitted = 0;
  int32_t next = pick(0);
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
      next = pick(0);
      continue;
    }
    ++stats.passes;
    stats.drafted += int64_t(draft.size());
    // Row i is the target's distribution after step[i]: keep draft[i]
    // while it is the target's own choice there.
    size_t kept = 0;
    bool stopped = false;
    for (; kept < draft.size(); ++kept) {
      const int32_t want = pick(kept);
      if (want != draft[kept])
        break;
      if (emitted >= n || isStop(want) || !emit(want)) {
        stopped = true;
        break;
      }
      ++emitted;
      context.push_back(want);
    }
    stats.accepted += int64_t(kept);
    if (stopped)
      break;
    if (kept == 0)
      draftLen = std::max<int64_t>(1, draftLen / 2);
    else if (kept == draft.size())
      draftLen = std::min<int64_t>(std::max(1, opts.max_draft), draftLen * 2);
    exec.rewind(base + 1 + int64_t(kept)); // `next` and the kept drafts stay
    next = pick(kept);
  }
  return emitted;
}

} // namespace llmc::spec
