//===- KvRdkv.cpp - RDKV: rate-distortion bit widths for cache entries ----===//
// The row codec, the weights, the allocation (KvRdkv.h), and the layer's
// RDKV compression LayerCache::compressRdkv (declared in KvCache.h, kept
// here with the rest of the method).
//===----------------------------------------------------------------------===//
#include "KvRdkv.h"

#include "../exec/Matmul.h"
#include "KvCache.h"
#include "KvSelect.h"
#include "llmc/dtype.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <queue>
#include <stdexcept>
#include <string>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define LLMC_RDKV_AVX2 1
#endif

namespace llmc::kv::rdkv {

namespace {

constexpr float kHalfMax = 65504.0f;

float loadHalf(const uint8_t *p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return llmc::halfToFloat(h);
}
void putHalf(uint8_t *p, float f) {
  uint16_t h = llmc::floatToHalf(std::clamp(f, -kHalfMax, kHalfMax));
  std::memcpy(p, &h, 2);
}

/// Code i of a row of `bits`-bit codes packed LSB first (bits divides 8).
inline unsigned codeAt(const uint8_t *codes, int64_t i, int bits) {
  const int64_t bit = i * bits;
  return (codes[bit / 8] >> (bit % 8)) & ((1u << bits) - 1u);
}

#ifdef LLMC_RDKV_AVX2
float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_hadd_ps(lo, lo);
  lo = _mm_hadd_ps(lo, lo);
  return _mm_cvtss_f32(lo);
}
/// Eight consecutive codes (chunk c) as floats: 8 codes of `bits` bits are
/// `bits` whole bytes.
inline __m256 codes8(const uint8_t *codes, int64_t c, int bits) {
  const uint8_t *p = codes + c * bits;
  if (bits == 8)
    return _mm256_cvtepi32_ps(
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(p))));
  uint32_t word = 0;
  std::memcpy(&word, p, size_t(bits));
  const __m256i shifts = bits == 4 ? _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)
                                   : _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  const __m256i mask = _mm256_set1_epi32((1 << bits) - 1);
  return _mm256_cvtepi32_ps(
      _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(int(word)), shifts), mask));
}
#endif

} // namespace

int widthCode(int width) {
  for (int c = 0; c < 5; ++c)
    if (kWidths[c] == width)
      return c;
  throw std::runtime_error("rdkv: unsupported bit width " + std::to_string(width) +
                           " (supported: 0, 2, 4, 8, 16)");
}

int64_t rowBytes(int width, int64_t hd) {
  if (width == 0)
    return 0;
  if (width == 16)
    return 2 * hd;
  return 4 + (hd * width + 7) / 8;
}

void encodeRow(const float *x, int64_t hd, int width, uint8_t *dst) {
  if (width == 16) {
    for (int64_t i = 0; i < hd; ++i)
      putHalf(dst + 2 * i, x[i]);
    return;
  }
  if (width == 0)
    return;
  widthCode(width);
  float mn = x[0], mx = x[0];
  for (int64_t i = 1; i < hd; ++i) {
    mn = std::min(mn, x[i]);
    mx = std::max(mx, x[i]);
  }
  const int levels = (1 << width) - 1;
  putHalf(dst, (mx - mn) / float(levels));
  putHalf(dst + 2, mn);
  const float scale = loadHalf(dst), lo = loadHalf(dst + 2);
  const float inv = scale > 0 ? 1.0f / scale : 0.0f;
  uint8_t *codes = dst + 4;
  std::fill(codes, codes + (hd * width + 7) / 8, uint8_t(0));
  for (int64_t i = 0; i < hd; ++i) {
    const int c = std::clamp(int(std::lround((x[i] - lo) * inv)), 0, levels);
    const int64_t bit = i * width;
    codes[bit / 8] |= uint8_t(unsigned(c) << (bit % 8));
  }
}

void decodeRow(const uint8_t *row, int64_t hd, int width, float *dst) {
  if (width == 16) {
    for (int64_t i = 0; i < hd; ++i)
      dst[i] = loadHalf(row + 2 * i);
    return;
  }
  if (width == 0) {
    std::fill(dst, dst + hd, 0.0f);
    return;
  }
  const float scale = loadHalf(row), lo = loadHalf(row + 2);
  for (int64_t i = 0; i < hd; ++i)
    dst[i] = scale * float(codeAt(row + 4, i, width)) + lo;
}

