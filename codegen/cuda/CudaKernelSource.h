//===- CudaKernelSource.h - CUDA C++ source of a model's GPU kernels -*- C++ -*-===//
// The CUDA backend's first kernels: one matrix-vector product per (weight
// format, input width) the model multiplies by, with the width and the
// block layout compile-time constants, over f32 activations. The source is
// self-contained CUDA C++ (no CUDA headers: NVRTC compiles it as is), so
// the compiler turns it into cubin and PTX without a GPU (CudaCompiler.h).
//
// Kernel ABI (extern "C", one per (format, width)):
//   llmc_cu_mv_<format>_<cols>(const unsigned char *w, long long rowStride,
//       const float *x, long long ldx, int T, float *y, long long ldy,
//       long long rows)
// y[t * ldy + r] = dot(row r of w (rowStride bytes apart), x + t * ldx) for
// t < T (1..kCudaMaxTokens) and r < rows. One warp per row, launched with
// blockDim.x = 32 * kCudaRowsPerBlock and gridDim.x = ceil(rows /
// kCudaRowsPerBlock). A lane takes units of 8 weights (a quarter of a
// 32-weight block), strided by 32 over the row, then the warp sums its
// lanes by shuffles.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/dtype.h"

#include <cstdint>
#include <string>
#include <vector>

namespace llmc::codegen {

constexpr int kCudaMaxTokens = 8;
constexpr int kCudaRowsPerBlock = 4;

struct CudaMatvecSpec {
  DType dtype;
  int64_t cols;
  std::string symbol() const; // llmc_cu_mv_<format>_<cols>
};

/// Formats with a generated CUDA matrix-vector kernel (f32, f16, q8_0,
/// q4_0, q4_1) at widths that are a multiple of 32.
bool canGenerateCuda(DType dtype, int64_t cols);

/// The translation unit: a kernel for each of `specs` (deduplicated, in
/// order). std::invalid_argument for a spec canGenerateCuda() refuses.
std::string cudaKernelSource(const std::vector<CudaMatvecSpec> &specs);

} // namespace llmc::codegen
