//===- CpuRows8Kernels.cpp - Int8-activation kernels, eight-row layout ---===//
// Q8_0/Q4_0/Q4_1/Q5_0/Q5_1 (and Q4_K, which has no f32 kernel here) get an
// int8-activation kernel over the runtime's eight-row interleaved copy
// (kRows8Template, kRows8Q4KTemplate): the kernel engine's default path,
// used for every step size. Each is a template with the format and width
// substituted, and a T switch (1..codegen::kMaxRows8 = 8).
//===----------------------------------------------------------------------===//
#include "codegen/TemplateText.h"
#include "codegen/cpu/CpuKernelParts.h"

#include <string>

namespace llmc::codegen::detail {

namespace {

/// Int8-activation kernel over groups [g0, g1) of the eight-row layout
/// (runtime/src/kernels/rows8.h) for one format and width: @NAME@, @NB@
/// (column blocks) and @FMT@ (0 q4_0, 1 q4_1, 2 q8_0) are substituted. With
/// AVX2 the 8 rows' sums of a block come from VPMADDUBSW on 4-step registers
/// (the 4 activation bytes of a step broadcast), with VNNI from VPDPBUSD on
/// the same registers (one instruction per step; the sums are exact both
/// ways, so the results are bit for bit the same); without, plain integer
/// loops. Same arithmetic as the runtime's library kernels: an exact
/// integer dot per block, then acc += isum * (d * dx), the minimum (q4_1) or
/// the -8 offset (q4_0) from the activations' scaled sums.
const char *kRows8Template = R"(
template <int T>
static void @NAME@_t(const unsigned char *w8, const int8_t *xq, const float *xd,
                     const float *xs, int64_t ldq, int64_t ldd, float *y, int64_t ldy,
                     int64_t g0, int64_t g1) {
  constexpr int NB = @NB@, FMT = @FMT@;
  // FMT 0 q4_0, 1 q4_1, 2 q8_0, 3 q5_0, 4 q5_1: scales (d, and m for the
  // _1 formats) 16 bytes each, q5's fifth bits (4 bytes a row), quants.
  constexpr bool MIN = FMT == 1 || FMT == 4, FIVE = FMT >= 3;
  constexpr int HAT = MIN ? 32 : 16, QAT = HAT + (FIVE ? 32 : 0), STEPS = FMT == 2 ? 8 : 4;
  constexpr int BLK = QAT + 32 * STEPS;
  // q8_0 with VPDPBUSD and two or more tokens: the activations + 128 as
  // unsigned bytes (xu, NB * 32 a token), the signed weights as they are,
  // and 128 * (the row's weight sum) taken off per block: the same exact
  // integer sums as |w| * sign(x, w), without a sign fix per token and step.
  constexpr bool BIASED = FMT == 2 && T >= 2 && T * NB * 32 <= 65536 && LLMC_R8_HAS_VNNI;
  alignas(64) unsigned char xu[BIASED ? T * NB * 32 : 1];
  if constexpr (BIASED)
    for (int t = 0; t < T; ++t)
      for (int k = 0; k < NB * 32; ++k)
        xu[t * NB * 32 + k] = static_cast<unsigned char>(xq[t * ldq + k]) ^ 0x80u;
  int64_t g = g0;
#ifdef LLMC_R8_AVX512
  if constexpr (FMT <= 2) // two groups (16 rows) a pass in 512-bit registers
    for (; g + 1 < g1; g += 2)
      @NAME@_x2<T>(w8, xq, xu, xd, xs, ldq, ldd, y, ldy, g);
#endif
  for (; g < g1; ++g) {
    const unsigned char *grp = w8 + g * int64_t(NB) * BLK;
    float *yg = y + g * 8;
#ifdef LLMC_R8_AVX2
    __m256 acc[T], side[T];
    for (int t = 0; t < T; ++t)
      acc[t] = side[t] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    for (int b = 0; b < NB; ++b) {
      const unsigned char *p = grp + b * BLK;
      _mm_prefetch(reinterpret_cast<const char *>(p + 1024), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char *>(p + 1088), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char *>(p + 1152), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char *>(p + 4096), _MM_HINT_T1); // as in _x2
      _mm_prefetch(reinterpret_cast<const char *>(p + 4160), _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char *>(p + 4224), _MM_HINT_T1);
      if constexpr (FMT == 2) {
        _mm_prefetch(reinterpret_cast<const char *>(p + 1216), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char *>(p + 1280), _MM_HINT_T0);
      }
      const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
      // q8_0: v the signed weights, a = |v|; q4: a the low nibbles, h the high.
      __m256i v[STEPS], a[STEPS], h[STEPS];
      for (int s = 0; s < STEPS; ++s) {
        v[s] = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p + QAT + 32 * s));
        a[s] = FMT == 2 ? _mm256_abs_epi8(v[s]) : _mm256_and_si256(v[s], m4);
        h[s] = FMT == 2 ? v[s] : _mm256_and_si256(_mm256_srli_epi16(v[s], 4), m4);
      }
      if constexpr (FIVE) {
        // Lane r holds row r's 32 fifth bits. Step s's low nibbles (weights
        // 4s+k) take bits 4s+k: byte s/2 of the lane, spread over its 4
        // bytes, tested against 1,2,4,8 (<< 4 for odd s); the high nibbles
        // (weights 16+4s+k) byte 2 + s/2 the same way.
        const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p + HAT));
        const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12,
                                                0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12);
        const __m256i sixteen = _mm256_set1_epi8(16);
        for (int s = 0; s < 4; ++s) {
          const __m256i bits = _mm256_set1_epi32(s & 1 ? int(0x80402010u) : 0x08040201);
          const __m256i lo = _mm256_shuffle_epi8(qh, _mm256_add_epi8(spread, _mm256_set1_epi8(char(s / 2))));
          const __m256i hi = _mm256_shuffle_epi8(qh, _mm256_add_epi8(spread, _mm256_set1_epi8(char(2 + s / 2))));
          a[s] = _mm256_or_si256(a[s], _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(lo, bits), bits), sixteen));
          h[s] = _mm256_or_si256(h[s], _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hi, bits), bits), sixteen));
        }
      }
      __m256 sd = d;
      if constexpr (MIN)
        sd = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p + 16)));
      __m256i bias = _mm256_setzero_si256(); // -128 * each row's weight sum (BIASED)