float dotRow(const float *q, float qsum, const uint8_t *row, int64_t hd, int width) {
  int64_t i = 0;
  float s = 0;
  if (width == 16) {
#ifdef LLMC_RDKV_AVX2
    __m256 acc = _mm256_setzero_ps();
    for (; i + 8 <= hd; i += 8) {
      __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(row + 2 * i)));
      acc = _mm256_fmadd_ps(x, _mm256_loadu_ps(q + i), acc);
    }
    s = hsum(acc);
#endif
    for (; i < hd; ++i)
      s += q[i] * loadHalf(row + 2 * i);
    return s;
  }
  const uint8_t *codes = row + 4;
#ifdef LLMC_RDKV_AVX2
  __m256 acc = _mm256_setzero_ps();
  for (; i + 8 <= hd; i += 8)
    acc = _mm256_fmadd_ps(codes8(codes, i / 8, width), _mm256_loadu_ps(q + i), acc);
  s = hsum(acc);
#endif
  for (; i < hd; ++i)
    s += q[i] * float(codeAt(codes, i, width));
  return loadHalf(row) * s + loadHalf(row + 2) * qsum;
}

void accumulateRow(const uint8_t *row, int64_t hd, int width, float w, float *acc) {
  int64_t i = 0;
  if (width == 16) {
#ifdef LLMC_RDKV_AVX2
    const __m256 wv = _mm256_set1_ps(w);
    for (; i + 8 <= hd; i += 8) {
      __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(row + 2 * i)));
      _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(wv, x, _mm256_loadu_ps(acc + i)));
    }
#endif
    for (; i < hd; ++i)
      acc[i] += w * loadHalf(row + 2 * i);
    return;
  }
  const float ws = w * loadHalf(row), wm = w * loadHalf(row + 2);
  const uint8_t *codes = row + 4;
#ifdef LLMC_RDKV_AVX2
  const __m256 wsv = _mm256_set1_ps(ws), wmv = _mm256_set1_ps(wm);
  for (; i + 8 <= hd; i += 8) {
    __m256 a = _mm256_add_ps(_mm256_loadu_ps(acc + i), wmv);
    _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(wsv, codes8(codes, i / 8, width), a));
  }
#endif
  for (; i < hd; ++i)
    acc[i] += ws * float(codeAt(codes, i, width)) + wm;
}

void appendEntry(std::vector<uint8_t> &arena, const float *k, const float *v, int64_t hd,
                 uint8_t packed) {
  const int kw = keyWidth(packed), vw = valueWidth(packed);
  const size_t at = arena.size();
  arena.resize(at + size_t(rowBytes(kw, hd) + rowBytes(vw, hd)));
  encodeRow(k, hd, kw, arena.data() + at);
  encodeRow(v, hd, vw, arena.data() + at + rowBytes(kw, hd));
}

std::vector<int64_t> entryOffsets(const std::vector<uint8_t> &widths, int64_t hd) {
  std::vector<int64_t> off(widths.size());
  int64_t o = 0;
  for (size_t j = 0; j < widths.size(); ++j) {
    off[j] = o;
    o += entryBytes(widths[j], hd);
  }
  return off;
}

