//===- Aaac.cpp - AAAC: activation-aware adaptive codebooks --------------===//
// See Aaac.h. Rows are processed in fixed chunks by a few worker threads;
// everything a round sums (k-means statistics, errors) is kept per chunk and
// reduced in chunk order, so the result does not depend on the thread count.
//===----------------------------------------------------------------------===//
#include "compiler/quant/Aaac.h"
#include "compiler/quant/ParallelFor.h"
#include "llmc/format/aaac.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define LLMC_AAAC_AVX2 1
#endif

namespace llmc::quant {
namespace {

constexpr int kMaxEntries = 16;
constexpr int64_t kChunkRows = 16;

/// One codebook, ascending, with the midpoints nearest() searches.
struct Book {
  int k = 0;
  float c[kMaxEntries] = {};
  float mid[kMaxEntries] = {}; // mid[i] = (c[i] + c[i+1]) / 2, i < k - 1
  /// The midpoints nearest() compares at each level of its search, by the
  /// index of the interval reached so far: search[l][i] = mid[(2i + 1) *
  /// (k >> (l + 1)) - 1], i < 2^l (lanes above repeat them), for the vector
  /// search (one lane permute per level instead of a compare per midpoint).
  alignas(32) float search[4][8] = {};
  float cmin = 0, cmax = 0, amax = 0;

