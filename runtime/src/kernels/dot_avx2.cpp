//===- dot_avx2.cpp - AVX2/FMA fused dots and fast dequantization ----------===//
// Each block format is expanded 32 weights at a time: the packed integers
// become 32 bytes in a register (nibbles split, 5th/6th bits merged, offset
// removed), then four vectors of 8 integer-valued floats. The fused dot
// multiplies those by the f32 activations and applies the block scale once
// per group (acc += d * sum(q * x)); formats with a minimum add
// min * sum(x) from precomputed per-group activation sums. dequantRowFast
// reuses the expansion and applies scale and minimum in the reference order,
// so its floats equal llmc::dequantizeRow's bit for bit (q * d is exact in
// float for every format except Q6_K, where both round the same product).
//
// Compiled to nothing unless the compiler targets AVX2 + FMA + F16C.
//===----------------------------------------------------------------------===//
#include "dot_quant.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include "llmc/format/k_scales.h"
#include "llmc/format/q4_0.h"
#include "llmc/format/q4_1.h"
#include "llmc/format/q4_k.h"
#include "llmc/format/q5_0.h"
#include "llmc/format/q5_1.h"
#include "llmc/format/q5_k.h"
#include "llmc/format/q6_k.h"
#include "llmc/format/q8_0.h"

#include "avx2_util.h"

#include <cstddef>
#include <cstring>
#include <type_traits>

namespace llmc::kernels {

namespace {
using namespace avx2;

//===- Block formats: 32-weight expansion ---------------------------------===//
// expand(block, q, dm) fills q with the integer values as floats and dm
// with {scale, minimum, 0, 0} (minimum 0 for formats without one).

struct FmtQ8_0 {
  static constexpr int64_t kBytes = sizeof(BlockQ8_0);
  static constexpr float kOffset = 0.0f;
  static constexpr bool kMin = false;
  static LLMC_INLINE void expand(const uint8_t *p, __m256 q[4], __m128 &dm) {
    dm = halfPair(p + offsetof(BlockQ8_0, d), false);
    const uint8_t *qs = p + offsetof(BlockQ8_0, qs);
    for (int i = 0; i < 4; ++i)
      q[i] = _mm256_cvtepi32_ps(
          _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(qs + 8 * i))));
  }
};

/// 16 packed bytes -> 32 nibbles as 4 x 8 floats in element order (low
/// nibbles are elements 0..15, high nibbles 16..31). Widening 8 bytes to 8
/// dwords straight from memory needs no cross-lane shuffles.
LLMC_INLINE void nibbleFloats(const uint8_t *qs, __m256 q[4]) {
  const __m256i a = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(qs)));
  const __m256i b =
      _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(qs + 8)));
  const __m256i m = _mm256_set1_epi32(0x0F);
  q[0] = _mm256_cvtepi32_ps(_mm256_and_si256(a, m));
  q[1] = _mm256_cvtepi32_ps(_mm256_and_si256(b, m));
  q[2] = _mm256_cvtepi32_ps(_mm256_srli_epi32(a, 4));
  q[3] = _mm256_cvtepi32_ps(_mm256_srli_epi32(b, 4));
}

/// Q4_0 is expanded as unsigned nibbles with a minimum: (q - 8) d = q d + (-8 d).
/// dequant32 applies the offset to q instead (kOffset), so zeros keep the
/// reference's sign.
struct FmtQ4_0 {
  static constexpr int64_t kBytes = sizeof(BlockQ4_0);
  static constexpr bool kMin = true;
  static constexpr float kOffset = 8.0f;
  static LLMC_INLINE void expand(const uint8_t *p, __m256 q[4], __m128 &dm) {
    dm = _mm_mul_ps(_mm_moveldup_ps(halfPair(p + offsetof(BlockQ4_0, d), false)),
                    _mm_setr_ps(1.0f, -8.0f, 0, 0));
    nibbleFloats(p + offsetof(BlockQ4_0, qs), q);
  }
};

struct FmtQ4_1 {
  static constexpr int64_t kBytes = sizeof(BlockQ4_1);
  static constexpr float kOffset = 0.0f;
  static constexpr bool kMin = true;
  static LLMC_INLINE void expand(const uint8_t *p, __m256 q[4], __m128 &dm) {
    static_assert(offsetof(BlockQ4_1, m) == offsetof(BlockQ4_1, d) + 2, "d, m adjacent");
    dm = halfPair(p + offsetof(BlockQ4_1, d), true);
    nibbleFloats(p + offsetof(BlockQ4_1, qs), q);
  }
};