std::vector<EntryCost> entryCosts(const float *A, const float *qnorm2, int64_t rows, int64_t n,
                                  int64_t candidates, const float *k, const float *v,
                                  int64_t hd) {
  std::vector<EntryCost> out(static_cast<size_t>(candidates));
  if (rows == 0)
    return out;
  // Window outputs o_r and their squared norms.
  std::vector<float> o(static_cast<size_t>(rows * hd), 0.0f);
  std::vector<double> on2(static_cast<size_t>(rows), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    float *orow = o.data() + r * hd;
    for (int64_t j = 0; j < n; ++j) {
      const float a = A[r * n + j];
      if (a != 0)
        for (int64_t d = 0; d < hd; ++d)
          orow[d] += a * v[j * hd + d];
    }
    on2[size_t(r)] = dot(orow, orow, hd);
  }
  std::vector<uint8_t> row(static_cast<size_t>(rowBytes(16, hd)));
  std::vector<float> back(static_cast<size_t>(hd));
  // Measured per-element MSE of a row stored at width code c.
  auto mse = [&](const float *x, int c) {
    encodeRow(x, hd, kWidths[c], row.data());
    decodeRow(row.data(), hd, kWidths[c], back.data());
    double e = 0;
    for (int64_t d = 0; d < hd; ++d)
      e += double(back[size_t(d)] - x[d]) * (back[size_t(d)] - x[d]);
    return e / double(hd);
  };
  const double perRow = 1.0 / (double(rows) * double(hd));
  std::vector<double> a2dvo(static_cast<size_t>(rows)); // a_rj^2 ||v_j - o_r||^2
  for (int64_t j = 0; j < candidates; ++j) {
    const float *vj = v + j * hd, *kj = k + j * hd;
    const double vn2 = dot(vj, vj, hd);
    double wv = 0, ev = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const double a = A[r * n + j];
      a2dvo[size_t(r)] = 0;
      if (a == 0)
        continue;
      const double dvo = std::max(0.0, vn2 - 2.0 * dot(vj, o.data() + r * hd, hd) + on2[size_t(r)]);
      const double odds = a / std::max(1e-6, 1.0 - a);
      a2dvo[size_t(r)] = a * a * dvo;
      wv += a * a;
      ev += odds * odds * dvo;
    }
    EntryCost &c = out[size_t(j)];
    c.evict = ev * perRow;
    for (int code = 1; code < 5; ++code) {
      c.value[code] = wv / double(rows) * mse(vj, code);
      const double m = mse(kj, code);
      double dk = 0;
      for (int64_t r = 0; r < rows; ++r) {
        if (a2dvo[size_t(r)] == 0)
          continue;
        const double s2 = std::min(20.0, qnorm2[r] * m / double(hd)); // logit error variance
        dk += a2dvo[size_t(r)] *
              (s2 < 1e-4 ? s2 : std::exp(2 * s2) - 2 * std::exp(0.5 * s2) + 1);
      }
      c.key[code] = dk * perRow;
    }
  }
  return out;
}

void smoothCosts(std::vector<EntryCost> &cost, int64_t kernel) {
  const int64_t m = int64_t(cost.size());
  if (kernel <= 1 || m == 0)
    return;
  std::vector<float> x(static_cast<size_t>(m));
  auto pool = [&](auto field) {
    for (int64_t j = 0; j < m; ++j)
      x[size_t(j)] = float(field(cost[size_t(j)]));
    avgPool(x.data(), m, kernel);
    for (int64_t j = 0; j < m; ++j)
      field(cost[size_t(j)]) = double(x[size_t(j)]);
  };
  pool([](EntryCost &c) -> double & { return c.evict; });
  for (int code = 1; code < 5; ++code) {
    pool([code](EntryCost &c) -> double & { return c.key[code]; });
    pool([code](EntryCost &c) -> double & { return c.value[code]; });
  }
}

namespace {

int higherWidth(int w) { return w == 0 ? 2 : w == 2 ? 4 : w == 4 ? 8 : 16; }

struct Move {
  double ratio; // distortion removed per bit spent
  int64_t entry;
  uint8_t k, v; // target widths
  uint32_t version;
};

} // namespace