#ifdef LLMC_R8_VNNI
      if constexpr (BIASED) {
        for (int s = 0; s < 8; ++s)
          bias = LLMC_DPBUSD(bias, _mm256_set1_epi8(char(0x80)), v[s]);
        bias = _mm256_sub_epi32(_mm256_setzero_si256(), bias);
      }
#endif
      for (int t = 0; t < T; ++t) {
        // The block's 32 activation bytes (+ 128 when BIASED), 4 a step.
        int32_t xw[8];
        if constexpr (BIASED)
          std::memcpy(xw, xu + t * NB * 32 + b * 32, 32);
        else
          std::memcpy(xw, xq + t * ldq + b * 32, 32);
        __m256i s32;
        if constexpr (BIASED) {
#ifdef LLMC_R8_VNNI
          s32 = bias;
          for (int s = 0; s < 8; ++s)
            s32 = LLMC_DPBUSD(s32, _mm256_set1_epi32(xw[s]), v[s]);
#endif
        } else if constexpr (FMT == 2) {
          s32 = _mm256_setzero_si256();
          for (int s = 0; s < 8; ++s) {
            const __m256i sx = _mm256_sign_epi8(_mm256_set1_epi32(xw[s]), v[s]);
#ifdef LLMC_R8_VNNI
            s32 = LLMC_DPBUSD(s32, a[s], sx);
#else
            s32 = _mm256_add_epi32(s32, _mm256_madd_epi16(_mm256_maddubs_epi16(a[s], sx), ones));
#endif
          }
        } else {
#ifdef LLMC_R8_VNNI
          s32 = _mm256_setzero_si256();
          for (int s = 0; s < 4; ++s) {
            s32 = LLMC_DPBUSD(s32, a[s], _mm256_set1_epi32(xw[s]));
            s32 = LLMC_DPBUSD(s32, h[s], _mm256_set1_epi32(xw[4 + s]));
          }
#else
          // 16-bit sums: 8 products of 4 bits (|sum| <= 30480) or 4 of 5
          // bits (<= 31496) before widening.
          __m256i s16 = _mm256_setzero_si256();
          s32 = _mm256_setzero_si256();
          for (int s = 0; s < 4; ++s) {
            s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(a[s], _mm256_set1_epi32(xw[s])));
            s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(h[s], _mm256_set1_epi32(xw[4 + s])));
            if (FIVE && s == 1) {
              s32 = _mm256_madd_epi16(s16, ones);
              s16 = _mm256_setzero_si256();
            }
          }
          s32 = _mm256_add_epi32(s32, _mm256_madd_epi16(s16, ones));
