//===- ExecutorImpl.h - The Executor's state, shared by its files -*- C++ -*-===//
// Internal to runtime/src/exec: Executor::Impl and the nodes it runs.
// ExecutorBuild.cpp resolves the program against the artifact (and sets up
// the kernel plan), ExecutorSteps.cpp runs forward steps and blocks, and
// Executor.cpp has the public accessors and the KV-cache handling.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/executor.h"

#include "KernelPlan.h"
#include "MoeRouting.h"
#include "PackedWeights.h"
#include "Ops.h"
#include "ThreadPool.h"
#include "../kv/KvCache.h"

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace llmc::exec {

enum class Op { Embed, RmsNorm, LayerNorm, Add, Attention, Mlp, Moe, LmHead };

/// A node ready to run.
struct Node {
  Op op;
  std::string desc; // "program node 3 (attention)"
  std::vector<int> in;
  int out = -1;
  int64_t width = 0;     // output width
  int64_t inWidth = 0;   // width of in[0]
  WeightMatrix a, b, c, d; // op-specific matrices (see build)
  std::vector<WeightMatrix> experts; // moe: gate, up, down of expert 0, then 1, ...
  std::vector<float> vec0, vec1, qBias, kBias, vBias;
  float eps = 1e-5f;
  ops::AttentionShape att{};
  std::vector<double> invFreq;
  RopeStyle rope = RopeStyle::Half;
  int cache = -1;
  Activation act = Activation::SiLU;
  int64_t ffn = 0;
  ops::MoeRouting moe; // moe: experts, top k, gating, adaptive activation
  int index = 0;      // program node index
  int64_t block = -1; // attrs.block
  // Linear-input sites for the hook: attention {q,k,v} {o}; mlp {gate,up}
  // {down}; moe {router} {gate,up} {down} (the last two per expert).
  struct Site {
    std::vector<std::string> roles, weights;
  };
  std::vector<Site> sites;
};

} // namespace llmc::exec

namespace llmc {

struct Executor::Impl {
  using Node = exec::Node;

  const Artifact &art;
  PackedWeights packed; // weights the compiler stored in the eight-row layout
  ThreadPool pool;
  int64_t maxCtx = 0;
  int64_t pos = 0;
  int64_t treeRows = 0; // verifyTree's rows awaiting acceptTreePath (0: none)
  std::vector<Node> nodes;
  int output = -1;
  std::vector<int64_t> widths; // by value id
  std::vector<std::vector<float>> vals;
  std::vector<int64_t> valRows;
  std::vector<kv::LayerCache> caches;
  /// Empty caches under the current policies: what a new sequence starts
  /// from (Executor::newSequence).
  std::vector<kv::LayerCache> freshCaches;
  kv::KvMeter kvMeter; // every cache's bytes, current and peak
  /// Paged KV for new sequences (usePagedKv), and whether prompts share
  /// their leading blocks.
  std::shared_ptr<kv::KvBlockPool> kvPool;
  bool prefixSharing = false;
  int64_t prefillChunk = 0;
  std::vector<int64_t> cacheLayers;   // the `layer` of each cache's node
  std::vector<std::string> cacheDesc; // its node, for errors
  bool kvRecord = false;
  // Scratch reused across steps.
  std::vector<float> sq, sk, sv, satt, sg, su, sx, sy, slogits, smoe;
  LinearInputHook hook;
  int64_t hookBlock = -1, stopAfterBlock = -1;
  std::unique_ptr<codegen::GeneratedKernels> generated; // the artifact's generated kernels
  std::string generatedHow;                             // which object, or why none
  std::unique_ptr<PlanEngine> plan; // the kernel plan, when it runs forward()
  std::vector<float> planLogits;
  bool keepHidden = false;
  std::vector<float> hidden; // keep_hidden: the last step's final hidden rows

  Impl(const Artifact &a, const ExecutorOptions &o)
      : art(a), packed(a), pool(o.threads), hook(o.linear_input_hook), hookBlock(o.hook_block),
        stopAfterBlock(o.stop_after_block), kvRecord(o.kv_record),
        keepHidden(o.keep_hidden) {
    int64_t ctx = a.config().context_length;
    maxCtx = o.max_context > 0 ? o.max_context : (ctx > 0 ? std::min<int64_t>(ctx, 4096) : 4096);
    if (o.prefill_chunk < 0)
      throw std::runtime_error("ExecutorOptions::prefill_chunk must be >= 0, not " +
                               std::to_string(o.prefill_chunk));
    prefillChunk = o.prefill_chunk;
    build();
    buildPlan(o);
    freshCaches = caches;
    if (o.kv_row_type != KvRowType::F32)
      useRowType(o.kv_row_type);
    attachKvMeter();
  }

  /// The single sequence's caches in f16 or Q8 rows, in blocks of a
  /// private pool sized for the whole context (freshCaches, what batched
  /// sequences copy, stay as they were).
  void useRowType(KvRowType type) {
    constexpr int64_t kBlock = 16;
    const int64_t hd = poolHeadDim((kvRowTypeName(type) + std::string(" KV rows")).c_str());
    if (hd < 0)
      return; // no attention layer: nothing to store
    int64_t tables = 0;
    for (const kv::LayerCache &c : caches)
      tables += c.kvHeads();
    auto pool = std::make_shared<kv::KvBlockPool>(
        kBlock, hd, tables * ((maxCtx + kBlock - 1) / kBlock + 1), type);
    for (kv::LayerCache &c : caches)
      c.usePool(pool);
  }

