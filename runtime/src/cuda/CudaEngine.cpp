//===- CudaEngine.cpp - The kernel plan as CUDA launches -------------------===//
// The plan is parsed and checked by the CPU's PlanEngine (same slots, same
// weights, same errors), then each step becomes launches of the kernels
// named in codegen/cuda/CudaKernelSource.h and CudaAttentionSource.h (their
// ABI; this file mirrors it). A slot of the plan holds T tokens at
// arena + offset * T floats as a [T, width] matrix, as on the CPU.
//===----------------------------------------------------------------------===//
#include "llmc/cuda_engine.h"
#include "llmc/cuda.h"
#include "llmc/dtype.h"
#include "llmc/program.h"
#include "../exec/KernelPlan.h"
#include "../exec/PackedWeights.h"
#include "CudaStepProfile.h"
#include "CudaWeightBytes.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <deque>
#include <map>
#include <stdexcept>

namespace llmc::cuda {

namespace {

// The generated kernels' launch shapes (codegen/cuda/CudaKernelSource.h).
constexpr int kMatvecMaxTokens = 8, kMatvecRowsPerBlock = 4, kKvBlock = 16;
constexpr int kDecodeRowsPerBlock = 8; // llmc_cu_mv1_*
// Attention splits: a step launches kMaxSplits (fewer when the context is
// short) per row and KV head, each of at least kSplitLen positions; the
// kernel cuts 0..pos evenly among them.
constexpr int kSplitLen = 16, kMaxSplits = 32;
constexpr int kRopeThreads = 512;

unsigned blocksFor(int64_t n, int64_t per) { return unsigned((n + per - 1) / per); }

std::string symbolPart(DType t) { return std::string(dtypeName(t)); }

} // namespace

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
  };
  struct GpuStep {
    std::vector<GpuMatrix> w;
    const DeviceBuffer *norm = nullptr;
    void *embed = nullptr, *norm_k = nullptr, *gate = nullptr, *add = nullptr;
    void *rope = nullptr, *attend = nullptr, *combine = nullptr;
    int cache = -1;
  };
  std::vector<GpuStep> gsteps;
  std::map<const void *, DeviceBuffer> weights; // by host address: tied weights once
  std::deque<DeviceBuffer> norms; // steps point at their norms: addresses stay put
  std::deque<DeviceBuffer> stacked; // q, k, v of a step as one matrix (one launch)
  std::vector<DeviceBuffer> kpool, vpool; // per cache
  DeviceBuffer arena, logits, normBuf, tmpBuf, part, tokensBuf, posBuf, seqBuf, blockTable;
  int64_t normW = 0, tmpW = 0;
  int64_t maxHeads = 0, maxHeadDim = 0;
  std::vector<int32_t> hostTokens, hostPos, hostSeq;
  std::map<int64_t, CudaGraph> graphs; // decode step per batch bucket
  /// LLMC_CUDA_PROFILE=1: eager steps time each plan step on the GPU and
  /// step()'s host phases; the tables go to stderr when the engine closes.
  CudaStepProfile profile;
  /// One-token products run llmc_cu_mv1_* (LLMC_CUDA_MV1=0: the general
  /// kernel at T = 1, the same bits; for comparing their speed).
  bool useMatvec1 = true;

  Impl(const Artifact &a, const CudaEngineOptions &o) : art(a), opts(o) {
    const char *e = std::getenv("LLMC_CUDA_MV1");
    useMatvec1 = !(e && std::string(e) == "0");
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
    const std::string shape = symbolPart(dtype) + "_" + std::to_string(cols);
    GpuMatrix m{&buf, dtype, rows, cols, rowBytes(dtype, cols), nullptr};
    m.matvec = kernel(module, "llmc_cu_mv_" + shape, ctx);
    m.matvec1 = optionalKernel(module, "llmc_cu_mv1_" + shape);
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
  void bindStep(void *module, const PlanStep &s, GpuStep &g);
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

void CudaEngine::Impl::build(void *module) {
  PackedWeights packed(art);
  PlanBindings bind;
  bind.matrix = [&](const std::string &name, const std::string &ctx) {
    const TensorView *t = packed.find(name);
    if (!t || t->shape.size() != 2)
      throw std::runtime_error(ctx + ": weight '" + name + "' is not a matrix of " + art.path());
    WeightMatrix w =
        WeightMatrix::of(*t, needsAux(t->dtype) ? art.tensor(t->name + kAuxSuffix) : nullptr);
    packed.attach(t->name, w);
    return w;
  };
  bind.slabs = [&](const std::string &, const std::string &ctx) -> std::vector<WeightMatrix> {
    throw std::runtime_error(ctx + ": MoE layers have no CUDA kernels yet (run the artifact on "
                             "the CPU)");
  };
  bind.vector = [&](const std::string &name, const std::string &ctx) {
    const TensorView *t = art.tensor(name);
    if (!t || t->shape.size() != 1)
      throw std::runtime_error(ctx + ": weight '" + name + "' is not a vector of " + art.path());
    WeightMatrix w = WeightMatrix::of(*t);
    std::vector<float> v(size_t(w.rows * w.cols));
    for (int64_t r = 0; r < w.rows; ++r)
      loadRow(w, r, v.data() + r * w.cols);
    return v;
  };
  std::map<int64_t, int> caches;
  bind.cache = [&](int64_t layer, const std::string &) {
    auto it = caches.find(layer);
    if (it != caches.end())
      return it->second;
    const int idx = int(caches.size());
    caches[layer] = idx;
    return idx;
  };
  bind.int8_activations = false; // the GPU kernels read f32 activations
  plan = std::make_unique<PlanEngine>(art.manifest()["kernel_plan"], bind);
  vocab = plan->vocab();
  const auto t0 = std::chrono::steady_clock::now();
  gsteps.resize(plan->steps().size());
  for (size_t i = 0; i < gsteps.size(); ++i)
    bindStep(module, plan->steps()[i], gsteps[i]);
  stats.upload_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Buffers at fixed addresses, sized for the largest step.
  const int64_t T = kCudaPrefillChunk;
  arena = dev->alloc(size_t(plan->arenaFloatsPerToken() * T * 4));
  logits = dev->alloc(size_t(vocab * T * 4));
  normBuf = dev->alloc(size_t(std::max<int64_t>(normW, 1) * T * 4));
  tmpBuf = dev->alloc(size_t(std::max<int64_t>(tmpW, 1) * T * 4));
  tokensBuf = dev->alloc(size_t(T * 4));
  posBuf = dev->alloc(size_t(T * 4));
  seqBuf = dev->alloc(size_t(T * 4));
  maxBlocks = (maxCtx + kKvBlock - 1) / kKvBlock;
  nSplits = std::min<int64_t>(kMaxSplits, (maxCtx + kSplitLen - 1) / kSplitLen);
  part = dev->alloc(size_t(std::max<int64_t>(T * maxHeads * nSplits * (maxHeadDim + 2), 1) * 4));
  // Sequence q owns blocks [q * maxBlocks, (q + 1) * maxBlocks); one more
  // sequence takes the padding rows of a batch bucket.
  const int64_t blocks = (maxSeqs + 1) * maxBlocks;
  if (blocks > INT32_MAX)
    throw std::runtime_error("cuda engine: too many KV blocks for the sequences and context");
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  for (int64_t b = 0; b < blocks; ++b)
    table[size_t(b)] = int32_t(b);
  blockTable = dev->alloc(table.size() * 4);
  dev->upload(blockTable, table.data(), table.size() * 4);
  stats.arena_bytes = int64_t(arena.bytes() + logits.bytes() + normBuf.bytes() + tmpBuf.bytes() +
                              part.bytes());
  for (const PlanStep &s : plan->steps())
    if (s.kernel == PlanKernel::RopeKvAppend) {
      if (size_t(s.cache) >= kpool.size()) {
        kpool.resize(size_t(s.cache) + 1);
        vpool.resize(size_t(s.cache) + 1);
      }
      const size_t bytes = size_t(blocks * s.kvHeads * kKvBlock * s.headDim * 2);
      kpool[size_t(s.cache)] = dev->alloc(bytes);
      vpool[size_t(s.cache)] = dev->alloc(bytes);
      stats.kv_bytes += int64_t(2 * bytes);
    }
  for (size_t c = 0; c < kpool.size(); ++c)
    if (!kpool[c].ptr())
      throw std::runtime_error("kernel_plan: attention over KV cache " + std::to_string(c) +
                               " that no rope_kv_append step fills");
  hostTokens.resize(size_t(T));
  hostPos.resize(size_t(T));
  hostSeq.resize(size_t(T));
  seqPos.assign(size_t(maxSeqs), 0);
}

void CudaEngine::Impl::bindStep(void *module, const PlanStep &s, GpuStep &g) {
  const std::string &ctx = s.desc;
  // A norm_matmul's matrices (q, k, v) of one format and width write
  // adjacent output columns: stacked into one matrix, one launch does them.
  bool stack = s.kernel == PlanKernel::NormMatmul && s.w.size() > 1;
  for (const WeightMatrix &w : s.w)
    stack = stack && w.dtype == s.w[0].dtype && w.cols == s.w[0].cols;
  if (stack) {
    std::vector<uint8_t> bytes;
    int64_t rows = 0;
    for (const WeightMatrix &w : s.w) {
      const std::vector<uint8_t> b = rowMajorBytes(w);
      bytes.insert(bytes.end(), b.begin(), b.end());
      rows += w.rows;
    }
    stacked.push_back(dev->alloc(bytes.size()));
    dev->upload(stacked.back(), bytes.data(), bytes.size());
    stats.weight_bytes += int64_t(bytes.size());
    g.w.push_back(productMatrix(module, stacked.back(), s.w[0].dtype, rows, s.w[0].cols, ctx));
  }
  for (size_t i = 0; !stack && i < s.w.size(); ++i) { // each matrix once (tied ones shared)
    const WeightMatrix &w = s.w[i];
    const void *key = w.data ? static_cast<const void *>(w.data) : w.rows8;
    auto it = weights.find(key);
    if (it == weights.end()) {
      const std::vector<uint8_t> bytes = rowMajorBytes(w);
      DeviceBuffer b = dev->alloc(bytes.size());
      dev->upload(b, bytes.data(), bytes.size());
      stats.weight_bytes += int64_t(bytes.size());
      it = weights.emplace(key, std::move(b)).first;
    }
    g.w.push_back(s.kernel == PlanKernel::Embed
                      ? GpuMatrix{&it->second, w.dtype, w.rows, w.cols,
                                  rowBytes(w.dtype, w.cols), nullptr}
                      : productMatrix(module, it->second, w.dtype, w.rows, w.cols, ctx));
  }
  const int64_t inW = s.in.empty() ? 0 : s.in[0].width;
  if (!s.norm.empty()) {
    norms.push_back(dev->alloc(s.norm.size() * 4));
    dev->upload(norms.back(), s.norm.data(), s.norm.size() * 4);
    g.norm = &norms.back();
    g.norm_k = kernel(module, "llmc_cu_rms_norm_" + std::to_string(inW), ctx);
    normW = std::max(normW, inW);
  }
  switch (s.kernel) {
  case PlanKernel::Embed:
    g.embed = kernel(module, "llmc_cu_embed_" + symbolPart(s.w[0].dtype) + "_" +
                                 std::to_string(s.w[0].cols), ctx);
    break;
  case PlanKernel::NormGatedMatmul:
    g.gate = kernel(module, std::string("llmc_cu_gate_") + std::string(spelling(s.act)), ctx);
    tmpW = std::max(tmpW, s.out.width);
    break;
  case PlanKernel::MatmulAdd:
    g.add = kernel(module, "llmc_cu_add", ctx);
    tmpW = std::max(tmpW, s.out.width);
    break;
  case PlanKernel::Add:
    g.add = kernel(module, "llmc_cu_add", ctx);
    break;
  case PlanKernel::RopeKvAppend: {
    char theta[40];
    snprintf(theta, sizeof theta, "%.10g", s.theta);
    std::string t = theta;
    for (char &c : t)
      if (c == '.' || c == '+' || c == '-')
        c = 'p';
    g.rope = kernel(module, "llmc_cu_rope_kv_" + std::to_string(s.heads) + "_" +
                                std::to_string(s.kvHeads) + "_" + std::to_string(s.headDim) +
                                "_" + std::string(spelling(s.rope)) + "_" + t, ctx);
    break;
  }
  case PlanKernel::Attend:
    g.attend = kernel(module, "llmc_cu_attend_" + std::to_string(s.heads) + "_" +
                                  std::to_string(s.kvHeads) + "_" + std::to_string(s.headDim), ctx);
    g.combine = kernel(module, "llmc_cu_attend_combine_" + std::to_string(s.heads) + "_" +
                                   std::to_string(s.headDim), ctx);
    maxHeads = std::max(maxHeads, s.heads);
    maxHeadDim = std::max(maxHeadDim, s.headDim);
    break;
  default:
    break;
  }
  if (s.kernel == PlanKernel::RopeKvAppend || s.kernel == PlanKernel::Attend)
    g.cache = s.cache;
  ++stats.kernels;
}

void CudaEngine::Impl::matvec(const GpuMatrix &m, uint64_t x, int64_t ldx, int64_t T, uint64_t y,
                              int64_t ldy, uint64_t res, int64_t ldr) {
  if (T == 1 && m.matvec1 && useMatvec1) {
    uint64_t w = m.buf->ptr(), xp = x, yp = y, rp = res;
    long long stride = m.stride, rows = m.rows;
    void *args[] = {&w, &stride, &xp, &yp, &rows, &rp};
    dev->launch(m.matvec1, blocksFor(m.rows, kDecodeRowsPerBlock), 32 * kDecodeRowsPerBlock,
                args);
    return;
  }
  for (int64_t t0 = 0; t0 < T; t0 += kMatvecMaxTokens) {
    uint64_t w = m.buf->ptr(), xp = x + uint64_t(t0 * ldx) * 4, yp = y + uint64_t(t0 * ldy) * 4;
    uint64_t rp = res ? res + uint64_t(t0 * ldr) * 4 : 0;
    long long stride = m.stride, lx = ldx, ly = ldy, rows = m.rows, lr = ldr;
    int n = int(std::min<int64_t>(kMatvecMaxTokens, T - t0));
    void *args[] = {&w, &stride, &xp, &lx, &n, &yp, &ly, &rows, &rp, &lr};
    dev->launch(m.matvec, blocksFor(m.rows, kMatvecRowsPerBlock), 32 * kMatvecRowsPerBlock, args);
  }
}

/// One step over T rows; rowsOut < T (the logits step without all_logits)
/// computes only the last rowsOut rows, written from the output's start.
void CudaEngine::Impl::runStep(const PlanStep &s, const GpuStep &g, int64_t T, int64_t rowsOut) {
  const int64_t inW = s.in.empty() ? 0 : s.in[0].width, outW = s.out.width;
  const int64_t skip = T - rowsOut; // leading rows not computed
  uint64_t in = s.in.empty() ? 0 : slotPtr(s.in[0], T) + uint64_t(skip * inW) * 4;
  uint64_t out = s.out.offset < 0 ? logits.ptr() : slotPtr(s.out, T);
  long long n = rowsOut;
  if (g.norm) { // RMSNorm into normBuf (or the output, for rms_norm)
    uint64_t w = g.norm->ptr(), y = s.kernel == PlanKernel::RmsNorm ? out : normBuf.ptr();
    float eps = s.eps;
    void *args[] = {&in, &w, &y, &n, &eps};
    dev->launch(g.norm_k, unsigned(rowsOut), 32, args);
    in = y;
  }
  switch (s.kernel) {
  case PlanKernel::Embed: {
    uint64_t table = g.w[0].buf->ptr(), tok = tokensBuf.ptr();
    long long stride = g.w[0].stride, rows = g.w[0].rows, ldo = outW;
    int nt = int(T);
    void *args[] = {&table, &stride, &rows, &tok, &nt, &out, &ldo};
    dev->launch(g.embed, unsigned(T), 32, args);
    break;
  }
  case PlanKernel::NormMatmul: {
    int64_t col = 0;
    for (const GpuMatrix &m : g.w) {
      matvec(m, in, inW, rowsOut, out + uint64_t(col) * 4, outW);
      col += m.rows;
    }
    break;
  }
  case PlanKernel::NormGatedMatmul: {
    matvec(g.w[0], in, inW, rowsOut, out, outW);
    matvec(g.w[1], in, inW, rowsOut, tmpBuf.ptr(), outW);
    uint64_t u = tmpBuf.ptr();
    long long count = rowsOut * outW;
    void *args[] = {&out, &u, &count};
    dev->launch(g.gate, blocksFor(count, 256), 256, args);
    break;
  }
  case PlanKernel::MatmulAdd: {
    uint64_t res = slotPtr(s.in[1], T) + uint64_t(skip * outW) * 4, tmp = tmpBuf.ptr();
    if (s.out.offset != s.in[0].offset) { // the residual fused (out may be the residual)
      matvec(g.w[0], in, inW, rowsOut, out, outW, res, outW);
      break;
    }
    matvec(g.w[0], in, inW, rowsOut, tmpBuf.ptr(), outW);
    long long count = rowsOut * outW;
    void *args[] = {&res, &tmp, &out, &count};
    dev->launch(g.add, blocksFor(count, 256), 256, args);
    break;
  }
  case PlanKernel::Add: {
    uint64_t b = slotPtr(s.in[1], T) + uint64_t(skip * inW) * 4;
    long long count = rowsOut * outW;
    void *args[] = {&in, &b, &out, &count};
    dev->launch(g.add, blocksFor(count, 256), 256, args);
    break;
  }
  case PlanKernel::RmsNorm:
    break; // done above
  case PlanKernel::RopeKvAppend: {
    long long ld = inW, ldq = outW;
    int nt = int(T), mb = int(maxBlocks);
    uint64_t pos = posBuf.ptr(), seq = seqBuf.ptr(), k = kpool[size_t(g.cache)].ptr(),
             v = vpool[size_t(g.cache)].ptr(), table = blockTable.ptr();
    void *args[] = {&in, &ld, &nt, &pos, &seq, &out, &ldq, &k, &v, &table, &mb};
    dev->launch(g.rope, unsigned(T), kRopeThreads, args);
    break;
  }
  case PlanKernel::NormMoe: // refused when the plan is bound (bind.slabs)
    throw std::runtime_error(s.desc + ": no CUDA kernel");
  case PlanKernel::Attend: {
    long long ldq = inW, ldo = outW;
    int nt = int(T), mb = int(maxBlocks), ns = int(nSplits), sl = kSplitLen;
    uint64_t pos = posBuf.ptr(), seq = seqBuf.ptr(), k = kpool[size_t(g.cache)].ptr(),
             v = vpool[size_t(g.cache)].ptr(), table = blockTable.ptr(), p = part.ptr();
    void *args[] = {&in, &ldq, &nt, &pos, &seq, &k, &v, &table, &mb, &ns, &sl, &p};
    dev->launch(g.attend, unsigned(T * s.kvHeads * nSplits), 32, args);
    void *cargs[] = {&p, &nt, &ns, &out, &ldo};
    dev->launch(g.combine, unsigned(T * s.heads), 32, cargs);
    break;
  }
  }
}

void CudaEngine::Impl::launchAll(int64_t T, bool allLogits, bool timed) {
  const std::vector<PlanStep> &steps = plan->steps();
  auto one = [&](size_t i) {
    const bool last = i + 1 == steps.size();
    runStep(steps[i], gsteps[i], T, last && !allLogits ? 1 : T);
  };
  if (!timed) {
    for (size_t i = 0; i < steps.size(); ++i)
      one(i);
    return;
  }
  const std::vector<float> ms = dev->timeEach(steps.size(), one);
  for (size_t i = 0; i < steps.size(); ++i)
    profile.addStep(cudaStepLabel(steps[i], T), ms[i]);
}

CudaEngine::CudaEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaEngine::~CudaEngine() = default;

std::unique_ptr<CudaEngine> CudaEngine::open(const Artifact &art, const CudaEngineOptions &opts,
                                             std::string &why) {
  if (!art.manifest().contains("kernel_plan"))
    throw std::runtime_error(art.path() + ": no kernel plan (compile with kernels)");
  verifyCudaSections(art, opts.trust); // the same refusals with or without a GPU
  for (const ProgramNode &n : art.program().nodes) {
    if (n.op != "attention")
      continue;
    const nlohmann::json *kp = n.attrs.contains("kv_policy") ? &n.attrs["kv_policy"] : nullptr;
    if ((kp && !kp->is_null()) || !n.attrs.value("causal", true))
      throw std::runtime_error(art.path() + ": attention with a KV policy or without a causal "
                               "mask does not run on the GPU yet (the CPU engine runs it)");
  }
  auto impl = std::make_unique<Impl>(art, opts);
  impl->dev = CudaDevice::open(why);
  if (!impl->dev)
    return nullptr;
  const CudaImage img =
      trustedCudaImage(art, opts.trust, impl->dev->ccMajor(), impl->dev->ccMinor());
  impl->image = img.arch;
  void *module = impl->dev->loadModule(img.bytes);
  const int64_t ctx = art.config().context_length;
  impl->maxCtx = opts.max_context > 0 ? opts.max_context
                                      : (ctx > 0 ? std::min<int64_t>(ctx, 4096) : 4096);
  if (opts.max_sequences < 1 || opts.max_sequences > 1024)
    throw std::runtime_error("cuda engine: max_sequences must be in [1, 1024]");
  impl->maxSeqs = opts.max_sequences;
  impl->build(module);
  return std::unique_ptr<CudaEngine>(new CudaEngine(std::move(impl)));
}

void CudaEngine::Impl::step(int64_t T, bool bucket, bool allLogits, float *out) {
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  auto phase = [&](const char *what) {
    if (!profile.enabled())
      return;
    const auto now = Clock::now();
    profile.addHost(std::string(what) + " T=" + std::to_string(T),
                    std::chrono::duration<double, std::milli>(now - t0).count());
    t0 = now;
  };
  dev->uploadAsync(tokensBuf, 0, hostTokens.data(), size_t(T * 4));
  dev->uploadAsync(posBuf, 0, hostPos.data(), size_t(T * 4));
  dev->uploadAsync(seqBuf, 0, hostSeq.data(), size_t(T * 4));
  phase("upload rows");
  if (bucket && opts.graphs) {
    CudaGraph &g = graphs[T];
    if (!g) {
      g = dev->capture([&] { launchAll(T, true, false); });
      ++stats.captures;
    }
    dev->replay(g);
    ++stats.graph_steps;
    phase("graph replay (issue)");
  } else {
    launchAll(T, allLogits, profile.enabled());
    ++stats.eager_steps;
    phase(profile.enabled() ? "launches (profiled: synchronized)" : "launches");
  }
  if (out)
    dev->downloadAsync(out, logits, 0, size_t((allLogits ? T : 1) * vocab * 4));
  dev->synchronize(); // the staging vectors are rewritten by the next step
  phase("logits download + synchronize");
}

std::vector<float> CudaEngine::forward(const std::vector<int32_t> &tokens, bool allLogits) {
  return forwardSequence(0, tokens, allLogits);
}

std::vector<float> CudaEngine::forwardSequence(int64_t seq, const std::vector<int32_t> &tokens,
                                               bool allLogits) {
  Impl &m = *impl_;
  m.checkSequence(seq);
  if (tokens.empty())
    throw std::runtime_error("forward: no tokens");
  for (int32_t t : tokens)
    if (t < 0 || t >= m.vocab)
      throw std::runtime_error("forward: token id " + std::to_string(t) + " outside [0, " +
                               std::to_string(m.vocab) + ")");
  int64_t &pos = m.seqPos[size_t(seq)];
  if (pos + int64_t(tokens.size()) > m.maxCtx)
    throw std::runtime_error("forward: context overflow: " + std::to_string(pos) + " + " +
                             std::to_string(tokens.size()) + " > " + std::to_string(m.maxCtx));
  std::vector<float> out(size_t((allLogits ? tokens.size() : 1) * size_t(m.vocab)));
  for (size_t at = 0; at < tokens.size(); at += size_t(kCudaPrefillChunk)) {
    const int64_t T = std::min<int64_t>(kCudaPrefillChunk, int64_t(tokens.size() - at));
    const bool lastChunk = at + size_t(T) == tokens.size();
    for (int64_t t = 0; t < T; ++t) {
      m.hostTokens[size_t(t)] = tokens[at + size_t(t)];
      m.hostPos[size_t(t)] = int32_t(pos + t);
      m.hostSeq[size_t(t)] = int32_t(seq);
    }
    // A lone decode token replays bucket 1's graph (its one row's logits).
    float *dst = allLogits ? out.data() + at * size_t(m.vocab) : lastChunk ? out.data() : nullptr;
    m.step(T, T == 1 && !allLogits, allLogits, dst);
    pos += T;
  }
  return out;
}

std::vector<float> CudaEngine::decodeBatch(const std::vector<int64_t> &seqs,
                                           const std::vector<int32_t> &tokens) {
  Impl &m = *impl_;
  const int64_t B = int64_t(seqs.size());
  if (B < 1 || tokens.size() != seqs.size())
    throw std::runtime_error("decodeBatch: one token per sequence, at least one");
  int64_t bucket = 1;
  while (bucket < B)
    bucket *= 2;
  if (bucket > kCudaMaxBatch)
    throw std::runtime_error("decodeBatch: more than " + std::to_string(kCudaMaxBatch) +
                             " sequences in one step");
  for (int64_t i = 0; i < B; ++i) {
    m.checkSequence(seqs[size_t(i)]);
    if (std::count(seqs.begin(), seqs.end(), seqs[size_t(i)]) != 1)
      throw std::runtime_error("decodeBatch: sequence " + std::to_string(seqs[size_t(i)]) +
                               " twice in one step");
    if (tokens[size_t(i)] < 0 || tokens[size_t(i)] >= m.vocab)
      throw std::runtime_error("decodeBatch: token id " + std::to_string(tokens[size_t(i)]) +
                               " outside [0, " + std::to_string(m.vocab) + ")");
    if (m.seqPos[size_t(seqs[size_t(i)])] + 1 > m.maxCtx)
      throw std::runtime_error("decodeBatch: sequence " + std::to_string(seqs[size_t(i)]) +
                               " is at the end of the context");
  }
  for (int64_t i = 0; i < bucket; ++i) { // padding rows: the scratch sequence at 0
    const bool real = i < B;
    m.hostTokens[size_t(i)] = real ? tokens[size_t(i)] : 0;
    m.hostSeq[size_t(i)] = int32_t(real ? seqs[size_t(i)] : m.maxSeqs);
    m.hostPos[size_t(i)] = int32_t(real ? m.seqPos[size_t(seqs[size_t(i)])] : 0);
  }
  std::vector<float> all(size_t(bucket * m.vocab));
  m.step(bucket, true, true, all.data());
  for (int64_t i = 0; i < B; ++i)
    ++m.seqPos[size_t(seqs[size_t(i)])];
  all.resize(size_t(B * m.vocab));
  return all;
}

void CudaEngine::resetSequence(int64_t seq) {
  impl_->checkSequence(seq);
  impl_->seqPos[size_t(seq)] = 0;
}
int64_t CudaEngine::sequencePos(int64_t seq) const {
  impl_->checkSequence(seq);
  return impl_->seqPos[size_t(seq)];
}
int64_t CudaEngine::maxSequences() const { return impl_->maxSeqs; }
int64_t CudaEngine::kvBytesPerPosition() const {
  const Impl &m = *impl_;
  return m.stats.kv_bytes / ((m.maxSeqs + 1) * m.maxBlocks * kKvBlock);
}

void CudaEngine::reset() { impl_->seqPos[0] = 0; }
int64_t CudaEngine::pos() const { return impl_->seqPos[0]; }
int64_t CudaEngine::vocabSize() const { return impl_->vocab; }
int64_t CudaEngine::maxContext() const { return impl_->maxCtx; }
const CudaEngineStats &CudaEngine::stats() const { return impl_->stats; }

std::string CudaEngine::deviceInfo() const {
  const Impl &m = *impl_;
  return m.dev->name() + " (compute capability " + std::to_string(m.dev->ccMajor()) + "." +
         std::to_string(m.dev->ccMinor()) + ", image " + m.image + ")";
}

} // namespace llmc::cuda
