//===- attention_f32.cpp - Scores, softmax, value sums, vector exp ---------===//
// exp: x = n ln2 + r with n = round(x / ln2) and |r| <= ln2 / 2 (ln2 split
// in a high part exact in float and a low correction), e^r from its degree-6
// Taylor polynomial in Horner form, 2^n built in the exponent bits. The
// scalar tail uses the same steps, so every element gets the same result
// whatever its position.
//===----------------------------------------------------------------------===//
#include "attention_f32.h"
#include "llmc/dtype.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include "avx2_util.h"
#define LLMC_ATT_AVX2 1
#endif

namespace llmc::kernels {

namespace {

constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
constexpr float kExpMax = 88.7228390f, kExpMin = -87.3365447505531f;
// 1/k! for k = 6 .. 1, then 1.
constexpr float kC6 = 1.0f / 720, kC5 = 1.0f / 120, kC4 = 1.0f / 24, kC3 = 1.0f / 6, kC2 = 0.5f;

float expScalar(float x) {
  if (x > kExpMax)
    return INFINITY;
  x = std::max(x, kExpMin);
  const float n = std::nearbyint(x * kLog2e);
  float r = std::fma(-n, kLn2Hi, x);
  r = std::fma(-n, kLn2Lo, r);
  float p = std::fma(kC6, r, kC5);
  p = std::fma(p, r, kC4);
  p = std::fma(p, r, kC3);
  p = std::fma(p, r, kC2);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  // 2^n as 2^a * 2^b (a = n >> 1): n reaches 128 just below the overflow.
  const int32_t a = int32_t(n) >> 1, b = int32_t(n) - a;
  const int32_t bitsA = (a + 127) << 23, bitsB = (b + 127) << 23;
  float sa, sb;
  std::memcpy(&sa, &bitsA, 4);
  std::memcpy(&sb, &bitsB, 4);
  return p * sa * sb;
}

#ifdef LLMC_ATT_AVX2
inline __m256 expVec(__m256 x) {
  const __m256 over = _mm256_cmp_ps(x, _mm256_set1_ps(kExpMax), _CMP_GT_OQ);
  x = _mm256_max_ps(x, _mm256_set1_ps(kExpMin));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(kC6), r, _mm256_set1_ps(kC5));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i ni = _mm256_cvtps_epi32(n), na = _mm256_srai_epi32(ni, 1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 sa = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(na, bias), 23));
  const __m256 sb = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, na), bias), 23));
  const __m256 e = _mm256_mul_ps(_mm256_mul_ps(p, sa), sb);
  return _mm256_blendv_ps(e, _mm256_set1_ps(INFINITY), over);
}

using avx2::hsum;
#endif

} // namespace

void scoreKeys(const float *q, const float *k, int64_t n, int64_t hd, float scale, float *out) {
  int64_t j = 0;
#ifdef LLMC_ATT_AVX2
  if (hd % 8 == 0) {
    // Four keys per pass share each query load; one horizontal reduction
    // of the four accumulators gives the four scores.
    for (; j + 4 <= n; j += 4) {
      const float *k0 = k + j * hd;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t d = 0; d < hd; d += 8) {
        const __m256 qv = _mm256_loadu_ps(q + d);
        a0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + d), a0);
        a1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + hd + d), a1);
        a2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + 2 * hd + d), a2);
        a3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + 3 * hd + d), a3);
      }
      const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
      const __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
      _mm_storeu_ps(out + j, _mm_mul_ps(s, _mm_set1_ps(scale)));
    }
    for (; j < n; ++j) {
      __m256 a = _mm256_setzero_ps();
      for (int64_t d = 0; d < hd; d += 8)
        a = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(k + j * hd + d), a);
      out[j] = hsum(a) * scale;
    }
    return;
  }
#endif
  for (; j < n; ++j) {
    float s = 0;
    for (int64_t d = 0; d < hd; ++d)
      s += q[d] * k[j * hd + d];
    out[j] = s * scale;
  }
}

void softmaxInPlace(float *w, int64_t n) {
  float mx = w[0];
  for (int64_t j = 1; j < n; ++j)
    mx = std::max(mx, w[j]);
  int64_t j = 0;
  float sum = 0;
#ifdef LLMC_ATT_AVX2
  __m256 sv = _mm256_setzero_ps();
  const __m256 mv = _mm256_set1_ps(mx);
  for (; j + 8 <= n; j += 8) {
    const __m256 e = expVec(_mm256_sub_ps(_mm256_loadu_ps(w + j), mv));
    _mm256_storeu_ps(w + j, e);
    sv = _mm256_add_ps(sv, e);
  }
  sum = hsum(sv);
#endif
  for (; j < n; ++j)
    sum += w[j] = expScalar(w[j] - mx);
  const float inv = 1.0f / sum;
  for (j = 0; j < n; ++j)
    w[j] *= inv;
}

void weightedRows(const float *w, const float *v, int64_t n, int64_t hd, float *o) {
  int64_t d0 = 0;
#ifdef LLMC_ATT_AVX2
  // 32 output columns per pass live in four registers across all n rows.
  for (; d0 + 32 <= hd; d0 += 32) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t j = 0; j < n; ++j) {
      const __m256 wj = _mm256_set1_ps(w[j]);
      const float *vr = v + j * hd + d0;
      a0 = _mm256_fmadd_ps(wj, _mm256_loadu_ps(vr), a0);
      a1 = _mm256_fmadd_ps(wj, _mm256_loadu_ps(vr + 8), a1);
      a2 = _mm256_fmadd_ps(wj, _mm256_loadu_ps(vr + 16), a2);
      a3 = _mm256_fmadd_ps(wj, _mm256_loadu_ps(vr + 24), a3);
    }
    _mm256_storeu_ps(o + d0, a0);
    _mm256_storeu_ps(o + d0 + 8, a1);
    _mm256_storeu_ps(o + d0 + 16, a2);
    _mm256_storeu_ps(o + d0 + 24, a3);
  }
#endif
  for (int64_t d = d0; d < hd; ++d)
    o[d] = 0.0f;
  if (d0 < hd)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t d = d0; d < hd; ++d)
        o[d] += w[j] * v[j * hd + d];
}

void halfRow(const float *src, int64_t n, uint16_t *dst) {
  int64_t i = 0;
#ifdef LLMC_ATT_AVX2
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
  for (; i < n; ++i)
    dst[i] = floatToHalf(src[i]);
}

void floatRow(const uint16_t *src, int64_t n, float *dst) {
  int64_t i = 0;
#ifdef LLMC_ATT_AVX2
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(src + i))));
#endif
  for (; i < n; ++i)
    dst[i] = halfToFloat(src[i]);
}

void expRow(const float *x, float *y, int64_t n) {
  int64_t i = 0;
#ifdef LLMC_ATT_AVX2
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, expVec(_mm256_loadu_ps(x + i)));
#endif
  for (; i < n; ++i)
    y[i] = expScalar(x[i]);
}

void siluGate(float *g, const float *u, int64_t n) {
  int64_t i = 0;
#ifdef LLMC_ATT_AVX2
  const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
  for (; i + 8 <= n; i += 8) {
    const __m256 gv = _mm256_loadu_ps(g + i);
    const __m256 e = expVec(_mm256_xor_ps(gv, sign));
    _mm256_storeu_ps(g + i, _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(one, e)),
                                          _mm256_loadu_ps(u + i)));
  }
#endif
  for (; i < n; ++i)
    g[i] = g[i] / (1.0f + expScalar(-g[i])) * u[i];
}

} // namespace llmc::kernels
