//===- CudaEngineImpl.h - The GPU engine's state (private) ------*- C++ -*-===//
// CudaEngine's implementation, shared by its files: CudaEngine.cpp (open
// and the public calls), CudaEngineBuild.cpp (weights and kernels bound to
// the plan's steps, device buffers), CudaEngineSteps.cpp (a step's
// launches). The plan is parsed and checked by the CPU's PlanEngine (same
// slots, same weights, same errors), then each step becomes launches of the
// kernels named in codegen/cuda/CudaKernelSource.h and CudaAttentionSource.h
// (their ABI; these files mirror it). A slot of the plan holds T tokens at
// arena + offset * T floats as a [T, width] matrix, as on the CPU.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/cuda_engine.h"
#include "llmc/cuda.h"
#include "llmc/dtype.h"
#include "llmc/program.h"
#include "../exec/KernelPlan.h"
#include "../exec/MoeRouting.h"
#include "../exec/PackedWeights.h"
#include "CudaStepProfile.h"
#include "CudaKvPolicy.h"
#include "CudaWeightBytes.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <deque>
#include <map>
#include <stdexcept>


namespace llmc::cuda {

namespace cudaengine {

// The generated kernels' launch shapes (codegen/cuda/CudaKernelSource.h).
constexpr int kMatvecMaxTokens = 8, kMatvecRowsPerBlock = 4, kKvBlock = 16;
constexpr int kDecodeRowsPerBlock = 8; // llmc_cu_mv1_*
// Attention splits: a step launches kMaxSplits (fewer when the context is
// short) per row and KV head, each of at least kSplitLen positions; the
// kernel cuts 0..pos evenly among them.
constexpr int kSplitLen = 16, kMaxSplits = 32;
constexpr int kRopeThreads = 512;
// Products of a prompt chunk of at least this many tokens go to the tensor
// cores (llmc_cu_mm_*: 4 warps of 16 rows, 32 tokens per block).
constexpr int64_t kMmaMinTokens = 16;
constexpr int kMmaWarps = 4, kMmaTokens = 32;

inline unsigned blocksFor(int64_t n, int64_t per) { return unsigned((n + per - 1) / per); }

inline std::string symbolPart(DType t) { return std::string(dtypeName(t)); }

} // namespace cudaengine

struct CudaEngine::Impl {
  const Artifact &art;
  CudaEngineOptions opts;
  std::unique_ptr<CudaDevice> dev;
  std::string image;
  std::unique_ptr<PlanEngine> plan;
  CudaEngineStats stats;
  int64_t maxCtx = 0, vocab = 0, maxBlocks = 0, nSplits = 0;
  int64_t maxSeqs = 1;          // sequences 0..maxSeqs-1; maxSeqs is padding rows' scratch
  std::vector<int64_t> seqPos; // next position of each sequence

