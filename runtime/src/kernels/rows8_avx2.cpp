//===- rows8_avx2.cpp - AVX2 kernels of the eight-row layout ----------------===//
// Per 32-weight column block and activation row: VPMADDUBSW of each 4-step
// weight register (8 rows x 4 weights) with the 4 activation bytes of that
// step broadcast, summed in int16, then VPMADDWD into 8 int32 row sums.
// 4-bit weights are unsigned (0..15): 8 steps of pair sums stay below
// 8 * 2 * 15 * 127 = 30480, so the int16 sum cannot overflow, and Q4_0's
// -8 offset is applied in float from the activation sums (-8 d s). Q8_0
// weights are signed: |w| times the activations with w's sign, each step
// widened to int32 at once (a pair reaches 2 * 128 * 127).
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

/// Q4_0 (kMin false) and Q4_1 (kMin true).
template <bool kMin, int NX>
void rows8Q4(const uint8_t *group, int64_t cols, const int8_t *xq, const float *xd,
             const float *xs, int64_t ldq, int64_t ldd, float *out, int64_t ldo) {
  constexpr int64_t kQuantAt = kMin ? 32 : 16, kBlock = kQuantAt + 128;
  __m256 acc[NX], side[NX];
  for (int j = 0; j < NX; ++j)
    acc[j] = side[j] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  const int64_t nb = cols / 32;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t *p = group + b * kBlock;
    _mm_prefetch(reinterpret_cast<const char *>(p + 1024), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char *>(p + 1024 + 64), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char *>(p + 1024 + 128), _MM_HINT_T0);
    const __m256 d = halves8(p);
    __m256i lo[4], hi[4];
    for (int s = 0; s < 4; ++s) {
      const __m256i v = loadBytes32(p + kQuantAt + 32 * s);
      lo[s] = _mm256_and_si256(v, m4);
      hi[s] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    }
    const __m256 sideScale = kMin ? halves8(p + 16) : d;
    for (int j = 0; j < NX; ++j) {
      const int8_t *x = xq + j * ldq + b * 32;
      __m256i s16 = _mm256_maddubs_epi16(lo[0], bcast4(x));
      s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(hi[0], bcast4(x + 16)));
      for (int s = 1; s < 4; ++s) {
        s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(lo[s], bcast4(x + 4 * s)));
        s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(hi[s], bcast4(x + 16 + 4 * s)));
      }
      const __m256 isum = _mm256_cvtepi32_ps(_mm256_madd_epi16(s16, ones));
      acc[j] = _mm256_fmadd_ps(isum, _mm256_mul_ps(d, _mm256_set1_ps(xd[j * ldd + b])), acc[j]);
      side[j] = _mm256_fmadd_ps(sideScale, _mm256_set1_ps(xs[j * ldd + b]), side[j]);
    }
  }
  for (int j = 0; j < NX; ++j) {
    const __m256 r = kMin ? _mm256_add_ps(acc[j], side[j])
                          : _mm256_fmadd_ps(_mm256_set1_ps(-8.0f), side[j], acc[j]);
    _mm256_storeu_ps(out + j * ldo, r);
  }
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
template <int NX> struct KQ4_0 { static constexpr Rows8DotFn fn = rows8Q4<false, NX>; };
template <int NX> struct KQ4_1 { static constexpr Rows8DotFn fn = rows8Q4<true, NX>; };
template <int NX> struct KQ8_0 { static constexpr Rows8DotFn fn = rows8Q8<NX>; };

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
