//===- Matmul.cpp - Blocked, threaded Y = X * W^T --------------------------===//
#include "Matmul.h"
#include "../kernels/dot_grouped.h"
#include "../kernels/family_rows.h"
#include "../kernels/dot_int8.h"
#include "../kernels/dot_quant.h"
#include "../kernels/rows8.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <stdexcept>
#include <vector>
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include "../kernels/avx2_util.h"
#define LLMC_AVX2 1
#endif

namespace llmc {

namespace {

constexpr int64_t kRowBlock = 16; // weight rows converted per block

#ifdef LLMC_AVX2
using kernels::avx2::hsum;
#endif

/// out[i] = dot(r[i], x) for 4 rows.
inline void dot4(const float *r0, const float *r1, const float *r2, const float *r3, const float *x,
                 int64_t n, float out[4]) {
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

namespace {

/// Output rows of one work item.
constexpr int64_t kFusedRowBlock = 16;

/// Work items of a matmulMany call: row blocks of every job, in job order.
struct WorkList {
  int64_t first[8] = {}; // first item of each job
  int64_t total = 0;
  int64_t block;
  WorkList(const MatmulJob *jobs, int n, int64_t blockRows, bool paired) : block(blockRows) {
    for (int j = 0; j < (paired ? 1 : n); ++j) { // paired: an item covers every job
      first[j] = total;
      total += (jobs[j].w->rows + block - 1) / block;
    }
  }
  /// Job of an item and its first row.
  void locate(int64_t item, int n, int &job, int64_t &r0) const {
    job = 0;
    while (job + 1 < n && item >= first[job + 1])
      ++job;
    r0 = (item - first[job]) * block;
  }
};

/// Chunks of work items handed out at a time. Decode-sized steps (T <=
/// 16 rows) stream every weight once per step, and each kernel prefetches
/// the rows after its own: two chunks per thread keep a thread on long
/// runs of consecutive rows (SmolLM2 Q4_1 on a Xeon, 2 threads: decode
/// 1.25x faster at one sequence and 1.05x at 16 than with eight chunks).
/// From 9 to 16 rows one chunk per thread (an equal share of the rows,
/// no thread running into another's prefetched rows) is faster again:
/// 1.034x at 16 sequences, 1.005x at 8 and 0.98x at 4 against two.
/// Longer steps are compute-bound: eight chunks per thread balance them
/// (a 16 x 128-token prefill is 1.08x faster than with two).
int64_t grainFor(const ThreadPool &pool, int64_t items, int64_t T) {
  const int64_t chunksPerThread = T <= 8 ? 2 : T <= 16 ? 1 : 8;
  return std::max<int64_t>(1, items / (int64_t(pool.size()) * chunksPerThread));
}

void addBias(const MatmulJob &job, int64_t T, int64_t r0, int64_t nr) {
  if (!job.bias)
    return;
  for (int64_t t = 0; t < T; ++t) {
    float *yt = job.y + t * job.ldy + r0;
    for (int64_t k = 0; k < nr; ++k)
      yt[k] += job.bias[r0 + k];
  }
}

/// Runs work items [lo, hi): one job's row block each, or with `paired`
/// the same row block of every job followed by the epilogue. With `merge`
/// (and no epilogue) consecutive blocks of one job go to runBlock as one
/// range of at most `mergeBlocks` blocks: decode steps then make one kernel
/// call per chunk (or per cache-sized part of it), not per block.
template <class BlockFn>
void runItems(const WorkList &work, const MatmulJob *jobs, int njobs, const RowEpilogue *paired,
              int64_t lo, int64_t hi, const BlockFn &runBlock, bool merge = false,
              int64_t mergeBlocks = INT64_MAX) {
  for (int64_t item = lo; item < hi; ++item) {
    int j;
    int64_t r0;
    work.locate(item, paired ? 1 : njobs, j, r0);
    int64_t nr = std::min(work.block, jobs[j].w->rows - r0);
    if (!paired) {
      // Items of job j run to first[j + 1] (or the end of the list).
      const int64_t jobEnd = j + 1 < njobs ? work.first[j + 1] : work.total;
      if (merge && item + 1 < hi && item + 1 < jobEnd) {
        const int64_t last = item + std::min(std::min(hi, jobEnd) - item, mergeBlocks) - 1;
        nr = std::min(jobs[j].w->rows, r0 + (last - item + 1) * work.block) - r0;
        item = last;
      }
      runBlock(j, r0, nr);
      continue;
    }
    for (int k = 0; k < njobs; ++k)
      runBlock(k, r0, nr);
    (*paired)(r0, nr);
  }
}

/// Small T: fused quantized-row x f32 dots, at most kMaxDotRows tokens per call.
void fusedMany(ThreadPool &pool, const MatmulJob *jobs, int njobs, const float *x, int64_t T,
               int64_t ldx, const RowEpilogue *paired) {
  const int64_t cols = jobs[0].w->cols;
  kernels::DotFn full[8], rest[8];
  bool needSums = false;
  const int64_t fullT = T / kernels::kMaxDotRows * kernels::kMaxDotRows;
  for (int j = 0; j < njobs; ++j) {
    if (isGroupedInt(jobs[j].w->dtype) || kernels::isFamilyType(jobs[j].w->dtype)) {
      // grouped integers and the AAAC/QTEA/HBQ families: their own row dots below
      full[j] = rest[j] = nullptr;
      continue;
    }
    full[j] = kernels::dotKernel(jobs[j].w->dtype, kernels::kMaxDotRows);
    rest[j] = T > fullT ? kernels::dotKernel(jobs[j].w->dtype, int(T - fullT)) : nullptr;
    needSums = needSums || kernels::dotNeedsSums(jobs[j].w->dtype);
  }
  const int64_t lds = (cols + kernels::kSumGroup - 1) / kernels::kSumGroup;
  thread_local std::vector<float> sums;
  if (needSums) {
    sums.resize(size_t(T * lds));
    for (int64_t t = 0; t < T; ++t)
      kernels::groupSums(x + t * ldx, cols, sums.data() + t * lds);
  }
  const float *sp = needSums ? sums.data() : nullptr;
  const WorkList work(jobs, njobs, kFusedRowBlock, paired != nullptr);
  auto runBlock = [&](int j, int64_t r0, int64_t nr) {
    const MatmulJob &job = jobs[j];
    const WeightMatrix &w = *job.w;
    for (int64_t r = r0; r < r0 + nr; ++r) {
      const uint8_t *row = w.row(r);
      int64_t t = 0;
      if (!full[j] && kernels::isFamilyType(w.dtype)) {
        for (; t < T; t += kernels::kMaxFamilyDotRows)
          kernels::familyDotRows(w.dtype, row, w.aux, r, w.rows, cols, x + t * ldx, ldx,
                                 int(std::min<int64_t>(kernels::kMaxFamilyDotRows, T - t)),
                                 job.y + t * job.ldy + r, job.ldy);
        continue;
      }
      if (!full[j]) {
        for (; t < T; t += kernels::kMaxGroupedDotRows)
          kernels::dotGroupedRows(w.dtype, row, cols, x + t * ldx, ldx,
                                  int(std::min<int64_t>(kernels::kMaxGroupedDotRows, T - t)),
                                  job.y + t * job.ldy + r, job.ldy);
        continue;
      }
      for (; t < fullT; t += kernels::kMaxDotRows)
        full[j](row, cols, x + t * ldx, ldx, sp ? sp + t * lds : nullptr, lds,
                job.y + t * job.ldy + r, job.ldy);
      if (t < T)
        rest[j](row, cols, x + t * ldx, ldx, sp ? sp + t * lds : nullptr, lds,
                job.y + t * job.ldy + r, job.ldy);
    }
    addBias(job, T, r0, nr);
  };
  pool.parallelFor(0, work.total, grainFor(pool, work.total, T), [&](int64_t lo, int64_t hi) {
    runItems(work, jobs, njobs, paired, lo, hi, runBlock);
  });
}

/// Block-format weights x int8 activations (kernels/dot_int8.h): X is
/// quantized once per call, then each work item runs its row block for every
/// group of up to kMaxInt8Rows tokens (the tokens outer, so a group's
/// quantized rows and the block's weight rows stay in L1 across the block).
void int8Many(ThreadPool &pool, const MatmulJob *jobs, int njobs, const float *x, int64_t T,
              int64_t ldx, const RowEpilogue *paired, const codegen::Rows8Fn *generated8) {
  const int64_t cols = jobs[0].w->cols;
  constexpr int64_t G = kernels::kMaxInt8Rows;
  const int64_t fullT = T / G * G;
  kernels::Int8DotFn full[8], rest[8];
  kernels::Rows8DotFn full8[8] = {}, rest8[8] = {};
  for (int j = 0; j < njobs; ++j) {
    const WeightMatrix &w = *jobs[j].w;
    // Rows outside the eight-row copy (none for grouped integers, whose
    // copies cover every row) take the row kernels of the block formats.
    full[j] = rest[j] = nullptr;
    if (kernels::hasInt8Dot(w.dtype)) {
      full[j] = kernels::int8DotKernel(w.dtype, int(G));
      rest[j] = T > fullT ? kernels::int8DotKernel(w.dtype, int(T - fullT)) : nullptr;
    }
    if (w.rows8) {
      full8[j] = kernels::rows8DotKernel(w.rows8Type, int(G));
      rest8[j] = T > fullT ? kernels::rows8DotKernel(w.rows8Type, int(T - fullT)) : nullptr;
    }
  }
  const int64_t nb = cols / kernels::kInt8Block;
  thread_local std::vector<int8_t> xq;
  thread_local std::vector<float> xd, xs;
  xq.resize(size_t(T * cols));
  xd.resize(size_t(T * nb));
  xs.resize(size_t(T * nb));
  int8_t *q = xq.data();
  float *d = xd.data(), *s = xs.data();
  auto quantize = [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t)
      kernels::quantizeRowInt8(x + t * ldx, cols, q + t * cols, d + t * nb, s + t * nb);
  };
  if (T > G)
    pool.parallelFor(0, T, 0, quantize);
  else
    quantize(0, T);
  const WorkList work(jobs, njobs, kFusedRowBlock, paired != nullptr);
  auto runBlock = [&](int j, int64_t r0, int64_t nr) {
    const MatmulJob &job = jobs[j];
    const WeightMatrix &w = *job.w;
    // Row blocks start at multiples of kFusedRowBlock (a multiple of 8).
    const int64_t n8 = w.rows8 ? nr / kernels::kRows8 * kernels::kRows8 : 0;
    const int64_t gb = w.rows8 ? kernels::rows8GroupBytes(w.rows8Type, cols) : 0;
    const codegen::Rows8Fn gen8 = w.rows8 && generated8 ? generated8[j] : nullptr;
    if (gen8) // up to kMaxRows8 tokens a call: each pass over the weights serves more rows
      for (int64_t t = 0; t < T; t += codegen::kMaxRows8)
        gen8(w.rows8, q + t * cols, d + t * nb, s + t * nb, cols, nb,
             int32_t(std::min<int64_t>(codegen::kMaxRows8, T - t)), job.y + t * job.ldy, job.ldy,
             r0 / kernels::kRows8, (r0 + n8) / kernels::kRows8);
    for (int64_t t = 0; t < T; t += G) {
      const kernels::Int8DotFn fn = t < fullT ? full[j] : rest[j];
      const kernels::Rows8DotFn fn8 = t < fullT ? full8[j] : rest8[j];
      if (!gen8)
        for (int64_t r = r0; r < r0 + n8; r += kernels::kRows8)
          fn8(w.rows8 + (r / kernels::kRows8) * gb, cols, q + t * cols, d + t * nb, s + t * nb,
              cols, nb, job.y + t * job.ldy + r, job.ldy);
      for (int64_t r = r0 + n8; r < r0 + nr; ++r)
        fn(w.row(r), cols, q + t * cols, d + t * nb, s + t * nb, cols, nb, job.y + t * job.ldy + r,
           job.ldy);
    }
    addBias(job, T, r0, nr);
  };
  // One token group: a chunk's blocks of one matrix are one kernel call.
  bool allGenerated = generated8 != nullptr;
  for (int j = 0; j < njobs; ++j)
    allGenerated = allGenerated && jobs[j].w->rows8 && generated8[j];
  // More tokens than a call takes: runBlock passes over its rows once per
  // kMaxRows8 tokens, so a merged range is kept to what L2 holds between
  // passes (~96 KiB of weights: one call per ~150 rows of q8_0 x 576 rather
  // than per 16-row block; fewer calls, and the kernel's per-call set-up is
  // spread over more rows).
  int64_t mergeBlocks = INT64_MAX;
  if (allGenerated && T > int64_t(codegen::kMaxRows8)) {
    int64_t rowBytes = 1;
    for (int j = 0; j < njobs; ++j)
      rowBytes = std::max(rowBytes, kernels::rows8GroupBytes(jobs[j].w->rows8Type, cols) /
                                        kernels::kRows8);
    mergeBlocks = std::max<int64_t>(1, (int64_t(96) << 10) / (rowBytes * kFusedRowBlock));
  }
  const bool merge = allGenerated || T <= G;
  pool.parallelFor(0, work.total, grainFor(pool, work.total, T), [&](int64_t lo, int64_t hi) {
    runItems(work, jobs, njobs, paired, lo, hi, runBlock, merge, mergeBlocks);
  });
}

/// The artifact's generated f32-activation kernels on each block of rows:
/// float rows against all T tokens in one call, block formats (T <=
/// codegen::kMaxRows here) in one call too.
void generatedMany(ThreadPool &pool, const MatmulJob *jobs, const codegen::MatvecFn *fns,
                   int njobs, const float *x, int64_t T, int64_t ldx, const RowEpilogue *paired) {
  const WorkList work(jobs, njobs, kFusedRowBlock, paired != nullptr);
  auto runBlock = [&](int j, int64_t r0, int64_t nr) {
    const MatmulJob &job = jobs[j];
    // Float rows take any T; block formats reach here with T <= kMaxRows.
    fns[j](job.w->data, job.w->rowStride, x, ldx, int32_t(T), job.y, job.ldy, r0, r0 + nr);
    addBias(job, T, r0, nr);
  };
  // Decode-sized steps: a chunk's blocks of one matrix are one kernel call.
  const bool merge = T <= codegen::kMaxRows;
  pool.parallelFor(0, work.total, grainFor(pool, work.total, T), [&](int64_t lo, int64_t hi) {
    runItems(work, jobs, njobs, paired, lo, hi, runBlock, merge);
  });
}

/// Larger T: dequantize a block of rows once, reuse it for every token.
void blockedMany(ThreadPool &pool, const MatmulJob *jobs, int njobs, const float *x, int64_t T,
                 int64_t ldx, const RowEpilogue *paired) {
  const int64_t cols = jobs[0].w->cols;
  const WorkList work(jobs, njobs, kRowBlock, paired != nullptr);
  auto runBlock = [&](int j, int64_t r0, int64_t nr) {
    thread_local std::vector<float> buf;
    if (buf.size() < size_t(kRowBlock * cols))
      buf.resize(size_t(kRowBlock * cols));
    const MatmulJob &job = jobs[j];
    const WeightMatrix &w = *job.w;
    const bool direct = w.dtype == DType::F32 && w.data; // read F32 rows in place
    float *y = job.y;
    const int64_t ldy = job.ldy;
    const float *rp[kRowBlock];
    for (int64_t i = 0; i < nr; ++i) {
      if (direct) {
        rp[i] = reinterpret_cast<const float *>(w.row(r0 + i));
      } else {
        float *dst = buf.data() + i * cols;
        if (!w.data || w.dtype == DType::F16 || w.dtype == DType::BF16 ||
            kernels::isFamilyType(w.dtype))
          loadRow(w, r0 + i, dst); // (a weight stored packed only: unpacked row by row)
        else
          kernels::dequantRowFast(w.dtype, w.row(r0 + i), dst, cols);
        rp[i] = dst;
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
    }
    addBias(job, T, r0, nr);
  };
  pool.parallelFor(0, work.total, 1, [&](int64_t lo, int64_t hi) {
    runItems(work, jobs, njobs, paired, lo, hi, runBlock);
  });
}

} // namespace

void matmulMany(ThreadPool &pool, const MatmulJob *jobs, int njobs, const float *x, int64_t T,
                int64_t ldx, const RowEpilogue *paired, const MatmulPaths &paths) {
  if (njobs <= 0 || T <= 0)
    return;
  if (njobs > 8)
    throw std::runtime_error("matmulMany: at most 8 products per call");
  for (int j = 0; j < njobs; ++j)
    if (jobs[j].w->cols != jobs[0].w->cols)
      throw std::runtime_error("matmulMany: products with different input widths");
  if (paired)
    for (int j = 0; j < njobs; ++j)
      if (jobs[j].w->rows != jobs[0].w->rows)
        throw std::runtime_error("matmulMany: paired products with different output widths");
  bool accumulate = false;
  for (int j = 0; j < njobs; ++j)
    accumulate = accumulate || jobs[j].accumulate;
  if (accumulate) {
    // Products go to scratch [T, rows] per job, then are added to Y: the
    // kernels store their results, and Y may be read by nothing else.
    thread_local std::vector<float> scratch;
    int64_t total = 0;
    for (int j = 0; j < njobs; ++j)
      total += jobs[j].accumulate ? T * jobs[j].w->rows : 0;
    if (scratch.size() < size_t(total))
      scratch.resize(size_t(total));
    MatmulJob plain[8];
    int64_t at = 0;
    for (int j = 0; j < njobs; ++j) {
      plain[j] = jobs[j];
      plain[j].accumulate = false;
      if (jobs[j].accumulate) {
        plain[j].y = scratch.data() + at;
        plain[j].ldy = jobs[j].w->rows;
        at += T * jobs[j].w->rows;
      }
    }
    matmulMany(pool, plain, njobs, x, T, ldx, paired, paths);
    for (int j = 0; j < njobs; ++j) {
      if (!jobs[j].accumulate)
        continue;
      const int64_t rows = jobs[j].w->rows;
      for (int64_t t = 0; t < T; ++t) {
        float *yt = jobs[j].y + t * jobs[j].ldy;
        const float *st = plain[j].y + t * rows;
        for (int64_t r = 0; r < rows; ++r)
          yt[r] += st[r];
      }
    }
    return;
  }
  if (paths.int8) {
    bool int8 = jobs[0].w->cols % kernels::kInt8Block == 0;
    for (int j = 0; j < njobs; ++j)
      int8 = int8 && (kernels::hasInt8Dot(jobs[j].w->dtype) ||
                      (jobs[j].w->rows8 && jobs[j].w->rows % kernels::kRows8 == 0));
    if (int8) {
      int8Many(pool, jobs, njobs, x, T, ldx, paired, paths.generated8);
      return;
    }
  }
  // A weight stored only in the eight-row layout (the compiler chose int8
  // for it) read with f32 activations: rows are unpacked one by one.
  for (int j = 0; j < njobs; ++j)
    if (!jobs[j].w->data) {
      blockedMany(pool, jobs, njobs, x, T, ldx, paired);
      return;
    }
  if (paths.generated) {
    // Longer steps run generated kernels for float rows only (they take
    // any T): a block format would be decoded again for every group of
    // kMaxRows tokens, where blockedMany decodes each row once for all.
    bool anyT = true;
    for (int j = 0; j < njobs; ++j)
      anyT = anyT && codegen::floatRowsAnyT(jobs[j].w->dtype);
    if (T <= codegen::kMaxRows || anyT) {
      generatedMany(pool, jobs, paths.generated, njobs, x, T, ldx, paired);
      return;
    }
  }
  bool fused = T <= kFusedMaxT;
  for (int j = 0; j < njobs; ++j)
    fused = fused && (kernels::hasFusedDot(jobs[j].w->dtype) || isGroupedInt(jobs[j].w->dtype) ||
                      kernels::isFamilyType(jobs[j].w->dtype));
  if (fused)
    fusedMany(pool, jobs, njobs, x, T, ldx, paired);
  else
    blockedMany(pool, jobs, njobs, x, T, ldx, paired);
}

void matmul(ThreadPool &pool, const WeightMatrix &w, const float *x, int64_t T, int64_t ldx,
            float *y, int64_t ldy, const float *bias) {
  if (w.rows == 0)
    return;
  MatmulJob job{&w, y, ldy, bias};
  matmulMany(pool, &job, 1, x, T, ldx);
}

} // namespace llmc