Allocation allocate(const std::vector<EntryCost> &cost, const std::vector<uint8_t> &capKey,
                    const std::vector<uint8_t> &capValue, int64_t hd, double budgetBits) {
  const int64_t n = int64_t(cost.size());
  if (int64_t(capKey.size()) != n || int64_t(capValue.size()) != n)
    throw std::runtime_error("rdkv::allocate: " + std::to_string(n) + " entries but " +
                             std::to_string(capKey.size()) + "/" + std::to_string(capValue.size()) +
                             " key/value caps");
  for (int64_t j = 0; j < n; ++j)
    if (capKey[size_t(j)] < 2 || capValue[size_t(j)] < 2)
      throw std::runtime_error("rdkv::allocate: entry " + std::to_string(j) +
                               "'s current width is below 2 bits");
  Allocation out;
  out.key.assign(size_t(n), 0);
  out.value.assign(size_t(n), 0);
  if (n == 0)
    return out;
  auto dist = [&](int64_t j, int k, int v) {
    const EntryCost &c = cost[size_t(j)];
    return k == 0 ? c.evict : c.key[widthCode(k)] + c.value[widthCode(v)];
  };
  auto bitsOf = [&](int k, int v) { return rowBits(k, hd) + rowBits(v, hd); };

  // 1. Water level theta: each entry takes its state minimizing D + theta
  // bits; the layer's bits fall as theta rises.
  auto level = [&](double theta, bool write) {
    double total = 0;
    for (int64_t j = 0; j < n; ++j) {
      const EntryCost &c = cost[size_t(j)];
      double bestK = INFINITY, bestV = INFINITY;
      int k = 0, v = 0;
      for (int code = 1; code < 5; ++code) {
        const int w = kWidths[code];
        const double price = theta * rowBits(w, hd);
        if (w <= capKey[size_t(j)] && c.key[code] + price < bestK) {
          bestK = c.key[code] + price;
          k = w;
        }
        if (w <= capValue[size_t(j)] && c.value[code] + price < bestV) {
          bestV = c.value[code] + price;
          v = w;
        }
      }
      if (c.evict <= bestK + bestV)
        k = v = 0;
      total += bitsOf(k, v);
      if (write) {
        out.key[size_t(j)] = uint8_t(k);
        out.value[size_t(j)] = uint8_t(v);
      }
    }
    return total;
  };
  // Bisect log2 theta: at 2^-300 every entry keeps its widest state (unless
  // evicting costs nothing), at 2^300 every entry is evicted.
  double lo = -300, hi = 300;
  for (int it = 0; it < 80 && hi - lo > 1e-9; ++it) {
    const double mid = 0.5 * (lo + hi);
    (level(std::exp2(mid), false) > budgetBits ? lo : hi) = mid;
  }
  double bits = level(std::exp2(hi), true); // the side within budget

  // 2. Spend what is left: the step up (one width, or restoring an evicted
  // entry at 2/2 bits) that removes the most distortion per bit, while one fits.
  std::vector<uint32_t> version(size_t(n), 0);
  auto dearer = [](const Move &a, const Move &b) { // ties: the older entry first
    return a.ratio < b.ratio || (a.ratio == b.ratio && a.entry > b.entry);
  };
  std::priority_queue<Move, std::vector<Move>, decltype(dearer)> up(dearer);
  auto pushUp = [&](int64_t j) {
    const int k = out.key[size_t(j)], v = out.value[size_t(j)];
    const double d0 = dist(j, k, v), c0 = bitsOf(k, v);
    auto push = [&](int tk, int tv) {
      up.push({(d0 - dist(j, tk, tv)) / (bitsOf(tk, tv) - c0), j, uint8_t(tk), uint8_t(tv),
               version[size_t(j)]});
    };
    if (k == 0) {
      push(2, 2);
      return;
    }
    if (k < capKey[size_t(j)])
      push(higherWidth(k), v);
    if (v < capValue[size_t(j)])
      push(k, higherWidth(v));
  };
  for (int64_t j = 0; j < n; ++j)
    pushUp(j);
  while (!up.empty()) {
    const Move m = up.top();
    up.pop();
    if (m.version != version[size_t(m.entry)])
      continue;
    const double more = bitsOf(m.k, m.v) - bitsOf(out.key[size_t(m.entry)], out.value[size_t(m.entry)]);
    if (bits + more > budgetBits)
      continue; // never fits later either: what is left only shrinks
    bits += more;
    out.key[size_t(m.entry)] = m.k;
    out.value[size_t(m.entry)] = m.v;
    ++version[size_t(m.entry)];
    pushUp(m.entry);
  }
  out.bits = bits;
  return out;
}

} // namespace llmc::kv::rdkv

