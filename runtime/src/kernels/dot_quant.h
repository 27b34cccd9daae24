//===- dot_quant.h - Fused dots of stored weight rows with f32 rows -*- C++ -*-===//
// Decode (one or a few tokens) is a matrix-vector product bound by how fast
// the weights stream from memory, so the fused kernels read a quantized row
// once and expand each block to f32 in registers next to the FMA, instead of
// dequantizing into a buffer first. Activations stay f32: the result differs
// from dequantizeRow + dot only by float re-association (per block,
// scale * sum(q * x) and, for formats with a minimum, min * sum(x)).
//
// dequantRowFast is the prefill helper: SIMD expansion that gives exactly
// the same floats as llmc::dequantizeRow.
//
// Internal to the runtime; the AVX2 kernels live in dot_avx2.cpp, the
// portable ones and the dispatch in dot_quant.cpp.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/dtype.h"

#include <cstdint>

namespace llmc::kernels {

/// Most activation rows one fused call handles.
inline constexpr int kMaxDotRows = 4;
/// Group length of the activation sums that min formats use.
inline constexpr int64_t kSumGroup = 32;

/// out[j * ldo] = dot(weight row, x + j * ldx) for j < nx, over n elements.
/// sums: for types where dotNeedsSums(), groupSums() of each activation row
/// (row j at sums + j * lds); ignored otherwise (may be null).
using DotFn = void (*)(const uint8_t *row, int64_t n, const float *x, int64_t ldx,
                       const float *sums, int64_t lds, float *out, int64_t ldo);

/// Whether the fused kernels of t read per-group activation sums (formats
/// with a minimum, and Q4_0 whose -8 offset is applied as one).
bool dotNeedsSums(DType t);
/// sums[g] = x[32g] + ... + x[32g + 31] for g < n / 32 (n a multiple of 32).
void groupSums(const float *x, int64_t n, float *sums);

/// Whether t has fused kernels (the GGUF formats and the float types; other
/// types, e.g. grouped integers, go through dequantizeRow instead).
bool hasFusedDot(DType t);

/// The fastest kernel for t and nx (1..kMaxDotRows) this build has; throws
/// std::runtime_error when !hasFusedDot(t).
DotFn dotKernel(DType t, int nx);
/// The portable kernel (block dequantization + scalar dot); for tests.
DotFn dotKernelScalar(DType t, int nx);
/// Whether dotKernel returns SIMD kernels in this build.
bool haveSimdDot();

/// Same result as llmc::dequantizeRow(t, src, dst, n), bit for bit, faster.
void dequantRowFast(DType t, const uint8_t *src, float *dst, int64_t n);

namespace detail {
// Set by dot_avx2.cpp when compiled with AVX2+FMA+F16C; null otherwise.
DotFn avx2DotKernel(DType t, int nx);
bool avx2DequantRow(DType t, const uint8_t *src, float *dst, int64_t n);
} // namespace detail

} // namespace llmc::kernels
