//===- dot_int8_avx2.cpp - AVX2 int8-activation dots and quantizer ---------===//
// Per 32-weight block: the weights become 32 bytes in a register (nibbles
// split, 5th bits merged; signed formats keep their sign, formats with a
// minimum stay unsigned), VPMADDUBSW multiplies them by the activation bytes
// into 16 int16 pair sums (unsigned x signed: signed weights pass |w| and
// the activations take w's sign), VPMADDWD adds pairs to 8 int32, and one
// convert + FMA applies dw * dx. Values stay far from int16 saturation:
// |w| <= 128 (Q8_0) or 31, |q| <= 127, so a pair sum is at most 32512.
//
// Compiled to nothing unless the compiler targets AVX2 + FMA + F16C.
//===----------------------------------------------------------------------===//
#include "dot_int8.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include "avx2_util.h"
#include "llmc/format/q4_0.h"
#include "llmc/format/q4_1.h"
#include "llmc/format/q5_0.h"
#include "llmc/format/q5_1.h"
#include "llmc/format/q8_0.h"

#include <cstddef>

namespace llmc::kernels {

namespace {
using namespace avx2;

// load(block, w, dm): w the 32 weight integers as bytes (signed when
// kSigned, else unsigned), dm {scale, minimum or 0, ...}.

struct I8Q8_0 {
  static constexpr int64_t kBytes = sizeof(BlockQ8_0);
  static constexpr bool kSigned = true, kMin = false;
  static LLMC_INLINE void load(const uint8_t *p, __m256i &w, __m128 &dm) {
    dm = halfPair(p + offsetof(BlockQ8_0, d), false);
    w = loadBytes32(p + offsetof(BlockQ8_0, qs));
  }
};

struct I8Q4_0 {
  static constexpr int64_t kBytes = sizeof(BlockQ4_0);
  static constexpr bool kSigned = true, kMin = false;
  static LLMC_INLINE void load(const uint8_t *p, __m256i &w, __m128 &dm) {
    dm = halfPair(p + offsetof(BlockQ4_0, d), false);
    w = _mm256_sub_epi8(nibbles32(p + offsetof(BlockQ4_0, qs)), _mm256_set1_epi8(8));
  }
};

struct I8Q4_1 {
  static constexpr int64_t kBytes = sizeof(BlockQ4_1);
  static constexpr bool kSigned = false, kMin = true;
  static LLMC_INLINE void load(const uint8_t *p, __m256i &w, __m128 &dm) {
    static_assert(offsetof(BlockQ4_1, m) == offsetof(BlockQ4_1, d) + 2, "d, m adjacent");
    dm = halfPair(p + offsetof(BlockQ4_1, d), true);
    w = nibbles32(p + offsetof(BlockQ4_1, qs));
  }
};

struct I8Q5_0 {
  static constexpr int64_t kBytes = sizeof(BlockQ5_0);
  static constexpr bool kSigned = true, kMin = false;
  static LLMC_INLINE void load(const uint8_t *p, __m256i &w, __m128 &dm) {
    dm = halfPair(p + offsetof(BlockQ5_0, d), false);
    w = _mm256_sub_epi8(_mm256_or_si256(nibbles32(p + offsetof(BlockQ5_0, qs)),
                                        fifthBits32(u32At(p + offsetof(BlockQ5_0, qh)))),
                        _mm256_set1_epi8(16));
  }
};

struct I8Q5_1 {
  static constexpr int64_t kBytes = sizeof(BlockQ5_1);
  static constexpr bool kSigned = false, kMin = true;
  static LLMC_INLINE void load(const uint8_t *p, __m256i &w, __m128 &dm) {
    static_assert(offsetof(BlockQ5_1, m) == offsetof(BlockQ5_1, d) + 2, "d, m adjacent");
    dm = halfPair(p + offsetof(BlockQ5_1, d), true);
    w = _mm256_or_si256(nibbles32(p + offsetof(BlockQ5_1, qs)),
                        fifthBits32(u32At(p + offsetof(BlockQ5_1, qh))));
  }
};

/// Two accumulator sets (even and odd blocks) keep two FMA chains in flight.
template <class F, int NX>
void dotInt8(const uint8_t *row, int64_t n, const int8_t *xq, const float *xd, const float *xs,
             int64_t ldq, int64_t ldd, float *out, int64_t ldo) {
  __m256 accA[NX], accB[NX];
  float minA[NX] = {}, minB[NX] = {};
  for (int j = 0; j < NX; ++j)
    accA[j] = accB[j] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  auto one = [&](int64_t b, __m256 *acc, float *mins) LLMC_FORCE {
    __m256i w;
    __m128 dm;
    F::load(row + b * F::kBytes, w, dm);
    const __m256 dw = _mm256_broadcastss_ps(dm);
    const __m256i uw = F::kSigned ? _mm256_abs_epi8(w) : w;
    for (int j = 0; j < NX; ++j) {
      __m256i x = loadBytes32(reinterpret_cast<const uint8_t *>(xq + j * ldq + b * 32));
      if constexpr (F::kSigned)
        x = _mm256_sign_epi8(x, w);
      const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(uw, x), ones);
      const __m256 scale = _mm256_mul_ps(dw, _mm256_broadcast_ss(xd + j * ldd + b));
      acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), scale, acc[j]);
      if constexpr (F::kMin)
        mins[j] += _mm_cvtss_f32(_mm_movehdup_ps(dm)) * xs[j * ldd + b];
    }
  };
  const int64_t nb = n / 32;
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    prefetchAhead(row + b * F::kBytes, 2 * F::kBytes);
    one(b, accA, minA);
    one(b + 1, accB, minB);
  }
  if (b < nb)
    one(b, accA, minA);
  for (int j = 0; j < NX; ++j)
    out[j * ldo] = hsum(_mm256_add_ps(accA[j], accB[j])) + (minA[j] + minB[j]);
}

