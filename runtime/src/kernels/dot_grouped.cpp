//===- dot_grouped.cpp - Fused grouped-integer dot kernels -----------------===//
// See dot_grouped.h. Kernels are templated on the code width B, symmetry
// and the number of activation rows NX, so the group loop has no runtime
// branches; the group size stays a runtime value (any multiple of 8).
//===----------------------------------------------------------------------===//
#include "dot_grouped.h"
#include "grouped_int_rows.h"
#include "quant_rows.h"

#include <stdexcept>
#include <string>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define LLMC_GROUPED_AVX2 1
#endif

namespace llmc::kernels {
namespace {

struct Row {
  GroupedIntSpec spec;
  int64_t groups;
  int64_t blockBytes;
};

Row checkRow(DType t, int64_t n, int nx, const char *what) {
  auto s = groupedIntSpec(t);
  if (!s)
    throw std::runtime_error(std::string(what) + ": " + std::string(dtypeName(t)) +
                             " is not a grouped-integer type");
  if (nx < 1 || nx > kMaxGroupedDotRows)
    throw std::runtime_error(std::string(what) + ": " + std::to_string(nx) +
                             " activation rows (1.." + std::to_string(kMaxGroupedDotRows) +
                             " supported)");
  return {*s, detail::groupedGroups(*s, n, what), detail::groupedBlockBytes(*s)};
}

//===- portable ------------------------------------------------------------===//

template <int B, bool SYM, int NX>
void dotScalar(const uint8_t *row, const Row &r, const float *x, int64_t ldx, float *out,
               int64_t ldo) {
  const int64_t G = r.spec.group;
  const int off = SYM ? groupedIntSymOffset(B) : 0;
  float tot[NX] = {};
  for (int64_t g = 0; g < r.groups; ++g) {
    const uint8_t *blk = row + g * r.blockBytes;
    const float d = halfToFloat(detail::loadU16(blk));
    const float m = SYM ? 0.0f : halfToFloat(detail::loadU16(blk + 2));
    const uint8_t *qs = blk + (SYM ? 2 : 4);
    float sq[NX] = {}, sx[NX] = {};
    for (int64_t j = 0; j < G; j += 8, qs += B) {
      const uint64_t v = detail::loadCodes8<B>(qs);
      for (int i = 0; i < 8; ++i) {
        const float q = float(detail::codeAt<B>(v, i) - off);
        for (int k = 0; k < NX; ++k) {
          const float xv = x[k * ldx + g * G + j + i];
          sq[k] += q * xv;
          if (!SYM)
            sx[k] += xv;
        }
      }
    }
    for (int k = 0; k < NX; ++k)
      tot[k] += SYM ? d * sq[k] : d * sq[k] + m * sx[k];
  }
  for (int k = 0; k < NX; ++k)
    out[k * ldo] = tot[k];
}

#if LLMC_GROUPED_AVX2

//===- AVX2 ----------------------------------------------------------------===//

inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The 8 codes at qs (B bytes) as 8 int32 lanes.
template <int B> inline __m256i codes8(const uint8_t *qs) {
  if constexpr (B == 8) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(qs)));
  } else if constexpr (B == 4 || B == 2) {
    // All 8 codes sit in one 32-bit word: shift each lane to its code.
    uint32_t w = 0;
    std::memcpy(&w, qs, B);
    const __m256i shifts = _mm256_setr_epi32(0, B, 2 * B, 3 * B, 4 * B, 5 * B, 6 * B, 7 * B);
    return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(int(w)), shifts),
                            _mm256_set1_epi32((1 << B) - 1));
  } else {
    // Odd widths: copy the two bytes holding code i into lane i with a byte
    // shuffle, then shift by the code's bit offset in its first byte.
    const __m256i v = _mm256_set1_epi64x(int64_t(detail::loadCodes8<B>(qs)));
#define LLMC_LANE(i) char((i) * B / 8), char((i) * B / 8 + 1), char(-128), char(-128)
    const __m256i ctl = _mm256_setr_epi8(LLMC_LANE(0), LLMC_LANE(1), LLMC_LANE(2), LLMC_LANE(3),
                                         LLMC_LANE(4), LLMC_LANE(5), LLMC_LANE(6), LLMC_LANE(7));
#undef LLMC_LANE
    const __m256i shifts =
        _mm256_setr_epi32(0, B % 8, (2 * B) % 8, (3 * B) % 8, (4 * B) % 8, (5 * B) % 8,
                          (6 * B) % 8, (7 * B) % 8);
    return _mm256_and_si256(_mm256_srlv_epi32(_mm256_shuffle_epi8(v, ctl), shifts),
                            _mm256_set1_epi32((1 << B) - 1));
  }
}

template <int B, bool SYM> inline __m256 codesF(const uint8_t *qs) {
  __m256i q = codes8<B>(qs);
  if constexpr (SYM)
    q = _mm256_sub_epi32(q, _mm256_set1_epi32(groupedIntSymOffset(B)));
  return _mm256_cvtepi32_ps(q);
}

