//===- speculative.h - Draft-and-verify decoding ---------------*- C++ -*-===//
// Lossless speculative decoding on one Executor: a drafter proposes the
// next few tokens, one target pass over [last token, drafts...] scores them
// all, the drafts the verification rule accepts are kept (with the
// target's next token after them), and the KV entries of the rejected
// drafts are dropped (Executor::rewind). Greedy output is the plain greedy
// decoding's token for token; sampled output has plain sampling's
// distribution. Drafters: prompt lookup (n-gram matching against the
// context: no weights) and Medusa heads compiled into the artifact
// (llm-spec-attach: maps of the final hidden state that the model's own LM
// head turns into drafts of the next tokens), and a draft model (a smaller
// model with the same vocabulary, autoregressive or PARD-style parallel).
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/executor.h"
#include "llmc/ir_enums.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
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

/// The verdict on m distinct candidates for one position (a draft tree's
/// children of one node, in the drafter's order) at one row of the
/// target's logits: the index of the one kept, or -1 with `next` the token
/// to go on with. Greedy: the candidate equal to the target's choice.
/// Sampling: candidate i is kept with its probability under the target's
/// distribution with candidates 0..i-1 removed (renormalized); when all
/// are rejected, `next` is drawn with all of them removed. The token that
/// results is distributed as the target's (sequential rejection against
/// point proposals), so a tree is as lossless as a chain.
int verifyCandidates(Sampler &sampler, const float *row, int64_t vocab, const int32_t *cand,
                     int m, int32_t &next);

/// Draft tokens in a tree: node i is token[i], following node parent[i]
/// (< i), or the context's last token when parent[i] is -1. Siblings are
/// in the drafter's order of preference.
struct DraftTree {
  std::vector<int32_t> token, parent;
  size_t size() const { return token.size(); }
  /// A chain: node i follows node i - 1.
  static DraftTree chain(const std::vector<int32_t> &tokens);
};

/// Prompt lookup as a tree: the continuations (up to max_depth tokens) of
/// every earlier occurrence of the context's last n tokens, n = max_n down
/// to min_n and the latest occurrence first, merged where they share a
/// prefix, until max_nodes tokens. Its first path is ngramDraft's chain;
/// later occurrences that continued differently become siblings.
DraftTree ngramTree(const std::vector<int32_t> &context, int max_nodes, int max_depth, int max_n,
                    int min_n);

/// Proposes the tokens that may follow the context.
class Drafter {
public:
  virtual ~Drafter() = default;
  /// Up to max_draft tokens to follow `context` (which ends with the token
  /// just chosen, not yet fed). `hidden`: the final hidden state of the
  /// position whose logits chose that token (needsHidden() drafters only).
  virtual std::vector<int32_t> draft(const std::vector<int32_t> &context, int max_draft,
                                     const float *hidden) = 0;
  /// Whether draft() reads `hidden` (the executor must keep_hidden).
  virtual bool needsHidden() const { return false; }
  /// Whether draftTree() branches (otherwise it is draft()'s chain).
  virtual bool branches() const { return false; }
  /// A tree of up to max_nodes drafts at most max_depth deep (the default:
  /// draft()'s chain of min(max_nodes, max_depth) tokens).
  virtual DraftTree draftTree(const std::vector<int32_t> &context, int max_nodes, int max_depth,
                              const float *hidden) {
    return DraftTree::chain(draft(context, std::min(max_nodes, max_depth), hidden));
  }
  virtual const char *name() const = 0;
};

class NgramDrafter final : public Drafter {
public:
  NgramDrafter(int max_n, int min_n) : max_n_(max_n), min_n_(min_n) {}
  std::vector<int32_t> draft(const std::vector<int32_t> &context, int max_draft,
                             const float *) override {
    return ngramDraft(context, max_draft, max_n_, min_n_);
  }
  bool branches() const override { return true; }
  DraftTree draftTree(const std::vector<int32_t> &context, int max_nodes, int max_depth,
                      const float *) override {
    return ngramTree(context, max_nodes, max_depth, max_n_, min_n_);
  }
  const char *name() const override { return "prompt lookup"; }

private:
  int max_n_, min_n_;
};

