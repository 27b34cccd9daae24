//===- Matmul.h - Y = X * W^T reading W in its stored dtype -----*- C++ -*-===//
// The one matrix product of the executor. W is [out, in] (rows contiguous),
// X is [T, in], Y is [T, out]. Parallel over blocks of output rows: each
// block's weight rows are converted to f32 once into a small thread-local
// buffer and dotted with all T activation rows, so prefill reuses each
// dequantized row across tokens and decode (T = 1) is a streaming matvec.
//===----------------------------------------------------------------------===//
#pragma once
#include "ThreadPool.h"
#include "WeightMatrix.h"

namespace llmc {

/// Y[t*ldy + r] = dot(W row r, X[t*ldx ...]) + (bias ? bias[r] : 0).
void matmul(ThreadPool &pool, const WeightMatrix &w, const float *x, int64_t T, int64_t ldx,
            float *y, int64_t ldy, const float *bias = nullptr);

/// Dot product of n floats (vectorized).
float dot(const float *a, const float *b, int64_t n);

} // namespace llmc
