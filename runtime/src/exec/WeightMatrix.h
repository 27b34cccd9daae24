//===- WeightMatrix.h - A stored weight matrix and its row loader -*- C++ -*-===//
// A [rows, cols] matrix in its stored dtype (a 2-D weight or one expert's
// slab of a 3-D weight). loadRow converts one row to f32: F32/F16/BF16 have
// inline fast paths (F16C when available), block-quantized types go through
// llmc::dequantizeRow.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/model.h"

#include <cstdint>

namespace llmc {

struct WeightMatrix {
  const uint8_t *data = nullptr;
  DType dtype = DType::F32;
  int64_t rows = 0, cols = 0;
  int64_t rowStride = 0; // bytes per row
  const uint8_t *aux = nullptr; // side data (needsAux(dtype)), this matrix's part
  /// The eight-row interleaved layout (kernels/rows8.h) the compiler stored
  /// (or, for older artifacts, the kernel engine built), or null; group g
  /// (rows 8g..8g+7) at rows8 + g * rows8GroupBytes(rows8Type, cols), in the
  /// layout of rows8Type. A weight stored only packed has data == null:
  /// loadRow unpacks its rows.
  const uint8_t *rows8 = nullptr;
  DType rows8Type = DType::F32;

  const uint8_t *row(int64_t r) const { return data + r * rowStride; }

  /// The whole tensor as a matrix of rows x cols (cols = innermost dim).
  /// `aux` is the companion "<name>.aux" tensor, required when
  /// needsAux(t.dtype) (its size is checked), ignored otherwise.
  static WeightMatrix of(const TensorView &t, const TensorView *aux = nullptr);
  /// Slab `index` of a 3-D tensor [n, rows, cols] (and its side data).
  static WeightMatrix slab(const TensorView &t, int64_t index, const TensorView *aux = nullptr);
};

/// Convert row r of w to f32 (w.cols floats).
void loadRow(const WeightMatrix &w, int64_t r, float *dst);

/// Local IEEE half -> float (bit exact), independent of other kernels.
float halfBitsToFloat(uint16_t h);

} // namespace llmc
