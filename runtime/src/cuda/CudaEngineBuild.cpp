//===- CudaEngineBuild.cpp - The plan's weights and kernels on the GPU -===//
// Uploads the plan's weights, looks up each step's kernels, allocates the
// device buffers at fixed addresses.
//===----------------------------------------------------------------------===//
#include "CudaEngineImpl.h"

namespace llmc::cuda {

using namespace cudaengine;

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
  bind.slabs = [&](const std::string &name, const std::string &ctx) {
    return packed.expertSlabs(name, ctx);
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
    cacheLayer.push_back(layer);
    return idx;
  };
  bind.int8_activations = false; // the GPU kernels read f32 activations
  plan = std::make_unique<PlanEngine>(art.manifest()["kernel_plan"], bind);
  vocab = plan->vocab();
  readKvPolicies();
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
  // The pools: every cache's rows of blocks.pool blocks (CudaKvBlocks.cpp).
  int64_t blockBytes = 0;
  for (const PlanStep &s : plan->steps())
    if (s.kernel == PlanKernel::RopeKvAppend && size_t(s.cache) < kvLayers.size()) {
      const CudaKvLayer &l = kvLayers[size_t(s.cache)];
      blockBytes += s.kvHeads * kKvBlock * (l.keyRowBytes() + l.valueRowBytes());
    }
  buildBlockPool(blockBytes);
  if (moe.any) {
    const size_t t = size_t(T);
    moe.logits = dev->alloc(t * size_t(moe.experts) * 4);
    moe.rows = dev->alloc(t * size_t(moe.experts) * 4);
    moe.weights = dev->alloc(t * size_t(moe.experts) * 4);
    moe.x = dev->alloc(t * size_t(moe.width) * 4);
    moe.g = dev->alloc(t * size_t(moe.ffn) * 4);
    moe.u = dev->alloc(t * size_t(moe.ffn) * 4);
    moe.y = dev->alloc(t * size_t(moe.outWidth) * 4);
  }
  stats.arena_bytes = int64_t(arena.bytes() + logits.bytes() + normBuf.bytes() + tmpBuf.bytes() +
                              part.bytes() + moe.logits.bytes() + moe.rows.bytes() +
                              moe.weights.bytes() + moe.x.bytes() + moe.g.bytes() + moe.u.bytes() +
                              moe.y.bytes());
  for (const PlanStep &s : plan->steps())
    if (s.kernel == PlanKernel::RopeKvAppend) {
      if (size_t(s.cache) >= kpool.size()) {
        kpool.resize(size_t(s.cache) + 1);
        vpool.resize(size_t(s.cache) + 1);
      }
      const CudaKvLayer &l = kvLayers[size_t(s.cache)];
      const size_t rows = size_t(blocks.pool * s.kvHeads * kKvBlock);
      kpool[size_t(s.cache)] = dev->alloc(rows * size_t(l.keyRowBytes()));
      vpool[size_t(s.cache)] = dev->alloc(rows * size_t(l.valueRowBytes()));
      stats.kv_bytes += int64_t(rows * size_t(l.keyRowBytes() + l.valueRowBytes()));
      ++stats.kv_caches;
      stats.polykv_caches += l.polyKv();
    }
  for (size_t c = 0; c < kpool.size(); ++c)
    if (!kpool[c].ptr())
      throw std::runtime_error("kernel_plan: attention over KV cache " + std::to_string(c) +
                               " that no rope_kv_append step fills");
  hostTokens.resize(size_t(T));
  hostPos.resize(size_t(T));
  hostSeq.resize(size_t(T));
  seqPos.assign(size_t(maxSeqs), 0);
  buildKvPolicies(module);
}

void CudaEngine::Impl::readKvPolicies() {
  std::map<int64_t, const ProgramNode *> byLayer;
  for (const ProgramNode &n : art.program().nodes)
    if (n.op == "attention" && n.attrs.contains("layer") && n.attrs["layer"].is_number_integer())
      byLayer[n.attrs["layer"].get<int64_t>()] = &n;
  std::vector<CudaKvLayer> &layers = kvLayers;
  layers.assign(cacheLayer.size(), CudaKvLayer{});
  PackedWeights packed(art);
  for (const PlanStep &s : plan->steps()) {
    if (s.kernel != PlanKernel::RopeKvAppend)
      continue;
    CudaKvLayer &l = layers[size_t(s.cache)];
    l.layer = cacheLayer[size_t(s.cache)];
    l.heads = s.heads;
    l.kvHeads = s.kvHeads;
    l.headDim = s.headDim;
    auto node = byLayer.find(l.layer);
    if (node == byLayer.end())
      continue; // no attention node names it: no policy
    const ProgramNode &n = *node->second;
    const std::string ctx = "attention (layer " + std::to_string(l.layer) + ")";
    if (n.attrs.contains("kv_policy") && !n.attrs["kv_policy"].is_null())
      l.policy = kv::parsePolicy(n.attrs["kv_policy"], ctx, l.kvHeads);
    if (l.polyKv()) {
      const kv::PolyKV codec = kv::LayerCache::polyKvFor(l.policy, l.layer, l.headDim);
      if (signsBuf.size() <= size_t(s.cache))
        signsBuf.resize(size_t(s.cache) + 1);
      signsBuf[size_t(s.cache)] = dev->alloc(codec.signs.size() * 4);
      dev->upload(signsBuf[size_t(s.cache)], codec.signs.data(), codec.signs.size() * 4);
    }
    if (l.policy.full() || !n.weights.count("o"))
      continue;
    const TensorView *t = packed.find(n.weights.at("o"));
    if (!t || t->shape.size() != 2)
      throw std::runtime_error(ctx + ": weight 'o' is not a matrix of " + art.path());
    WeightMatrix wo =
        WeightMatrix::of(*t, needsAux(t->dtype) ? art.tensor(t->name + kAuxSuffix) : nullptr);
    packed.attach(t->name, wo);
    l.width = wo.rows;
    l.woRow = [wo](int64_t r, float *dst) { loadRow(wo, r, dst); };
  }
}

