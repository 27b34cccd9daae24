//===- qtea_dot.cpp - Fused QTEA dot kernels -------------------------------===//
// out[k] = dot(row r of a QTEA matrix, x_k) for up to four activation rows,
// reading the weight row once: the trit bytes (five per byte) are expanded
// through a 256 x 8 table into a small int8 buffer, a chunk of groups at a
// time, then w = (alpha * v[j]) * t + beta is formed 8 lanes at a time and
// multiplied into every activation row (AVX2: two accumulators each). The
// salient residual of the row (about S/4 of the S entries) is added by a
// scalar loop over the matching positions. The AVX2 + FMA kernel is used
// when the build targets them; the portable one is always available
// (tests). Results differ from dequantize + dot only by float
// re-association.
//===----------------------------------------------------------------------===//
#include "family_rows.h"
#include "qtea_rows.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define LLMC_QTEA_AVX2 1
#endif

namespace llmc::kernels {
namespace {

using qtea::detail::kTrits;
using qtea::detail::loadF32;

void checkNx(int nx) {
  if (nx < 1 || nx > kMaxFamilyDotRows)
    throw std::runtime_error("qtea dot: " + std::to_string(nx) + " activation rows (1.." +
                             std::to_string(kMaxFamilyDotRows) + " supported)");
}

inline uint16_t loadU16(const uint8_t *p) { return uint16_t(p[0] | p[1] << 8); }

/// Expands one group's trit bytes into int8 codes; dst has room for
/// 5 * tritBytes(G) + 3 bytes.
inline void expandTrits(const uint8_t *codes, int64_t nbytes, int8_t *dst) {
  for (int64_t b = 0; b < nbytes; ++b)
    std::memcpy(dst + 5 * b, kTrits.t[codes[b]], 8);
}

constexpr int64_t kMaxGroup = 4096;

template <int NX>
void dotScalarN(const QteaSpec &s, const uint8_t *row, const qtea::detail::AuxView &a, int64_t n,
                const float *x, int64_t ldx, float *out, int64_t ldo) {
  const int64_t G = s.group, BB = qtea::blockBytes(G), TB = qtea::tritBytes(G);
  const uint8_t *v = a.v();
  int8_t t[kMaxGroup + 16];
  float tot[NX] = {};
  for (int64_t g = 0; g < n / G; ++g) {
    const uint8_t *blk = row + g * BB;
    const float alpha = halfToFloat(loadU16(blk)), beta = halfToFloat(loadU16(blk + 2));
    expandTrits(blk + 4, TB, t);
    float acc[NX] = {};
    for (int64_t k = 0; k < G; ++k) {
      const int64_t j = g * G + k;
      const float w = alpha * loadF32(v + 4 * j) * float(t[k]) + beta;
      for (int i = 0; i < NX; ++i)
        acc[i] += w * x[i * ldx + j];
    }
    for (int i = 0; i < NX; ++i)
      tot[i] += acc[i];
  }
  for (int i = 0; i < NX; ++i)
    out[i * ldo] = tot[i];
}

#if LLMC_QTEA_AVX2

inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/// Trits are expanded for a chunk of groups before the arithmetic: the
/// buffer is written by overlapping 8-byte copies, and reading it back right
/// away would stall on store forwarding.
constexpr int64_t kChunk = 2048;

template <int NX>
void dotAvx2N(const QteaSpec &s, const uint8_t *row, const qtea::detail::AuxView &a, int64_t n,
              const float *x, int64_t ldx, float *out, int64_t ldo) {
  const int64_t G = s.group, BB = qtea::blockBytes(G), TB = qtea::tritBytes(G), ng = n / G;
  const int64_t groupsPerChunk = std::max<int64_t>(1, kChunk / G);
  const float *v = reinterpret_cast<const float *>(a.v()); // read with unaligned loads only
  alignas(32) int8_t t[kChunk + kMaxGroup + 16];
  // Two accumulators per activation row hide the FMA latency.
  __m256 acc0[NX], acc1[NX];
  for (int i = 0; i < NX; ++i)
    acc0[i] = acc1[i] = _mm256_setzero_ps();
  for (int64_t g0 = 0; g0 < ng; g0 += groupsPerChunk) {
    const int64_t g1 = std::min(ng, g0 + groupsPerChunk);
    for (int64_t g = g0; g < g1; ++g) // in order: a group's spill is overwritten by the next
      expandTrits(row + g * BB + 4, TB, t + (g - g0) * G);
    for (int64_t g = g0; g < g1; ++g) {
      const uint8_t *blk = row + g * BB;
      const __m256 va = _mm256_set1_ps(halfToFloat(loadU16(blk)));
      const __m256 vb = _mm256_set1_ps(halfToFloat(loadU16(blk + 2)));
      const int8_t *tg = t + (g - g0) * G;
      const int64_t j0 = g * G;
      auto weights = [&](int64_t k) {
        const __m128i t8 = _mm_loadl_epi64(reinterpret_cast<const __m128i *>(tg + k));
        const __m256 tf = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(t8));
        return _mm256_fmadd_ps(_mm256_mul_ps(va, _mm256_loadu_ps(v + j0 + k)), tf, vb);
      };
      int64_t k = 0;
      for (; k + 16 <= G; k += 16) {
        const __m256 w0 = weights(k), w1 = weights(k + 8);
        for (int i = 0; i < NX; ++i) {
          acc0[i] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + i * ldx + j0 + k), acc0[i]);
          acc1[i] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + i * ldx + j0 + k + 8), acc1[i]);
        }
      }
      if (k < G) { // G % 16 == 8
        const __m256 w0 = weights(k);
        for (int i = 0; i < NX; ++i)
          acc0[i] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + i * ldx + j0 + k), acc0[i]);
      }
    }
  }
  for (int i = 0; i < NX; ++i)
    out[i * ldo] = hsum8(_mm256_add_ps(acc0[i], acc1[i]));
}