struct FmtQ5_0 {
  static constexpr int64_t kBytes = sizeof(BlockQ5_0);
  static constexpr float kOffset = 0.0f;
  static constexpr bool kMin = false;
  static LLMC_INLINE void expand(const uint8_t *p, __m256 q[4], __m128 &dm) {
    dm = halfPair(p + offsetof(BlockQ5_0, d), false);
    __m256i b = _mm256_or_si256(nibbles32(p + offsetof(BlockQ5_0, qs)),
                                fifthBits32(u32At(p + offsetof(BlockQ5_0, qh))));
    toFloats(_mm256_sub_epi8(b, _mm256_set1_epi8(16)), q);
  }
};

struct FmtQ5_1 {
  static constexpr int64_t kBytes = sizeof(BlockQ5_1);
  static constexpr float kOffset = 0.0f;
  static constexpr bool kMin = true;
  static LLMC_INLINE void expand(const uint8_t *p, __m256 q[4], __m128 &dm) {
    static_assert(offsetof(BlockQ5_1, m) == offsetof(BlockQ5_1, d) + 2, "d, m adjacent");
    dm = halfPair(p + offsetof(BlockQ5_1, d), true);
    toFloats(_mm256_or_si256(nibbles32(p + offsetof(BlockQ5_1, qs)),
                             fifthBits32(u32At(p + offsetof(BlockQ5_1, qh)))),
             q);
  }
};

/// acc += scale * sum_k q[k] * x[k] over 32 elements, for NX activation rows.
template <int NX>
LLMC_INLINE void fmaGroup(const __m256 q[4], const float *x, int64_t ldx, __m256 scale,
                          __m256 *acc) {
  for (int j = 0; j < NX; ++j) {
    const float *xj = x + j * ldx;
    // Two short chains instead of one long one: shorter latency per block.
    __m256 p0 = _mm256_mul_ps(q[0], _mm256_loadu_ps(xj));
    __m256 p1 = _mm256_mul_ps(q[2], _mm256_loadu_ps(xj + 16));
    p0 = _mm256_fmadd_ps(q[1], _mm256_loadu_ps(xj + 8), p0);
    p1 = _mm256_fmadd_ps(q[3], _mm256_loadu_ps(xj + 24), p1);
    acc[j] = _mm256_fmadd_ps(_mm256_add_ps(p0, p1), scale, acc[j]);
  }
}

template <int NX>
LLMC_INLINE void storeSums(const __m256 *a, const __m256 *b, const float *ma, const float *mb,
                           float *out, int64_t ldo) {
  for (int j = 0; j < NX; ++j)
    out[j * ldo] = hsum(_mm256_add_ps(a[j], b[j])) + (ma[j] + mb[j]);
}

/// Fused dot for the 32-weight block formats. Two accumulator sets (even and
/// odd blocks) keep two FMA chains in flight.
template <class F, int NX>
void dot32(const uint8_t *row, int64_t n, const float *x, int64_t ldx, const float *sums,
           int64_t lds, float *out, int64_t ldo) {
  __m256 accA[NX], accB[NX];
  __m128 minA[NX], minB[NX];
  for (int j = 0; j < NX; ++j) {
    accA[j] = accB[j] = _mm256_setzero_ps();
    minA[j] = minB[j] = _mm_setzero_ps();
  }
  const int64_t nb = n / 32;
  auto one = [&](int64_t b, __m256 *acc, __m128 *mins) LLMC_FORCE {
    __m256 q[4];
    __m128 dm;
    F::expand(row + b * F::kBytes, q, dm);
    fmaGroup<NX>(q, x + b * 32, ldx, _mm256_broadcastss_ps(dm), acc);
    if constexpr (F::kMin) // lane 1 collects min * sum(x); lane 0 is unused
      for (int j = 0; j < NX; ++j)
        mins[j] = _mm_fmadd_ps(dm, _mm_broadcast_ss(sums + j * lds + b), mins[j]);
  };
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    prefetchAhead(row + b * F::kBytes, 2 * F::kBytes);
    one(b, accA, minA);
    one(b + 1, accB, minB);
  }
  if (b < nb)
    one(b, accA, minA);
  float ma[NX], mb[NX];
  for (int j = 0; j < NX; ++j) {
    ma[j] = _mm_cvtss_f32(_mm_movehdup_ps(minA[j]));
    mb[j] = _mm_cvtss_f32(_mm_movehdup_ps(minB[j]));
  }
  storeSums<NX>(accA, accB, ma, mb, out, ldo);
}