  /// The head size every attention layer shares (one pool holds them all),
  /// -1 without attention layers; std::runtime_error naming `what` when
  /// they differ.
  int64_t poolHeadDim(const char *what) const {
    int64_t hd = -1;
    for (const kv::LayerCache &c : freshCaches) {
      if (hd >= 0 && c.headDim() != hd)
        throw std::runtime_error(std::string(what) + ": layers of different head sizes (" +
                                 std::to_string(hd) + ", " + std::to_string(c.headDim()) +
                                 ") cannot share a pool");
      hd = c.headDim();
    }
    return hd;
  }

  /// (Re)starts the meter from the caches as they are now.
  void attachKvMeter() {
    kvMeter = kv::KvMeter();
    for (kv::LayerCache &c : caches)
      c.attachMeter(&kvMeter);
    kvMeter.resetPeak();
  }

  /// The chunk a prompt of n tokens is fed in: prefillChunk when it is
  /// shorter than the prompt, every cache's policy can be applied chunk by
  /// chunk and no calibration hook or block limit is set; else n.
  int64_t chunkFor(int64_t n) const {
    if (prefillChunk <= 0 || n <= prefillChunk || hook || stopAfterBlock >= 0)
      return n;
    for (const kv::LayerCache &c : caches)
      if (!c.chunkablePrefill())
        return n;
    return prefillChunk;
  }
  /// Throws for an empty step, positions past maxCtx (from pos) or a token
  /// id out of the embedding's range.
  void checkTokens(const std::vector<int32_t> &tokens, int64_t pos) const;
  /// One forward step of checked tokens at pos.
  std::vector<float> step(const std::vector<int32_t> &tokens, bool allLogits);

  void buildPlan(const ExecutorOptions &o);
  /// The lm_head node that writes the logits (nullptr: none).
  const exec::Node *logitsNode() const;

  void build();
  /// Sizes the table of value widths from the largest value id the program
  /// uses; throws when an id is too large.
  void sizeValueTable(const Program &prog);
  /// Node `idx`'s description, op, inputs, output, block and hook sites,
  /// checked against the op's arity and the values defined so far; the
  /// op's own fields are left to the build* functions below.
  Node startNode(const ProgramNode &pn, size_t idx);
  void buildEmbed(Node &n, const ProgramNode &pn);
  void buildNorm(Node &n, const ProgramNode &pn);
  void buildAdd(Node &n, const ProgramNode &pn);
  void buildAttention(Node &n, const ProgramNode &pn, std::set<int64_t> &cacheSlots);
  /// The attention node's KV policy and cache, in the slot of its `layer`
  /// (which no other attention node may use).
  void addKvCache(Node &n, const nlohmann::json &at, std::set<int64_t> &cacheSlots);
  void buildMlp(Node &n, const ProgramNode &pn);
  void buildMoe(Node &n, const ProgramNode &pn);
  void buildLmHead(Node &n, const ProgramNode &pn);
  /// The tensor as a matrix, with its side data when its format has some.
  WeightMatrix matrixOf(const TensorView &t);
  /// Expert `e`'s slab of a 3-D weight (its side data and packed layout).
  WeightMatrix slabOf(const TensorView &t, int64_t e);
  const TensorView &weight(const ProgramNode &pn, const std::string &desc, const char *role);
  void expectShape(const TensorView &t, const std::string &desc, const char *role,
                   const std::vector<int64_t> &want);
  std::vector<float> vectorOf(const TensorView &t);

  /// The vector weight `role` of [size] as f32, or empty when the node has
  /// no such weight.
  std::vector<float> optionalVector(const ProgramNode &pn, const std::string &desc,
                                    const char *role, int64_t size);

  std::vector<float> &value(int id, int64_t rows, int64_t width) {
    std::vector<float> &v = vals[size_t(id)];
    v.resize(size_t(rows * width));
    valRows[size_t(id)] = rows;
    return v;
  }

  void run(const Node &n, const std::vector<int32_t> &tokens, bool allLogits);

  /// Nodes [first, last) of block `block`, its one input from earlier nodes
  /// and its one output read by later nodes (or the program output); throws
  /// when the block is missing, not contiguous or has several of either.
  struct BlockSpan {
    size_t first = 0, last = 0;
    int input = -1, output = -1;
  };
  BlockSpan blockSpan(int64_t block) const;
  /// Puts `hidden` (whole rows) into the block's input value; returns the
  /// rows. Throws std::runtime_error (prefixed `who`) on a ragged size or
  /// positions past the context.
  int64_t setBlockInput(const BlockSpan &span, const std::vector<float> &hidden, const char *who);
  /// Show the hook the input x [rows, cols] of site `site` of node n.
  void observe(const Node &n, size_t site, const float *x, int64_t rows, int64_t cols,
               int64_t expert = -1) {
    if (!hook || (hookBlock >= 0 && n.block != hookBlock) || site >= n.sites.size())
      return;
    LinearInput in;
    in.node = n.index;
    in.block = n.block;
    in.expert = expert;
    in.roles = &n.sites[site].roles;
    in.weights = &n.sites[site].weights;
    in.x = x;
    in.rows = rows;
    in.cols = cols;
    hook(in);
  }
  void runAttention(const Node &n);
  void runMlp(const Node &n);
  void runMoe(const Node &n);
};

} // namespace llmc