namespace llmc::kv {

void LayerCache::compressRdkv() {
  const int64_t Wq = int64_t(winPos_.size()), qd = H_ * hd_, rows = group_ * Wq;
  std::vector<std::vector<float>> keys(static_cast<size_t>(KV_)), vals(static_cast<size_t>(KV_));
  std::vector<rdkv::EntryCost> costs;
  std::vector<uint8_t> capK, capV;
  std::vector<int64_t> candidates(static_cast<size_t>(KV_));
  double budgetBits = 0;
  const double fp16Entry = 2 * rdkv::rowBits(16, hd_);
  for (int64_t g = 0; g < KV_; ++g) {
    const HeadCache &c = heads_[size_t(g)];
    const int64_t n = c.n, cand = std::max<int64_t>(0, n - policy_.window);
    candidates[size_t(g)] = cand;
    keyRows(g, keys[size_t(g)]);
    valueRows(g, vals[size_t(g)]);
    // The group's window attention, one block of Wq rows per query head.
    std::vector<float> A(static_cast<size_t>(rows * n)), qn2(static_cast<size_t>(rows), 0.0f);
    for (int64_t hh = 0; hh < group_; ++hh) {
      const int64_t h = g * group_ + hh;
      windowAttention(winQ_.data() + h * hd_, Wq, qd, winPos_.data(), keys[size_t(g)].data(),
                      c.pos.data(), n, hd_, A.data() + hh * Wq * n);
      for (int64_t i = 0; i < Wq; ++i) {
        const float *qi = winQ_.data() + i * qd + h * hd_;
        qn2[size_t(hh * Wq + i)] = dot(qi, qi, hd_);
      }
    }
    std::vector<rdkv::EntryCost> ec =
        rdkv::entryCosts(A.data(), qn2.data(), rows, n, cand, keys[size_t(g)].data(),
                         vals[size_t(g)].data(), hd_);
    rdkv::smoothCosts(ec, policy_.pool);
    costs.insert(costs.end(), ec.begin(), ec.end());
    double windowBits = 0;
    for (int64_t j = 0; j < n; ++j) {
      const int kw = rdStored_ ? rdkv::keyWidth(c.widths[size_t(j)]) : 16;
      const int vw = rdStored_ ? rdkv::valueWidth(c.widths[size_t(j)]) : 16;
      if (j < cand) {
        capK.push_back(uint8_t(kw));
        capV.push_back(uint8_t(vw));
      } else {
        windowBits += rdkv::rowBits(kw, hd_) + rdkv::rowBits(vw, hd_);
      }
    }
    const double share = (policy_.budget_tokens > 0 ? double(policy_.budget_tokens)
                                                    : policy_.budget * double(promptLen_)) *
                         fp16Entry;
    budgetBits += std::max(0.0, share - windowBits) * policy_.layer_scale;
  }
  const rdkv::Allocation alloc = rdkv::allocate(costs, capK, capV, hd_, budgetBits);

  // Rebuild each head's storage at the chosen widths (evicted entries go).
  size_t unit = 0;
  for (int64_t g = 0; g < KV_; ++g) {
    HeadCache &c = heads_[size_t(g)];
    const int64_t n = c.n, cand = candidates[size_t(g)];
    std::vector<int64_t> off;
    if (rdStored_)
      off = rdkv::entryOffsets(c.widths, hd_);
    std::vector<uint8_t> packed(static_cast<size_t>(n));
    std::vector<int64_t> keep;
    int64_t bytes = 0;
    for (int64_t j = 0; j < n; ++j) {
      if (j < cand) {
        const uint8_t kw = alloc.key[unit], vw = alloc.value[unit];
        ++unit;
        if (kw == 0)
          continue;
        packed[size_t(j)] = rdkv::packWidths(kw, vw);
      } else {
        packed[size_t(j)] = rdStored_ ? c.widths[size_t(j)] : rdkv::packWidths(16, 16);
      }
      keep.push_back(j);
      bytes += rdkv::entryBytes(packed[size_t(j)], hd_);
    }
    // Room for one more fp16 entry before the arena grows (like keep()).
    std::vector<uint8_t> arena, widths;
    arena.reserve(size_t(bytes + rdkv::entryBytes(rdkv::packWidths(16, 16), hd_)));
    widths.reserve(keep.size() + 1);
    std::vector<int32_t> pos;
    std::vector<float> acc;
    pos.reserve(keep.size() + 1);
    if (!c.acc.empty())
      acc.reserve(keep.size() + 1);
    for (int64_t j : keep) {
      const uint8_t p = packed[size_t(j)];
      if (rdStored_ && p == c.widths[size_t(j)]) {
        const uint8_t *src = c.rd.data() + off[size_t(j)];
        arena.insert(arena.end(), src, src + rdkv::entryBytes(p, hd_));
      } else {
        rdkv::appendEntry(arena, keys[size_t(g)].data() + j * hd_, vals[size_t(g)].data() + j * hd_,
                          hd_, p);
      }
      widths.push_back(p);
      pos.push_back(c.pos[size_t(j)]);
      if (!c.acc.empty())
        acc.push_back(c.acc[size_t(j)]);
    }
    c.rd.swap(arena);
    c.widths.swap(widths);
    c.pos.swap(pos);
    c.acc.swap(acc);
    std::vector<float>().swap(c.k);
    std::vector<float>().swap(c.v);
    c.paged.clear(); // a paged cache's blocks go back to the pool
    c.n = int64_t(keep.size());
  }
  rdStored_ = true;
}

} // namespace llmc::kv