//===- K-quants: 256-weight super-blocks ----------------------------------===//

/// Q4_K / Q5_K: 8 groups of 32, each with a 6-bit scale and minimum.
template <bool kFive, int NX>
void dotQ45K(const uint8_t *row, int64_t n, const float *x, int64_t ldx, const float *sums,
             int64_t lds, float *out, int64_t ldo) {
  using Block = std::conditional_t<kFive, BlockQ5_K, BlockQ4_K>;
  __m256 accA[NX], accB[NX];
  float minA[NX] = {}, minB[NX] = {};
  for (int j = 0; j < NX; ++j)
    accA[j] = accB[j] = _mm256_setzero_ps();
  const __m256i low4 = _mm256_set1_epi8(0x0F), bit4 = _mm256_set1_epi8(0x10);
  const int64_t nb = n / kQK_K;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t *p = row + b * int64_t(sizeof(Block));
    prefetchAhead(p, sizeof(Block));
    const float d = halfAt(p + offsetof(Block, d));
    const float dmin = halfAt(p + offsetof(Block, dmin));
    const uint8_t *scales = p + offsetof(Block, scales);
    const uint8_t *qs = p + offsetof(Block, qs);
    __m256i qh = _mm256_setzero_si256();
    if constexpr (kFive)
      qh = loadBytes32(p + offsetof(BlockQ5_K, qh));
    for (int gp = 0; gp < 4; ++gp) {
      __m256 qlo[4], qhi[4];
      if constexpr (kFive) {
        const __m256i v = loadBytes32(qs + 32 * gp);
        __m256i lo = _mm256_and_si256(v, low4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
        // bits 2gp and 2gp+1 of qh are the 5th bits
        lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(qh, 4), bit4));
        hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(qh, 3), bit4));
        qh = _mm256_srli_epi16(qh, 2);
        toFloats(lo, qlo);
        toFloats(hi, qhi);
      } else { // widen 8 bytes at a time straight from memory
        const __m256i m4 = _mm256_set1_epi32(0x0F);
        for (int i = 0; i < 4; ++i) {
          const __m256i a = _mm256_cvtepu8_epi32(
              _mm_loadl_epi64(reinterpret_cast<const __m128i *>(qs + 32 * gp + 8 * i)));
          qlo[i] = _mm256_cvtepi32_ps(_mm256_and_si256(a, m4));
          qhi[i] = _mm256_cvtepi32_ps(_mm256_srli_epi32(a, 4));
        }
      }
      uint8_t sc0, m0, sc1, m1;
      unpackKScaleMin(scales, 2 * gp, sc0, m0);
      unpackKScaleMin(scales, 2 * gp + 1, sc1, m1);
      const int64_t g = b * 8 + 2 * gp; // group index in the row
      fmaGroup<NX>(qlo, x + g * 32, ldx, _mm256_set1_ps(d * float(sc0)), accA);
      fmaGroup<NX>(qhi, x + (g + 1) * 32, ldx, _mm256_set1_ps(d * float(sc1)), accB);
      const float mn0 = dmin * float(m0), mn1 = dmin * float(m1);
      for (int j = 0; j < NX; ++j) {
        minA[j] -= mn0 * sums[j * lds + g];
        minB[j] -= mn1 * sums[j * lds + g + 1];
      }
    }
  }
  storeSums<NX>(accA, accB, minA, minB, out, ldo);
}

/// Q6_K: the four 32-byte groups of one 128-weight half, offset removed.
LLMC_INLINE void q6Groups(const uint8_t *ql, const uint8_t *qhp, __m256i g[4]) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), hi2 = _mm256_set1_epi8(0x30);
  const __m256i a = loadBytes32(ql), b = loadBytes32(ql + 32), h = loadBytes32(qhp);
  const __m256i off = _mm256_set1_epi8(32);
  g[0] = _mm256_or_si256(_mm256_and_si256(a, low4), _mm256_and_si256(_mm256_slli_epi16(h, 4), hi2));
  g[1] = _mm256_or_si256(_mm256_and_si256(b, low4), _mm256_and_si256(_mm256_slli_epi16(h, 2), hi2));
  g[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), low4), _mm256_and_si256(h, hi2));
  g[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b, 4), low4),
                         _mm256_and_si256(_mm256_srli_epi16(h, 2), hi2));
  for (int i = 0; i < 4; ++i)
    g[i] = _mm256_sub_epi8(g[i], off);
}