#endif
        }
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32),
                                 _mm256_mul_ps(d, _mm256_set1_ps(xd[t * ldd + b])), acc[t]);
        if constexpr (FMT != 2)
          side[t] = _mm256_fmadd_ps(sd, _mm256_set1_ps(xs[t * ldd + b]), side[t]);
      }
    }
    for (int t = 0; t < T; ++t) {
      __m256 r = acc[t];
      if constexpr (FMT == 0)
        r = _mm256_fmadd_ps(_mm256_set1_ps(-8.0f), side[t], r);
      else if constexpr (FMT == 3)
        r = _mm256_fmadd_ps(_mm256_set1_ps(-16.0f), side[t], r);
      else if constexpr (MIN)
        r = _mm256_add_ps(r, side[t]);
      _mm256_storeu_ps(yg + t * ldy, r);
    }
#else
    float acc[T][8] = {}, side[T][8] = {};
    for (int b = 0; b < NB; ++b) {
      const unsigned char *p = grp + b * BLK;
      for (int r = 0; r < 8; ++r) {
        int w[32];
        uint32_t qh = 0;
        if constexpr (FIVE)
          std::memcpy(&qh, p + HAT + 4 * r, 4);
        for (int s = 0; s < STEPS; ++s)
          for (int k = 0; k < 4; ++k) {
            const unsigned char byte = p[QAT + s * 32 + r * 4 + k];
            if constexpr (FMT == 2) {
              w[4 * s + k] = int8_t(byte);
            } else {
              const int j = 4 * s + k;
              w[j] = (byte & 15) | int((qh >> j) & 1) << 4;
              w[16 + j] = (byte >> 4) | int((qh >> (16 + j)) & 1) << 4;
            }
          }
        const float d = h2f(p + 2 * r), sd = MIN ? h2f(p + 16 + 2 * r) : d;
        for (int t = 0; t < T; ++t) {
          const int8_t *x = xq + t * ldq + b * 32;
          int isum = 0;
          for (int k = 0; k < 32; ++k)
            isum += w[k] * x[k];
          acc[t][r] += float(isum) * (d * xd[t * ldd + b]);
          side[t][r] += sd * xs[t * ldd + b];
        }
      }
    }
    for (int t = 0; t < T; ++t)
      for (int r = 0; r < 8; ++r)
        yg[t * ldy + r] = FMT == 0 ? acc[t][r] - 8.0f * side[t][r]
                          : FMT == 3 ? acc[t][r] - 16.0f * side[t][r]
                          : MIN      ? acc[t][r] + side[t][r] : acc[t][r];
#endif
  }
}

)";