/// Medusa heads from an artifact's "speculation" (method medusa): head k
/// maps the final hidden state h_t and the embedding of the token before
/// its draft (the model's own choice for head 1, head k-1's draft after
/// that) to y_k = W_k [h_t; e] + b_k, and the model's LM head rows of the
/// draft vocabulary (gathered in f32 when the drafter is made) turn y_k
/// into the draft of token t+k+1 (its argmax). The drafts form a chain:
/// head k's token is tried only if heads 1..k-1's were accepted.
class MedusaDrafter final : public Drafter {
public:
  /// Throws std::runtime_error when the artifact has no medusa heads or
  /// their tensors are missing, not f32, or of the wrong shape.
  /// min_confidence < 0: the artifact's ("min_confidence", else 0).
  MedusaDrafter(const Artifact &art, Executor &exec, double min_confidence = -1);
  std::vector<int32_t> draft(const std::vector<int32_t> &context, int max_draft,
                             const float *hidden) override;
  bool needsHidden() const override { return true; }
  bool branches() const override { return true; }
  /// Depth by depth from the context's last token: head d scores the
  /// children of the few likeliest candidates of depth d (one product for
  /// them all), each keyed by its path's product of draft probabilities;
  /// the max_nodes likeliest candidates of all depths form the tree
  /// (SpecTree.cpp).
  DraftTree draftTree(const std::vector<int32_t> &context, int max_nodes, int max_depth,
                      const float *hidden) override;
  const char *name() const override { return "medusa heads"; }
  int64_t heads() const { return heads_; }
  int64_t vocabSize() const { return int64_t(vocab_.size()); }
  /// Drafting stops at the first head whose draft has a probability (its
  /// softmax over the draft vocabulary) below this.
  double minConfidence() const { return minConfidence_; }

private:
  Executor &exec_;
  int64_t heads_ = 0, width_ = 0;
  const float *w_ = nullptr, *b_ = nullptr; // [heads, width, 2 width], [heads, width]
  double minConfidence_ = 0;
  std::vector<int32_t> vocab_;              // the draft vocabulary's token ids
  std::vector<float> vocabRows_;            // their LM head rows [vocab, width]
  std::vector<float> in_, y_, logits_;
  // The heads' rows and the draft vocabulary's LM-head rows in Q8_0 when
  // the width allows (a multiple of 32), multiplied by the int8 kernels: a
  // draft reads about 3.8x fewer bytes than in f32 (drafts may differ at
  // near ties; verification keeps the output the target's). Empty
  // otherwise: the f32 rows are read.
  std::vector<uint8_t> headsQ8_, vocabQ8_;
  int64_t headRowBytes_ = 0, vocabRowBytes_ = 0;
  /// Head h's scores over the draft vocabulary for `rows` inputs at once
  /// (one product over the rows, on the executor's threads): from `hidden`
  /// and the embedding of fed[i] (the token before its draft) into row i
  /// of logits_ [rows, draft vocabulary].
  void headLogits(int64_t h, const float *hidden, const int32_t *fed, int64_t rows);
};

/// Prompt lookup where the context repeats (a suffix of at least min_n
/// tokens recurs), the fallback drafter (e.g. Medusa heads) elsewhere.
class HybridDrafter final : public Drafter {
public:
  HybridDrafter(int max_n, int min_n, std::unique_ptr<Drafter> fallback)
      : lookup_(max_n, min_n), fallback_(std::move(fallback)) {}
  std::vector<int32_t> draft(const std::vector<int32_t> &context, int max_draft,
                             const float *hidden) override {
    std::vector<int32_t> d = lookup_.draft(context, max_draft, hidden);
    return d.empty() ? fallback_->draft(context, max_draft, hidden) : d;
  }
  bool branches() const override { return true; }
  DraftTree draftTree(const std::vector<int32_t> &context, int max_nodes, int max_depth,
                      const float *hidden) override {
    DraftTree t = lookup_.draftTree(context, max_nodes, max_depth, hidden);
    return t.size() == 0 ? fallback_->draftTree(context, max_nodes, max_depth, hidden) : t;
  }
  bool needsHidden() const override { return fallback_->needsHidden(); }
  const char *name() const override { return "prompt lookup, then medusa heads"; }

private:
  NgramDrafter lookup_;
  std::unique_ptr<Drafter> fallback_;
};

