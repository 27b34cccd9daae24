//===- rows8_avx2.cpp - AVX2 kernels of the eight-row layout ----------------===//
// Per 32-weight column block and activation row: VPMADDUBSW of each 4-step
// weight register (8 rows x 4 weights) with the 4 activation bytes of that
// step broadcast, summed in int16, then VPMADDWD into 8 int32 row sums.
// 4-bit weights are unsigned (0..15): 8 steps of pair sums stay below
// 8 * 2 * 15 * 127 = 30480, so the int16 sum cannot overflow, and Q4_0's
// -8 offset is applied in float from the activation sums (-8 d s). Q8_0
// weights are signed: |w| times the activations with w's sign, each step
// widened to int32 at once (a pair reaches 2 * 128 * 127). Q5_0/Q5_1 are
// Q4_0/Q4_1 with each weight's fifth bit ORed into its nibble as 16 (0..31:
// 4 steps of pair sums reach 4 * 2 * 31 * 128 = 31744, so the int16 sum is
// widened halfway), their -16 offset or minimum applied like Q4's. Q4_K:
// per 32-weight sub-block 8 steps of one nibble half (<= 30720 in int16),
// the int32 sum times the sub-block's 6-bit scale in int32, then the float
// terms in the portable kernel's order (sub-blocks 0..7 of each super-block).
//
// Compiled to nothing unless the compiler targets AVX2 + FMA + F16C.
//===----------------------------------------------------------------------===//
#include "rows8.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include "avx2_util.h"

namespace llmc::kernels {

namespace {
using namespace avx2;

LLMC_INLINE __m256i bcast4(const int8_t *p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

LLMC_INLINE __m256 halves8(const uint8_t *p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
}

template <int NX>
void rows8Q8(const uint8_t *group, int64_t cols, const int8_t *xq, const float *xd, const float *,
             int64_t ldq, int64_t ldd, float *out, int64_t ldo) {
  constexpr int64_t kBlock = 16 + 256;
  __m256 acc[NX];
  for (int j = 0; j < NX; ++j)
    acc[j] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  const int64_t nb = cols / 32;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t *p = group + b * kBlock;
    for (int k = 0; k < 5; ++k)
      _mm_prefetch(reinterpret_cast<const char *>(p + 2048 + 64 * k), _MM_HINT_T0);
    const __m256 d = halves8(p);
    __m256i w[8], aw[8];
    for (int s = 0; s < 8; ++s) {
      w[s] = loadBytes32(p + 16 + 32 * s);
      aw[s] = _mm256_abs_epi8(w[s]);
    }
    for (int j = 0; j < NX; ++j) {
      const int8_t *x = xq + j * ldq + b * 32;
      __m256i s32 = _mm256_setzero_si256();
      for (int s = 0; s < 8; ++s) {
        const __m256i sx = _mm256_sign_epi8(bcast4(x + 4 * s), w[s]);
        s32 = _mm256_add_epi32(s32, _mm256_madd_epi16(_mm256_maddubs_epi16(aw[s], sx), ones));
      }
      acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32),
                               _mm256_mul_ps(d, _mm256_set1_ps(xd[j * ldd + b])), acc[j]);
    }
  }
  for (int j = 0; j < NX; ++j)
    _mm256_storeu_ps(out + j * ldo, acc[j]);
}

/// Q5_0/Q5_1: ORs each weight's fifth bit, as 16, into the nibbles of the 4
/// steps. qh's dword r is row r's 32 bits (bit j: weight j). Step s's low
/// nibbles (weights 4s + k, k the byte in the row's dword) take bit
/// 4 (s & 1) + k of qh byte s / 2, its high nibbles (16 + 4s + k) the same
/// bit of byte 2 + s / 2: one VPSHUFB spreads qh byte t over each row's 4
/// bytes, for steps 2 (t & 1) and 2 (t & 1) + 1 (the low nibbles for t < 2).
LLMC_INLINE void orFifthBits(__m256i qh, __m256i lo[4], __m256i hi[4]) {
  const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12, //
                                          0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12);
  const __m256i even = _mm256_set1_epi32(0x08040201), odd = _mm256_set1_epi32(int(0x80402010u));
  const __m256i sixteen = _mm256_set1_epi8(16);
  for (int t = 0; t < 4; ++t) {
    const __m256i v = _mm256_shuffle_epi8(qh, _mm256_add_epi8(spread, _mm256_set1_epi8(char(t))));
    __m256i *w = t < 2 ? lo : hi;
    const int s = 2 * (t & 1);
    w[s] = _mm256_or_si256(
        w[s], _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, even), even), sixteen));
    w[s + 1] = _mm256_or_si256(
        w[s + 1], _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, odd), odd), sixteen));
  }
}