#endif

using RowFn = void (*)(const QteaSpec &, const uint8_t *, const qtea::detail::AuxView &, int64_t,
                       const float *, int64_t, float *, int64_t);

void run(RowFn f, const QteaSpec &s, const uint8_t *row, const uint8_t *aux, int64_t r,
         int64_t rows, int64_t n, const float *x, int64_t ldx, int nx, float *out, int64_t ldo) {
  checkNx(nx);
  const qtea::detail::AuxView a = qtea::detail::auxView(s, aux, r, rows, n, "qtea dot");
  if (s.group > kMaxGroup)
    throw std::runtime_error("qtea dot: group " + std::to_string(s.group) + " above " +
                             std::to_string(kMaxGroup));
  f(s, row, a, n, x, ldx, out, ldo);
  qtea::detail::forEachResidual(a, r, n, [&](int64_t c, float val) {
    for (int i = 0; i < nx; ++i)
      out[i * ldo] += val * x[i * ldx + c];
  });
}

RowFn scalarFor(int nx) {
  switch (nx) {
  case 1: return dotScalarN<1>;
  case 2: return dotScalarN<2>;
  case 3: return dotScalarN<3>;
  default: return dotScalarN<4>;
  }
}

#if LLMC_QTEA_AVX2
RowFn avx2For(int nx) {
  switch (nx) {
  case 1: return dotAvx2N<1>;
  case 2: return dotAvx2N<2>;
  case 3: return dotAvx2N<3>;
  default: return dotAvx2N<4>;
  }
}
#endif

} // namespace

void qteaDotRowsScalar(const QteaSpec &s, const uint8_t *row, const uint8_t *aux, int64_t r,
                       int64_t rows, int64_t n, const float *x, int64_t ldx, int nx, float *out,
                       int64_t ldo) {
  run(scalarFor(nx), s, row, aux, r, rows, n, x, ldx, nx, out, ldo);
}

void qteaDotRows(const QteaSpec &s, const uint8_t *row, const uint8_t *aux, int64_t r,
                 int64_t rows, int64_t n, const float *x, int64_t ldx, int nx, float *out,
                 int64_t ldo) {
#if LLMC_QTEA_AVX2
  run(avx2For(nx), s, row, aux, r, rows, n, x, ldx, nx, out, ldo);
#else
  run(scalarFor(nx), s, row, aux, r, rows, n, x, ldx, nx, out, ldo);
#endif
}

bool haveSimdQteaDot() {
#if LLMC_QTEA_AVX2
  return true;
#else
  return false;
#endif
}

} // namespace llmc::kernels