  struct GpuMatrix {
    const DeviceBuffer *buf = nullptr;
    DType dtype = DType::F32;
    int64_t rows = 0, cols = 0, stride = 0;
    void *matvec = nullptr;
    void *matvec1 = nullptr; // the one-token kernel, when the artifact has it
    void *mma = nullptr;     // the tensor-core kernel (prompt chunks), when it has it
  };
  struct GpuStep {
    std::vector<GpuMatrix> w;
    const DeviceBuffer *norm = nullptr;
    void *embed = nullptr, *norm_k = nullptr, *gate = nullptr, *add = nullptr;
    void *rope = nullptr, *attend = nullptr, *combine = nullptr;
    int cache = -1;
    uint64_t signs = 0; // a PolyKV cache's rotation signs (its rope and combine read them)
    void *moeGather = nullptr, *moeScatter = nullptr, *moeFill = nullptr; // norm_moe
  };
  std::vector<GpuStep> gsteps;
  std::map<const void *, DeviceBuffer> weights; // by host address: tied weights once
  std::deque<DeviceBuffer> norms; // steps point at their norms: addresses stay put
  std::deque<DeviceBuffer> stacked; // q, k, v of a step as one matrix (one launch)
  std::vector<DeviceBuffer> kpool, vpool; // per cache
  DeviceBuffer arena, logits, normBuf, tmpBuf, part, tokensBuf, posBuf, seqBuf, blockTable;
  int64_t normW = 0, tmpW = 0;
  /// MoE layers (norm_moe): routed on the host between launches (the
  /// router's logits read back, each chosen expert run over the rows
  /// gathered for it), so their decode steps run eagerly. Buffers for the
  /// largest layer: logits [T, E], routed rows' indices and weights [T * E],
  /// gathered rows [T, D], gate and up [T, F], the expert's output [T, W].
  struct MoeBuffers {
    bool any = false;
    int64_t experts = 0, width = 0, ffn = 0, outWidth = 0;
    DeviceBuffer logits, rows, weights, x, g, u, y;
    std::vector<float> hostLogits, hostWeights;
    std::vector<int32_t> hostRows;
    // Routing scratch, reused by every step: each expert's (row, weight).
    std::vector<std::vector<std::pair<int64_t, float>>> routed;
    std::vector<std::pair<int64_t, float>> chosen;
    ops::RouteScratch scratch;
  } moe;
  int64_t maxHeads = 0, maxHeadDim = 0;
  std::vector<int32_t> hostTokens, hostPos, hostSeq;
  /// The KV block pool (CudaKvBlocks.cpp). Every cache's pools hold `pool`
  /// blocks of kKvBlock rows per KV head; block 0 is scratch (the padding
  /// rows' and every unmapped entry's). A sequence's logical blocks map to
  /// physical ones as its cache grows (ensureBlocks, before a step runs)
  /// and go back to the free list when its policy shrinks the cache
  /// (trimBlocks) or it resets: a policy's evictions free device memory
  /// for other sequences. `table` ([(maxSeqs + 1) * maxBlocks], the padding
  /// sequence's row all scratch) is uploaded to blockTable before a step
  /// when it changed; the kernels and graphs read it there.
  struct KvBlocks {
    int64_t pool = 0, used = 0, peak = 0;
    std::vector<int32_t> table, free;
    std::vector<int64_t> mapped; // per sequence: its first `mapped` logical blocks
    bool dirty = false;
  } blocks;
  /// Blocks of kKvBlock rows each of the pools hold, and their bytes.
  void buildBlockPool(int64_t blockBytes);
  /// Entries sequence seq holds in its largest cache (the next row's slot there).
  int64_t slotsHeld(int64_t seq) const;
  /// Maps blocks so that each (sequence, slots) pair's sequence holds that
  /// many slots; throws std::runtime_error, mapping nothing, when the pool
  /// has too few free blocks.
  void ensureBlocks(const std::vector<std::pair<int64_t, int64_t>> &need);
  /// Gives back sequence seq's blocks past slotsHeld(seq) (all after a reset).
  void trimBlocks(int64_t seq);
  /// The physical block of sequence seq's logical block b.
  int64_t physicalBlock(int64_t seq, int64_t b) const {
    return blocks.table[size_t(seq * maxBlocks + b)];
  }
  std::map<int64_t, CudaGraph> graphs; // decode step per batch bucket
  std::vector<int64_t> cacheLayer;     // each KV cache's layer (bind.cache order)
  /// KV policies (CudaKvPolicy.h). When some cache compresses, every row's
  /// cache slot in each cache goes to the kernels beside its position:
  /// slotBuf holds [cache][kCudaPrefillChunk] of them (hostSlot staged).
  std::unique_ptr<CudaKvPolicies> kv;
  /// Each cache's policy and shape (read before the steps are bound: a
  /// PolyKV cache's steps take the PolyKV kernels), and the PolyKV caches'
  /// rotation signs on the device.
  std::vector<CudaKvLayer> kvLayers;
  std::vector<DeviceBuffer> signsBuf;
  DeviceBuffer slotBuf;
  std::vector<int32_t> hostSlot;
  /// Per compressing cache, each sequence's hole per KV head ([lo, hi)
  /// pairs, [sequence][kvHead][2]; the attention kernels skip it), and the
  /// host copy.
  std::vector<DeviceBuffer> holeBuf;
  std::vector<std::vector<int32_t>> hostHole;
  /// While a multi-token call runs with compressing caches: its row count,
  /// the current chunk's first row, and per cache the call's last query
  /// rows the policy reads ([tailRows, heads * headDim]), downloaded as
  /// the chunks' RoPE steps write them.
  struct QueryTail {
    bool on = false;
    int64_t rows = 0, at = 0;
    std::vector<std::vector<float>> q;
  } tail;
  /// While a decode step runs with caches that evict while decoding: per
  /// such cache, the step's query rows ([kCudaMaxBatch, heads * headDim]).
  /// Each RoPE step copies its rows to `dev` (llmc_cu_add with `zeros`: x +
  /// 0 is x; a launch, so decode graphs capture it), read back after the
  /// step: such decode steps replay graphs too.
  struct DecodeQueries {
    bool on = false;
    std::vector<std::vector<float>> q;
    std::vector<DeviceBuffer> dev;
    DeviceBuffer zeros;
    void *copy = nullptr; // llmc_cu_add
  } decodeQ;
  /// LLMC_CUDA_PROFILE=1: eager steps time each plan step on the GPU and
  /// step()'s host phases; the tables go to stderr when the engine closes.
  CudaStepProfile profile;
  /// One-token products run llmc_cu_mv1_* (LLMC_CUDA_MV1=0: the general
  /// kernel at T = 1, the same bits; for comparing their speed).
  bool useMatvec1 = true;
  /// Products of at least this many tokens run llmc_cu_mm_* on the tensor
  /// cores (f16 inputs); LLMC_CUDA_MMA=0: never (the f32 matrix-vector
  /// kernels in groups of 8 tokens), LLMC_CUDA_MMA=N: from N tokens.
  int64_t mmaMinTokens = cudaengine::kMmaMinTokens;

