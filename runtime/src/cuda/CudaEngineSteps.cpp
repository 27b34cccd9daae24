//===- CudaEngineSteps.cpp - A step of the plan as CUDA launches -===//
// The launches of each plan step, and a step's upload, launches (or graph
// replay) and logits download.
//===----------------------------------------------------------------------===//
#include "CudaEngineImpl.h"

namespace llmc::cuda {

using namespace cudaengine;

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
  if (T >= mmaMinTokens && m.mma) {
    uint64_t w = m.buf->ptr(), xp = x, yp = y, rp = res;
    long long stride = m.stride, lx = ldx, ly = ldy, rows = m.rows, lr = ldr;
    int n = int(T);
    void *args[] = {&w, &stride, &xp, &lx, &n, &yp, &ly, &rows, &rp, &lr};
    dev->launch(m.mma,
                blocksFor(m.rows, 16 * kMmaWarps) * blocksFor(T, kMmaTokens), 32 * kMmaWarps,
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
    uint64_t pos = posBuf.ptr(), slot = cacheSlots(g.cache), seq = seqBuf.ptr(),
             k = kpool[size_t(g.cache)].ptr(), v = vpool[size_t(g.cache)].ptr(),
             table = blockTable.ptr();
    uint64_t signs = g.signs; // PolyKV kernels take one more argument (the others read 12)
    void *args[] = {&in, &ld, &nt, &pos, &slot, &seq, &out, &ldq, &k, &v, &table, &mb, &signs};
    dev->launch(g.rope, unsigned(T), kRopeThreads, args);
    if (tail.on && kv->compresses(g.cache))
      keepQueryTail(g.cache, out, T, outW);
    if (decodeQ.on && kv->replaysDecode(g.cache)) { // a decode step's rows (T <= 32)
      uint64_t zeros = decodeQ.zeros.ptr(), dst = decodeQ.dev[size_t(g.cache)].ptr();
      long long count = T * outW;
      void *cargs[] = {&out, &zeros, &dst, &count}; // dst = q + 0: read back by step()
      dev->launch(decodeQ.copy, blocksFor(count, 256), 256, cargs);
    }
    break;
  }
  case PlanKernel::NormMoe: {
    const uint64_t res =
        s.in.size() == 2 ? slotPtr(s.in[1], T) + uint64_t(skip * outW) * 4 : 0;
    runMoe(s, g, rowsOut, in, res, out);
    break;
  }
  case PlanKernel::Attend: {
    long long ldq = inW, ldo = outW;
    int nt = int(T), mb = int(maxBlocks), ns = int(nSplits), sl = kSplitLen;
    // Each row attends over cache slots 0..its own slot (its position
    // when no policy evicted entries).
    const uint64_t slot = cacheSlots(g.cache);
    uint64_t pos = slot ? slot : posBuf.ptr(), seq = seqBuf.ptr(), k = kpool[size_t(g.cache)].ptr(),
             v = vpool[size_t(g.cache)].ptr(), table = blockTable.ptr(), p = part.ptr();
    uint64_t hole = cacheHoles(g.cache);
    void *args[] = {&in, &ldq, &nt, &pos, &seq, &hole, &k, &v, &table, &mb, &ns, &sl, &p};
    dev->launch(g.attend, unsigned(T * s.kvHeads * nSplits), 32, args);
    uint64_t signs = g.signs; // PolyKV: rotated back with the layer's signs
    void *cargs[] = {&p, &nt, &ns, &out, &ldo, &signs};
    dev->launch(g.combine, unsigned(T * s.heads), 32, cargs);
    break;
  }
  }
}

