//===- KvAttend.cpp - Attention over one layer's KV cache -----------------===//
// LayerCache::attend: every query row of a step against its KV head's
// entries in their stored form (f32 rows, contiguous or in pool blocks;
// PolyKV codes; RDKV rows at per-entry widths), with the running attention
// statistics H2O and InertiaKV keep.
//===----------------------------------------------------------------------===//
#include "KvCache.h"
#include "../kernels/attention_f32.h"
#include "../kernels/kv_q8_row.h"

#include "../exec/Matmul.h"
#include "../exec/ThreadPool.h"
#include "KvRdkv.h"

#include <algorithm>
#include <cmath>

namespace llmc::kv {

namespace {
constexpr double kInertiaBeta = 0.9;
// With running statistics a step's query rows are split into at most this
// many chunks per KV head, each summing its attention into its own row
// (summed in chunk order after), so every core has work however few KV
// heads a layer has; fixed, so results do not depend on the thread count.
constexpr int64_t kStatChunks = 16;
} // namespace

void LayerCache::attendPaged(const HeadCache &c, const float *qh, int64_t first, int64_t last,
                             float scale, float *w, float *out, float *scratch) const {
  const int64_t B = blockEntries_;
  const KvRowType type = rowType();
  thread_local std::vector<float> wide; // f16 or Q8 rows of one block, decoded
  if (type != KvRowType::F32)
    wide.resize(size_t(B * hd_));
  // Rows [lo, hi) of block b's keys or values as f32.
  auto rows = [&](int64_t b, int64_t lo, int64_t hi, bool values) -> const float * {
    const int32_t id = c.paged.id(size_t(b));
    const int64_t at = (lo - b * B) * hd_;
    switch (type) {
    case KvRowType::F32:
      return (values ? pool_->values(id) : pool_->keys(id)) + at;
    case KvRowType::F16:
      kernels::floatRow((values ? pool_->valuesF16(id) : pool_->keysF16(id)) + at,
                        (hi - lo) * hd_, wide.data());
      break;
    case KvRowType::Q8:
      for (int64_t r = lo; r < hi; ++r)
        kernels::floatRowQ8((values ? pool_->valueBytes(id) : pool_->keyBytes(id)) +
                                (r - b * B) * pool_->rowBytes(),
                            hd_, wide.data() + (r - lo) * hd_);
      break;
    }
    return wide.data();
  };
  for (int64_t b = first / B; b <= last / B; ++b) {
    const int64_t lo = std::max(first, b * B), hi = std::min(last + 1, (b + 1) * B);
    kernels::scoreKeys(qh, rows(b, lo, hi, false), hi - lo, hd_, scale, w + lo);
  }
  kernels::softmaxInPlace(w + first, last + 1 - first);
  std::fill(out, out + hd_, 0.0f);
  for (int64_t b = first / B; b <= last / B; ++b) {
    const int64_t lo = std::max(first, b * B), hi = std::min(last + 1, (b + 1) * B);
    kernels::weightedRows(w + lo, rows(b, lo, hi, true), hi - lo, hd_, scratch);
    for (int64_t d = 0; d < hd_; ++d)
      out[d] += scratch[d];
  }
}

template <typename E>
void LayerCache::pagedRows(const HeadCache &c, std::vector<const E *> &k,
                           std::vector<const E *> &v) const {
  const int64_t B = blockEntries_;
  const int64_t stride = pool_->rowBytes() / int64_t(sizeof(E)); // elements a row
  k.resize(size_t(c.n));
  v.resize(size_t(c.n));
  for (int64_t b = 0; b * B < c.n; ++b) {
    const int32_t id = c.paged.id(size_t(b));
    const E *kb = reinterpret_cast<const E *>(pool_->keyBytes(id));
    const E *vb = reinterpret_cast<const E *>(pool_->valueBytes(id));
    for (int64_t r = 0, n = std::min(B, c.n - b * B); r < n; ++r) {
      k[size_t(b * B + r)] = kb + r * stride;
      v[size_t(b * B + r)] = vb + r * stride;
    }
  }
}

template <typename E> void LayerCache::RowAddresses<E>::fill(const LayerCache &cache) {
  const size_t heads = size_t(cache.KV_);
  if (k.size() < heads) {
    k.resize(heads);
    v.resize(heads);
  }
  for (size_t g = 0; g < heads; ++g)
    cache.pagedRows(cache.heads_[g], k[g], v[g]);
}

int64_t LayerCache::firstVisible(const HeadCache &c, int64_t last) const {
  if (windowLimit_ <= 0)
    return 0;
  const int32_t lo = c.pos[size_t(last)] - int32_t(windowLimit_) + 1;
  return std::lower_bound(c.pos.begin(), c.pos.begin() + last, lo) - c.pos.begin();
}

void LayerCache::attendByGroup(ThreadPool &pool, const float *q, int64_t T, float *out,
                               const codegen::AttendKernels &gen, const RowAddresses<float> &rows,
                               const RowAddresses<uint16_t> &half,
                               const RowAddresses<uint8_t> &q8) const {
  const int64_t qd = H_ * hd_;
  const KvRowType type = rowType();
  // A KV head's query rows one after another: its rows stay in cache.
  pool.parallelFor(0, KV_ * T, 0, [&](int64_t lo, int64_t hi) {
    thread_local std::vector<float> w;
    for (int64_t item = lo; item < hi; ++item) {
      const int64_t g = item / T, t = item % T;
      const HeadCache &c = heads_[size_t(g)];
      const int64_t last = c.n - T + t, first = firstVisible(c, last), n = last + 1 - first;
      w.resize(size_t(group_ * n));
      const float *qg = q + t * qd + g * group_ * hd_;
      float *og = out + t * qd + g * group_ * hd_;
      if (type == KvRowType::F16)
        gen.rowsGroupF16(qg, half.k[size_t(g)].data() + first, half.v[size_t(g)].data() + first, n,
                         w.data(), n, og);
      else if (type == KvRowType::Q8)
        gen.rowsGroupQ8(qg, q8.k[size_t(g)].data() + first, q8.v[size_t(g)].data() + first, n,
                        w.data(), n, og);
      else if (paged())
        gen.rowsGroup(qg, rows.k[size_t(g)].data() + first, rows.v[size_t(g)].data() + first, n,
                      w.data(), n, og);
      else
        gen.group(qg, c.k.data() + first * hd_, c.v.data() + first * hd_, n, w.data(), n, og);
    }
  });
}

void LayerCache::groupStatistics(const HeadCache &c, const float *q, int64_t tFirst,
                                 int64_t tLast, int64_t T, int64_t g, codegen::AttendGroupFn group,
                                 float *out, std::vector<float> &w, float *sum) const {
  const int64_t qd = H_ * hd_;
  for (int64_t t = tFirst; t < tLast; ++t) {
    const int64_t last = c.n - T + t, first = firstVisible(c, last), n = last + 1 - first;
    w.resize(size_t(group_ * n));
    group(q + t * qd + g * group_ * hd_, c.k.data() + first * hd_, c.v.data() + first * hd_, n,
          w.data(), n, out + t * qd + g * group_ * hd_);
    for (int64_t h = 0; h < group_; ++h) // the group's heads in order, as the per-head loop adds
      for (int64_t j = 0; j < n; ++j)
        sum[first + j] += w[size_t(h * n + j)] / float(group_);
  }
}

void LayerCache::attend(ThreadPool &pool, const float *q, int64_t T, float *out,
                        const codegen::AttendKernels &gen) {
  const codegen::AttendFn genFlat = gen.flat;
  const int64_t qd = H_ * hd_;
  const float scale = float(1.0 / std::sqrt(double(hd_)));
  // InertiaKV-Lazy gathers attention statistics only every score_every
  // decode steps (steps_ counts the decode steps before this one). Recording
  // (sweeps) matters for the prompt only, so it does not override this.
  const bool lazySkip = policy_.method == Method::InertiaKV && T == 1 &&
                        steps_ % policy_.score_every != 0;
  const bool acc = accumulating() && !lazySkip;
  // With running statistics each task owns a chunk of one KV head's query
  // rows and its own row of column sums (no shared writes).
  const int64_t chunks = acc ? std::min(T, kStatChunks) : 1;
  const int64_t items = acc ? KV_ * chunks : H_ * T;
  std::vector<std::vector<float>> stepSum(acc ? size_t(items) : 0);
  // RDKV: where each entry's rows start (widths differ per entry).
  std::vector<std::vector<int64_t>> rdOff(rdStored_ ? size_t(KV_) : 0);
  for (size_t g = 0; g < rdOff.size(); ++g)
    rdOff[g] = rdkv::entryOffsets(heads_[g].widths, hd_);
  // Paged with a generated kernel: each entry's key and value row, by head,
  // filled block by block into this thread's reused arrays (a decode step
  // of a batch runs each sequence's layers on one thread).
  // (The lambda below runs on pool threads too: it must see these arrays
  // through references, not name the thread_local variables themselves.)
  thread_local RowAddresses<float> rowsOfThread;
  thread_local RowAddresses<uint16_t> halfOfThread;
  thread_local RowAddresses<uint8_t> q8OfThread;
  RowAddresses<float> &rows = rowsOfThread;
  RowAddresses<uint16_t> &half = halfOfThread;
  RowAddresses<uint8_t> &q8 = q8OfThread;
  // f16 and Q8 rows: the generated group kernel of their type, else the
  // library's (decoding a block at a time); the per-head generated kernels
  // read f32 rows only.
  const KvRowType type = rowType();
  const bool contiguousF32 = !paged() && !rdStored_ && !quantized();
  const codegen::AttendRowsFn genRows = type == KvRowType::F32 ? gen.rows : nullptr;
  const bool byGroup =
      !acc && (type == KvRowType::F16  ? gen.rowsGroupF16 != nullptr
               : type == KvRowType::Q8 ? gen.rowsGroupQ8 != nullptr
               : paged()               ? gen.rowsGroup != nullptr
                                       : contiguousF32 && gen.group != nullptr);
  if (type == KvRowType::F16 && byGroup)
    half.fill(*this);
  else if (type == KvRowType::Q8 && byGroup)
    q8.fill(*this);
  else if (paged() && (genRows || byGroup))
    rows.fill(*this);
  if (byGroup) {
    attendByGroup(pool, q, T, out, gen, rows, half, q8);
    return;
  }
  pool.parallelFor(0, items, acc ? 1 : 0, [&](int64_t lo, int64_t hi) {
    std::vector<float> w, o(static_cast<size_t>(hd_));
    for (int64_t item = lo; item < hi; ++item) {
      const int64_t g = acc ? item / chunks : (item / T) / group_, chunk = item % chunks;
      const int64_t hFirst = acc ? g * group_ : item / T, hLast = acc ? hFirst + group_ : hFirst + 1;
      const int64_t tFirst = acc ? T * chunk / chunks : item % T;
      const int64_t tLast = acc ? T * (chunk + 1) / chunks : tFirst + 1;
      const HeadCache &c = heads_[size_t(g)];
      float *colSum = nullptr; // this task's attention sums by entry (running statistics only)
      if (acc) {
        stepSum[size_t(item)].assign(static_cast<size_t>(c.n), 0.0f);
        colSum = stepSum[size_t(item)].data();
      }
      if (acc && contiguousF32 && gen.group) {
        groupStatistics(c, q, tFirst, tLast, T, g, gen.group, out, w, colSum);
        continue;
      }
      for (int64_t h = hFirst; h < hLast; ++h)
        for (int64_t t = tFirst; t < tLast; ++t) {
          const int64_t last = c.n - T + t; // this query's own entry
          const int64_t first = firstVisible(c, last);
          const float *qh = q + t * qd + h * hd_;
          w.resize(static_cast<size_t>(last + 1));
          if (paged()) { // f32 rows in pool blocks
            float *oh = out + t * qd + h * hd_;
            if (genRows) // the generated kernel over the rows' addresses
              genRows(qh, rows.k[size_t(g)].data() + first, rows.v[size_t(g)].data() + first,
                      last + 1 - first, w.data() + first, oh);
            else // the library's, block by block
              attendPaged(c, qh, first, last, scale, w.data(), oh, o.data());
            if (acc)
              for (int64_t j = first; j <= last; ++j)
                colSum[j] += w[size_t(j)] / float(group_);
            continue;
          }
          if (!rdStored_ && !quantized()) { // f32 cache: the vectorized kernels
            const int64_t n = last + 1 - first;
            float *wf = w.data() + first;
            const float *kf = c.k.data() + first * hd_, *vf = c.v.data() + first * hd_;
            float *o = out + t * qd + h * hd_;
            if (genFlat) { // scores, softmax (probabilities left in wf) and values
              genFlat(qh, kf, vf, n, wf, o);
            } else {
              kernels::scoreKeys(qh, kf, n, hd_, scale, wf);
              kernels::softmaxInPlace(wf, n);
              kernels::weightedRows(wf, vf, n, hd_, o);
            }
            if (acc)
              for (int64_t j = first; j <= last; ++j)
                colSum[j] += w[size_t(j)] / float(group_);
            continue;
          }
          float mx = -INFINITY, qsum = 0;
          if (rdStored_)
            for (int64_t d = 0; d < hd_; ++d)
              qsum += qh[d];
          for (int64_t j = first; j <= last; ++j) {
            float s = rdStored_ ? rdkv::dotKey(qh, qsum, c.rd.data() + rdOff[size_t(g)][size_t(j)],
                                               c.widths[size_t(j)], hd_)
                      : quantized() ? poly_.dotKey(qh, c.kq.data() + j * poly_.keyBytes())
                                    : dot(qh, c.k.data() + j * hd_, hd_);
            w[size_t(j)] = s * scale;
            mx = std::max(mx, w[size_t(j)]);
          }
          double sum = 0;
          for (int64_t j = first; j <= last; ++j)
            sum += w[size_t(j)] = std::exp(w[size_t(j)] - mx);
          const float inv = float(1.0 / sum);
          std::fill(o.begin(), o.end(), 0.0f);
          for (int64_t j = first; j <= last; ++j) {
            const float wj = w[size_t(j)] * inv;
            if (acc)
              colSum[j] += wj / float(group_);
            if (rdStored_) {
              rdkv::accumulateValue(c.rd.data() + rdOff[size_t(g)][size_t(j)], c.widths[size_t(j)],
                                    hd_, wj, o.data());
            } else if (quantized()) {
              poly_.accumulateValue(c.vq.data() + j * poly_.valueBytes(), wj, o.data());
            } else {
              const float *vr = c.v.data() + j * hd_;
              for (int64_t d = 0; d < hd_; ++d)
                o[size_t(d)] += wj * vr[d];
            }
          }
          if (quantized())
            poly_.rotateBack(o.data());
          std::copy(o.begin(), o.end(), out + t * qd + h * hd_);
        }
    }
  });
  if (!acc)
    return;
  for (int64_t g = 0; g < KV_; ++g) {
    HeadCache &c = heads_[size_t(g)];
    std::vector<float> &s = stepSum[size_t(g * chunks)]; // the chunks' sums, in order
    for (int64_t ch = 1; ch < chunks; ++ch) {
      const std::vector<float> &part = stepSum[size_t(g * chunks + ch)];
      for (int64_t j = 0; j < c.n; ++j)
        s[size_t(j)] += part[size_t(j)];
    }
    if (policy_.method != Method::InertiaKV || T > 1) {
      // H2O: column sums of every query so far. InertiaKV starts from the
      // prompt's mean attention.
      for (int64_t j = 0; j < c.n; ++j)
        c.acc[size_t(j)] += policy_.method == Method::InertiaKV ? s[size_t(j)] / float(T) : s[size_t(j)];
    } else {
      // New entries (acc < 0: appended since the last scoring step) start
      // at this step's attention; the rest follow the EMA.
      for (int64_t j = 0; j < c.n; ++j)
        c.acc[size_t(j)] = c.acc[size_t(j)] < 0.0f
                               ? s[size_t(j)]
                               : float(kInertiaBeta * c.acc[size_t(j)] +
                                       (1 - kInertiaBeta) * s[size_t(j)]);
    }
  }
}

} // namespace llmc::kv