void CudaEngine::Impl::buildKvPolicies(void *module) {
  kv = std::make_unique<CudaKvPolicies>(kvLayers, maxSeqs);
  if (!kv->any())
    return;
  slotBuf = dev->alloc(size_t(kv->caches() * kCudaPrefillChunk * 4));
  hostSlot.assign(size_t(kv->caches() * kCudaPrefillChunk), 0);
  tail.q.resize(size_t(kv->caches()));
  decodeQ.q.resize(size_t(kv->caches()));
  decodeQ.dev.resize(size_t(kv->caches()));
  int64_t widest = 0;
  for (const PlanStep &s : plan->steps()) // a decode step's q rows, [kCudaMaxBatch, width]
    if (s.kernel == PlanKernel::RopeKvAppend && kv->replaysDecode(s.cache)) {
      decodeQ.q[size_t(s.cache)].assign(size_t(kCudaMaxBatch * s.out.width), 0.0f);
      decodeQ.dev[size_t(s.cache)] = dev->alloc(decodeQ.q[size_t(s.cache)].size() * 4);
      widest = std::max(widest, s.out.width);
    }
  if (widest > 0) {
    const std::vector<float> zero(size_t(kCudaMaxBatch * widest), 0.0f);
    decodeQ.zeros = dev->alloc(zero.size() * 4);
    dev->upload(decodeQ.zeros, zero.data(), zero.size() * 4);
    decodeQ.copy = kernel(module, "llmc_cu_add", "kv policy (decode-step queries)");
  }
  holeBuf.resize(size_t(kv->caches()));
  hostHole.resize(size_t(kv->caches()));
  for (int c = 0; c < int(kv->caches()); ++c) {
    if (!kv->compresses(c))
      continue;
    const CudaKvLayer &l = kvLayers[size_t(c)];
    hostHole[size_t(c)].assign(size_t((maxSeqs + 1) * l.kvHeads * 2), 0);
    holeBuf[size_t(c)] = dev->alloc(hostHole[size_t(c)].size() * 4);
    dev->upload(holeBuf[size_t(c)], hostHole[size_t(c)].data(), hostHole[size_t(c)].size() * 4);
  }
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
  const bool hasCache = s.kernel == PlanKernel::RopeKvAppend || s.kernel == PlanKernel::Attend;
  const bool polyKv = hasCache && size_t(s.cache) < kvLayers.size() &&
                      kvLayers[size_t(s.cache)].polyKv();
  if (polyKv)
    g.signs = signsBuf[size_t(s.cache)].ptr();
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
  case PlanKernel::NormMoe:
    g.gate = kernel(module, std::string("llmc_cu_gate_") + std::string(spelling(s.act)), ctx);
    g.moeGather = kernel(module, "llmc_cu_moe_gather", ctx);
    g.moeScatter = kernel(module, "llmc_cu_moe_scatter_add", ctx);
    g.moeFill = kernel(module, "llmc_cu_moe_fill", ctx);
    moe.any = true;
    moe.experts = std::max(moe.experts, s.moe.experts);
    moe.width = std::max(moe.width, inW);
    moe.ffn = std::max(moe.ffn, s.w[1].rows);
    moe.outWidth = std::max(moe.outWidth, s.out.width);
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
    // A PolyKV cache's entries are encoded as they are appended.
    g.rope = kernel(module, std::string(polyKv ? "llmc_cu_pkv_rope_" : "llmc_cu_rope_kv_") +
                                std::to_string(s.heads) + "_" + std::to_string(s.kvHeads) + "_" +
                                std::to_string(s.headDim) + "_" + std::string(spelling(s.rope)) +
                                "_" + t, ctx);
    break;
  }
  case PlanKernel::Attend:
    g.attend = kernel(module, std::string(polyKv ? "llmc_cu_pkv_attend_" : "llmc_cu_attend_") +
                                  std::to_string(s.heads) + "_" + std::to_string(s.kvHeads) +
                                  "_" + std::to_string(s.headDim), ctx);
    g.combine = kernel(module,
                       std::string(polyKv ? "llmc_cu_pkv_combine_" : "llmc_cu_attend_combine_") +
                           std::to_string(s.heads) + "_" + std::to_string(s.headDim), ctx);
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

} // namespace llmc::cuda