template <int B, bool SYM, int NX>
void dotAvx2(const uint8_t *row, const Row &r, const float *x, int64_t ldx, float *out,
             int64_t ldo) {
  const int64_t G = r.spec.group;
  __m256 tot[NX];
  for (int k = 0; k < NX; ++k)
    tot[k] = _mm256_setzero_ps();
  for (int64_t g = 0; g < r.groups; ++g) {
    const uint8_t *blk = row + g * r.blockBytes;
    const uint8_t *qs = blk + (SYM ? 2 : 4);
    const float *xg = x + g * G;
    // Two accumulator chains per activation row hide the FMA latency.
    __m256 qa[NX], qb[NX], xa[NX], xb[NX];
    for (int k = 0; k < NX; ++k) {
      qa[k] = qb[k] = _mm256_setzero_ps();
      if (!SYM)
        xa[k] = xb[k] = _mm256_setzero_ps();
    }
    int64_t j = 0;
    for (; j + 16 <= G; j += 16, qs += 2 * B) {
      const __m256 q0 = codesF<B, SYM>(qs), q1 = codesF<B, SYM>(qs + B);
      for (int k = 0; k < NX; ++k) {
        const __m256 x0 = _mm256_loadu_ps(xg + k * ldx + j);
        const __m256 x1 = _mm256_loadu_ps(xg + k * ldx + j + 8);
        qa[k] = _mm256_fmadd_ps(q0, x0, qa[k]);
        qb[k] = _mm256_fmadd_ps(q1, x1, qb[k]);
        if (!SYM) {
          xa[k] = _mm256_add_ps(xa[k], x0);
          xb[k] = _mm256_add_ps(xb[k], x1);
        }
      }
    }
    if (j < G) { // G is a multiple of 8: at most one step of 8 left
      const __m256 q0 = codesF<B, SYM>(qs);
      for (int k = 0; k < NX; ++k) {
        const __m256 x0 = _mm256_loadu_ps(xg + k * ldx + j);
        qa[k] = _mm256_fmadd_ps(q0, x0, qa[k]);
        if (!SYM)
          xa[k] = _mm256_add_ps(xa[k], x0);
      }
    }
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(detail::loadU16(blk)));
    const __m256 m = SYM ? d : _mm256_set1_ps(_cvtsh_ss(detail::loadU16(blk + 2)));
    for (int k = 0; k < NX; ++k) {
      tot[k] = _mm256_fmadd_ps(_mm256_add_ps(qa[k], qb[k]), d, tot[k]);
      if (!SYM)
        tot[k] = _mm256_fmadd_ps(_mm256_add_ps(xa[k], xb[k]), m, tot[k]);
    }
  }
  for (int k = 0; k < NX; ++k)
    out[k * ldo] = hsum8(tot[k]);
}

#endif // LLMC_GROUPED_AVX2

using Kernel = void (*)(const uint8_t *, const Row &, const float *, int64_t, float *, int64_t);

template <int B, bool SYM> Kernel pickRows(int nx, bool simd) {
#if LLMC_GROUPED_AVX2
  if (simd) {
    switch (nx) {
    case 1: return dotAvx2<B, SYM, 1>;
    case 2: return dotAvx2<B, SYM, 2>;
    case 3: return dotAvx2<B, SYM, 3>;
    default: return dotAvx2<B, SYM, 4>;
    }
  }
#endif
  (void)simd;
  switch (nx) {
  case 1: return dotScalar<B, SYM, 1>;
  case 2: return dotScalar<B, SYM, 2>;
  case 3: return dotScalar<B, SYM, 3>;
  default: return dotScalar<B, SYM, 4>;
  }
}

Kernel pick(const GroupedIntSpec &s, int nx, bool simd) {
  return detail::withBits(s.bits, [&](auto B) -> Kernel {
    return s.sym ? pickRows<B, true>(nx, simd) : pickRows<B, false>(nx, simd);
  });
}

} // namespace

void dotGroupedRows(DType t, const void *row, int64_t n, const float *x, int64_t ldx, int nx,
                    float *out, int64_t ldo) {
  const Row r = checkRow(t, n, nx, "dotGroupedRows");
  pick(r.spec, nx, true)(static_cast<const uint8_t *>(row), r, x, ldx, out, ldo);
}

void dotGroupedRowsScalar(DType t, const void *row, int64_t n, const float *x, int64_t ldx,
                          int nx, float *out, int64_t ldo) {
  const Row r = checkRow(t, n, nx, "dotGroupedRowsScalar");
  pick(r.spec, nx, false)(static_cast<const uint8_t *>(row), r, x, ldx, out, ldo);
}

float dotGroupedRow(DType t, const void *row, const float *x, int64_t n) {
  const Row r = checkRow(t, n, 1, "dotGroupedRow");
  float out = 0.0f;
  pick(r.spec, 1, true)(static_cast<const uint8_t *>(row), r, x, 0, &out, 1);
  return out;
}

bool haveSimdGroupedDot() {
#if LLMC_GROUPED_AVX2
  return true;
#else
  return false;
#endif
}

} // namespace llmc::kernels
