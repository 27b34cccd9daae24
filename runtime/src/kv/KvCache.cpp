//===- KvCache.cpp - One attention layer's KV cache under a policy --------===//
#include "KvCache.h"
#include "../exec/Matmul.h"
#include "../kernels/attention_f32.h"
#include "../kernels/kv_q8_row.h"
#include "../exec/ThreadPool.h"
#include "KvRdkv.h"
#include "KvSelect.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <random>
#include <stdexcept>

namespace llmc::kv {

namespace {
constexpr int64_t kLaproxFloor = 8; // entries a head keeps beyond its window under LaProx
} // namespace

LayerCache::LayerCache(const Policy &policy, int64_t layer, int64_t heads, int64_t kv_heads,
                       int64_t head_dim, int64_t window_limit, int64_t D, const RowLoader &wo_row)
    : policy_(policy), woRow_(wo_row), D_(D), layer_(layer), H_(heads), KV_(kv_heads),
      hd_(head_dim), group_(heads / kv_heads), windowLimit_(window_limit),
      heads_(size_t(kv_heads)) {
  if (quantized())
    poly_ = polyKvFor(policy_, layer_, hd_);
  buildGram();
}

void LayerCache::buildGram() {
  if (!gram_.empty() || (policy_.method != Method::RestKV && policy_.method != Method::LaProx))
    return;
  const int64_t cols = H_ * hd_;
  std::vector<float> wo(size_t(D_ * cols));
  for (int64_t r = 0; r < D_; ++r)
    woRow_(r, wo.data() + r * cols);
  gram_.resize(size_t(H_ * hd_ * hd_));
  for (int64_t h = 0; h < H_; ++h)
    gramOfColumns(wo, D_, cols, h * hd_, hd_, gram_.data() + h * hd_ * hd_);
}

void LayerCache::setPolicy(const Policy &policy, bool compress_now) {
  const bool wasQuantized = quantized();
  const Method before = policy_.method;
  // f32 rows to re-store in the new policy's form (from blocks or vectors).
  std::vector<std::vector<float>> keysBefore(KV_), valuesBefore(KV_);
  if (policy.quant == KvQuant::PolyKV && !wasQuantized && !rdStored_)
    for (int64_t g = 0; g < KV_; ++g) {
      keyRows(g, keysBefore[size_t(g)]);
      valueRows(g, valuesBefore[size_t(g)]);
    }
  if (rdStored_ && policy.method != Method::RdKV)
    throw std::runtime_error("kv cache: cannot switch an rdkv cache (mixed bit widths) to policy " +
                             policy.name);
  policy_ = policy;
  if (quantized() && !wasQuantized) {
    // Store the f32 entries in the policy's form.
    poly_ = polyKvFor(policy_, layer_, hd_);
    for (int64_t g = 0; g < KV_; ++g) {
      HeadCache &c = heads_[size_t(g)];
      const float *kf = keysBefore[size_t(g)].data(), *vf = valuesBefore[size_t(g)].data();
      c.kq.assign(size_t(c.n * poly_.keyBytes()), 0);
      c.vq.assign(size_t(c.n * poly_.valueBytes()), 0);
      for (int64_t j = 0; j < c.n; ++j) {
        poly_.encodeKey(kf + j * hd_, c.kq.data() + j * poly_.keyBytes());
        poly_.encodeValue(vf + j * hd_, c.vq.data() + j * poly_.valueBytes());
      }
      std::vector<float>().swap(c.k);
      std::vector<float>().swap(c.v);
      c.paged.clear(); // its blocks go back to the pool
    }
  } else if (!quantized() && wasQuantized) {
    if (entries() > 0)
      throw std::runtime_error("kv cache: cannot switch a quantized cache back to f32");
    for (HeadCache &c : heads_) { // nothing stored yet: just the other form
      std::vector<uint8_t>().swap(c.kq);
      std::vector<uint8_t>().swap(c.vq);
    }
  }
  buildGram();
  if (!record_ && !policy_.usesWindowQueries()) {
    std::vector<float>().swap(winQ_);
    std::vector<int32_t>().swap(winPos_);
  }
  for (HeadCache &c : heads_) {
    if (!accumulating())
      std::vector<float>().swap(c.acc);
    else if (c.acc.size() != size_t(c.n))
      throw std::runtime_error("kv cache: policy " + policy_.name +
                               " needs attention statistics this cache did not record");
    else if (policy_.method == Method::InertiaKV && before != Method::InertiaKV && promptLen_ > 0)
      for (float &a : c.acc) // cumulative sums -> the prompt's mean attention
        a /= float(promptLen_);
  }
  if (compress_now && policy_.prefill()) {
    compress(false);
    for (const HeadCache &c : heads_) // the compressed entries cannot come back
      if (c.n > 0)
        rewindFloor_ = std::max<int64_t>(rewindFloor_, c.pos[size_t(c.n - 1)] + 1);
  }
  updateMeter();
}

void LayerCache::reset() {
  for (HeadCache &c : heads_) {
    c = HeadCache();
    if (pool_)
      c.paged = BlockTable(pool_);
  }
  std::vector<float>().swap(winQ_);
  std::vector<int32_t>().swap(winPos_);
  promptLen_ = steps_ = rewindFloor_ = 0;
  rdStored_ = false; // an empty cache starts in f32 again
  updateMeter();
}

void LayerCache::attachMeter(KvMeter *meter) {
  meter_ = meter;
  metered_ = 0;
  updateMeter();
}

void LayerCache::usePool(std::shared_ptr<KvBlockPool> pool) {
  if (entries() > 0)
    throw std::runtime_error("kv cache: usePool on a cache that holds entries");
  if (pool && pool->headDim() != hd_)
    throw std::runtime_error("kv cache: pool rows of " + std::to_string(pool->headDim()) +
                             " floats for a head_dim of " + std::to_string(hd_));
  pool_ = std::move(pool);
  blockEntries_ = pool_ ? pool_->blockEntries() : 0;
  for (HeadCache &c : heads_)
    c.paged = pool_ ? BlockTable(pool_) : BlockTable();
  updateMeter();
}

void LayerCache::adoptPrefix(const std::vector<int32_t> &blocks, int64_t n_blocks, int64_t width,
                             int64_t first) {
  if (!prefixSharable() || entries() > 0)
    throw std::logic_error("kv cache: adoptPrefix on a cache that cannot share a prefix");
  for (int64_t g = 0; g < KV_; ++g) {
    HeadCache &c = heads_[size_t(g)];
    for (int64_t b = 0; b < n_blocks; ++b)
      c.paged.adopt(blocks[size_t(b * width + first + g)]);
    c.n = n_blocks * blockEntries_;
    c.pos.resize(size_t(c.n));
    for (int64_t j = 0; j < c.n; ++j)
      c.pos[size_t(j)] = int32_t(j);
  }
  updateMeter();
}

void LayerCache::prefixBlocks(int64_t n_blocks, int64_t width, int64_t first,
                              std::vector<int32_t> &blocks) const {
  blocks.resize(size_t(n_blocks * width));
  for (int64_t g = 0; g < KV_; ++g)
    for (int64_t b = 0; b < n_blocks; ++b)
      blocks[size_t(b * width + first + g)] = heads_[size_t(g)].paged.id(size_t(b));
}

void LayerCache::appendPaged(HeadCache &c, const float *kr, const float *vr) {
  if (c.n == int64_t(c.paged.size()) * blockEntries_)
    c.paged.grow();
  const int32_t id = c.paged.writable(size_t(c.n / blockEntries_));
  const int64_t row = c.n % blockEntries_;
  switch (rowType()) {
  case KvRowType::F16:
    kernels::halfRow(kr, hd_, pool_->keysF16(id) + row * hd_);
    kernels::halfRow(vr, hd_, pool_->valuesF16(id) + row * hd_);
    break;
  case KvRowType::Q8:
    kernels::q8Row(kr, hd_, pool_->keyBytes(id) + row * pool_->rowBytes());
    kernels::q8Row(vr, hd_, pool_->valueBytes(id) + row * pool_->rowBytes());
    break;
  case KvRowType::F32:
    std::copy_n(kr, hd_, pool_->keys(id) + row * hd_);
    std::copy_n(vr, hd_, pool_->values(id) + row * hd_);
    break;
  }
}

void LayerCache::pagedRowsF32(const HeadCache &c, bool values, std::vector<float> &dst) const {
  dst.resize(static_cast<size_t>(c.n * hd_));
  for (int64_t j = 0; j < c.n; ++j) {
    const unsigned char *row = values ? pagedValue(c, j) : pagedKey(c, j);
    switch (rowType()) {
    case KvRowType::F16:
      kernels::floatRow(reinterpret_cast<const uint16_t *>(row), hd_, dst.data() + j * hd_);
      break;
    case KvRowType::Q8:
      kernels::floatRowQ8(row, hd_, dst.data() + j * hd_);
      break;
    case KvRowType::F32:
      std::memcpy(dst.data() + j * hd_, row, size_t(hd_) * sizeof(float));
      break;
    }
  }
}

void LayerCache::updateMeter() {
  if (!meter_)
    return;
  const int64_t b = bytes();
  meter_->current += b - metered_;
  metered_ = b;
  meter_->peak = std::max(meter_->peak, meter_->current);
}

namespace {
/// Grow a vector's capacity by 1/16 of its size (at least `minChunk`
/// elements) rather than by doubling, so that a cache holds about what it
/// uses (kv_bytes is its capacity) while appends stay amortized O(1).
/// Decode steps (one entry) grow by at least kGrowEntries entries; a
/// prompt or prompt chunk reserves what it appends (no floor), so a chunked
/// prefill's cache stays at its budget plus one chunk.
template <typename V> void growFor(V &vec, size_t more, size_t minChunk) {
  if (vec.size() + more > vec.capacity())
    vec.reserve(vec.size() + std::max({more, minChunk, vec.size() / 16}));
}
constexpr size_t kGrowEntries = 16;
} // namespace

void LayerCache::append(const float *k, const float *v, int64_t T, int64_t stride, int64_t p0,
                        const int32_t *depth) {
  const size_t grow = T == 1 ? kGrowEntries : 1; // minimum growth, in entries
  for (int64_t g = 0; g < KV_; ++g) {
    HeadCache &c = heads_[size_t(g)];
    const size_t t = size_t(T);
    const uint8_t fp16 = rdkv::packWidths(16, 16); // RDKV: new tokens stay at 16 bits
    if (rdStored_) {
      const size_t eb = size_t(rdkv::entryBytes(fp16, hd_));
      growFor(c.rd, t * eb, grow * eb);
      growFor(c.widths, t, grow);
    } else if (paged()) {
      // blocks come from the pool as entries need them
    } else if (quantized()) {
      growFor(c.kq, t * size_t(poly_.keyBytes()), grow * size_t(poly_.keyBytes()));
      growFor(c.vq, t * size_t(poly_.valueBytes()), grow * size_t(poly_.valueBytes()));
    } else {
      growFor(c.k, t * size_t(hd_), grow * size_t(hd_));
      growFor(c.v, t * size_t(hd_), grow * size_t(hd_));
    }
    growFor(c.pos, t, grow);
    if (accumulating())
      growFor(c.acc, t, grow);
    for (int64_t t = 0; t < T; ++t) {
      const float *kr = k + t * stride + g * hd_, *vr = v + t * stride + g * hd_;
      if (rdStored_) {
        rdkv::appendEntry(c.rd, kr, vr, hd_, fp16);
        c.widths.push_back(fp16);
      } else if (paged()) {
        appendPaged(c, kr, vr);
      } else if (quantized()) {
        size_t ko = c.kq.size(), vo = c.vq.size();
        c.kq.resize(ko + size_t(poly_.keyBytes()));
        c.vq.resize(vo + size_t(poly_.valueBytes()));
        poly_.encodeKey(kr, c.kq.data() + ko);
        poly_.encodeValue(vr, c.vq.data() + vo);
      } else {
        c.k.insert(c.k.end(), kr, kr + hd_);
        c.v.insert(c.v.end(), vr, vr + hd_);
      }
      c.pos.push_back(int32_t(p0 + (depth ? depth[t] : t)));
      if (accumulating()) // an InertiaKV decode entry is unscored (< 0) until its first EMA step
        c.acc.push_back(policy_.method == Method::InertiaKV && T == 1 ? -1.0f : 0.0f);
      ++c.n;
    }
  }
  updateMeter();
}

void LayerCache::appendEncoded(const uint8_t *keys, const uint8_t *values, int64_t T,
                               int64_t p0) {
  if (!quantized())
    throw std::runtime_error("kv cache: appendEncoded needs a PolyKV cache");
  const size_t kb = size_t(poly_.keyBytes()), vb = size_t(poly_.valueBytes());
  for (int64_t g = 0; g < KV_; ++g) {
    HeadCache &c = heads_[size_t(g)];
    growFor(c.kq, size_t(T) * kb, kb);
    growFor(c.vq, size_t(T) * vb, vb);
    growFor(c.pos, size_t(T), 1);
    if (accumulating())
      growFor(c.acc, size_t(T), 1);
    for (int64_t t = 0; t < T; ++t) {
      const uint8_t *kr = keys + size_t(t * KV_ + g) * kb, *vr = values + size_t(t * KV_ + g) * vb;
      c.kq.insert(c.kq.end(), kr, kr + kb);
      c.vq.insert(c.vq.end(), vr, vr + vb);
      c.pos.push_back(int32_t(p0 + t));
      if (accumulating())
        c.acc.push_back(policy_.method == Method::InertiaKV && T == 1 ? -1.0f : 0.0f);
      ++c.n;
    }
  }
  updateMeter();
}

PolyKV LayerCache::polyKvFor(const Policy &policy, int64_t layer, int64_t head_dim) {
  return PolyKV(head_dim, policy.seed + uint64_t(layer) * 7919u);
}

void LayerCache::recordWindow(const float *tail, int64_t T, int64_t p0, bool trim) {
  const int64_t qd = H_ * hd_, W = policy_.window;
  const int64_t from = std::max<int64_t>(0, T - W);
  // Drop the oldest rows first, so the buffers never hold more than W rows
  // (their capacity, counted in bytes(), stays at the window's); untrimmed
  // (a verification step), they hold the step's rows beside the window's.
  if (trim)
    trimWindow(W - (T - from));
  const int64_t rows = trim ? W : std::max<int64_t>(W, int64_t(winPos_.size()) + T - from);
  winQ_.reserve(size_t(rows * qd));
  winPos_.reserve(size_t(rows));
  winQ_.insert(winQ_.end(), tail, tail + (T - from) * qd);
  for (int64_t t = from; t < T; ++t)
    winPos_.push_back(int32_t(p0 + t));
}

void LayerCache::afterStep(const float *q, int64_t T, int64_t p0) {
  afterStepTail(q + std::max<int64_t>(0, T - policy_.window) * H_ * hd_, T, p0);
}

void LayerCache::afterStepTail(const float *tail, int64_t T, int64_t p0) {
  if (policy_.full() && !record_)
    return;
  const bool verification = stepKind_ == StepKind::Verification;
  if (record_ || policy_.usesWindowQueries())
    recordWindow(tail, T, p0, /*trim=*/!verification);
  if (verification) { // decode steps of a policy that compresses prompts only
    steps_ += T;         // (dropFrom takes the dropped ones back)
    updateMeter();
    return;
  }
  if (T > 1) {
    // The budget is a share of every position so far: of the prompt when
    // it came in one step, of the prompt's chunks so far when it comes in
    // chunks (ending at the same budget), of the whole conversation for a
    // later multi-token turn (whose kept entries are not compressed twice).
    promptLen_ = p0 + T;
    rewindFloor_ = p0 + T; // compressed (or recorded) entries cannot come back
    if (policy_.prefill())
      compress(false);
    updateMeter();
    return;
  }
  ++steps_;
  updateMeter(); // the window queries
  if (!policy_.decode())
    return;
  if (promptLen_ == 0)
    promptLen_ = heads_[0].n;
  for (int64_t g = 0; g < KV_; ++g) {
    const HeadCache &c = heads_[size_t(g)];
    if (c.n >= headBudget(policy_, promptLen_, INT64_MAX, g) + policy_.refresh) {
      compress(true);
      updateMeter();
      return;
    }
  }
}

void LayerCache::keyRows(int64_t g, std::vector<float> &dst) const {
  const HeadCache &c = heads_[size_t(g)];
  if (rdStored_) {
    dst.resize(static_cast<size_t>(c.n * hd_));
    const std::vector<int64_t> off = rdkv::entryOffsets(c.widths, hd_);
    for (int64_t j = 0; j < c.n; ++j)
      rdkv::decodeRow(c.rd.data() + off[size_t(j)], hd_, rdkv::keyWidth(c.widths[size_t(j)]),
                      dst.data() + j * hd_);
    return;
  }
  if (paged()) {
    pagedRowsF32(c, false, dst);
    return;
  }
  if (!quantized()) {
    dst = c.k;
    return;
  }
  dst.resize(static_cast<size_t>(c.n * hd_));
  for (int64_t j = 0; j < c.n; ++j)
    poly_.decodeKey(c.kq.data() + j * poly_.keyBytes(), dst.data() + j * hd_);
}

void LayerCache::valueRows(int64_t g, std::vector<float> &dst) const {
  const HeadCache &c = heads_[size_t(g)];
  if (rdStored_) {
    dst.resize(static_cast<size_t>(c.n * hd_));
    const std::vector<int64_t> off = rdkv::entryOffsets(c.widths, hd_);
    for (int64_t j = 0; j < c.n; ++j) {
      const uint8_t p = c.widths[size_t(j)];
      rdkv::decodeRow(c.rd.data() + off[size_t(j)] + rdkv::rowBytes(rdkv::keyWidth(p), hd_), hd_,
                      rdkv::valueWidth(p), dst.data() + j * hd_);
    }
    return;
  }
  if (paged()) {
    pagedRowsF32(c, true, dst);
    return;
  }
  if (!quantized()) {
    dst = c.v;
    return;
  }
  dst.resize(static_cast<size_t>(c.n * hd_));
  for (int64_t j = 0; j < c.n; ++j)
    poly_.decodeValue(c.vq.data() + j * poly_.valueBytes(), dst.data() + j * hd_);
}

std::vector<float> LayerCache::headScores(int64_t g, bool decoding, std::vector<float> *relevance) {
  const HeadCache &c = heads_[size_t(g)];
  const int64_t n = c.n, Wq = int64_t(winPos_.size()), qd = H_ * hd_;
  std::vector<float> score(static_cast<size_t>(n), 0.0f);
  switch (policy_.method) {
  case Method::H2O:
  case Method::InertiaKV:
    return c.acc;
  case Method::Random: {
    // A uniform draw for every entry, prompt or generated: only the recent
    // window is kept whatever the draw (as for the other scoring
    // policies). Seeded per (seed, layer, head, decode step).
    std::mt19937_64 rng(policy_.seed * 1000003u + uint64_t(layer_) * 131u + uint64_t(g) * 17u +
                        uint64_t(steps_));
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    for (int64_t j = 0; j < n; ++j)
      score[size_t(j)] = u(rng);
    return score;
  }
  case Method::Streaming:
  case Method::Full:
    return score;
  default:
    break;
  }
  (void)decoding;
  std::vector<float> keys, vals, A(static_cast<size_t>(Wq * n)), s(static_cast<size_t>(n));
  keyRows(g, keys);
  if (policy_.method == Method::RestKV || policy_.method == Method::LaProx)
    valueRows(g, vals);
  for (int64_t h = g * group_; h < (g + 1) * group_; ++h) {
    windowAttention(winQ_.data() + h * hd_, Wq, qd, winPos_.data(), keys.data(), c.pos.data(), n,
                    hd_, A.data());
    const float *G = gram_.empty() ? nullptr : gram_.data() + h * hd_ * hd_;
    switch (policy_.method) {
    case Method::RestKV:
      restScore(A.data(), Wq, n, std::max<int64_t>(0, n - policy_.window), vals.data(), hd_, G,
                s.data());
      break;
    case Method::LaProx:
      laproxScore(A.data(), Wq, n, vals.data(), hd_, G, s.data());
      break;
    default: // SnapKV family and CapKV's relevance
      snapScore(A.data(), Wq, n, s.data());
      break;
    }
    for (int64_t j = 0; j < n; ++j)
      score[size_t(j)] += s[size_t(j)] / float(group_);
  }
  if (policy_.method != Method::LaProx)
    avgPool(score.data(), n, policy_.pool);
  if (policy_.method == Method::CapKV) {
    std::vector<float> Q(static_cast<size_t>(Wq * group_ * hd_));
    for (int64_t i = 0; i < Wq; ++i)
      for (int64_t h = 0; h < group_; ++h)
        std::copy_n(winQ_.data() + i * qd + (g * group_ + h) * hd_, hd_,
                    Q.data() + (i * group_ + h) * hd_);
    leverageScore(Q.data(), Wq * group_, hd_, keys.data(), n, hd_, s.data());
    if (relevance)
      *relevance = score;
    for (int64_t j = 0; j < n; ++j)
      score[size_t(j)] *= s[size_t(j)];
  }
  return score;
}

void LayerCache::keep(int64_t g, const std::vector<int64_t> &idx, int64_t headroom) {
  HeadCache &c = heads_[size_t(g)];
  const int64_t m = int64_t(idx.size());
  const int64_t kb = poly_.keyBytes(), vb = poly_.valueBytes();
  for (int64_t i = 0; i < m; ++i)
    moveEntry(c, idx[size_t(i)], i); // ascending, so idx[i] >= i
  c.n = m;
  // Give the memory back: reallocate at the kept size plus room for the
  // entries appended before the next eviction.
  auto shrink = [&](auto &vec, int64_t per) {
    using V = std::decay_t<decltype(vec)>;
    V fresh;
    fresh.reserve(static_cast<size_t>((m + headroom) * per));
    fresh.assign(vec.begin(), vec.begin() + m * per);
    vec.swap(fresh);
  };
  if (paged()) {
    c.paged.truncate(size_t((m + blockEntries_ - 1) / blockEntries_)); // the rest to the pool
  } else if (quantized()) {
    shrink(c.kq, kb);
    shrink(c.vq, vb);
  } else {
    shrink(c.k, hd_);
    shrink(c.v, hd_);
  }
  shrink(c.pos, 1);
  if (!c.acc.empty())
    shrink(c.acc, 1);
}

void LayerCache::compress(bool decoding) {
  if (policy_.method == Method::RdKV) {
    compressRdkv();
    return;
  }
  const int64_t headroom = policy_.decode() ? policy_.refresh + 1 : 1;
  std::vector<int64_t> budget(static_cast<size_t>(KV_));
  for (int64_t g = 0; g < KV_; ++g)
    budget[size_t(g)] = headBudget(policy_, promptLen_, heads_[size_t(g)].n, g);

  if (policy_.method == Method::LaProx) {
    // One selection across the layer's heads: the global top of the
    // non-window entries, each head keeping at least kLaproxFloor of them.
    std::vector<std::vector<float>> score(static_cast<size_t>(KV_));
    std::vector<std::pair<float, std::pair<int64_t, int64_t>>> pool;
    int64_t total = 0;
    std::vector<int64_t> quota(static_cast<size_t>(KV_), 0);
    for (int64_t g = 0; g < KV_; ++g) {
      score[size_t(g)] = headScores(g, decoding, nullptr);
      const int64_t n = heads_[size_t(g)].n, cand = std::max<int64_t>(0, n - policy_.window);
      total += std::max<int64_t>(0, budget[size_t(g)] - std::min(n, policy_.window));
      std::vector<int64_t> order(static_cast<size_t>(cand));
      for (int64_t j = 0; j < cand; ++j)
        order[size_t(j)] = j;
      const int64_t floor = std::min(cand, kLaproxFloor);
      std::partial_sort(order.begin(), order.begin() + floor, order.end(), [&](int64_t a, int64_t b) {
        return score[size_t(g)][size_t(a)] > score[size_t(g)][size_t(b)];
      });
      for (int64_t i = 0; i < cand; ++i)
        pool.push_back({i < floor ? INFINITY : score[size_t(g)][size_t(order[size_t(i)])],
                        {g, order[size_t(i)]}});
    }
    total = std::min<int64_t>(total, int64_t(pool.size()));
    std::partial_sort(pool.begin(), pool.begin() + total, pool.end(),
                      [](const auto &a, const auto &b) { return a.first > b.first; });
    std::vector<std::vector<char>> chosen(static_cast<size_t>(KV_));
    for (int64_t g = 0; g < KV_; ++g)
      chosen[size_t(g)].assign(static_cast<size_t>(heads_[size_t(g)].n), 0);
    for (int64_t i = 0; i < total; ++i)
      chosen[size_t(pool[size_t(i)].second.first)][size_t(pool[size_t(i)].second.second)] = 1;
    for (int64_t g = 0; g < KV_; ++g) {
      const int64_t n = heads_[size_t(g)].n;
      std::vector<int64_t> idx;
      for (int64_t j = 0; j < n; ++j)
        if (chosen[size_t(g)][size_t(j)] || j >= n - policy_.window)
          idx.push_back(j);
      keep(g, idx, headroom);
    }
    return;
  }

  for (int64_t g = 0; g < KV_; ++g) {
    const int64_t n = heads_[size_t(g)].n, C = budget[size_t(g)];
    if (n <= C)
      continue;
    std::vector<int64_t> idx;
    if (policy_.method == Method::Streaming) {
      idx = selectTop(nullptr, n, C, policy_.sink, C - std::min(policy_.sink, C));
    } else {
      std::vector<float> s = headScores(g, decoding, nullptr);
      const bool sinks = policy_.method == Method::InertiaKV;
      idx = selectTop(s.data(), n, C, sinks ? policy_.sink : 0, policy_.window);
    }
    keep(g, idx, headroom);
  }
}

int64_t LayerCache::bytes() const {
  int64_t b = 0;
  for (const HeadCache &c : heads_)
    b += int64_t(c.k.capacity() + c.v.capacity() + c.acc.capacity()) * 4 +
         int64_t(c.kq.capacity() + c.vq.capacity() + c.rd.capacity() + c.widths.capacity()) +
         int64_t(c.pos.capacity()) * 4 +
         (pool_ ? int64_t(c.paged.size()) * pool_->blockBytes() : 0);
  // The policy's own state: W_O Gram matrices, the window's queries.
  b += int64_t(gram_.capacity() + winQ_.capacity()) * 4 + int64_t(winPos_.capacity()) * 4;
  return b;
}

int64_t LayerCache::entries() const {
  int64_t e = 0;
  for (const HeadCache &c : heads_)
    e += c.n;
  return e;
}

} // namespace llmc::kv
