//===- CudaKvPolicy.cpp - KV-cache policies of the GPU engine -------------===//
#include "CudaKvPolicy.h"
#include "../exec/ThreadPool.h"
#include "llmc/dtype.h"

#include <algorithm>
#include <stdexcept>

namespace llmc::cuda {

bool gpuRunsKvPolicy(const kv::Policy &p, std::string &why) {
  why.clear();
  if (p.full())
    return true;
  if (p.quant != KvQuant::None)
    why = "stores quantized entries (kv_quant)";
  else if (p.method == kv::Method::RdKV)
    why = "stores entries at per-entry bit widths";
  return why.empty();
}

CudaKvPolicies::CudaKvPolicies(std::vector<CudaKvLayer> caches, int64_t sequences)
    : caches_(std::move(caches)) {
  for (const CudaKvLayer &c : caches_) {
    std::string why;
    if (!gpuRunsKvPolicy(c.policy, why))
      throw std::runtime_error("kv_policy " + c.policy.name + " of layer " +
                               std::to_string(c.layer) + " does not run on the GPU: " + why);
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
  std::vector<uint16_t> kb(size_t(count * KV * kBlock * hd)), vb(kb.size());
  io.read(cache, seq, first, count, kb.data(), vb.data());
  std::vector<float> k(size_t(n * KV * hd)), v(k.size());
  for (int64_t s = have; s < now; ++s)
    for (int64_t h = 0; h < KV; ++h) {
      const size_t from = size_t((((s / kBlock - first) * KV + h) * kBlock + s % kBlock) * hd);
      const size_t to = size_t(((s - have) * KV + h) * hd);
      for (int64_t d = 0; d < hd; ++d) {
        k[to + size_t(d)] = halfToFloat(kb[from + size_t(d)]);
        v[to + size_t(d)] = halfToFloat(vb[from + size_t(d)]);
      }
    }
  sh.append(k.data(), v.data(), n, KV * hd, lastPos - n + 1);
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
  if (kept == before)
    return 0;
  int64_t most = 0;
  for (int64_t h = 0; h < KV; ++h)
    most = std::max(most, sh.headEntries(h));
  // Head h's kept entries, in the shadow's order (by position), to slots
  // 0..count-1; slots count..most-1 are its hole.
  const int64_t blocks = (most + kBlock - 1) / kBlock;
  std::vector<uint16_t> kb(size_t(blocks * KV * kBlock * hd), 0), vb(kb.size(), 0);
  std::vector<int32_t> holes(size_t(2 * KV));
  for (int64_t h = 0; h < KV; ++h) {
    const kv::HeadCache &e = sh.head(h);
    for (int64_t j = 0; j < e.n; ++j) {
      const size_t to = size_t((((j / kBlock) * KV + h) * kBlock + j % kBlock) * hd);
      for (int64_t d = 0; d < hd; ++d) { // f16 values widened: exact back to f16
        kb[to + size_t(d)] = floatToHalf(e.k[size_t(j * hd + d)]);
        vb[to + size_t(d)] = floatToHalf(e.v[size_t(j * hd + d)]);
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