/// Q6_K: 16 sub-blocks of 16 weights, each with a signed 8-bit scale.
template <int NX>
void dotQ6K(const uint8_t *row, int64_t n, const float *x, int64_t ldx, const float *, int64_t,
            float *out, int64_t ldo) {
  __m256 accA[NX], accB[NX];
  for (int j = 0; j < NX; ++j)
    accA[j] = accB[j] = _mm256_setzero_ps();
  const int64_t nb = n / kQK_K;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t *p = row + b * int64_t(sizeof(BlockQ6_K));
    prefetchAhead(p, sizeof(BlockQ6_K));
    const float d = halfAt(p + offsetof(BlockQ6_K, d));
    const auto *sc = reinterpret_cast<const int8_t *>(p + offsetof(BlockQ6_K, scales));
    for (int h = 0; h < 2; ++h) {
      __m256i g[4];
      q6Groups(p + offsetof(BlockQ6_K, ql) + 64 * h, p + offsetof(BlockQ6_K, qh) + 32 * h, g);
      for (int gi = 0; gi < 4; ++gi) {
        __m256 q[4];
        toFloats(g[gi], q);
        const float *xg = x + b * kQK_K + h * 128 + gi * 32;
        const __m256 s0 = _mm256_set1_ps(d * float(sc[8 * h + 2 * gi]));
        const __m256 s1 = _mm256_set1_ps(d * float(sc[8 * h + 2 * gi + 1]));
        for (int j = 0; j < NX; ++j) {
          const float *xj = xg + j * ldx;
          __m256 p0 = _mm256_mul_ps(q[0], _mm256_loadu_ps(xj));
          p0 = _mm256_fmadd_ps(q[1], _mm256_loadu_ps(xj + 8), p0);
          __m256 p1 = _mm256_mul_ps(q[2], _mm256_loadu_ps(xj + 16));
          p1 = _mm256_fmadd_ps(q[3], _mm256_loadu_ps(xj + 24), p1);
          accA[j] = _mm256_fmadd_ps(p0, s0, accA[j]);
          accB[j] = _mm256_fmadd_ps(p1, s1, accB[j]);
        }
      }
    }
  }
  const float zero[NX] = {};
  storeSums<NX>(accA, accB, zero, zero, out, ldo);
}

//===- Float types --------------------------------------------------------===//

struct LoadF32 {
  static LLMC_INLINE __m256 vec(const uint8_t *p, int64_t k) {
    return _mm256_loadu_ps(reinterpret_cast<const float *>(p) + k);
  }
  static LLMC_INLINE float one(const uint8_t *p, int64_t k) {
    float f;
    std::memcpy(&f, p + 4 * k, 4);
    return f;
  }
};
struct LoadF16 {
  static LLMC_INLINE __m256 vec(const uint8_t *p, int64_t k) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p + 2 * k)));
  }
  static LLMC_INLINE float one(const uint8_t *p, int64_t k) { return halfAt(p + 2 * k); }
};
struct LoadBF16 {
  static LLMC_INLINE __m256 vec(const uint8_t *p, int64_t k) {
    __m256i w =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p + 2 * k)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  static LLMC_INLINE float one(const uint8_t *p, int64_t k) {
    uint16_t v;
    std::memcpy(&v, p + 2 * k, 2);
    return bf16ToFloat(v);
  }
};

template <class L, int NX>
void dotFloat(const uint8_t *row, int64_t n, const float *x, int64_t ldx, const float *, int64_t,
              float *out, int64_t ldo) {
  __m256 accA[NX], accB[NX];
  for (int j = 0; j < NX; ++j)
    accA[j] = accB[j] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    const __m256 w0 = L::vec(row, k), w1 = L::vec(row, k + 8);
    for (int j = 0; j < NX; ++j) {
      accA[j] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + j * ldx + k), accA[j]);
      accB[j] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + j * ldx + k + 8), accB[j]);
    }
  }
  for (; k + 8 <= n; k += 8) {
    const __m256 w0 = L::vec(row, k);
    for (int j = 0; j < NX; ++j)
      accA[j] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + j * ldx + k), accA[j]);
  }
  float tail[NX] = {}, zero[NX] = {};
  for (; k < n; ++k) {
    const float w = L::one(row, k);
    for (int j = 0; j < NX; ++j)
      tail[j] += w * x[j * ldx + k];
  }
  storeSums<NX>(accA, accB, tail, zero, out, ldo);
}

