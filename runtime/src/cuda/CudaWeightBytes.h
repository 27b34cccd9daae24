//===- CudaWeightBytes.h - A weight's bytes as the CUDA kernels read them -*- C++ -*-===//
// The generated CUDA kernels read a matrix row-major in its own format
// (codegen/cuda/CudaKernelSource.h); the CPU engine may hold it only in its
// rows8 layout (eight rows interleaved), which is unpacked here.
//===----------------------------------------------------------------------===//
#pragma once
#include "../exec/KernelPlan.h"

#include <cstdint>
#include <vector>

namespace llmc::cuda {

/// The row-major bytes of w in its own format (rows8 copies unpacked);
/// std::runtime_error for a layout the GPU cannot read.
std::vector<uint8_t> rowMajorBytes(const WeightMatrix &w);

} // namespace llmc::cuda
