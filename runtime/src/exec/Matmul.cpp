//===- Matmul.cpp - Blocked, threaded Y = X * W^T --------------------------===//
#include "Matmul.h"

#include <algorithm>
#include <vector>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define LLMC_AVX2 1
#endif

namespace llmc {

namespace {

constexpr int64_t kRowBlock = 16; // weight rows converted per block

#ifdef LLMC_AVX2
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#endif

/// out[i] = dot(r[i], x) for 4 rows.
inline void dot4(const float *r0, const float *r1, const float *r2, const float *r3,
                 const float *x, int64_t n, float out[4]) {
  int64_t k = 0;
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#ifdef LLMC_AVX2
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  for (; k + 8 <= n; k += 8) {
    __m256 xv = _mm256_loadu_ps(x + k);
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(r0 + k), xv, a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(r1 + k), xv, a1);
    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(r2 + k), xv, a2);
    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(r3 + k), xv, a3);
  }
  s0 = hsum(a0);
  s1 = hsum(a1);
  s2 = hsum(a2);
  s3 = hsum(a3);
#endif
  for (; k < n; ++k) {
    s0 += r0[k] * x[k];
    s1 += r1[k] * x[k];
    s2 += r2[k] * x[k];
    s3 += r3[k] * x[k];
  }
  out[0] = s0;
  out[1] = s1;
  out[2] = s2;
  out[3] = s3;
}

/// out[j*ldo + i] = dot(r[i], x[j]) for 4 rows and 3 activation rows: each
/// weight vector load feeds three FMAs (prefill).
inline void dot4x3(const float *const r[4], const float *x0, const float *x1, const float *x2,
                   int64_t n, float *out, int64_t ldo) {
  int64_t k = 0;
  float s[3][4] = {};
#ifdef LLMC_AVX2
  __m256 acc[3][4];
  for (int j = 0; j < 3; ++j)
    for (int i = 0; i < 4; ++i)
      acc[j][i] = _mm256_setzero_ps();
  for (; k + 8 <= n; k += 8) {
    __m256 xa = _mm256_loadu_ps(x0 + k), xb = _mm256_loadu_ps(x1 + k), xc = _mm256_loadu_ps(x2 + k);
    for (int i = 0; i < 4; ++i) {
      __m256 w = _mm256_loadu_ps(r[i] + k);
      acc[0][i] = _mm256_fmadd_ps(w, xa, acc[0][i]);
      acc[1][i] = _mm256_fmadd_ps(w, xb, acc[1][i]);
      acc[2][i] = _mm256_fmadd_ps(w, xc, acc[2][i]);
    }
  }
  for (int j = 0; j < 3; ++j)
    for (int i = 0; i < 4; ++i)
      s[j][i] = hsum(acc[j][i]);
#endif
  for (; k < n; ++k)
    for (int i = 0; i < 4; ++i) {
      s[0][i] += r[i][k] * x0[k];
      s[1][i] += r[i][k] * x1[k];
      s[2][i] += r[i][k] * x2[k];
    }
  for (int j = 0; j < 3; ++j)
    for (int i = 0; i < 4; ++i)
      out[j * ldo + i] = s[j][i];
}

} // namespace

float dot(const float *a, const float *b, int64_t n) {
  int64_t k = 0;
  float s = 0;
#ifdef LLMC_AVX2
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (; k + 16 <= n; k += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k + 8), _mm256_loadu_ps(b + k + 8), acc1);
  }
  for (; k + 8 <= n; k += 8)
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), acc0);
  s = hsum(_mm256_add_ps(acc0, acc1));
#endif
  for (; k < n; ++k)
    s += a[k] * b[k];
  return s;
}

void matmul(ThreadPool &pool, const WeightMatrix &w, const float *x, int64_t T, int64_t ldx,
            float *y, int64_t ldy, const float *bias) {
  const int64_t rows = w.rows, cols = w.cols;
  if (rows == 0 || T == 0)
    return;
  const int64_t nblocks = (rows + kRowBlock - 1) / kRowBlock;
  const bool direct = w.dtype == DType::F32; // read F32 rows in place
  pool.parallelFor(0, nblocks, 1, [&](int64_t lo, int64_t hi) {
    thread_local std::vector<float> buf;
    if (!direct && buf.size() < size_t(kRowBlock * cols))
      buf.resize(size_t(kRowBlock * cols));
    for (int64_t blk = lo; blk < hi; ++blk) {
      const int64_t r0 = blk * kRowBlock;
      const int64_t nr = std::min(kRowBlock, rows - r0);
      const float *rp[kRowBlock];
      for (int64_t i = 0; i < nr; ++i) {
        if (direct) {
          rp[i] = reinterpret_cast<const float *>(w.row(r0 + i));
        } else {
          loadRow(w, r0 + i, buf.data() + i * cols);
          rp[i] = buf.data() + i * cols;
        }
      }
      int64_t t = 0;
      const int64_t full = nr / 4 * 4;
      for (; t + 3 <= T; t += 3) { // three tokens at a time share each weight load
        const float *xt = x + t * ldx;
        for (int64_t i = 0; i < full; i += 4)
          dot4x3(rp + i, xt, xt + ldx, xt + 2 * ldx, cols, y + t * ldy + r0 + i, ldy);
      }
      for (; t < T; ++t) {
        const float *xt = x + t * ldx;
        float *yt = y + t * ldy + r0;
        for (int64_t i = 0; i < full; i += 4)
          dot4(rp[i], rp[i + 1], rp[i + 2], rp[i + 3], xt, cols, yt + i);
      }
      for (t = 0; t < T; ++t) {
        const float *xt = x + t * ldx;
        float *yt = y + t * ldy + r0;
        for (int64_t i = full; i < nr; ++i)
          yt[i] = dot(rp[i], xt, cols);
        if (bias)
          for (int64_t k = 0; k < nr; ++k)
            yt[k] += bias[r0 + k];
      }
    }
  });
}

} // namespace llmc