void CudaEngine::Impl::runMoe(const PlanStep &s, const GpuStep &g, int64_t rows, uint64_t x,
                              uint64_t res, uint64_t out) {
  const int64_t E = s.moe.experts, D = s.in[0].width, F = s.w[1].rows, W = s.out.width;
  // The router (f32, as the CPU's: routing is a discrete choice), read back.
  matvec(g.w[0], x, D, rows, moe.logits.ptr(), E);
  moe.hostLogits.resize(size_t(rows * E));
  dev->downloadAsync(moe.hostLogits.data(), moe.logits, 0, moe.hostLogits.size() * 4);
  dev->synchronize();
  // The CPU engine's routing; each expert's rows and weights, expert by
  // expert, in one upload.
  std::vector<std::vector<std::pair<int64_t, float>>> &routed = moe.routed;
  routed.resize(size_t(E));
  for (auto &list : routed)
    list.clear();
  for (int64_t t = 0; t < rows; ++t) {
    ops::routeToken(s.moe, moe.hostLogits.data() + t * E, moe.scratch, moe.chosen);
    for (const auto &[e, w] : moe.chosen)
      routed[size_t(e)].push_back({t, w});
  }
  moe.hostRows.clear();
  moe.hostWeights.clear();
  for (const auto &list : routed)
    for (const auto &[t, w] : list) {
      moe.hostRows.push_back(int32_t(t));
      moe.hostWeights.push_back(w);
    }
  if (!moe.hostRows.empty()) {
    dev->uploadAsync(moe.rows, 0, moe.hostRows.data(), moe.hostRows.size() * 4);
    dev->uploadAsync(moe.weights, 0, moe.hostWeights.data(), moe.hostWeights.size() * 4);
  }
  // out = the residual (or 0), then each expert's weighted rows added.
  {
    uint64_t src = res, dst = out;
    long long count = rows * W;
    void *args[] = {&src, &dst, &count};
    if (res != out)
      dev->launch(g.moeFill, blocksFor(count, 256), 256, args);
  }
  int64_t at = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t n = int64_t(routed[size_t(e)].size());
    if (n == 0)
      continue;
    uint64_t rowIdx = moe.rows.ptr() + uint64_t(at) * 4, wts = moe.weights.ptr() + uint64_t(at) * 4;
    at += n;
    uint64_t xs = x, xg = moe.x.ptr(), gp = moe.g.ptr(), up = moe.u.ptr(), yp = moe.y.ptr();
    long long ldx = D, ldg = D, cols = D;
    int nn = int(n);
    void *gather[] = {&xs, &ldx, &rowIdx, &nn, &xg, &ldg, &cols};
    dev->launch(g.moeGather, unsigned(n), 128, gather);
    const size_t k = size_t(1 + 3 * e); // gate; up and down follow
    matvec(g.w[k], xg, D, n, gp, F);
    matvec(g.w[k + 1], xg, D, n, up, F);
    long long count = n * F;
    void *gate[] = {&gp, &up, &count};
    dev->launch(g.gate, blocksFor(count, 256), 256, gate);
    matvec(g.w[k + 2], gp, F, n, yp, W);
    long long ldy = W, ldo = W, wcols = W;
    void *scatter[] = {&yp, &ldy, &rowIdx, &wts, &nn, &out, &ldo, &wcols};
    dev->launch(g.moeScatter, unsigned(n), 128, scatter);
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
  if (kv->any())
    dev->uploadAsync(slotBuf, 0, hostSlot.data(), hostSlot.size() * 4);
  if (blocks.dirty) { // blocks mapped or given back since the last step
    dev->uploadAsync(blockTable, 0, blocks.table.data(), blocks.table.size() * 4);
    blocks.dirty = false;
  }
  phase("upload rows");
  // MoE layers (routed on the host) run eagerly.
  if (bucket && opts.graphs && !moe.any) {
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
  if (decodeQ.on) // the decode step's query rows for the policies' shadows
    for (int c = 0; c < int(kv->caches()); ++c)
      if (kv->replaysDecode(c))
        dev->downloadAsync(decodeQ.q[size_t(c)].data(), decodeQ.dev[size_t(c)], 0,
                           size_t(T) * (decodeQ.q[size_t(c)].size() / kCudaMaxBatch) * 4);
  dev->synchronize(); // the staging vectors are rewritten by the next step
  phase("logits download + synchronize");
}

void CudaEngine::Impl::setRowSlots(int64_t row, int64_t seq, int64_t ahead) {
  if (!kv->any())
    return;
  for (int c = 0; c < int(kv->caches()); ++c)
    hostSlot[size_t(c * kCudaPrefillChunk + row)] =
        int32_t(seq < maxSeqs ? kv->slots(c, seq) + ahead : 0); // padding rows: slot 0
}

void CudaEngine::Impl::keepQueryTail(int c, uint64_t q, int64_t T, int64_t qd) {
  const int64_t want = kv->tailRows(c, tail.rows), first = tail.rows - want; // call rows
  const int64_t from = std::max(first, tail.at), to = tail.at + T;
  if (from >= to)
    return;
  std::vector<float> &dst = tail.q[size_t(c)];
  dst.resize(size_t(want * qd));
  dev->downloadAsync(dst.data() + (from - first) * qd, arena,
                     size_t(q - arena.ptr()) + size_t((from - tail.at) * qd) * 4,
                     size_t((to - from) * qd) * 4); // waited for by step()'s synchronize
}

CudaKvBlockIo CudaEngine::Impl::blockIo() {
  CudaKvBlockIo io;
  // Sequence q's logical blocks first.. through the block table, one
  // copy per run of consecutive physical blocks; a block of a pool is its
  // bytes / the pool's blocks (keys and values differ in a PolyKV cache).
  auto each = [this](const DeviceBuffer &pool, int64_t q, int64_t first, int64_t count,
                     const std::function<void(size_t at, size_t host, size_t bytes)> &copy) {
    const size_t block = pool.bytes() / size_t(blocks.pool);
    for (int64_t b = 0; b < count;) {
      const int64_t phys = physicalBlock(q, first + b);
      int64_t run = 1;
      while (b + run < count && physicalBlock(q, first + b + run) == phys + run)
        ++run;
      copy(size_t(phys) * block, size_t(b) * block, size_t(run) * block);
      b += run;
    }
  };
  io.read = [this, each](int c, int64_t q, int64_t first, int64_t count, uint8_t *k,
                         uint8_t *v) {
    const DeviceBuffer &kp = kpool[size_t(c)], &vp = vpool[size_t(c)];
    each(kp, q, first, count,
         [&](size_t at, size_t h, size_t n) { dev->downloadAsync(k + h, kp, at, n); });
    each(vp, q, first, count,
         [&](size_t at, size_t h, size_t n) { dev->downloadAsync(v + h, vp, at, n); });
    dev->synchronize();
  };
  io.write = [this, each](int c, int64_t q, int64_t first, int64_t count, const uint8_t *k,
                          const uint8_t *v) {
    DeviceBuffer &kp = kpool[size_t(c)], &vp = vpool[size_t(c)];
    each(kp, q, first, count,
         [&](size_t at, size_t h, size_t n) { dev->uploadAsync(kp, at, k + h, n); });
    each(vp, q, first, count,
         [&](size_t at, size_t h, size_t n) { dev->uploadAsync(vp, at, v + h, n); });
    dev->synchronize();
  };
  io.setHoles = [this](int c, int64_t q, const std::vector<int32_t> &lohi) {
    setHoles(c, q, lohi);
  };
  return io;
}

void CudaEngine::Impl::compressAfterPrompt(int64_t seq, int64_t p0, int64_t n) {
  const CudaKvBlockIo io = blockIo();
  int64_t evicted = 0;
  for (int c = 0; c < int(kv->caches()); ++c)
    evicted += kv->afterPrompt(c, seq, p0, n, tail.q[size_t(c)].data(), io);
  stats.kv_evicted += evicted;
  stats.kv_compressions += evicted > 0;
}

void CudaEngine::Impl::evictAfterDecode(const std::vector<int64_t> &seqs,
                                        const std::vector<int64_t> &positions) {
  if (!kv->anyReplaysDecode())
    return;
  const CudaKvBlockIo io = blockIo();
  for (int c = 0; c < int(kv->caches()); ++c) {
    if (!kv->replaysDecode(c))
      continue;
    const std::vector<float> &q = decodeQ.q[size_t(c)];
    const size_t qd = q.size() / size_t(kCudaMaxBatch);
    for (size_t i = 0; i < seqs.size(); ++i) {
      const int64_t evicted = kv->afterDecode(c, seqs[i], positions[i], q.data() + i * qd, io);
      stats.kv_evicted += evicted;
      stats.kv_decode_evictions += evicted > 0;
    }
  }
}

void CudaEngine::Impl::setHoles(int c, int64_t seq, const std::vector<int32_t> &lohi) {
  std::vector<int32_t> &h = hostHole[size_t(c)];
  const size_t at = size_t(seq) * lohi.size();
  if (at + lohi.size() > h.size())
    throw std::runtime_error("cuda engine: KV hole of sequence " + std::to_string(seq) +
                             " outside the table");
  if (std::equal(lohi.begin(), lohi.end(), h.begin() + std::ptrdiff_t(at)))
    return;
  std::copy(lohi.begin(), lohi.end(), h.begin() + std::ptrdiff_t(at));
  dev->uploadAsync(holeBuf[size_t(c)], at * 4, h.data() + at, lohi.size() * 4);
  dev->synchronize(); // the host copy may change before the stream runs
}

} // namespace llmc::cuda
