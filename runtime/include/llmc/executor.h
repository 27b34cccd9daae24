//===- executor.h - CPU reference executor of a Program --------*- C++ -*-===//
// Runs an artifact's Program on the CPU: batch 1, a KV cache per attention
// node, multithreaded blocked matrix products that read each weight in its
// stored type (rows are dequantized block by block into a small buffer, never
// the whole model).
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/artifact.h"
#include "llmc/kv_row_type.h"
#include "llmc/signing.h"
#include <cstdint>
#include <functional>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace llmc {

class ThreadPool;

/// The input of one or more linear projections, seen while the Executor
/// runs (for calibration: GPTQ Hessians, AWQ activation statistics).
struct LinearInput {
  int node = -1;       // program node index
  int64_t block = -1;  // the node's attrs.block (its llm.layer index), -1 if none
  int64_t expert = -1; // MoE expert for expert projections, else -1
  /// Roles and weight names of every projection that multiplies x: one call
  /// for q,k,v (they share x), one for o (x = attention output), gate,up,
  /// down (x = act(gate) * up), router, and per routed expert gate,up / down
  /// (x = that expert's tokens; the weight names are the 3-D expert tensors).
  const std::vector<std::string> *roles = nullptr;
  const std::vector<std::string> *weights = nullptr;
  const float *x = nullptr; // row-major [rows, cols]
  int64_t rows = 0, cols = 0;
};
using LinearInputHook = std::function<void(const LinearInput &)>;

/// Which code runs a forward step. Kernels: the artifact's kernel plan
/// (fused kernels, one arena; compiled by llm-lower-to-kernels). Reference:
/// the op-by-op program (the reference for tests; the only engine with the
/// linear-input hook and block-by-block runs). Auto: kernels when the
/// artifact has a plan and neither a hook nor stop_after_block is set.
enum class Engine { Auto, Kernels, Reference };

struct ExecutorOptions {
  int threads = 0;          // 0: hardware concurrency
  int64_t max_context = 0;  // 0: the model's context length, capped at 4096
  /// Called right before each linear projection of a node whose block is
  /// selected by hook_block (-1: every node) with that projection's input.
  LinearInputHook linear_input_hook;
  int64_t hook_block = -1;
  /// >= 0: forward() ends after the last node of this block (nothing later
  /// runs, and it returns an empty vector). Calibration of block l needs
  /// nothing after it.
  int64_t stop_after_block = -1;
  /// KV-policy sweeps: every attention layer records what any policy needs
  /// from a prompt (window queries, cumulative attention) even under the
  /// full cache, so that setKvPolicies can compress a saved prefill later.
  bool kv_record = false;
  /// > 0: forward() feeds a longer prompt in steps of this many tokens, and
  /// prefill KV policies compress after each (their budget a share of the
  /// positions so far), so the cache's peak stays near its budget and the
  /// activations near one chunk's. Not for RDKV (one pass over the whole
  /// prompt), a linear-input hook or stop_after_block: those run the
  /// prompt in one step. 0: one step.
  int64_t prefill_chunk = 0;
  /// F16: the single sequence's KV caches keep f16 rows in blocks of a
  /// private pool (usePagedKv's pool for batched sequences takes its own
  /// row type). All attention layers must share one head size.
  KvRowType kv_row_type = KvRowType::F32;
  Engine engine = Engine::Auto;
  /// Keep the final hidden state (the LM head's input, after the final
  /// norm) of every row of each step, for hidden() (speculative heads,
  /// their calibration). Single sequences only (not forwardBatch).
  bool keep_hidden = false;
  /// The kernel engine runs the artifact's generated kernels (every product
  /// and op the artifact has a kernel for; the runtime's library kernels for
  /// the rest, or for all when false or when the artifact has none).
  bool generated_kernels = true;
  /// The kernel engine quantizes the activations of products with 32-weight
  /// block weights (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, and grouped integers
  /// gq4s/gq4a/gq8s with groups of 32k) to int8 per 32 and runs integer
  /// dots, as llama.cpp does; true keeps them f32 (what the reference engine
  /// computes, up to float re-association).
  bool exact_activations = false;
  /// Whose generated kernels run: those of artifacts signed by one of
  /// trust.keys (or compiled in this process); others run the library
  /// kernels (with untrustedCodeWarning() set), or fail to open with
  /// trust.require_signed.
  signing::CodeTrust trust;
  /// Self-speculation's drafter: the kernel plan without the steps of these
  /// blocks (the residual stream passes them unchanged; their KV caches stay
  /// empty). The weights are the artifact's, shared with any other executor
  /// on it. Kernel engine only.
  std::vector<int64_t> skip_blocks;
};