/// AVX-512 form of kRows8Template for q4_0/q4_1/q8_0 (the v4 levels): two
/// consecutive groups (16 rows) a pass, group g in the low 256 bits of each
/// register and g + 1 in the high ones, the activation bytes broadcast to
/// both; per lane the same integer sums and the same float operations in
/// the same order as the 256-bit kernel, so results are bit for bit equal.
const char *kRows8x2KernelTemplate = R"(
#ifdef LLMC_R8_AVX512
template <int T>
static void @NAME@_x2(const unsigned char *w8, const int8_t *xq, const unsigned char *xu,
                      const float *xd,
                      const float *xs, int64_t ldq, int64_t ldd, float *y, int64_t ldy,
                      int64_t g) {
  constexpr int NB = @NB@, FMT = @FMT@;
  constexpr bool MIN = FMT == 1;
  constexpr int QAT = MIN ? 32 : 16, STEPS = FMT == 2 ? 8 : 4, BLK = QAT + 32 * STEPS;
  const unsigned char *lo = w8 + g * int64_t(NB) * BLK, *hi = lo + int64_t(NB) * BLK;
  __m512 acc[T], side[T];
  for (int t = 0; t < T; ++t)
    acc[t] = side[t] = _mm512_setzero_ps();
  const __m512i m4 = _mm512_set1_epi8(15);
#ifndef LLMC_R8_VNNI512
  const __m512i ones = _mm512_set1_epi16(1);
#endif
  for (int b = 0; b < NB; ++b) {
    const unsigned char *p = lo + b * BLK, *q = hi + b * BLK;
    _mm_prefetch(reinterpret_cast<const char *>(p + 1024), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char *>(q + 1024), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char *>(p + 1088), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char *>(q + 1088), _MM_HINT_T0);
    // And into L2 4 KiB ahead: the next groups, which the next call (the
    // next row block) reads; a block's first token pass is latency-bound
    // on weights that come from L3 or memory without it.
    _mm_prefetch(reinterpret_cast<const char *>(p + 4096), _MM_HINT_T1);
    _mm_prefetch(reinterpret_cast<const char *>(q + 4096), _MM_HINT_T1);
    _mm_prefetch(reinterpret_cast<const char *>(p + 4160), _MM_HINT_T1);
    _mm_prefetch(reinterpret_cast<const char *>(q + 4160), _MM_HINT_T1);
    if constexpr (FMT == 2) {
      _mm_prefetch(reinterpret_cast<const char *>(p + 1152), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char *>(q + 1152), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char *>(p + 1216), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char *>(q + 1216), _MM_HINT_T0);
    }
    const __m512 d = llmcHalves2x8(p, q);
    __m512i v[STEPS], a[STEPS], h[STEPS];
    for (int s = 0; s < STEPS; ++s) {
      v[s] = llmcLoad2x256(p + QAT + 32 * s, q + QAT + 32 * s);
      a[s] = FMT == 2 ? _mm512_abs_epi8(v[s]) : _mm512_and_si512(v[s], m4);
      h[s] = FMT == 2 ? v[s] : _mm512_and_si512(_mm512_srli_epi16(v[s], 4), m4);
    }
    __m512 sd = d;
    if constexpr (MIN)
      sd = llmcHalves2x8(p + 16, q + 16);
    constexpr bool BIASED = FMT == 2 && T >= 2 && T * NB * 32 <= 65536 && LLMC_R8_HAS_VNNI512;
    __m512i bias = _mm512_setzero_si512(); // as in _t: -128 * each row's weight sum
#ifdef LLMC_R8_VNNI512
    if constexpr (BIASED) {
      for (int s = 0; s < 8; ++s)
        bias = _mm512_dpbusd_epi32(bias, _mm512_set1_epi8(char(0x80)), v[s]);
      bias = _mm512_sub_epi32(_mm512_setzero_si512(), bias);
    }
#endif
    for (int t = 0; t < T; ++t) {
      int32_t xw[8]; // as in _t
      if constexpr (BIASED)
        std::memcpy(xw, xu + t * NB * 32 + b * 32, 32);
      else
        std::memcpy(xw, xq + t * ldq + b * 32, 32);
      __m512i s32 = _mm512_setzero_si512();
      if constexpr (BIASED) {
#ifdef LLMC_R8_VNNI512
        s32 = bias;
        for (int s = 0; s < 8; ++s)
          s32 = _mm512_dpbusd_epi32(s32, _mm512_set1_epi32(xw[s]), v[s]);
#endif
      } else if constexpr (FMT == 2) {
        for (int s = 0; s < 8; ++s) {
          // VPSIGNB has no 512-bit form: negate x where the weight is
          // negative (where it is zero, |v| = 0 zeroes the product anyway).
          const __m512i xb = _mm512_set1_epi32(xw[s]);
          const __m512i sx = _mm512_mask_sub_epi8(xb, _mm512_movepi8_mask(v[s]),
                                                  _mm512_setzero_si512(), xb);
#ifdef LLMC_R8_VNNI512
          s32 = _mm512_dpbusd_epi32(s32, a[s], sx);
#else
          s32 = _mm512_add_epi32(s32, _mm512_madd_epi16(_mm512_maddubs_epi16(a[s], sx), ones));
#endif
        }
      } else {
#ifdef LLMC_R8_VNNI512
        for (int s = 0; s < 4; ++s) {
          s32 = _mm512_dpbusd_epi32(s32, a[s], _mm512_set1_epi32(xw[s]));
          s32 = _mm512_dpbusd_epi32(s32, h[s], _mm512_set1_epi32(xw[4 + s]));
        }
#else
        __m512i s16 = _mm512_setzero_si512();
        for (int s = 0; s < 4; ++s) {
          s16 = _mm512_add_epi16(s16, _mm512_maddubs_epi16(a[s], _mm512_set1_epi32(xw[s])));
          s16 = _mm512_add_epi16(s16, _mm512_maddubs_epi16(h[s], _mm512_set1_epi32(xw[4 + s])));
        }
        s32 = _mm512_madd_epi16(s16, ones);
#endif
      }
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s32),
                               _mm512_mul_ps(d, _mm512_set1_ps(xd[t * ldd + b])), acc[t]);
      if constexpr (FMT != 2)
        side[t] = _mm512_fmadd_ps(sd, _mm512_set1_ps(xs[t * ldd + b]), side[t]);
    }
  }
  for (int t = 0; t < T; ++t) {
    __m512 r = acc[t];
    if constexpr (FMT == 0)
      r = _mm512_fmadd_ps(_mm512_set1_ps(-8.0f), side[t], r);
    else if constexpr (MIN)
      r = _mm512_add_ps(r, side[t]);
    _mm512_storeu_ps(y + g * 8 + t * ldy, r);
  }
}
#endif
)";

