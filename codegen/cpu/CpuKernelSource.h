//===- CpuKernelSource.h - C++ source of the model's CPU kernels -*- C++ -*-===//
// One matrix-vector kernel per (weight format, input width) the model's
// kernel plan multiplies by, with the width and the block layout compile-time
// constants (fully unrolled block loops, vectorized by the host compiler for
// each instruction-set level). The source is the artifact's portable form of
// its kernels (see runtime/src/codegen/GeneratedKernels.h for the ABI).
//===----------------------------------------------------------------------===//
#pragma once
#include "codegen/cpu/CpuOpKernels.h"
#include "llmc/dtype.h"

#include <cstdint>
#include <string>
#include <vector>

namespace llmc::codegen {

struct MatvecSpec {
  DType dtype;
  int64_t cols;
  std::string symbol() const;      // llmc_mv_<format>_<cols>: codegen::MatvecFn
  std::string rows8Symbol() const; // llmc_r8_<format>_<cols>: codegen::Rows8Fn
};

/// Formats that get an int8-activation kernel over the eight-row layout
/// (q8_0, q4_0, q4_1, q5_0, q5_1, q4_K).
bool hasRows8Kernel(DType dtype);
/// Whether `dtype` rows of `cols` get the int8 eight-row kernel (q4_K: the
/// only generated kernel, for widths that are a multiple of 256).
bool canGenerateRows8(DType dtype, int64_t cols);

/// Formats the generator has f32-activation kernels for (f32, f16, bf16,
/// q8_0, q4_0, q4_1, q5_0, q5_1); products in other formats (and q4_K's
/// f32-activation ones) run the runtime's library kernels.
bool canGenerate(DType dtype, int64_t cols);

/// The translation unit: kernels for `specs` (deduplicated, in order; the
/// eight-row int8 kernel after the matrix-vector one where the format has
/// them; q4_K the int8 kernel alone), then the op kernels `ops` (CpuOpKernels.h), and llmc_codegen_abi().
std::string kernelSource(const std::vector<MatvecSpec> &specs,
                         const std::vector<OpKernelSpec> &ops = {});

/// extern "C" void `name`(const unsigned char *row, float *out): one row of
/// `cols` in `dtype` (a canGenerate() format or a grouped integer) decoded
/// to floats, scale and minimum applied (an embedding lookup).
std::string rowDecoderSource(DType dtype, int64_t cols, const std::string &name);

} // namespace llmc::codegen