struct KvSnapshot;
class Executor;

/// The KV caches and position of one sequence of a batch: made by
/// Executor::newSequence (empty caches under the executor's KV policies)
/// and fed by Executor::forwardBatch, by the executor that made it only.
class SequenceKv {
public:
  ~SequenceKv();
  SequenceKv(const SequenceKv &) = delete;
  SequenceKv &operator=(const SequenceKv &) = delete;
  /// Tokens fed so far (the position of the next).
  int64_t pos() const;
  /// Bytes its caches hold now and at most since it was made (as
  /// Executor::kvCacheBytes / kvCachePeakBytes).
  int64_t kvBytes() const;
  int64_t kvPeakBytes() const;
  int64_t kvEntries() const;

private:
  friend class Executor;
  struct State;
  explicit SequenceKv(std::unique_ptr<State> s);
  std::unique_ptr<State> state;
};

/// A paged KV cache for the sequences of a batch (Executor::usePagedKv).
struct PagedKvOptions {
  int64_t block_tokens = 16; // entries per block (of one layer's KV head)
  int64_t pool_blocks = 0;   // the pool's capacity in blocks (>= 1)
  KvRowType row_type = KvRowType::F32;
  /// Under the full cache, prompts that start with the same complete
  /// blocks of tokens share those blocks (and skip their prefill).
  bool prefix_sharing = true;
};

/// The pool's state (Executor::kvPoolInfo); all zero without a pool.
struct KvPoolInfo {
  int64_t capacity_blocks = 0, used_blocks = 0, cached_blocks = 0;
  int64_t block_bytes = 0, block_tokens = 0;
  int64_t prefix_entries = 0, prefix_hit_tokens = 0;
  bool prefix_sharing = false; // enabled and possible under the current policies
};

/// One sequence's tokens in a batched step.
struct BatchEntry {
  SequenceKv *sequence = nullptr;
  std::vector<int32_t> tokens; // fed at sequence->pos()..
};

class Executor {
public:
  /// Validates the program against the artifact's tensors (missing weight,
  /// shape mismatch) and throws std::runtime_error naming the problem.
  Executor(const Artifact &artifact, ExecutorOptions opts = {});
  ~Executor();

