//===- PackedWeights.h - Weights the compiler stored packed -----*- C++ -*-===//
// The manifest's "packed_weights": for each weight llmk-select-kernels gave
// the rows8 layout, the U8 tensor holding it in that layout (written at
// compile time; the runtime maps it and repacks nothing):
//   "packed_weights": {"blk.0.attn_q.weight": {"tensor": "blk.0.attn_q.weight.rows8",
//       "layout": "rows8", "format": "q8_0", "dtype": "q8_0", "dtype_nbytes": 352512,
//       "shape": [576, 576]}}
// (dtype_nbytes: the bytes the weight takes in its own format, for reports.)
// An expert tensor [experts, rows, cols] is packed slab after slab. The
// row-major tensor is stored too only where a product reads it so. Everything is checked against the
// artifact: the tensor exists, its size is the layout's, the format is the
// layout of the dtype.
//===----------------------------------------------------------------------===//
#pragma once
#include "WeightMatrix.h"
#include "llmc/artifact.h"
#include <map>
#include <string>
#include <vector>

namespace llmc {

class PackedWeights {
public:
  /// Throws std::runtime_error naming the artifact on a malformed entry.
  explicit PackedWeights(const Artifact &art);

  /// The weight `name`: its stored tensor, or (stored packed only) a view
  /// with its dtype and shape and no data; null when neither exists.
  const TensorView *find(const std::string &name) const;
  /// Points `w` (weight `name`, or slab `slab` of an expert tensor) at its
  /// packed layout, when it has one.
  void attach(const std::string &name, WeightMatrix &w, int64_t slab = 0) const;
  /// Each expert's slab of the expert tensor `name` ([experts, rows, cols])
  /// as a matrix, its packed layout attached; std::runtime_error naming ctx
  /// when the artifact has no such tensor.
  std::vector<WeightMatrix> expertSlabs(const std::string &name, const std::string &ctx) const;
  bool empty() const { return packed_.empty(); }

private:
  struct Entry {
    const TensorView *bytes = nullptr;
    DType format = DType::F32;
    TensorView view; // logical dtype and shape; data only if stored row-major too
  };
  const Artifact &art_;
  std::map<std::string, Entry> packed_;
};

} // namespace llmc