/// Q4_0/Q4_1 (kFive false) and Q5_0/Q5_1 (kFive true: each weight's fifth
/// bit ORed into its nibble); kMin: the _1 formats (a minimum, not the -8 /
/// -16 offset).
template <bool kMin, bool kFive, int NX>
void rows8Nibbles(const uint8_t *group, int64_t cols, const int8_t *xq, const float *xd,
                  const float *xs, int64_t ldq, int64_t ldd, float *out, int64_t ldo) {
  constexpr int64_t kHighAt = kMin ? 32 : 16, kQuantAt = kHighAt + (kFive ? 32 : 0),
                    kBlock = kQuantAt + 128;
  // Int16 sums: 4-bit weights take all 4 steps (<= 30480), 5-bit ones 2
  // steps at a time (<= 31744) before widening.
  constexpr int kStepsPerWiden = kFive ? 2 : 4;
  constexpr float kOffset = kFive ? -16.0f : -8.0f;
  __m256 acc[NX], side[NX];
  for (int j = 0; j < NX; ++j)
    acc[j] = side[j] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  const int64_t nb = cols / 32;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t *p = group + b * kBlock;
    for (int k = 0; k < 3; ++k)
      _mm_prefetch(reinterpret_cast<const char *>(p + 1024 + 64 * k), _MM_HINT_T0);
    const __m256 d = halves8(p);
    __m256i lo[4], hi[4];
    for (int s = 0; s < 4; ++s) {
      const __m256i v = loadBytes32(p + kQuantAt + 32 * s);
      lo[s] = _mm256_and_si256(v, m4);
      hi[s] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    }
    if constexpr (kFive)
      orFifthBits(loadBytes32(p + kHighAt), lo, hi);
    const __m256 sideScale = kMin ? halves8(p + 16) : d;
    for (int j = 0; j < NX; ++j) {
      const int8_t *x = xq + j * ldq + b * 32;
      __m256i s32 = _mm256_setzero_si256();
      for (int s0 = 0; s0 < 4; s0 += kStepsPerWiden) {
        __m256i s16 = _mm256_setzero_si256();
        for (int s = s0; s < s0 + kStepsPerWiden; ++s) {
          s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(lo[s], bcast4(x + 4 * s)));
          s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(hi[s], bcast4(x + 16 + 4 * s)));
        }
        s32 = _mm256_add_epi32(s32, _mm256_madd_epi16(s16, ones));
      }
      const __m256 isum = _mm256_cvtepi32_ps(s32);
      acc[j] = _mm256_fmadd_ps(isum, _mm256_mul_ps(d, _mm256_set1_ps(xd[j * ldd + b])), acc[j]);
      side[j] = _mm256_fmadd_ps(sideScale, _mm256_set1_ps(xs[j * ldd + b]), side[j]);
    }
  }
  for (int j = 0; j < NX; ++j) {
    const __m256 r = kMin ? _mm256_add_ps(acc[j], side[j])
                          : _mm256_fmadd_ps(_mm256_set1_ps(kOffset), side[j], acc[j]);
    _mm256_storeu_ps(out + j * ldo, r);
  }
}

/// 8 bytes at p -> 8 int32.
LLMC_INLINE __m256i bytes8(const uint8_t *p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(p)));
}

