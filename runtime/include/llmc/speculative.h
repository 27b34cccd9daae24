//===- speculative.h - Draft-and-verify decoding ---------------*- C++ -*-===//
// Lossless speculative decoding on one Executor: a drafter proposes the
// next few tokens, one target pass over [last token, drafts...] scores them
// all, the drafts the verification rule accepts are kept (with the
// target's next token after them), and the KV entries of the rejected
// drafts are dropped (Executor::rewind). Greedy output is the plain greedy
// decoding's token for token; sampled output has plain sampling's
// distribution. The drafter here is prompt lookup (n-gram matching against
// the context): no weights.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/executor.h"

#include <cstdint>
#include <functional>
#include <vector>

namespace llmc::spec {

/// Prompt lookup: the (up to) max_draft tokens that followed the latest
/// earlier occurrence of the context's last n tokens, trying n = max_n down
/// to min_n; empty when no suffix of at least min_n tokens recurs.
std::vector<int32_t> ngramDraft(const std::vector<int32_t> &context, int max_draft, int max_n,
                                int min_n);

/// The verdict on draft token `d` at one row of the target's logits (true:
/// keep it). Greedy sampler: kept iff it is the target's choice; otherwise
/// `next` is that choice. Sampling (the lossless rule for a drafter that
/// proposes one token with certainty): kept with probability p(d) under the
/// sampler's distribution (temperature, top-k, top-p); otherwise `next` is
/// drawn from that distribution with d removed (renormalized). Either way
/// the token that results (d if kept, else next) is distributed as p.
bool verifyDraft(Sampler &sampler, const float *row, int64_t vocab, int32_t d, int32_t &next);

struct SpecOptions {
  int max_draft = 4; // draft tokens per target pass at most (the length adapts:
                     // halved after a pass that keeps none, doubled after one that keeps all)
  int max_n = 3;     // longest suffix matched
  int min_n = 1;     // shortest
};

struct SpecStats {
  int64_t passes = 0;   // target passes with a draft
  int64_t drafted = 0;  // draft tokens scored
  int64_t accepted = 0; // draft tokens kept
  /// Tokens each drafted target pass yields (accepted drafts + the target's own).
  double meanAccepted() const { return passes ? double(accepted + passes) / double(passes) : 0.0; }
};

/// Generation with prompt-lookup drafts, lossless: greedy (the sampler's
/// temperature 0) gives plain greedy decoding's tokens; sampling keeps a
/// draft d with probability p(d) under the target's distribution (the
/// sampler's temperature, top-k, top-p) and otherwise draws from that
/// distribution with d removed, so each token is distributed exactly as in
/// plain sampling (the draws differ, not their distribution). `context`
/// holds every token fed so far (the prompt); `logits` are the target's for
/// its last one. Emits tokens through `emit` (returning false stops), up to
/// n, and stops before a token in `stops`. The executor must be
/// rewindable(). Returns the number of tokens emitted.
int64_t generate(Executor &exec, std::vector<int32_t> context, std::vector<float> logits,
                 int64_t n, const std::vector<int32_t> &stops, const SpecOptions &opts,
                 Sampler &sampler, const std::function<bool(int32_t)> &emit, SpecStats &stats);

} // namespace llmc::spec
