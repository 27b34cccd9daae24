//===- dot_int8.h - Block-quantized weights x int8 activations -*- C++ -*-===//
// The fast path of the kernel engine for the 32-weight block formats
// (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1), as llama.cpp runs them: the activation
// rows of a product are quantized once to int8 per block of 32 (scale
// d = max|x| / 127, q = round(x / d)), and each weight block is dotted with
// them in integer arithmetic (32 multiply-adds to int16 pairs, then int32),
// scaled once per block: sum_b dw_b * dx_b * (w_b . q_b) (+ m_b * s_b for
// formats with a minimum, s_b = dx_b * sum(q_b)). Per 32 weights that is
// one integer dot and one float multiply-add instead of 32 float ones, and
// the 4-bit weights never leave the integer domain.
//
// The result differs from the f32-activation dots by the activation
// rounding (relative error about 1/254 per element, averaging out in the
// sum); ExecutorOptions::exact_activations turns it off.
//
// Internal to the runtime: the AVX2 kernels live in dot_int8_avx2.cpp, the
// quantizer, the portable kernels and the dispatch in dot_int8.cpp.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/dtype.h"

#include <cstdint>

namespace llmc::kernels {

/// Activation values per scale.
inline constexpr int64_t kInt8Block = 32;
/// Most activation rows one int8 dot call handles.
inline constexpr int kMaxInt8Rows = 4;

/// Quantize n floats (n a multiple of kInt8Block) to q[n], with the scale
/// d[b] and d[b] * sum(q of block b) in s[b] of each block.
void quantizeRowInt8(const float *x, int64_t n, int8_t *q, float *d, float *s);

/// Whether t has int8-activation kernels.
bool hasInt8Dot(DType t);

/// out[j * ldo] = dot(weight row, activation row j) for j < nx, over n
/// elements: row j's values at xq + j * ldq, its scales and scaled sums at
/// xd + j * ldd and xs + j * ldd.
using Int8DotFn = void (*)(const uint8_t *row, int64_t n, const int8_t *xq, const float *xd,
                           const float *xs, int64_t ldq, int64_t ldd, float *out, int64_t ldo);

/// The fastest kernel for t and nx (1..kMaxInt8Rows) this build has; throws
/// std::runtime_error when !hasInt8Dot(t).
Int8DotFn int8DotKernel(DType t, int nx);
/// The portable kernel (integer dot per block, scalar); for tests and CPUs
/// without AVX2.
Int8DotFn int8DotKernelScalar(DType t, int nx);

namespace detail {
// Set by dot_int8_avx2.cpp when compiled with AVX2+FMA+F16C; null otherwise.
Int8DotFn avx2Int8DotKernel(DType t, int nx);
bool avx2QuantizeRowInt8(const float *x, int64_t n, int8_t *q, float *d, float *s);
} // namespace detail

} // namespace llmc::kernels