template <template <int> class K> struct ByRows {
  static DotFn get(int nx) {
    switch (nx) {
    case 1:
      return K<1>::fn;
    case 2:
      return K<2>::fn;
    case 3:
      return K<3>::fn;
    case 4:
      return K<4>::fn;
    }
    return nullptr;
  }
};

#define LLMC_DOT_KERNEL(Name, Expr)                                                                \
  template <int NX> struct Name { static constexpr DotFn fn = Expr; };
LLMC_DOT_KERNEL(KF32, (dotFloat<LoadF32, NX>))
LLMC_DOT_KERNEL(KF16, (dotFloat<LoadF16, NX>))
LLMC_DOT_KERNEL(KBF16, (dotFloat<LoadBF16, NX>))
LLMC_DOT_KERNEL(KQ8_0, (dot32<FmtQ8_0, NX>))
LLMC_DOT_KERNEL(KQ4_0, (dot32<FmtQ4_0, NX>))
LLMC_DOT_KERNEL(KQ4_1, (dot32<FmtQ4_1, NX>))
LLMC_DOT_KERNEL(KQ5_0, (dot32<FmtQ5_0, NX>))
LLMC_DOT_KERNEL(KQ5_1, (dot32<FmtQ5_1, NX>))
LLMC_DOT_KERNEL(KQ4_K, (dotQ45K<false, NX>))
LLMC_DOT_KERNEL(KQ5_K, (dotQ45K<true, NX>))
LLMC_DOT_KERNEL(KQ6_K, (dotQ6K<NX>))
#undef LLMC_DOT_KERNEL

//===- Bit-exact dequantization -------------------------------------------===//

template <class F> void dequant32(const uint8_t *src, float *dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, src += F::kBytes, dst += 32) {
    __m256 q[4];
    __m128 dm;
    F::expand(src, q, dm);
    const __m256 dv = _mm256_broadcastss_ps(dm);
    const __m256 mv = _mm256_broadcastss_ps(_mm_movehdup_ps(dm));
    for (int i = 0; i < 4; ++i) {
      __m256 w;
      if constexpr (F::kOffset != 0.0f) // (q - offset) * d, as the reference
        w = _mm256_mul_ps(_mm256_sub_ps(q[i], _mm256_set1_ps(F::kOffset)), dv);
      else if constexpr (F::kMin) // q * d is exact: at most 16 significant bits
        w = _mm256_add_ps(_mm256_mul_ps(q[i], dv), mv);
      else
        w = _mm256_mul_ps(q[i], dv);
      _mm256_storeu_ps(dst + 8 * i, w);
    }
  }
}

template <bool kFive> void dequantQ45K(const uint8_t *src, float *dst, int64_t nb) {
  using Block = std::conditional_t<kFive, BlockQ5_K, BlockQ4_K>;
  const __m256i low4 = _mm256_set1_epi8(0x0F), bit4 = _mm256_set1_epi8(0x10);
  for (int64_t b = 0; b < nb; ++b, src += sizeof(Block)) {
    const float d = halfAt(src + offsetof(Block, d));
    const float dmin = halfAt(src + offsetof(Block, dmin));
    const uint8_t *scales = src + offsetof(Block, scales);
    const uint8_t *qs = src + offsetof(Block, qs);
    __m256i qh = _mm256_setzero_si256();
    if constexpr (kFive)
      qh = loadBytes32(src + offsetof(BlockQ5_K, qh));
    for (int gp = 0; gp < 4; ++gp, dst += 64) {
      const __m256i v = loadBytes32(qs + 32 * gp);
      __m256i half[2] = {_mm256_and_si256(v, low4),
                         _mm256_and_si256(_mm256_srli_epi16(v, 4), low4)};
      if constexpr (kFive) {
        half[0] = _mm256_or_si256(half[0], _mm256_and_si256(_mm256_slli_epi16(qh, 4), bit4));
        half[1] = _mm256_or_si256(half[1], _mm256_and_si256(_mm256_slli_epi16(qh, 3), bit4));
        qh = _mm256_srli_epi16(qh, 2);
      }
      for (int s = 0; s < 2; ++s) {
        uint8_t sc, mn;
        unpackKScaleMin(scales, 2 * gp + s, sc, mn);
        // d * sc and d * sc * q are exact (at most 22 significant bits).
        const __m256 dv = _mm256_set1_ps(d * float(sc)), mv = _mm256_set1_ps(dmin * float(mn));
        __m256 q[4];
        toFloats(half[s], q);
        for (int i = 0; i < 4; ++i)
          _mm256_storeu_ps(dst + 32 * s + 8 * i, _mm256_sub_ps(_mm256_mul_ps(dv, q[i]), mv));
      }
    }
  }
}