/// A draft model: another artifact with the target's vocabulary (a smaller
/// model of the same family, or the target depth-pruned by
/// llm-prune-depth) run by its own executor over the same context. Its
/// cache follows the context: each draft() rewinds it to the longest
/// prefix it shares with the context (dropping the rejected drafts) and
/// feeds the rest. Autoregressive (mask < 0): up to max_draft greedy
/// tokens, one draft-model step each, stopping at the first whose
/// probability is below min_confidence. Parallel, PARD-style (mask >= 0,
/// the id of the mask token a PARD-trained draft model was trained with):
/// one draft-model pass over [unfed context..., mask x (max_draft - 1)]
/// drafts every token at once (row i of the masks predicts token i + 2),
/// then the masks are rewound. Self-speculation is the same with the
/// target's own artifact run without some of its blocks (chosen by the
/// depth-pruning scores: llm-spec-attach{method=self}).
class ModelDrafter final : public Drafter {
public:
  /// Throws std::runtime_error when the draft model's vocabulary differs
  /// from `targetVocab`, its KV cache cannot rewind, or mask is not a token.
  ModelDrafter(std::unique_ptr<Artifact> draftModel, ExecutorOptions opts, int64_t targetVocab,
               int32_t mask = -1, double min_confidence = 0);
  /// Self-speculation: the target's own artifact (not copied; it must
  /// outlive the drafter) run without `skip` blocks (opts.skip_blocks).
  ModelDrafter(const Artifact &target, const std::vector<int64_t> &skip, ExecutorOptions opts,
               double min_confidence = 0);
  ~ModelDrafter() override;
  std::vector<int32_t> draft(const std::vector<int32_t> &context, int max_draft,
                             const float *hidden) override;
  const char *name() const override {
    return self_ ? "self-speculation" : mask_ >= 0 ? "draft model, parallel" : "draft model";
  }
  Executor &executor() { return *exec_; }

private:
  std::vector<float> catchUp(const std::vector<int32_t> &context, size_t extra);
  void check(const std::string &what, int64_t targetVocab);
  std::unique_ptr<Artifact> owned_;
  const Artifact *art_ = nullptr;
  bool self_ = false;
  std::unique_ptr<Executor> exec_;
  std::vector<int32_t> fed_; // the tokens the draft model's cache holds
  int32_t mask_;
  double minConfidence_;
};

/// The artifact's drafter (manifest "speculation"): its method, draft
/// length and n-gram length; nullopt when it has none. Throws
/// std::runtime_error for a malformed entry.
struct SpecConfig {
  SpecMethod method = SpecMethod::Ngram;
  int max_draft = 4;
  int ngram = 3;
  int64_t heads = 0;
  int tree_nodes = 0;               // medusa: draft trees of up to this many tokens (0: chains)
  std::vector<int64_t> skip_blocks; // self: the blocks the drafter skips
};
std::optional<SpecConfig> specConfigOf(const Artifact &art);

struct SpecOptions {
  int max_draft = 4; // draft tokens per target pass at most (the length adapts:
                     // halved after a pass that keeps none, doubled after one that keeps all)
  int max_n = 3;     // longest suffix matched
  int min_n = 1;     // shortest
  /// > 0: a branching drafter (Medusa heads) drafts a tree of up to this
  /// many tokens, verified in one pass with tree attention, where the
  /// executor can (Executor::treeVerifiable; a chain otherwise). The tree
  /// is max_draft deep at most.
  int tree_nodes = 0;
};

struct SpecStats {
  int64_t passes = 0;   // target passes with a draft
  int64_t drafted = 0;  // draft tokens scored
  int64_t accepted = 0; // draft tokens kept
  double draft_seconds = 0; // time in the drafter (its overhead)
  int64_t tree_passes = 0; // passes that verified a branching tree
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
/// The same with any drafter (a needsHidden() drafter needs an executor
/// made with keep_hidden, whose last forward() was the prompt's).
int64_t generate(Executor &exec, Drafter &drafter, std::vector<int32_t> context,
                 std::vector<float> logits, int64_t n, const std::vector<int32_t> &stops,
                 const SpecOptions &opts, Sampler &sampler,
                 const std::function<bool(int32_t)> &emit, SpecStats &stats);

} // namespace llmc::spec