/// Q4_K int8-activation kernel over the runtime's eight-row layout
/// (runtime/src/kernels/rows8.h: per 256-weight super-block d[8], dmin[8],
/// the sub-block scales and mins as bytes, then 4 chunks of 8 steps of 8
/// rows x 4 bytes): @NAME@ and @NSB@ (super-blocks per row) substituted.
/// Per sub-block j of 32 weights (activation block b): an exact integer dot,
/// times the row's 6-bit scale (exact in int32), then acc += isum*sc * (d *
/// dx_b) and side += (dmin * m) * xs_b; y = acc - side.
const char *kRows8Q4KTemplate = R"(
template <int T>
static void @NAME@_t(const unsigned char *w8, const int8_t *xq, const float *xd,
                     const float *xs, int64_t ldq, int64_t ldd, float *y, int64_t ldy,
                     int64_t g0, int64_t g1) {
  constexpr int NSB = @NSB@, GB = 1184;
  for (int64_t g = g0; g < g1; ++g) {
    const unsigned char *grp = w8 + g * int64_t(NSB) * GB;
    float *yg = y + g * 8;
#ifdef LLMC_R8_AVX2
    __m256 acc[T], side[T];
    for (int t = 0; t < T; ++t)
      acc[t] = side[t] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(15);
#ifndef LLMC_R8_VNNI
    const __m256i ones = _mm256_set1_epi16(1);
#endif
    for (int sb = 0; sb < NSB; ++sb) {
      const unsigned char *p = grp + sb * GB;
      const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
      const __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p + 16)));
      for (int c = 0; c < 4; ++c) {
        const unsigned char *q = p + 160 + c * 256;
        _mm_prefetch(reinterpret_cast<const char *>(q + 1024), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char *>(q + 1088), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char *>(q + 1152), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char *>(q + 1216), _MM_HINT_T0);
        const __m256i scLo = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(p + 32 + 16 * c)));
        const __m256i scHi = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(p + 40 + 16 * c)));
        const __m256 mLo = _mm256_mul_ps(dm, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(p + 96 + 16 * c)))));
        const __m256 mHi = _mm256_mul_ps(dm, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(p + 104 + 16 * c)))));
        const int64_t bLo = int64_t(sb) * 8 + 2 * c, bHi = bLo + 1;
        for (int t = 0; t < T; ++t) {
          int32_t xl[8], xh[8];
          std::memcpy(xl, xq + t * ldq + bLo * 32, 32);
          std::memcpy(xh, xq + t * ldq + bHi * 32, 32);
#ifdef LLMC_R8_VNNI
          __m256i lo32 = _mm256_setzero_si256(), hi32 = _mm256_setzero_si256();
#else
          __m256i lo16 = _mm256_setzero_si256(), hi16 = _mm256_setzero_si256();
#endif
          for (int s = 0; s < 8; ++s) {
            const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(q + 32 * s));
            const __m256i a = _mm256_and_si256(v, m4);
            const __m256i h = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
#ifdef LLMC_R8_VNNI
            lo32 = LLMC_DPBUSD(lo32, a, _mm256_set1_epi32(xl[s]));
            hi32 = LLMC_DPBUSD(hi32, h, _mm256_set1_epi32(xh[s]));
#else
            // 8 products of 4 bits per 16-bit lane: |sum| <= 30480.
            lo16 = _mm256_add_epi16(lo16, _mm256_maddubs_epi16(a, _mm256_set1_epi32(xl[s])));
            hi16 = _mm256_add_epi16(hi16, _mm256_maddubs_epi16(h, _mm256_set1_epi32(xh[s])));
#endif
          }