  void set(const std::vector<float> &v) {
    k = int(v.size());
    std::copy(v.begin(), v.end(), c);
    std::sort(c, c + k);
    for (int i = 0; i + 1 < k; ++i)
      mid[i] = 0.5f * (c[i] + c[i + 1]);
    for (int l = 0; (k >> (l + 1)) > 0 && l < 4; ++l)
      for (int i = 0; i < 8; ++i)
        search[l][i] = mid[(2 * (i % (1 << l)) + 1) * (k >> (l + 1)) - 1];
    cmin = c[0];
    cmax = c[k - 1];
    amax = std::max(std::fabs(cmin), std::fabs(cmax));
  }
  /// Index of the entry nearest t (ties to the lower one): the number of
  /// midpoints below t, by a branchless binary search (k is a power of 2).
  int nearest(float t) const {
    int idx = 0;
    for (int step = k >> 1; step > 0; step >>= 1)
      idx += t > mid[idx + step - 1] ? step : 0;
    return idx;
  }
};

/// One group evaluated on book b at scale s: the weighted squared error, and
/// sum h w c[q], sum h c[q]^2 (whose ratio is the least-squares scale for
/// these codes).
struct Eval {
  float err, num, den;
};

/// The hot loop of the whole method; writes the codes when `codes` is set.
[[maybe_unused]] Eval evalScalar(const float *w, const float *h, int64_t G, const Book &b,
                                 float s, uint8_t *codes) {
  const float inv = 1.0f / s;
  Eval e{0, 0, 0};
  for (int64_t j = 0; j < G; ++j) {
    const int q = b.nearest(w[j] * inv);
    const float c = b.c[q], d = w[j] - s * c;
    e.err += h[j] * d * d;
    e.num += h[j] * w[j] * c;
    e.den += h[j] * c * c;
    if (codes)
      codes[j] = uint8_t(q);
  }
  return e;
}

#if LLMC_AAAC_AVX2
inline float hsum8(__m256 v) {
  __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

/// The same, 8 weights at a time (G is a multiple of 8): the code is the
/// number of midpoints below w / s, found as nearest() finds it, one level
/// (a lane permute of Book::search and a compare) per bit of the code; the
/// entry comes from a register permute (two and a blend for 16 entries).
template <int K>
Eval evalAvx2(const float *w, const float *h, int64_t G, const Book &b, float s,
              uint8_t *codes) {
  constexpr int kLevels = K == 16 ? 4 : K == 8 ? 3 : 2;
  static_assert(K == (1 << kLevels), "a power-of-two book");
  const __m256 vs = _mm256_set1_ps(s), vinv = _mm256_set1_ps(1.0f / s);
  const __m256 lo = _mm256_loadu_ps(b.c), hi = _mm256_loadu_ps(b.c + 8);
  __m256 search[kLevels];
  for (int l = 0; l < kLevels; ++l)
    search[l] = _mm256_load_ps(b.search[l]);
  __m256 err = _mm256_setzero_ps(), num = err, den = err;
  alignas(32) int32_t q32[8];
  for (int64_t j = 0; j < G; j += 8) {
    const __m256 wv = _mm256_loadu_ps(w + j), hv = _mm256_loadu_ps(h + j);
    const __m256 t = _mm256_mul_ps(wv, vinv);
    // q = 2 q + (t > the midpoint of q's interval); a true compare is -1.
    __m256i q = _mm256_castps_si256(_mm256_cmp_ps(t, search[0], _CMP_GT_OQ));
    q = _mm256_sub_epi32(_mm256_setzero_si256(), q);
    for (int l = 1; l < kLevels; ++l) {
      const __m256 m = _mm256_permutevar8x32_ps(search[l], q);
      q = _mm256_sub_epi32(_mm256_add_epi32(q, q),
                           _mm256_castps_si256(_mm256_cmp_ps(t, m, _CMP_GT_OQ)));
    }
    __m256 c = _mm256_permutevar8x32_ps(lo, q);
    if constexpr (K > 8)
      c = _mm256_blendv_ps(c, _mm256_permutevar8x32_ps(hi, q),
                           _mm256_castsi256_ps(_mm256_slli_epi32(q, 28)));
    const __m256 d = _mm256_fnmadd_ps(vs, c, wv), hc = _mm256_mul_ps(hv, c);
    err = _mm256_fmadd_ps(_mm256_mul_ps(hv, d), d, err);
    num = _mm256_fmadd_ps(hc, wv, num);
    den = _mm256_fmadd_ps(hc, c, den);
    if (codes) {
      _mm256_store_si256(reinterpret_cast<__m256i *>(q32), q);
      for (int i = 0; i < 8; ++i)
        codes[j + i] = uint8_t(q32[i]);
    }
  }
  return {hsum8(err), hsum8(num), hsum8(den)};
}
#endif

Eval evalGroup(const float *w, const float *h, int64_t G, const Book &b, float s,
               uint8_t *codes) {
#if LLMC_AAAC_AVX2
  switch (b.k) {
  case 4: return evalAvx2<4>(w, h, G, b, s, codes);
  case 8: return evalAvx2<8>(w, h, G, b, s, codes);
  default: return evalAvx2<16>(w, h, G, b, s, codes);
  }
#else
  return evalScalar(w, h, G, b, s, codes);
#endif
}

/// The smallest scale whose scaled book spans the group's range (on the
/// sides where the book has entries of that sign), or max|w| / max|c|.
float coverScale(float lo, float hi, const Book &b) {
  float s = 0;
  if (hi > 0 && b.cmax > 0)
    s = std::max(s, hi / b.cmax);
  if (lo < 0 && b.cmin < 0)
    s = std::max(s, lo / b.cmin);
  if (!(s > 0))
    s = std::max(std::fabs(lo), std::fabs(hi)) / b.amax;
  return s;
}

/// A scale as stored: fp16, clamped to [kAaacMinScale, kAaacMaxScale].
float storedScale(float s) {
  return std::isfinite(s) ? aaacStoredScale(std::min(s, kAaacMaxScale)) : kAaacMaxScale;
}

struct Choice {
  float scale = 0; // fp16-exact magnitude
  int book = 0;
  float err = std::numeric_limits<float>::infinity();
};

/// Best (book, scale) of one group; its codes go to `codes`. Candidates per
/// book: s0 * clip, the least-squares refit of the best of those, and the
/// previous choice `prev` (scale <= 0 when there is none).
Choice assignGroup(const float *w, const float *h, int64_t G, const Book books[2],
                   const Choice &prev, const std::vector<float> &clips, uint8_t *codes) {
  float lo = w[0], hi = w[0];
  for (int64_t j = 1; j < G; ++j) {
    lo = std::min(lo, w[j]);
    hi = std::max(hi, w[j]);
  }
  Choice best;
  for (int bi = 0; bi < 2; ++bi) {
    const Book &b = books[bi];
    const float s0 = coverScale(lo, hi, b);
    Choice c;
    c.book = bi;
    Eval at{0, 0, 0};
    auto consider = [&](float s) {
      s = storedScale(s);
      const Eval e = evalGroup(w, h, G, b, s, nullptr);
      if (e.err < c.err) {
        c.err = e.err;
        c.scale = s;
        at = e;
      }
    };
    for (float f : clips)
      consider(s0 * f);
    if (at.den > 0 && at.num > 0)
      consider(at.num / at.den);
    if (prev.scale > 0 && prev.book == bi)
      consider(prev.scale);
    if (c.err < best.err)
      best = c;
  }
  best.err = evalGroup(w, h, G, books[best.book], best.scale, codes).err;
  return best;
}

/// Inverse of the standard normal CDF, by bisection (init only).
double normalQuantile(double p) {
  double lo = -10, hi = 10;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

/// Scales v so max|v| = 1, rounds to fp16, sorts; returns the factor.
float normalise(std::vector<float> &v) {
  float m = 0;
  for (float x : v)
    m = std::max(m, std::fabs(x));
  if (m > 0)
    for (float &x : v)
      x = roundToHalf(x / m);
  std::sort(v.begin(), v.end());
  return m > 0 ? m : 1.0f;
}

} // namespace

std::vector<float> aaacInitialBook(int bits, bool normal) {
  if (bits < kAaacMinBits || bits > kAaacMaxBits)
    throw std::runtime_error("aaac: " + std::to_string(bits) + " bits (2..4 supported)");
  const int k = aaacEntries(bits);
  std::vector<float> v(static_cast<size_t>(k));
  for (int i = 0; i < k; ++i)
    v[size_t(i)] = normal ? float(normalQuantile((i + 0.5) / k)) : float(2 * i - (k - 1));
  normalise(v);
  return v;
}

AaacMatrix aaacQuantize(const float *w, int64_t rows, int64_t cols, const double *h,
                        const AaacOptions &o) {
  (void)aaacDType(o.bits, o.group); // checks bits and group
  if (rows < 0 || cols <= 0 || cols % o.group != 0)
    throw std::runtime_error("aaac: matrix " + std::to_string(rows) + "x" + std::to_string(cols) +
                             " has rows that are not whole groups of " + std::to_string(o.group));
  if (o.iters < 0 || o.clips.empty() || !(o.damp >= 0))
    throw std::runtime_error("aaac: iters and damp must be non-negative and clips non-empty");
  for (float f : o.clips)
    if (!(f > 0 && f <= 1))
      throw std::runtime_error("aaac: clip factor " + std::to_string(f) + " not in (0, 1]");
  const int64_t G = o.group, groups = cols / G, n = rows * cols;
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(w[i]) || std::fabs(w[i]) > kAaacMaxScale)
      throw std::runtime_error("aaac: weight at row " + std::to_string(i / cols) + ", column " +
                               std::to_string(i % cols) + " is " + std::to_string(w[i]) +
                               " (must be finite and fit an fp16 scale)");
  // Channel energies, damped and normalised to mean 1.
  std::vector<float> hf(size_t(cols), 1.0f);
  if (h) {
    double mean = 0;
    for (int64_t j = 0; j < cols; ++j) {
      if (!std::isfinite(h[j]) || h[j] < 0)
        throw std::runtime_error("aaac: activation energy of input channel " + std::to_string(j) +
                                 " is " + std::to_string(h[j]));
      mean += h[j];
    }
    mean /= double(cols);
    const double floor = mean > 0 ? o.damp * mean : 1.0;
    double scale = 0;
    for (int64_t j = 0; j < cols; ++j)
      scale += h[j] + floor;
    scale = double(cols) / scale;
    for (int64_t j = 0; j < cols; ++j)
      hf[size_t(j)] = float((h[j] + floor) * scale);
  }

  AaacMatrix m;
  m.bits = o.bits;
  m.group = G;
  m.rows = rows;
  m.cols = cols;
  m.codes.assign(size_t(n), 0);
  m.scales.assign(size_t(rows * groups), 0.0f);
  std::vector<float> books[2] = {aaacInitialBook(o.bits, false), aaacInitialBook(o.bits, true)};
  std::vector<Choice> choice(size_t(rows * groups));
  double ref = 0;
  for (int64_t i = 0; i < n; ++i)
    ref += double(hf[size_t(i % cols)]) * w[i] * w[i];

  const int64_t chunks = (rows + kChunkRows - 1) / kChunkRows;
  const int threads = o.threads > 0 ? o.threads : defaultQuantThreads();
  const int k = aaacEntries(o.bits);
  // Per chunk: error, and k-means sums num/den per (book, entry).
  std::vector<double> chunkErr(static_cast<size_t>(chunks));
  std::vector<double> chunkNum(size_t(chunks * 2 * k)), chunkDen(size_t(chunks * 2 * k));

  auto assign = [&] {
    Book bk[2];
    bk[0].set(books[0]);
    bk[1].set(books[1]);
    parallelIndices(chunks, threads, [&](int64_t c) {
      double err = 0;
      double *num = &chunkNum[size_t(c * 2 * k)], *den = &chunkDen[size_t(c * 2 * k)];
      std::fill(num, num + 2 * k, 0.0);
      std::fill(den, den + 2 * k, 0.0);
      for (int64_t r = c * kChunkRows; r < std::min(rows, (c + 1) * kChunkRows); ++r)
        for (int64_t g = 0; g < groups; ++g) {
          const float *wg = w + r * cols + g * G;
          const float *hg = hf.data() + g * G;
          uint8_t *codes = m.codes.data() + r * cols + g * G;
          Choice &ch = choice[size_t(r * groups + g)];
          ch = assignGroup(wg, hg, G, bk, ch, o.clips, codes);
          err += ch.err;
          const double s = ch.scale;
          for (int64_t j = 0; j < G; ++j) {
            const int e = ch.book * k + codes[j];
            num[e] += double(hg[j]) * s * wg[j];
            den[e] += double(hg[j]) * s * s;
          }
        }
      chunkErr[size_t(c)] = err;
    });
    double err = 0;
    for (double e : chunkErr)
      err += e;
    return ref > 0 ? err / ref : 0.0;
  };

  double err = assign();
  m.initialError = err;
  for (int it = 0; it < o.iters; ++it) {
    // Weighted k-means update from the sums of the last assignment.
    for (int b = 0; b < 2; ++b) {
      for (int e = 0; e < k; ++e) {
        double num = 0, den = 0;
        for (int64_t c = 0; c < chunks; ++c) {
          num += chunkNum[size_t((c * 2 + b) * k + e)];
          den += chunkDen[size_t((c * 2 + b) * k + e)];
        }
        if (den > 0)
          books[b][size_t(e)] = float(num / den);
      }
      // Renormalise; the previous scales absorb the factor so the previous
      // choices stay candidates of the next assignment.
      const float f = normalise(books[b]);
      for (Choice &ch : choice)
        if (ch.book == b)
          ch.scale *= f;
    }
    const double next = assign();
    m.iters = it + 1;
    const bool stalled = err - next <= 1e-5 * err;
    err = next;
    if (stalled)
      break;
  }
  m.finalError = err;
  m.book[0] = books[0];
  m.book[1] = books[1];

  int64_t onB = 0;
  std::vector<char> used(size_t(2 * k), 0);
  for (int64_t i = 0; i < rows * groups; ++i) {
    const Choice &ch = choice[size_t(i)];
    onB += ch.book;
    m.scales[size_t(i)] = ch.book ? -ch.scale : ch.scale;
    const uint8_t *codes = m.codes.data() + i * G;
    for (int64_t j = 0; j < G; ++j)
      used[size_t(ch.book * k + codes[j])] = 1;
  }
  m.shareB = rows * groups ? double(onB) / double(rows * groups) : 0.0;
  m.entriesUsed = double(std::count(used.begin(), used.end(), 1)) / double(2 * k);
  return m;
}

std::vector<float> AaacMatrix::dequantized() const {
  std::vector<float> out(size_t(rows * cols));
  const int64_t gs = groups();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < gs; ++g) {
      const float s = scales[size_t(r * gs + g)];
      const std::vector<float> &b = book[std::signbit(s) ? 1 : 0];
      const float a = std::fabs(s);
      for (int64_t j = 0; j < group; ++j) {
        const int64_t i = r * cols + g * group + j;
        out[size_t(i)] = a * b[codes[size_t(i)]];
      }
    }
  return out;
}

std::vector<uint8_t> AaacMatrix::pack() const {
  const DType t = dtype();
  const int64_t rb = rowBytes(t, cols);
  std::vector<uint8_t> out(size_t(rows * rb));
  for (int64_t r = 0; r < rows; ++r)
    packAaacRow(t, codes.data() + r * cols, scales.data() + r * groups(), out.data() + r * rb,
                cols);
  return out;
}

std::vector<uint8_t> AaacMatrix::packCodebooks() const {
  std::vector<uint8_t> out(size_t(aaacCodebookBytes(bits)));
  packAaacCodebooks(dtype(), book[0].data(), book[1].data(), out.data());
  return out;
}

double aaacWeightedError(const float *w, const float *q, int64_t rows, int64_t cols,
                         const double *h) {
  double err = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) {
      const double d = double(w[r * cols + j]) - q[r * cols + j];
      err += (h ? h[j] : 1.0) * d * d;
    }
  return err;
}

} // namespace llmc::quant