/// Q4_K (rows8.cpp's kQ4KGroupBytes layout): per super-block and chunk c,
/// sub-blocks 2c (low nibbles) and 2c + 1 (high) of all 8 rows at once.
template <int NX>
void rows8Q4K(const uint8_t *group, int64_t cols, const int8_t *xq, const float *xd,
              const float *xs, int64_t ldq, int64_t ldd, float *out, int64_t ldo) {
  constexpr int64_t kGroup = 16 + 16 + 64 + 64 + 1024;
  __m256 acc[NX], side[NX];
  for (int j = 0; j < NX; ++j)
    acc[j] = side[j] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  for (int64_t sb = 0; sb < cols / 256; ++sb) {
    const uint8_t *p = group + sb * kGroup;
    for (int k = 0; k < 3; ++k) // the next super-block's scales, then its chunks below
      _mm_prefetch(reinterpret_cast<const char *>(p + kGroup + 64 * k), _MM_HINT_T0);
    const __m256 d = halves8(p), dmin = halves8(p + 16);
    for (int c = 0; c < 4; ++c) {
      const uint8_t *q = p + 160 + 256 * c;
      for (int k = 0; k < 4; ++k)
        _mm_prefetch(reinterpret_cast<const char *>(q + kGroup + 64 * k), _MM_HINT_T0);
      const int64_t bLo = sb * 8 + 2 * c; // activation block of sub-block 2c
      __m256i lo16[NX], hi16[NX];
      for (int j = 0; j < NX; ++j)
        lo16[j] = hi16[j] = _mm256_setzero_si256();
      for (int s = 0; s < 8; ++s) { // 8 steps of 4-bit products: <= 30720
        const __m256i v = loadBytes32(q + 32 * s);
        const __m256i lo = _mm256_and_si256(v, m4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        for (int j = 0; j < NX; ++j) {
          const int8_t *x = xq + j * ldq + bLo * 32 + 4 * s;
          lo16[j] = _mm256_add_epi16(lo16[j], _mm256_maddubs_epi16(lo, bcast4(x)));
          hi16[j] = _mm256_add_epi16(hi16[j], _mm256_maddubs_epi16(hi, bcast4(x + 32)));
        }
      }
      const __m256i scLo = bytes8(p + 32 + 16 * c), scHi = bytes8(p + 40 + 16 * c);
      const __m256 mLo = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(bytes8(p + 96 + 16 * c)));
      const __m256 mHi = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(bytes8(p + 104 + 16 * c)));
      for (int j = 0; j < NX; ++j) {
        const float *dx = xd + j * ldd + bLo, *sx = xs + j * ldd + bLo;
        const __m256i iLo = _mm256_mullo_epi32(_mm256_madd_epi16(lo16[j], ones), scLo);
        const __m256i iHi = _mm256_mullo_epi32(_mm256_madd_epi16(hi16[j], ones), scHi);
        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iLo), _mm256_mul_ps(d, _mm256_set1_ps(dx[0])),
                                 acc[j]);
        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iHi), _mm256_mul_ps(d, _mm256_set1_ps(dx[1])),
                                 acc[j]);
        side[j] = _mm256_fmadd_ps(mLo, _mm256_set1_ps(sx[0]), side[j]);
        side[j] = _mm256_fmadd_ps(mHi, _mm256_set1_ps(sx[1]), side[j]);
      }
    }
  }
  for (int j = 0; j < NX; ++j)
    _mm256_storeu_ps(out + j * ldo, _mm256_sub_ps(acc[j], side[j]));
}

template <template <int> class K> Rows8DotFn byRows(int nx) {
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
template <int NX> struct KQ4_0 { static constexpr Rows8DotFn fn = rows8Nibbles<false, false, NX>; };
template <int NX> struct KQ4_1 { static constexpr Rows8DotFn fn = rows8Nibbles<true, false, NX>; };
template <int NX> struct KQ8_0 { static constexpr Rows8DotFn fn = rows8Q8<NX>; };
template <int NX> struct KQ5_0 { static constexpr Rows8DotFn fn = rows8Nibbles<false, true, NX>; };
template <int NX> struct KQ5_1 { static constexpr Rows8DotFn fn = rows8Nibbles<true, true, NX>; };
template <int NX> struct KQ4_K { static constexpr Rows8DotFn fn = rows8Q4K<NX>; };

} // namespace

namespace detail {
Rows8DotFn avx2Rows8DotKernel(DType t, int nx) {
  switch (t) {
  case DType::Q4_0:
    return byRows<KQ4_0>(nx);
  case DType::Q4_1:
    return byRows<KQ4_1>(nx);
  case DType::Q8_0:
    return byRows<KQ8_0>(nx);
  case DType::Q5_0:
    return byRows<KQ5_0>(nx);
  case DType::Q5_1:
    return byRows<KQ5_1>(nx);
  case DType::Q4_K:
    return byRows<KQ4_K>(nx);
  default:
    return nullptr;
  }
}
} // namespace detail
} // namespace llmc::kernels

#else

namespace llmc::kernels::detail {
Rows8DotFn avx2Rows8DotKernel(DType, int) { return nullptr; }
} // namespace llmc::kernels::detail

#endif