#ifndef LLMC_R8_VNNI
          const __m256i lo32 = _mm256_madd_epi16(lo16, ones), hi32 = _mm256_madd_epi16(hi16, ones);
#endif
          acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_mullo_epi32(lo32, scLo)),
                                   _mm256_mul_ps(d, _mm256_set1_ps(xd[t * ldd + bLo])), acc[t]);
          acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_mullo_epi32(hi32, scHi)),
                                   _mm256_mul_ps(d, _mm256_set1_ps(xd[t * ldd + bHi])), acc[t]);
          side[t] = _mm256_fmadd_ps(mLo, _mm256_set1_ps(xs[t * ldd + bLo]), side[t]);
          side[t] = _mm256_fmadd_ps(mHi, _mm256_set1_ps(xs[t * ldd + bHi]), side[t]);
        }
      }
    }
    for (int t = 0; t < T; ++t)
      _mm256_storeu_ps(yg + t * ldy, _mm256_sub_ps(acc[t], side[t]));
#else
    float acc[T][8] = {}, side[T][8] = {};
    for (int sb = 0; sb < NSB; ++sb) {
      const unsigned char *p = grp + sb * GB;
      for (int r = 0; r < 8; ++r) {
        const float d = h2f(p + 2 * r), dm = h2f(p + 16 + 2 * r);
        for (int c = 0; c < 4; ++c)
          for (int t = 0; t < T; ++t)
            for (int hh = 0; hh < 2; ++hh) {
              const int sub = 2 * c + hh;
              const int64_t b = int64_t(sb) * 8 + sub;
              const int8_t *x = xq + t * ldq + b * 32;
              int isum = 0;
              for (int s = 0; s < 8; ++s)
                for (int k = 0; k < 4; ++k) {
                  const unsigned char byte = p[160 + c * 256 + s * 32 + r * 4 + k];
                  isum += int(hh ? byte >> 4 : byte & 15) * x[4 * s + k];
                }
              acc[t][r] += float(isum * int(p[32 + 8 * sub + r])) * (d * xd[t * ldd + b]);
              side[t][r] += dm * float(p[96 + 8 * sub + r]) * xs[t * ldd + b];
            }
      }
    }
    for (int t = 0; t < T; ++t)
      for (int r = 0; r < 8; ++r)
        yg[t * ldy + r] = acc[t][r] - side[t][r];