void dequantQ6K(const uint8_t *src, float *dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, src += sizeof(BlockQ6_K)) {
    const float d = halfAt(src + offsetof(BlockQ6_K, d));
    const auto *sc = reinterpret_cast<const int8_t *>(src + offsetof(BlockQ6_K, scales));
    for (int h = 0; h < 2; ++h, dst += 128) {
      __m256i g[4];
      q6Groups(src + offsetof(BlockQ6_K, ql) + 64 * h, src + offsetof(BlockQ6_K, qh) + 32 * h, g);
      for (int gi = 0; gi < 4; ++gi) {
        __m256 q[4];
        toFloats(g[gi], q);
        // (d * sc) * q, rounded once, as the reference does.
        const __m256 s0 = _mm256_set1_ps(d * float(sc[8 * h + 2 * gi]));
        const __m256 s1 = _mm256_set1_ps(d * float(sc[8 * h + 2 * gi + 1]));
        float *o = dst + 32 * gi;
        _mm256_storeu_ps(o, _mm256_mul_ps(s0, q[0]));
        _mm256_storeu_ps(o + 8, _mm256_mul_ps(s0, q[1]));
        _mm256_storeu_ps(o + 16, _mm256_mul_ps(s1, q[2]));
        _mm256_storeu_ps(o + 24, _mm256_mul_ps(s1, q[3]));
      }
    }
  }
}

} // namespace

namespace detail {

DotFn avx2DotKernel(DType t, int nx) {
  switch (t) {
  case DType::F32:
    return ByRows<KF32>::get(nx);
  case DType::F16:
    return ByRows<KF16>::get(nx);
  case DType::BF16:
    return ByRows<KBF16>::get(nx);
  case DType::Q8_0:
    return ByRows<KQ8_0>::get(nx);
  case DType::Q4_0:
    return ByRows<KQ4_0>::get(nx);
  case DType::Q4_1:
    return ByRows<KQ4_1>::get(nx);
  case DType::Q5_0:
    return ByRows<KQ5_0>::get(nx);
  case DType::Q5_1:
    return ByRows<KQ5_1>::get(nx);
  case DType::Q4_K:
    return ByRows<KQ4_K>::get(nx);
  case DType::Q5_K:
    return ByRows<KQ5_K>::get(nx);
  case DType::Q6_K:
    return ByRows<KQ6_K>::get(nx);
  default:
    return nullptr;
  }
}

bool avx2DequantRow(DType t, const uint8_t *src, float *dst, int64_t n) {
  const int64_t bs = dtypeInfo(t).block_size;
  if (n % bs != 0)
    return false; // let dequantizeRow report it
  const int64_t nb = n / bs;
  switch (t) {
  case DType::Q8_0:
    dequant32<FmtQ8_0>(src, dst, nb);
    return true;
  case DType::Q4_0:
    dequant32<FmtQ4_0>(src, dst, nb);
    return true;
  case DType::Q4_1:
    dequant32<FmtQ4_1>(src, dst, nb);
    return true;
  case DType::Q5_0:
    dequant32<FmtQ5_0>(src, dst, nb);
    return true;
  case DType::Q5_1:
    dequant32<FmtQ5_1>(src, dst, nb);
    return true;
  case DType::Q4_K:
    dequantQ45K<false>(src, dst, nb);
    return true;
  case DType::Q5_K:
    dequantQ45K<true>(src, dst, nb);
    return true;
  case DType::Q6_K:
    dequantQ6K(src, dst, nb);
    return true;
  default:
    return false; // float types: dequantizeRow is already vectorized or a copy
  }
}

} // namespace detail
} // namespace llmc::kernels

#else // no AVX2: the portable kernels in dot_quant.cpp are used

namespace llmc::kernels::detail {
DotFn avx2DotKernel(DType, int) { return nullptr; }
bool avx2DequantRow(DType, const uint8_t *, float *, int64_t) { return false; }
} // namespace llmc::kernels::detail

#endif
