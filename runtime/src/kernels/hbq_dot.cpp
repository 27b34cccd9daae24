//===- hbq_dot.cpp - Fused HBQ dot kernels ---------------------------------===//
// out[j] = dot(HBQ row, x_j) for up to kMaxFamilyDotRows activation rows,
// reading the weight row once. Portable kernel: per L2 sub-block the sum of
// elem * x, scaled once by s1 * t (as a MAC array would). AVX2 kernel: per
// sub-block the 8-lane magnitude table is multiplied by s1 * t, then 8 codes
// at a time are expanded with one variable shift, looked up with a lane
// permute (giving the dequantized weights exactly) and signed with an xor,
// and FMA'd into two accumulators per activation row for the whole row.
// Templated on the element width, the number of activation rows and (AVX2)
// common sub-block sizes. Results differ from dequantizeRow + dot only by
// float re-association.
//===----------------------------------------------------------------------===//
#include "hbq_rows.h"

#include <stdexcept>
#include <string>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define LLMC_HBQ_AVX2 1
#endif

namespace llmc::kernels {
namespace {

using detail::hbqLoad8;

struct Row {
  HbqSpec spec;
  int64_t blocks, bytes, sub;
};

Row checkRow(const HbqSpec &s, int64_t n, int nx, const char *what) {
  if (nx < 1 || nx > kMaxFamilyDotRows)
    throw std::runtime_error(std::string(what) + ": " + std::to_string(nx) +
                             " activation rows (1.." + std::to_string(kMaxFamilyDotRows) +
                             " supported)");
  const int64_t blocks = detail::hbqBlocks(s, n, what);
  return {s, blocks, detail::hbqBlockBytes(s), s.block / kHbqSubBlocks};
}

//===- portable ------------------------------------------------------------===//

template <int B, int NX>
void dotScalar(const uint8_t *row, const Row &r, const float *x, int64_t ldx, float *out,
               int64_t ldo) {
  const float *scale = detail::kHbqScales.v;
  const float *val = detail::kHbqSigned[B - 2].v;
  float tot[NX] = {};
  for (int64_t b = 0; b < r.blocks; ++b) {
    const uint8_t *blk = row + b * r.bytes;
    const float *t = detail::hbqTableOf(r.spec, blk[2], b);
    const float s1 = scale[blk[0]];
    const uint8_t *qs = blk + kHbqHeaderBytes;
    const float *xb = x + b * r.spec.block;
    for (int k = 0; k < kHbqSubBlocks; ++k) {
      float acc[NX] = {};
      for (int64_t j = 0; j < r.sub; j += 8, qs += B) {
        const uint32_t w = hbqLoad8<B>(qs);
        for (int i = 0; i < 8; ++i) {
          const float e = val[(w >> (i * B)) & ((1u << B) - 1)];
          for (int q = 0; q < NX; ++q)
            acc[q] += e * xb[q * ldx + k * r.sub + j + i];
        }
      }
      const float st = s1 * t[(blk[1] >> (2 * k)) & 3];
      for (int q = 0; q < NX; ++q)
        tot[q] += st * acc[q];
    }
  }
  for (int q = 0; q < NX; ++q)
    out[q * ldo] = tot[q];
}

#if LLMC_HBQ_AVX2

//===- AVX2 ----------------------------------------------------------------===//

inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <int B> struct Decoder {
  __m256 mag;          // magnitudes in lanes 0..2^(B-1)-1
  __m256i shifts, idxMask, signMask;
  Decoder() {
    mag = _mm256_loadu_ps(detail::kHbqMagnitudes[B - 2]);
    shifts = _mm256_setr_epi32(0, B, 2 * B, 3 * B, 4 * B, 5 * B, 6 * B, 7 * B);
    idxMask = _mm256_set1_epi32((1 << (B - 1)) - 1);
    signMask = _mm256_set1_epi32(1 << (B - 1));
  }
  // The 8 weights whose codes are the B bytes at qs; `scaled` is mag * (s1 t)
  // of their sub-block, so each lane is exactly the dequantized weight.
  __m256 operator()(__m256 scaled, const uint8_t *qs) const {
    const __m256i v = _mm256_srlv_epi32(_mm256_set1_epi32(int(hbqLoad8<B>(qs))), shifts);
    const __m256 m = _mm256_permutevar8x32_ps(scaled, _mm256_and_si256(v, idxMask));
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(v, signMask), 32 - B);
    return _mm256_xor_ps(m, _mm256_castsi256_ps(sign));
  }
};

// S: the sub-block size when known at compile time (the loop over it is
// then unrolled), 0 for any multiple of 8.
template <int B, int NX, int S>
void dotAvx2(const uint8_t *row, const Row &r, const float *x, int64_t ldx, float *out,
             int64_t ldo) {
  const Decoder<B> dec;
  const float *scale = detail::kHbqScales.v;
  const int64_t sub = S ? S : r.sub;
  // Two chains per activation row hide the FMA latency.
  __m256 a0[NX], a1[NX];
  for (int q = 0; q < NX; ++q)
    a0[q] = a1[q] = _mm256_setzero_ps();
  const float *xs = x;
  for (int64_t b = 0; b < r.blocks; ++b) {
    const uint8_t *blk = row + b * r.bytes;
    const float *t = detail::hbqTableOf(r.spec, blk[2], b);
    const float s1 = scale[blk[0]];
    const unsigned l2 = blk[1];
    const uint8_t *qs = blk + kHbqHeaderBytes;
    for (int k = 0; k < kHbqSubBlocks; ++k, xs += sub) {
      const __m256 scaled = _mm256_mul_ps(dec.mag, _mm256_set1_ps(s1 * t[(l2 >> (2 * k)) & 3]));
      int64_t j = 0;
      for (; j + 16 <= sub; j += 16, qs += 2 * B) {
        const __m256 e0 = dec(scaled, qs), e1 = dec(scaled, qs + B);
        for (int q = 0; q < NX; ++q) {
          a0[q] = _mm256_fmadd_ps(e0, _mm256_loadu_ps(xs + q * ldx + j), a0[q]);
          a1[q] = _mm256_fmadd_ps(e1, _mm256_loadu_ps(xs + q * ldx + j + 8), a1[q]);
        }
      }
      if (j < sub) { // sub is a multiple of 8: at most one step of 8 left
        const __m256 e0 = dec(scaled, qs);
        qs += B;
        for (int q = 0; q < NX; ++q)
          a1[q] = _mm256_fmadd_ps(e0, _mm256_loadu_ps(xs + q * ldx + j), a1[q]);
      }
    }
  }
  for (int q = 0; q < NX; ++q)
    out[q * ldo] = hsum8(_mm256_add_ps(a0[q], a1[q]));
}

#endif // LLMC_HBQ_AVX2

using Kernel = void (*)(const uint8_t *, const Row &, const float *, int64_t, float *, int64_t);

#if LLMC_HBQ_AVX2
template <int B, int S> Kernel pickAvx2(int nx) {
  switch (nx) {
  case 1: return dotAvx2<B, 1, S>;
  case 2: return dotAvx2<B, 2, S>;
  case 3: return dotAvx2<B, 3, S>;
  default: return dotAvx2<B, 4, S>;
  }
}
#endif

template <int B> Kernel pickRows(int nx, int64_t sub, bool simd) {
#if LLMC_HBQ_AVX2
  if (simd) {
    switch (sub) { // the sub-blocks of 64- and 128-weight blocks, unrolled
    case 16: return pickAvx2<B, 16>(nx);
    case 32: return pickAvx2<B, 32>(nx);
    default: return pickAvx2<B, 0>(nx);
    }
  }
#endif
  (void)simd;
  (void)sub;
  switch (nx) {
  case 1: return dotScalar<B, 1>;
  case 2: return dotScalar<B, 2>;
  case 3: return dotScalar<B, 3>;
  default: return dotScalar<B, 4>;
  }
}

Kernel pick(const HbqSpec &s, int nx, bool simd) {
  return detail::hbqWithBits(s.bits, [&](auto B) -> Kernel {
    return pickRows<B>(nx, s.block / kHbqSubBlocks, simd);
  });
}

} // namespace

void hbqDotRows(const HbqSpec &s, const uint8_t *row, int64_t n, const float *x, int64_t ldx,
                int nx, float *out, int64_t ldo) {
  const Row r = checkRow(s, n, nx, "hbqDotRows");
  pick(s, nx, true)(row, r, x, ldx, out, ldo);
}

void hbqDotRowsScalar(const HbqSpec &s, const uint8_t *row, int64_t n, const float *x,
                      int64_t ldx, int nx, float *out, int64_t ldo) {
  const Row r = checkRow(s, n, nx, "hbqDotRowsScalar");
  pick(s, nx, false)(row, r, x, ldx, out, ldo);
}

bool haveSimdHbqDot() {
#if LLMC_HBQ_AVX2
  return true;
#else
  return false;
#endif
}

} // namespace llmc::kernels
