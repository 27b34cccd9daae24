//===- PackedWeights.cpp - Weights the compiler stored packed ------------===//
#include "PackedWeights.h"
#include "../artifact/JsonFields.h"
#include "../kernels/rows8.h"
#include <stdexcept>

namespace llmc {

PackedWeights::PackedWeights(const Artifact &art) : art_(art) {
  const nlohmann::json *all = jsonf::find(art.manifest(), "packed_weights");
  if (!all)
    return;
  const std::string top = art.path() + ": packed_weights";
  if (!all->is_object())
    jsonf::fail(top, "must be an object");
  for (auto &[name, e] : all->items()) {
    const std::string ctx = top + " '" + name + "'";
    if (!e.is_object())
      jsonf::fail(ctx, "must be an object");
    if (jsonf::getString(e, "layout", ctx) != "rows8")
      jsonf::fail(ctx, "unknown layout (known: rows8)");
    Entry p;
    const std::string tensor = jsonf::getString(e, "tensor", ctx);
    p.bytes = art.tensor(tensor);
    if (!p.bytes || p.bytes->dtype != DType::U8)
      jsonf::fail(ctx, "tensor '" + tensor + "' is not a u8 tensor of the artifact");
    auto dtype = dtypeFromName(jsonf::getString(e, "dtype", ctx));
    auto format = dtypeFromName(jsonf::getString(e, "format", ctx));
    if (!dtype || !format || kernels::rows8Layout(*dtype) != format)
      jsonf::fail(ctx, "'format' must be the eight-row layout of 'dtype'");
    p.format = *format;
    const nlohmann::json &shape = jsonf::require(e, "shape", ctx);
    if (!shape.is_array() || (shape.size() != 2 && shape.size() != 3))
      jsonf::fail(ctx, "'shape' must be [rows, cols] or [experts, rows, cols]");
    std::vector<int64_t> dims;
    for (const nlohmann::json &d : shape) {
      dims.push_back(jsonf::asInt(d, "shape", ctx));
      if (dims.back() <= 0 || dims.back() > (int64_t(1) << 31))
        jsonf::fail(ctx, "'shape' has a dimension out of range");
    }
    // Experts: slab after slab, each whole groups of 8 rows.
    const int64_t slabRows = dims[dims.size() - 2], cols = dims.back();
    const int64_t rows = dims.size() == 3 ? dims[0] * slabRows : slabRows;
    if (slabRows % kernels::kRows8 != 0 || cols % (*format == DType::Q4_K ? 256 : 32) != 0 ||
        rows > (int64_t(1) << 31))
      jsonf::fail(ctx, "'shape' must be whole groups of 8 rows of 32-weight blocks");
    if (p.bytes->nbytes != rows / kernels::kRows8 * kernels::rows8GroupBytes(*format, cols))
      jsonf::fail(ctx, "tensor '" + tensor + "' has the wrong size for its shape and format");
    if (const TensorView *rowMajor = art.tensor(name)) {
      if (rowMajor->dtype != *dtype || rowMajor->shape != dims)
        jsonf::fail(ctx, "the row-major tensor of the same name has another type or shape");
      p.view = *rowMajor;
    } else {
      p.view.name = name;
      p.view.dtype = *dtype;
      p.view.shape = dims;
    }
    packed_.emplace(name, std::move(p));
  }
}

const TensorView *PackedWeights::find(const std::string &name) const {
  if (const TensorView *t = art_.tensor(name))
    return t;
  auto it = packed_.find(name);
  return it == packed_.end() ? nullptr : &it->second.view;
}

void PackedWeights::attach(const std::string &name, WeightMatrix &w, int64_t slab) const {
  auto it = packed_.find(name);
  if (it == packed_.end())
    return;
  // w is slab `slab` of the weight (0 for a matrix): its groups follow the
  // earlier slabs' (checked in the constructor: whole groups per slab).
  const int64_t groups = w.rows / kernels::kRows8;
  w.rows8 = static_cast<const uint8_t *>(it->second.bytes->data) +
            slab * groups * kernels::rows8GroupBytes(it->second.format, w.cols);
  w.rows8Type = it->second.format;
}

std::vector<WeightMatrix> PackedWeights::expertSlabs(const std::string &name,
                                                    const std::string &ctx) const {
  const TensorView *t = find(name);
  if (!t || t->shape.size() != 3)
    throw std::runtime_error(ctx + ": weight '" + name + "' is not an expert tensor of " +
                             art_.path());
  std::vector<WeightMatrix> v;
  for (int64_t e = 0; e < t->shape[0]; ++e) {
    WeightMatrix w =
        WeightMatrix::slab(*t, e, needsAux(t->dtype) ? art_.tensor(t->name + kAuxSuffix) : nullptr);
    attach(t->name, w, e);
    v.push_back(w);
  }
  return v;
}

} // namespace llmc