  /// Feed tokens at positions [pos(), pos()+n); returns logits [n, vocab]
  /// row-major when all_logits, else the last row only [vocab] (empty when
  /// options.stop_after_block ended the step early).
  std::vector<float> forward(const std::vector<int32_t> &tokens, bool all_logits = false);
  /// Layer-sequential runs (calibration): blockInput runs the nodes before
  /// block `block` (the embedding; no attention may precede it) on `tokens`
  /// and returns the block's input rows [T, width]; forwardBlock runs only
  /// the nodes of `block` on such rows at positions [pos(), pos() + T)
  /// (filling that block's KV caches, calling the hook) and returns its
  /// output rows, which are the next block's input. Throws
  /// std::runtime_error for a missing block or one with several inputs or
  /// outputs.
  std::vector<float> blockInput(const std::vector<int32_t> &tokens, int64_t block = 0);
  std::vector<float> forwardBlock(int64_t block, const std::vector<float> &hidden);
  /// forward() resumed at block `block`: `hidden` is that block's input
  /// rows [T, width] (as blockInput and forwardBlock return them), and every
  /// node from the block on runs, on the same values forward() would give
  /// them, so the logits are forward()'s whenever the nodes before the block
  /// are. Returns logits as forward() does. Throws std::runtime_error for a
  /// missing block or when a later node reads a value from before it.
  std::vector<float> forwardFrom(int64_t block, const std::vector<float> &hidden,
                                 bool all_logits = false);
  /// The block of the node that multiplies weight `name` (the hook's sites'
  /// weights), or -1 (none, or a node outside the blocks).
  int64_t blockOfWeight(const std::string &name) const;
  int64_t pos() const;
  /// With keep_hidden: the final hidden state [rows, hiddenSize()] of every
  /// token of the last step forward() ran (the last chunk of a chunked
  /// prompt), row-major; empty without keep_hidden.
  const std::vector<float> &hidden() const;
  int64_t hiddenSize() const;
  /// The LM head's product alone on rows [rows, hiddenSize()] of final
  /// hidden states (no norm): logits [rows, vocab] into `logits`, by the
  /// same kernels as forward()'s logits (draft heads' predictions).
  void lmHead(const float *x, int64_t rows, std::vector<float> &logits);
  /// Row `id` of the LM head's weight, or of the token embedding table, in
  /// f32 [hiddenSize()] (dequantized as the kernels read it; a draft
  /// vocabulary's rows, the embedding of a drafted token). Throws
  /// std::runtime_error for an id out of range.
  void lmHeadRow(int32_t id, float *out) const;
  /// The executor's worker threads (a drafter's products run on them
  /// between target passes).
  ThreadPool &threadPool();
  void embeddingRow(int32_t id, float *out) const;
  /// "kernels" or "reference": the engine forward() uses.
  const char *engineName() const;
  /// Which generated-kernel object the kernel engine loaded (and how), or
  /// why it runs library kernels only.
  std::string generatedKernelsInfo() const;
  /// Non-empty when the artifact carries generated kernels that were not run
  /// because it is not signed by a trusted key (one line, for a warning).
  std::string untrustedCodeWarning() const;
  /// "f32", or how the kernel engine quantizes product activations (int8)
  /// and the size of its eight-row weight copies.
  std::string activationsInfo() const;
  void reset(); // clear the KV cache
  int64_t vocabSize() const;
  int64_t maxContext() const;
  /// Bytes the KV caches hold: allocated storage of every head's entries
  /// and of the policies' state (window queries, Gram matrices).
  int64_t kvCacheBytes() const;
  /// The most kvCacheBytes() has been since the executor was built or
  /// resetKvPeak() was called, at every append and compression (within a
  /// step too: a prompt's layers fill one by one, each compressed right
  /// after its attention).
  int64_t kvCachePeakBytes() const;
  void resetKvPeak();
  /// The chunk forward() feeds a prompt of n tokens in (n: one step).
  int64_t prefillChunkFor(int64_t n) const;
  /// Bytes a position takes in every layer's cache at full precision (f32
  /// keys and values of every KV head): what a server reserves per
  /// position of a sequence (KV policies and quantization use less).
  int64_t kvBytesPerPosition() const;
  /// Whether a prompt may be fed in several steps under every layer's KV
  /// policy (RDKV compresses a prompt in one pass).
  bool chunkablePrefill() const;
  /// Entries (tokens x KV heads) the KV caches hold, over all layers.
  int64_t kvCacheEntries() const;

  /// Speculative decoding: whether rewind() is exact (decoding changes
  /// nothing in any layer's cache but its entries and window queries: the
  /// full KV policy, or one that compresses prompts only and keeps no
  /// running statistics, RDKV excepted).
  bool rewindable() const;
  /// Forget positions >= pos (pos <= pos()): their KV entries are dropped
  /// and the next forward() continues at pos, as if they had never been
  /// fed. std::runtime_error when !rewindable(), pos is out of range, or
  /// pos lies in a prompt a KV policy compressed.
  void rewind(int64_t pos);
  /// A speculative verification pass: forward(tokens, true) in one step,
  /// whose rows the KV policies take as decode steps (a prefill policy does
  /// not compress them as a new prompt), so that rewind() after it leaves
  /// the caches as plain decoding of the kept tokens would.
  /// std::runtime_error unless rewindable().
  std::vector<float> verify(const std::vector<int32_t> &tokens);
  /// Tree verification: whether verifyTree() can run (the kernel plan, the
  /// full KV policy over f32 or paged entries, the generated attention
  /// kernels over row addresses).
  bool treeVerifiable() const;
  /// One pass over a draft tree: row 0 (tokens[0]) follows the tokens fed
  /// so far, row t > 0 follows row parent[t] < t (parent[0] is ignored),
  /// at position pos() + its depth, seeing only its own path. Returns every
  /// row's logits [T, vocab] (and keeps every row's hidden state with
  /// keep_hidden), each plain decoding's of its path. The caches hold the
  /// whole tree until acceptTreePath(), which must come next (other calls
  /// throw until then). std::runtime_error unless treeVerifiable().
  std::vector<float> verifyTree(const std::vector<int32_t> &tokens,
                                const std::vector<int32_t> &parent);
  /// After verifyTree(): keep the tree rows `path` (ascending, starting at
  /// row 0, each the next one's parent) as the next positions and drop the
  /// others, as if only the path had been fed.
  void acceptTreePath(const std::vector<int32_t> &path);