#endif
  }
}

)";

/// The Rows8Fn entry point of an eight-row kernel template (@NAME@_t<T>).
const char *kRows8Wrapper = R"(
extern "C" void @NAME@(const unsigned char *w8, const int8_t *xq, const float *xd,
                       const float *xs, int64_t ldq, int64_t ldd, int32_t T, float *y,
                       int64_t ldy, int64_t g0, int64_t g1) {
  switch (T) {
  case 1: @NAME@_t<1>(w8, xq, xd, xs, ldq, ldd, y, ldy, g0, g1); break;
  case 2: @NAME@_t<2>(w8, xq, xd, xs, ldq, ldd, y, ldy, g0, g1); break;
  case 3: @NAME@_t<3>(w8, xq, xd, xs, ldq, ldd, y, ldy, g0, g1); break;
  case 4: @NAME@_t<4>(w8, xq, xd, xs, ldq, ldd, y, ldy, g0, g1); break;
#ifdef LLMC_R8_AVX512
  // 32 vector registers: up to 8 tokens a pass over the weights.
  case 5: @NAME@_t<5>(w8, xq, xd, xs, ldq, ldd, y, ldy, g0, g1); break;
  case 6: @NAME@_t<6>(w8, xq, xd, xs, ldq, ldd, y, ldy, g0, g1); break;
  case 7: @NAME@_t<7>(w8, xq, xd, xs, ldq, ldd, y, ldy, g0, g1); break;
  case 8: @NAME@_t<8>(w8, xq, xd, xs, ldq, ldd, y, ldy, g0, g1); break;
#else
  // 16: four tokens a pass (more would spill the accumulators), twice.
  case 5: case 6: case 7: case 8:
    @NAME@_t<4>(w8, xq, xd, xs, ldq, ldd, y, ldy, g0, g1);
    @NAME@(w8, xq + 4 * ldq, xd + 4 * ldd, xs + 4 * ldd, ldq, ldd, T - 4, y + 4 * ldy, ldy, g0, g1);
    break;
#endif
  default: break;
  }
}
)";

} // namespace

std::string rows8Kernel(const MatvecSpec &s) {
  if (s.dtype == DType::Q4_K) {
    std::string k = replaceAll(std::string(kRows8Q4KTemplate) + kRows8Wrapper, "@NAME@",
                               s.rows8Symbol());
    k = replaceAll(k, "@NSB@", std::to_string(s.cols / 256));
    return "\n// q4_K rows of " + std::to_string(s.cols) + ", eight-row layout, int8 activations" +
           k;
  }
  const int fmt = s.dtype == DType::Q4_0   ? 0
                  : s.dtype == DType::Q4_1 ? 1
                  : s.dtype == DType::Q8_0 ? 2
                  : s.dtype == DType::Q5_0 ? 3
                                           : 4;
  std::string k = replaceAll(std::string(fmt <= 2 ? kRows8x2KernelTemplate : "") + kRows8Template +
                                 kRows8Wrapper,
                             "@NAME@", s.rows8Symbol());
  k = replaceAll(k, "@NB@", std::to_string(s.cols / 32));
  k = replaceAll(k, "@FMT@", std::to_string(fmt));
  return "\n// " + std::string(dtypeName(s.dtype)) + " rows of " + std::to_string(s.cols) +
         ", eight-row layout, int8 activations" + k;
}

} // namespace llmc::codegen::detail
