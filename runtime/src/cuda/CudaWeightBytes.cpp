//===- CudaWeightBytes.cpp - A weight's bytes as the CUDA kernels read them -===//
#include "CudaWeightBytes.h"

#include "llmc/dtype.h"
#include "../kernels/rows8.h"

#include <algorithm>
#include <stdexcept>

namespace llmc::cuda {

/// The row-major bytes of w in its own format (rows8 copies unpacked).
std::vector<uint8_t> rowMajorBytes(const WeightMatrix &w) {
  const int64_t stride = rowBytes(w.dtype, w.cols);
  std::vector<uint8_t> out(size_t(w.rows * stride));
  if (w.data) {
    for (int64_t r = 0; r < w.rows; ++r)
      std::copy(w.row(r), w.row(r) + stride, out.data() + r * stride);
    return out;
  }
  if (!w.rows8 || w.rows % kernels::kRows8 != 0)
    throw std::runtime_error("a weight stored only in a CPU layout the GPU cannot read");
  const int64_t gb = kernels::rows8GroupBytes(w.rows8Type, w.cols);
  for (int64_t r = 0; r < w.rows; ++r) {
    const uint8_t *group = w.rows8 + (r / kernels::kRows8) * gb;
    if (w.rows8Type == w.dtype) // Q4_0 ... Q4_K in their own layout
      kernels::unpackRows8Row(w.dtype, group, int(r % kernels::kRows8), w.cols,
                              out.data() + r * stride);
    else // grouped integers in a Q4_0/Q4_1/Q8_0 layout
      kernels::unpackRows8GroupedRow(w.dtype, group, int(r % kernels::kRows8), w.cols,
                                     out.data() + r * stride);
  }
  return out;
}


} // namespace llmc::cuda