  /// KV-policy sweeps: the caches and position, to try several policies on
  /// one prefill (restoreKv puts them back exactly).
  std::shared_ptr<const KvSnapshot> saveKv() const;
  void restoreKv(const KvSnapshot &snapshot);
  /// Turn the caches' kv_record on or off until the next restoreKv (which
  /// brings the snapshot's back): off, steps record nothing for later
  /// compression, and a cache under a prompt-only policy is rewindable.
  void setKvRecording(bool on);
  /// Replace the policy of each layer's attention node (kv_policy objects as
  /// in the program, by the node's `layer`; layers not listed get the full
  /// cache) and, if compress_now, apply it to the cache as after a prompt.
  /// Throws std::runtime_error for an invalid policy or unknown layer.
  void setKvPolicies(const std::map<int64_t, nlohmann::json> &by_layer, bool compress_now);

  /// Batches: a new sequence with empty caches under the current policies.
  std::unique_ptr<SequenceKv> newSequence() const;
  /// One forward step over several sequences (each at most once; tokens
  /// checked as forward() checks them, all before any runs). The kernel
  /// engine reads each weight once for all entries' rows; the reference
  /// engine runs the entries one after another. Returns the logits of each
  /// entry's last token, [entries, vocab]. Prompts are not chunked here
  /// (prefill_chunk does not apply): the caller schedules chunks. Throws
  /// std::runtime_error for a bad entry, or with a linear-input hook or
  /// stop_after_block set.
  std::vector<float> forwardBatch(const std::vector<BatchEntry> &entries);

  /// Sequences made from now on keep their f32 KV entries in fixed-size
  /// blocks of one pool (a paged cache; PolyKV and RDKV caches keep their
  /// own storage). Throws std::runtime_error for bad options or layers of
  /// different head sizes.
  void usePagedKv(const PagedKvOptions &opts);
  bool pagedKv() const;
  KvPoolInfo kvPoolInfo() const;
  /// Block tables per sequence (layer caches x KV heads): a sequence of n
  /// positions needs at most tables x ceil(n / block_tokens) blocks.
  int64_t kvTablesPerSequence() const;
  /// A new sequence for `prompt`: with prefix sharing, its caches start with
  /// the longest published run of complete blocks the prompt begins with
  /// (pos() is where its prefill starts; at least the last prompt token is
  /// left to feed), else as newSequence().
  std::unique_ptr<SequenceKv> newSequence(const std::vector<int32_t> &prompt) const;
  /// After `prompt` has been fed into `seq`: publishes its complete blocks
  /// for later prompts (nothing without prefix sharing).
  void publishPrompt(const SequenceKv &seq, const std::vector<int32_t> &prompt) const;

private:
  struct Impl;
  std::unique_ptr<Impl> impl;
};

struct SamplerOptions {
  float temperature = 0.0f; // 0: greedy
  int top_k = 0;            // 0: off
  float top_p = 1.0f;       // 1: off
  uint64_t seed = 0;
};

/// Deterministic for a given seed.
class Sampler {
public:
  explicit Sampler(SamplerOptions o);
  int32_t sample(const float *logits, int64_t vocab);
  bool greedy() const { return !(opts.temperature > 0.0f); }
  /// The distribution sample() draws from when not greedy (temperature,
  /// top-k and top-p applied): candidate ids with unnormalized weights,
  /// their sum returned; 0 (and no candidates) when no logit is finite.
  double distribution(const float *logits, int64_t vocab, std::vector<int32_t> &ids,
                      std::vector<double> &weights) const;
  /// The next uniform draw in [0, 1) of the sampler's generator.
  double uniform01();

private:
  SamplerOptions opts;
  uint64_t state;
};

} // namespace llmc
