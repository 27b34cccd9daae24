//===- dot_grouped.h - Fused dots of grouped-integer rows ------*- C++ -*-===//
// Decode-speed dot products of one row of a grouped-integer weight type
// (llmc/format/grouped_int.h) with f32 activations, without dequantizing
// into a buffer: per group, d * sum((q - off) * x) for symmetric types and
// d * sum(q * x) + m * sum(x) for asymmetric ones. The result differs from
// dequantizeRow + dot only by float re-association.
//
// AVX2+FMA kernels (dedicated code expansion for 2, 4 and 8 bits, a byte
// shuffle for 3, 5, 6 and 7) when the build targets them, else portable C++.
// Internal to the runtime.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/dtype.h"

#include <cstdint>

namespace llmc::kernels {

/// Most activation rows dotGroupedRows handles in one call.
inline constexpr int kMaxGroupedDotRows = 4;

/// dot(row, x) over n elements; row is n elements of grouped-integer type t.
/// Throws std::runtime_error if t is not grouped or its group does not
/// divide n.
float dotGroupedRow(DType t, const void *row, const float *x, int64_t n);

/// out[j * ldo] = dot(row, x + j * ldx) for j < nx (1..kMaxGroupedDotRows):
/// the weight row is read once for all nx activation rows.
void dotGroupedRows(DType t, const void *row, int64_t n, const float *x, int64_t ldx, int nx,
                    float *out, int64_t ldo);

/// The portable kernel, whatever the build targets (for tests).
void dotGroupedRowsScalar(DType t, const void *row, int64_t n, const float *x, int64_t ldx,
                          int nx, float *out, int64_t ldo);

/// Whether dotGroupedRows uses SIMD kernels in this build.
bool haveSimdGroupedDot();

} // namespace llmc::kernels
