//===- KernelPlan.h - Run an artifact's kernel plan -------------*- C++ -*-===//
// The manifest's "kernel_plan" (written by the compiler from the llmk IR
// after llm-lower-to-kernels and llmk-plan-buffers): a flat list of fused
// kernels whose activations live at fixed offsets of one arena (floats per
// token, so a step of T tokens uses T times the arena width; the arena grows
// to the largest step once and is never reallocated per token). The
// attention kernels use the executor's per-layer KV caches.
//===----------------------------------------------------------------------===//
#pragma once
#include "Matmul.h"
#include "MoeRouting.h"
#include "Ops.h"
#include "ThreadPool.h"
#include "WeightMatrix.h"
#include "../codegen/GeneratedKernels.h"
#include "../kv/KvCache.h"

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace llmc {

enum class PlanKernel { Embed, NormMatmul, NormGatedMatmul, MatmulAdd, NormMoe, RopeKvAppend,
                        Attend, RmsNorm, Add };

/// floats [offset*T, (offset+width)*T) of the arena; offset -1: the logits.
struct PlanSlot {
  int64_t offset = -1, width = 0;
};

struct PlanStep {
  PlanKernel kernel = PlanKernel::Embed;
  std::string desc; // "kernel_plan step 3 (norm_matmul)"
  std::vector<PlanSlot> in;
  PlanSlot out;
  /// In the step's order (q, k, v; gate, up; ...); norm_moe: the router,
  /// then gate, up and down of expert 0, of expert 1, ...
  std::vector<WeightMatrix> w;
  /// The generated kernel of each weight (all set, or the step uses the
  /// library kernels for decode-sized steps too).
  std::vector<codegen::MatvecFn> gen;
  /// The generated int8 kernel of each weight over its eight-row copy (null
  /// entries: the library's; empty: none).
  std::vector<codegen::Rows8Fn> gen8;
  /// The generated kernels of the step's other ops (null: the library's):
  /// the embedding lookup, the (fused) RMSNorm, the gated activation, RoPE
  /// with the K/V split, attention over f32 caches, the add.
  codegen::EmbedFn genEmbed = nullptr;
  codegen::RmsNormFn genNorm = nullptr;
  codegen::GateFn genGate = nullptr;
  codegen::RopeFn genRope = nullptr;
  // Over the f32 cache, a paged cache's rows, and both by GQA group.
  codegen::AttendKernels genAttend;
  codegen::AddFn genAdd = nullptr;
  std::vector<float> norm;     // RMSNorm weight when fused (empty: none)
  float eps = 1e-5f;
  Activation act = Activation::SiLU;
  int cache = -1; // index into the executor's caches (rope_kv_append, attend)
  int64_t heads = 0, kvHeads = 0, headDim = 0;
  std::vector<double> invFreq;
  double theta = 0;
  RopeStyle rope = RopeStyle::Half;
  bool int8 = false; // products read int8 activations (the plan's "activations")
  ops::MoeRouting moe; // norm_moe: experts, top k, gating, adaptive activation
};

/// How the plan reaches the executor's weights and caches.
struct PlanBindings {
  std::function<WeightMatrix(const std::string &name, const std::string &ctx)> matrix;
  /// Every slab (expert) of a 3-D weight [experts, rows, cols], in order.
  std::function<std::vector<WeightMatrix>(const std::string &name, const std::string &ctx)>
      slabs;
  std::function<std::vector<float>(const std::string &name, const std::string &ctx)> vector;
  /// The cache index of attention layer `layer`; throws if there is none.
  std::function<int(int64_t layer, const std::string &ctx)> cache;
  /// The artifact's generated kernels (nullptr: library kernels only).
  const codegen::GeneratedKernels *generated = nullptr;
  /// Products of 32-weight block formats quantize their activations to int8
  /// (matmulMany's int8Activations).
  bool int8_activations = false;
  /// With int8 activations, Q4_0/Q4_1/Q8_0 matrices (rows a multiple of 8)
  /// run from an eight-row interleaved copy built here; this is then called
  /// on each source range, whose pages the engine no longer reads (may be
  /// empty).
  std::function<void(const uint8_t *data, int64_t bytes)> release;
  /// Builds the eight-row copies in parallel (null: on the calling thread).
  ThreadPool *pool = nullptr;
};

/// One sequence's part of a batched step (PlanEngine::runBatch): its
/// layer caches, the tokens it feeds and the position of the first.
struct PlanSegment {
  std::vector<kv::LayerCache> *caches = nullptr;
  const int32_t *tokens = nullptr;
  int64_t n = 0;
  int64_t pos = 0;
  /// A draft tree (speculative verification; the only segment of its
  /// step): row t > 0 follows row parent[t] < t and sits at position pos +
  /// its depth; row t attends to its path only (LayerCache::attendTree).
  /// Null: rows one after another at pos, pos + 1, ...
  const int32_t *parent = nullptr;
};

/// `plan` without the steps of blocks `skip` (self-speculation's drafter):
/// each must be a run of consecutive steps that only adds into the residual
/// stream. std::runtime_error naming the block otherwise, for a block the
/// plan lacks, or when every block would go.
nlohmann::json planWithoutBlocks(const nlohmann::json &plan, const std::vector<int64_t> &skip);

class PlanEngine {
public:
  /// Parse and check the plan (slots inside the arena, widths matching the
  /// weights, inputs defined); throws std::runtime_error naming the step.
  PlanEngine(const nlohmann::json &plan, const PlanBindings &bind);

  /// One step of T = tokens.size() tokens at positions pos..; returns the
  /// logits [T or 1, vocab] into `logits`.
  /// `hidden` (optional): every row's final hidden state (the logits
  /// step's input after its norm) [T, hidden width].
  void run(ThreadPool &pool, std::vector<kv::LayerCache> &caches,
           const std::vector<int32_t> &tokens, int64_t pos, bool allLogits,
           std::vector<float> &logits, std::vector<float> *hidden = nullptr,
           const int32_t *treeParent = nullptr);
  /// The logits step's products alone (no norm) on rows x [rows, width]:
  /// logits [rows, vocab].
  void lmHead(ThreadPool &pool, const float *x, int64_t rows, std::vector<float> &logits) const;
  int64_t hiddenWidth() const { return steps_.back().in[0].width; }
  /// The logits step's (single) weight and the embedding step's table.
  const WeightMatrix &lmHeadMatrix() const;
  const WeightMatrix &embeddingMatrix() const;
  /// One step over several sequences: their rows go through every product
  /// together (each weight is read once for all of them), RoPE, the KV
  /// append and attention run per sequence on its own caches and
  /// positions. Logits: every row of every segment when allLogits, else
  /// the last row of each [segments, vocab], in segment order.
  void runBatch(ThreadPool &pool, const std::vector<PlanSegment> &segments, bool allLogits,
                std::vector<float> &logits, std::vector<float> *hidden = nullptr);

  int64_t vocab() const { return steps_.back().out.width; }
  /// The parsed, checked steps (for engines on other devices).
  const std::vector<PlanStep> &steps() const { return steps_; }
  int64_t arenaFloatsPerToken() const { return arenaPerToken_; }
  size_t size() const { return steps_.size(); }
  /// Products (weights) that run generated kernels: with int8 activations
  /// at every step size, with f32 ones when T <= kMaxRows.
  int generatedProducts() const { return generatedProducts_; }
  /// The plan's ops besides products (embedding, RMSNorms fused or alone,
  /// gated activations, RoPE, attention, adds) and how many of them have a
  /// generated kernel.
  int ops() const { return ops_; }
  int generatedOps() const { return generatedOps_; }
  /// Products that quantize their activations to int8 (0 without
  /// int8_activations or block-format weights).
  int int8Products() const { return int8Products_; }
  /// Bytes of the eight-row interleaved weight copies.
  int64_t rows8Bytes() const { return rows8Bytes_; }

private:
  std::vector<PlanStep> steps_;
  int64_t arenaPerToken_ = 0;
  int generatedProducts_ = 0;
  int ops_ = 0, generatedOps_ = 0;
  bool int8_ = false;
  int int8Products_ = 0;
  struct FreeDeleter {
    void operator()(uint8_t *p) const;
  };
  /// Eight-row copies, by source data pointer (a tied matrix is packed once).
  std::map<const uint8_t *, std::unique_ptr<uint8_t, FreeDeleter>> rows8_;
  int64_t rows8Bytes_ = 0;
  void packRows8(WeightMatrix &w, const PlanBindings &bind);
  /// The step's activation precision and weight layouts, as the plan says.
  void bindKernelChoice(PlanStep &s, const nlohmann::json &sj, const PlanBindings &bind);
  MatmulPaths paths(const PlanStep &s) const;
  /// The paths of the step's weights [first, first + n) run as one call.
  MatmulPaths pathsAt(const PlanStep &s, size_t first) const;
public:
  /// A norm_moe step's weights, slots, norm and routing (KernelPlanMoe.cpp);
  /// throws naming the step.
  static void checkNormMoe(PlanStep &s, const nlohmann::json &attrs);
private:
  void bindGeneratedOps(PlanStep &s, const codegen::GeneratedKernels *g);
  static void rmsNorm(const PlanStep &s, const float *x, float *y, int64_t rows);
  /// The gated activation's epilogue over g, u [rows, width] (rows of
  /// width floats): g = act(g) * u on each block of output columns.
  static RowEpilogue gateEpilogue(const PlanStep &s, float *g, const float *u, int64_t rows,
                                  int64_t width);
  /// norm_matmul's products (the step's weights side by side in `out`'s
  /// rows) on rows x that are already normalised.
  void products(ThreadPool &pool, const PlanStep &s, const float *x, int64_t rows,
                float *out) const;
  /// Where one step reads and writes: the arena (its slots hold slotT rows
  /// each) and the rows [first, first + rows) the step computes.
  struct StepIO {
    int64_t slotT = 0; // rows of every arena slot (the step's tokens)
    int64_t first = 0; // first row the step computes
    int64_t rows = 0;  // rows it computes
    float *arena = nullptr;
    float *out = nullptr; // its output at row `first`, or the logits
    /// Input slot k of step `s` at row `first`.
    float *in(const PlanStep &s, size_t k) const {
      return arena + s.in[k].offset * slotT + first * s.in[k].width;
    }
  };
  /// `tokens`: one per row of the whole step (the embedding reads rows
  /// [io.first, io.first + io.rows)); `caches` and `pos`: the sequence of
  /// those rows (RoPE, the KV append and attention).
  void runStep(ThreadPool &pool, std::vector<kv::LayerCache> *caches, const PlanStep &s,
               const int32_t *tokens, int64_t pos, const StepIO &io);
  /// The logits step's inputs at the last row of each segment, gathered
  /// into gather_ (laid out as an arena of one row per segment).
  void gatherLastRows(const PlanStep &s, const std::vector<PlanSegment> &segments, int64_t R);
  /// norm_matmul and norm_gated_matmul: the optional fused RMSNorm, then
  /// the products (with the gated activation as their epilogue).
  void runNormMatmul(ThreadPool &pool, const PlanStep &s, const StepIO &io);
  /// The step's draft tree, if its segment has one (KernelPlanTree.cpp):
  /// checked (the only segment; each row after its parent), treeParent_
  /// and treeDepth_ set; none: treeParent_ null.
  void beginTree(const std::vector<PlanSegment> &segments, int64_t R);
  /// rope_kv_append (KernelPlanTree.cpp): RoPE on Q and K, then K and V
  /// into the layer's cache.
  void runRopeKvAppend(ThreadPool &pool, kv::LayerCache &cache, const PlanStep &s, int64_t pos,
                       const StepIO &io);
  /// norm_moe (KernelPlanMoe.cpp): the optional norm, the router, each
  /// row's experts, and only those experts' products over the rows routed
  /// to them, summed into the output (from the residual, if any).
  void runNormMoe(ThreadPool &pool, const PlanStep &s, const StepIO &io);
  std::vector<float> arena_, xn_, kv_, gather_;
  struct MoeScratch {
    std::vector<float> logits, x, g, u, y;
    std::vector<std::vector<std::pair<int64_t, float>>> routed; // per expert: (row, weight)
    std::vector<std::pair<int64_t, float>> chosen;
    ops::RouteScratch route;
  } moe_;
  std::vector<int32_t> batchTokens_;
  // The draft tree of the step running (PlanSegment::parent; null
  // otherwise) and its rows' depths.
  const int32_t *treeParent_ = nullptr;
  std::vector<int32_t> treeDepth_;
};

/// Whether the artifact's manifest carries a kernel plan.
inline bool hasKernelPlan(const nlohmann::json &manifest) {
  return manifest.contains("kernel_plan") && manifest["kernel_plan"].is_object();
}

} // namespace llmc