  Impl(const Artifact &a, const CudaEngineOptions &o) : art(a), opts(o) {
    const char *e = std::getenv("LLMC_CUDA_MV1");
    useMatvec1 = !(e && std::string(e) == "0");
    if (const char *m = std::getenv("LLMC_CUDA_MMA")) {
      char *end = nullptr;
      const long long n = std::strtoll(m, &end, 10);
      if (end == m || *end || n < 0)
        throw std::runtime_error(std::string("LLMC_CUDA_MMA: expected a token count (0: off), "
                                             "got '") + m + "'");
      mmaMinTokens = n == 0 ? INT64_MAX : n;
    }
  }
  /// The kernel's function, or nullptr when the module lacks it.
  void *optionalKernel(void *module, const std::string &symbol) {
    try {
      return dev->function(module, symbol);
    } catch (const std::exception &) {
      return nullptr;
    }
  }

  /// A product's matrix on the device with its kernels (the one-token kernel
  /// when the artifact has it).
  GpuMatrix productMatrix(void *module, const DeviceBuffer &buf, DType dtype, int64_t rows,
                          int64_t cols, const std::string &ctx) {
    const std::string shape = cudaengine::symbolPart(dtype) + "_" + std::to_string(cols);
    GpuMatrix m{&buf, dtype, rows, cols, rowBytes(dtype, cols), nullptr};
    m.matvec = kernel(module, "llmc_cu_mv_" + shape, ctx);
    m.matvec1 = optionalKernel(module, "llmc_cu_mv1_" + shape);
    m.mma = optionalKernel(module, "llmc_cu_mm_" + shape);
    return m;
  }

  void *kernel(void *module, const std::string &symbol, const std::string &ctx) {
    try {
      return dev->function(module, symbol);
    } catch (const std::exception &) {
      throw std::runtime_error(ctx + ": the artifact's CUDA kernels have no " + symbol +
                               ": no CUDA kernel covers this format or shape yet (the CPU "
                               "engine runs it), or the artifact predates it (recompile with "
                               "--target cuda)");
    }
  }
  void build(void *module);
  /// Each cache's kv_policy from the program (CudaKvPolicy.h) into kvLayers.
  void readKvPolicies();
  /// The policies' host side (kv) and device buffers (slots, holes).
  void buildKvPolicies(void *module);
  /// The device address of cache c's row slots (0: slots are positions).
  uint64_t cacheSlots(int c) const {
    return kv && kv->any() ? slotBuf.ptr() + uint64_t(c) * uint64_t(kCudaPrefillChunk) * 4 : 0;
  }
  uint64_t cacheHoles(int c) const { return kv && kv->compresses(c) ? holeBuf[size_t(c)].ptr() : 0; }
  /// Sequence seq's holes in cache c set to lohi ([kvHead][2]).
  void setHoles(int c, int64_t seq, const std::vector<int32_t> &lohi);
  /// Row `row`'s slot in every cache: sequence seq's next slot + ahead.
  void setRowSlots(int64_t row, int64_t seq, int64_t ahead);
  /// Downloads the rows of a RoPE step's q output (T rows at q) that the
  /// call's compressing policy of cache c reads.
  void keepQueryTail(int c, uint64_t q, int64_t T, int64_t qd);
  /// The policies' compaction after a multi-token call of n rows from p0.
  void compressAfterPrompt(int64_t seq, int64_t p0, int64_t n);
  /// Decode-time eviction after a decode step of these sequences (row i:
  /// seqs[i] at positions[i]; their query rows in decodeQ).
  void evictAfterDecode(const std::vector<int64_t> &seqs, const std::vector<int64_t> &positions);
  /// The device side of compaction (CudaKvPolicy.h) on this engine's pools.
  CudaKvBlockIo blockIo();
  void bindStep(void *module, const PlanStep &s, GpuStep &g);
  /// A norm_moe step over `rows` rows of x (normalised) into out (starting
  /// from res, the residual, when res != 0).
  void runMoe(const PlanStep &s, const GpuStep &g, int64_t rows, uint64_t x, uint64_t res,
              uint64_t out);
  uint64_t slotPtr(const PlanSlot &s, int64_t T) const {
    return s.offset < 0 ? logits.ptr() : arena.ptr() + uint64_t(s.offset * T) * 4;
  }
  /// y = m x (+ res when res != 0: the residual add fused), in chunks of
  /// the kernels' token count.
  void matvec(const GpuMatrix &m, uint64_t x, int64_t ldx, int64_t T, uint64_t y, int64_t ldy,
              uint64_t res = 0, int64_t ldr = 0);
  void runStep(const PlanStep &s, const GpuStep &g, int64_t T, int64_t rowsOut);
  /// Every plan step's launches; `timed` (eager steps with LLMC_CUDA_PROFILE,
  /// never inside a graph capture) times each step on the GPU.
  void launchAll(int64_t T, bool allLogits, bool timed);
  /// Uploads the rows (token, position, sequence) and runs one step of
  /// their count (a graph when `bucket`), logits downloaded to `out`.
  void step(int64_t T, bool bucket, bool allLogits, float *out);
  void checkSequence(int64_t seq) const {
    if (seq < 0 || seq >= maxSeqs)
      throw std::runtime_error("cuda engine: no sequence " + std::to_string(seq) + " (0.." +
                               std::to_string(maxSeqs - 1) + ")");
  }
};

} // namespace llmc::cuda
