//===- CudaKvPolicy.cpp - KV-cache policies of the GPU engine -------------===//
#include "CudaKvPolicy.h"
#include "../exec/ThreadPool.h"
#include "llmc/dtype.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace llmc::cuda {

int64_t CudaKvLayer::keyRowBytes() const {
  return polyKv() ? kv::PolyKV::keyBytesFor(headDim) : 2 * headDim;
}
int64_t CudaKvLayer::valueRowBytes() const {
  return polyKv() ? kv::PolyKV::valueBytesFor(headDim) : 2 * headDim;
}

CudaKvPolicies::CudaKvPolicies(std::vector<CudaKvLayer> caches, int64_t sequences)
    : caches_(std::move(caches)) {
  for (const CudaKvLayer &c : caches_) {
    any_ = any_ || !c.policy.full();
    anyDecode_ = anyDecode_ || c.policy.decode() || c.policy.accumulates();
  }
  slots_.assign(caches_.size(), std::vector<int64_t>(size_t(sequences), 0));
  synced_ = slots_;
  shadows_.resize(caches_.size());
  for (auto &s : shadows_)
    s.resize(size_t(sequences));
}

CudaKvPolicies::~CudaKvPolicies() = default;

int64_t CudaKvPolicies::tailRows(int cache, int64_t n) const {
  const kv::Policy &p = caches_[size_t(cache)].policy;
  return !compresses(cache) ? 0 : p.accumulates() ? n : std::min(n, p.window);
}

void CudaKvPolicies::advance(int64_t seq, int64_t n) {
  for (auto &s : slots_)
    s[size_t(seq)] += n;
}

void CudaKvPolicies::reset(int64_t seq) {
  for (size_t c = 0; c < slots_.size(); ++c) {
    slots_[c][size_t(seq)] = 0;
    synced_[c][size_t(seq)] = 0;
    shadows_[c][size_t(seq)].reset();
  }
}

kv::LayerCache &CudaKvPolicies::shadow(int cache, int64_t seq) {
  std::unique_ptr<kv::LayerCache> &s = shadows_[size_t(cache)][size_t(seq)];
  if (!s) {
    const CudaKvLayer &c = caches_[size_t(cache)];
    s = std::make_unique<kv::LayerCache>(c.policy, c.layer, c.heads, c.kvHeads, c.headDim,
                                         /*window_limit=*/0, c.width, c.woRow);
  }
  return *s;
}

void CudaKvPolicies::syncShadow(int cache, int64_t seq, int64_t lastPos,
                                const CudaKvBlockIo &io) {
  const CudaKvLayer &c = caches_[size_t(cache)];
  kv::LayerCache &sh = shadow(cache, seq);
  const int64_t have = synced_[size_t(cache)][size_t(seq)], now = slots(cache, seq);
  if (now <= have)
    return;
  // Slots [have, now) are positions lastPos - (now - have) + 1 .. lastPos
  // on every KV head: nothing was evicted since the shadow last saw the
  // device cache.
  const int64_t KV = c.kvHeads, hd = c.headDim, first = have / kBlock;
  const int64_t count = (now + kBlock - 1) / kBlock - first, n = now - have;
  const int64_t kb = c.keyRowBytes(), vb = c.valueRowBytes();
  std::vector<uint8_t> kd(size_t(count * KV * kBlock * kb)), vd(size_t(count * KV * kBlock * vb));
  io.read(cache, seq, first, count, kd.data(), vd.data());
  // Row (slot s, head h) of the blocks read, as [entry][head] rows.
  auto rows = [&](const std::vector<uint8_t> &blocks, int64_t bytes) {
    std::vector<uint8_t> r(size_t(n * KV * bytes));
    for (int64_t s = have; s < now; ++s)
      for (int64_t h = 0; h < KV; ++h)
        std::copy_n(blocks.data() + (((s / kBlock - first) * KV + h) * kBlock + s % kBlock) * bytes,
                    bytes, r.data() + ((s - have) * KV + h) * bytes);
    return r;
  };
  const std::vector<uint8_t> kr = rows(kd, kb), vr = rows(vd, vb);
  if (c.polyKv()) {
    sh.appendEncoded(kr.data(), vr.data(), n, lastPos - n + 1);
  } else {
    std::vector<float> k(size_t(n * KV * hd)), v(k.size());
    for (size_t i = 0; i < k.size(); ++i) {
      uint16_t kh, vh;
      std::memcpy(&kh, kr.data() + 2 * i, 2);
      std::memcpy(&vh, vr.data() + 2 * i, 2);
      k[i] = halfToFloat(kh);
      v[i] = halfToFloat(vh);
    }
    sh.append(k.data(), v.data(), n, KV * hd, lastPos - n + 1);
  }
  synced_[size_t(cache)][size_t(seq)] = now;
}