template <class F> Int8DotFn byRows(int nx) {
  switch (nx) {
  case 1:
    return dotInt8<F, 1>;
  case 2:
    return dotInt8<F, 2>;
  case 3:
    return dotInt8<F, 3>;
  case 4:
    return dotInt8<F, 4>;
  }
  return nullptr;
}

LLMC_INLINE float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

} // namespace

namespace detail {

Int8DotFn avx2Int8DotKernel(DType t, int nx) {
  switch (t) {
  case DType::Q8_0:
    return byRows<I8Q8_0>(nx);
  case DType::Q4_0:
    return byRows<I8Q4_0>(nx);
  case DType::Q4_1:
    return byRows<I8Q4_1>(nx);
  case DType::Q5_0:
    return byRows<I8Q5_0>(nx);
  case DType::Q5_1:
    return byRows<I8Q5_1>(nx);
  default:
    return nullptr;
  }
}

bool avx2QuantizeRowInt8(const float *x, int64_t n, int8_t *q, float *d, float *s) {
  const __m256 absMask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t b = 0; b < n / kInt8Block; ++b) {
    const float *xb = x + b * kInt8Block;
    __m256 v[4];
    __m256 amaxv = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(xb + 8 * i);
      amaxv = _mm256_max_ps(amaxv, _mm256_and_ps(v[i], absMask));
    }
    const float amax = hmax(amaxv);
    const float db = amax / 127.0f;
    const __m256 id = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    __m256i iv[4];
    __m256i sum = _mm256_setzero_si256();
    for (int i = 0; i < 4; ++i) {
      iv[i] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[i], id),
                                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      sum = _mm256_add_epi32(sum, iv[i]);
    }
    // int32 -> int16 -> int8 packs work per 128-bit lane; the permute puts
    // the 32 bytes back in element order.
    const __m256i p16a = _mm256_packs_epi32(iv[0], iv[1]), p16b = _mm256_packs_epi32(iv[2], iv[3]);
    const __m256i p8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p16a, p16b), order);
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(q + b * kInt8Block), p8);
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
    d[b] = db;
    s[b] = db * float(_mm_cvtsi128_si32(s4));
  }
  return true;
}

} // namespace detail
} // namespace llmc::kernels

#else // no AVX2: the portable kernels in dot_int8.cpp are used

namespace llmc::kernels::detail {
Int8DotFn avx2Int8DotKernel(DType, int) { return nullptr; }
bool avx2QuantizeRowInt8(const float *, int64_t, int8_t *, float *, float *) { return false; }
} // namespace llmc::kernels::detail

#endif
