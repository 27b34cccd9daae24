//===- Matmul.h - Y = X * W^T reading W in its stored dtype -----*- C++ -*-===//
// The one matrix product of the executor. W is [out, in] (rows contiguous),
// X is [T, in], Y is [T, out]. Parallel over blocks of output rows.
// Decode and other small T use the fused kernels (kernels/dot_quant.h): each
// quantized row is read once and expanded in registers next to the FMAs.
// Larger T (prefill) converts each block of weight rows to f32 once into a
// thread-local buffer and dots it with all T activation rows, so each
// dequantized row is reused across tokens. matmulMany runs several products
// that share X (q/k/v, gate/up) as one parallel loop.
//===----------------------------------------------------------------------===//
#pragma once
#include "ThreadPool.h"
#include "llmc/codegen.h"
#include "WeightMatrix.h"

namespace llmc {

/// Y[t*ldy + r] = dot(W row r, X[t*ldx ...]) + (bias ? bias[r] : 0).
void matmul(ThreadPool &pool, const WeightMatrix &w, const float *x, int64_t T, int64_t ldx,
            float *y, int64_t ldy, const float *bias = nullptr);

/// One product of matmulMany: Y = X * W^T (+ bias).
struct MatmulJob {
  const WeightMatrix *w = nullptr;
  float *y = nullptr;
  int64_t ldy = 0;
  const float *bias = nullptr;
  /// Y += X * W^T (+ bias): the product is added to what Y holds (a residual
  /// stream updated in place) instead of replacing it.
  bool accumulate = false;
};

/// Called with a block of output rows [r0, r0 + nr) once every job has
/// written them (for every token); runs on the thread that computed them.
using RowEpilogue = std::function<void(int64_t r0, int64_t nr)>;

/// Which kernels matmulMany may use beyond the library's f32-activation ones.
struct MatmulPaths {
  /// With every job's weights in a 32-weight block format (int8 kernels,
  /// kernels/dot_int8.h) or in an eight-row copy (WeightMatrix::rows8, which
  /// grouped integers gq4s/gq4a/gq8s get too), quantize X to int8 per 32
  /// and run integer dots, from the eight-row copy where there is one.
  bool int8 = false;
  /// Per job, the artifact's generated int8 kernel over the eight-row copy
  /// (null entries, or a null array: the library's).
  const codegen::Rows8Fn *generated8 = nullptr;
  /// Per job (all set), the generated f32-activation kernels, used when the
  /// int8 path does not apply: for T <= codegen::kMaxRows, and for float
  /// rows (f32, f16, bf16) at any T.
  const codegen::MatvecFn *generated = nullptr;
};

/// Runs every job (all with w->cols equal to X's width) in one parallel loop.
/// With `paired` (all jobs then have the same rows), each work item computes
/// the same row block of every job and then calls the epilogue on it, e.g.
/// the gated activation of gate and up.
void matmulMany(ThreadPool &pool, const MatmulJob *jobs, int njobs, const float *x, int64_t T,
                int64_t ldx, const RowEpilogue *paired = nullptr, const MatmulPaths &paths = {});

/// Largest T that uses the fused (decode) kernels.
inline constexpr int64_t kFusedMaxT = 4;

/// Dot product of n floats (vectorized).
float dot(const float *a, const float *b, int64_t n);

} // namespace llmc