int64_t CudaKvPolicies::shadowEntries(int cache, int64_t seq) {
  int64_t n = 0;
  kv::LayerCache &sh = shadow(cache, seq);
  for (int64_t h = 0; h < caches_[size_t(cache)].kvHeads; ++h)
    n += sh.headEntries(h);
  return n;
}

int64_t CudaKvPolicies::afterPrompt(int cache, int64_t seq, int64_t p0, int64_t n,
                                    const float *tail, const CudaKvBlockIo &io) {
  if (!compresses(cache) || n < 2)
    return 0;
  syncShadow(cache, seq, p0 + n - 1, io);
  const int64_t before = shadowEntries(cache, seq);
  kv::LayerCache &sh = shadow(cache, seq);
  if (caches_[size_t(cache)].policy.accumulates()) { // tail: all n rows
    shadowAttend(cache, sh, tail, n);
    sh.afterStep(tail, n, p0);
  } else {
    sh.afterStepTail(tail, n, p0);
  }
  return writeBack(cache, seq, before, io);
}

int64_t CudaKvPolicies::afterDecode(int cache, int64_t seq, int64_t pos, const float *q,
                                    const CudaKvBlockIo &io) {
  if (!replaysDecode(cache))
    return 0;
  syncShadow(cache, seq, pos, io);
  const int64_t before = shadowEntries(cache, seq);
  kv::LayerCache &sh = shadow(cache, seq);
  if (caches_[size_t(cache)].policy.accumulates())
    shadowAttend(cache, sh, q, 1);
  sh.afterStepTail(q, 1, pos);
  return writeBack(cache, seq, before, io);
}

void CudaKvPolicies::shadowAttend(int cache, kv::LayerCache &sh, const float *q, int64_t T) {
  const CudaKvLayer &c = caches_[size_t(cache)];
  if (!pool_) // only H2O and InertiaKV need it: no thread for the other engines
    pool_ = std::make_unique<ThreadPool>(1);
  attendOut_.resize(size_t(T * c.heads * c.headDim));
  sh.attend(*pool_, q, T, attendOut_.data());
}

int64_t CudaKvPolicies::writeBack(int cache, int64_t seq, int64_t before,
                                  const CudaKvBlockIo &io) {
  const CudaKvLayer &c = caches_[size_t(cache)];
  const int64_t KV = c.kvHeads, hd = c.headDim;
  kv::LayerCache &sh = shadow(cache, seq);
  const int64_t kept = shadowEntries(cache, seq);
  if (kept == before && !sh.rdStored()) // RDKV narrows rows it keeps: rewritten even so
    return 0;
  int64_t most = 0;
  for (int64_t h = 0; h < KV; ++h)
    most = std::max(most, sh.headEntries(h));
  // Head h's kept entries, in the shadow's order (by position), to slots
  // 0..count-1; slots count..most-1 are its hole.
  const int64_t blocks = (most + kBlock - 1) / kBlock;
  const int64_t kbytes = c.keyRowBytes(), vbytes = c.valueRowBytes();
  std::vector<uint8_t> kb(size_t(blocks * KV * kBlock * kbytes), 0);
  std::vector<uint8_t> vb(size_t(blocks * KV * kBlock * vbytes), 0);
  std::vector<int32_t> holes(size_t(2 * KV));
  std::vector<float> kf, vf;
  for (int64_t h = 0; h < KV; ++h) {
    const kv::HeadCache &e = sh.head(h);
    if (!c.polyKv()) { // f16 entries widened (exact back to f16), or RDKV's rows decoded
      sh.keyRows(h, kf);
      sh.valueRows(h, vf);
    }
    for (int64_t j = 0; j < e.n; ++j) {
      const int64_t row = ((j / kBlock) * KV + h) * kBlock + j % kBlock;
      uint8_t *kd = kb.data() + row * kbytes, *vd = vb.data() + row * vbytes;
      if (c.polyKv()) { // the entries as stored, bit for bit
        std::copy_n(e.kq.data() + j * kbytes, kbytes, kd);
        std::copy_n(e.vq.data() + j * vbytes, vbytes, vd);
        continue;
      }
      for (int64_t d = 0; d < hd; ++d) {
        const uint16_t kh = floatToHalf(kf[size_t(j * hd + d)]);
        const uint16_t vh = floatToHalf(vf[size_t(j * hd + d)]);
        std::memcpy(kd + 2 * d, &kh, 2);
        std::memcpy(vd + 2 * d, &vh, 2);
      }
    }
    holes[size_t(2 * h)] = int32_t(e.n);
    holes[size_t(2 * h + 1)] = int32_t(most);
  }
  io.write(cache, seq, 0, blocks, kb.data(), vb.data());
  io.setHoles(cache, seq, holes);
  slots_[size_t(cache)][size_t(seq)] = most;
  synced_[size_t(cache)][size_t(seq)] = most;
  return before - kept;
}

} // namespace llmc::cuda
