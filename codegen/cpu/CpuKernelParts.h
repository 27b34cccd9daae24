//===- CpuKernelParts.h - Pieces of the model's CPU kernel source -*- C++ -*-===//
// Internal to codegen/cpu: what kernelSource() and rowDecoderSource()
// (CpuKernelSource.cpp) assemble. The common prelude of every translation
// unit (CpuKernelPrelude.cpp), the f32-activation matrix-vector kernels and
// the block decoders they share with the row decoders (CpuFloatKernels.cpp),
// and the int8-activation kernels over the eight-row layout
// (CpuRows8Kernels.cpp).
//===----------------------------------------------------------------------===//
#pragma once
#include "codegen/cpu/CpuKernelSource.h"
#include "llmc/dtype.h"

#include <string>

namespace llmc::codegen::detail {

/// Elements per block and bytes per block of a generated format.
struct Layout {
  int block, bytes;
};

/// The layout of a format with f32-activation kernels (f32, f16, bf16: one
/// element per block; q8_0, q4_0, q4_1, q5_0, q5_1); false for any other.
bool layoutOf(DType t, Layout &l);

/// The start of every generated translation unit: includes, the eight-row
/// kernels' instruction-set macros, the vector types and loads, f16/bf16
/// decoding, and llmc_codegen_abi().
const char *kernelPrelude();

/// Statements that turn block `blk` into four 8-float weight vectors
/// w0..w3 (elements 0-7, 8-15, 16-23, 24-31, unscaled) and its scale `d`
/// (and minimum `m` for q4_1 and q5_1). Throws std::logic_error for a
/// format without a generated decoder.
std::string decodeBlock(DType t);

/// The f32-activation kernel (codegen::MatvecFn) for `s`, a canGenerate()
/// format and width.
std::string f32ActivationKernel(const MatvecSpec &s);

/// The int8-activation kernel over the eight-row layout (codegen::Rows8Fn)
/// for `s`, a canGenerateRows8() format and width.
std::string rows8Kernel(const MatvecSpec &s);

} // namespace llmc::codegen::detail
