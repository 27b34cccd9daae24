//===- WeightStore.cpp - The weights an llm.weight op names -------------===//
#include "compiler/weights/WeightStore.h"
#include <stdexcept>

namespace llmc {

namespace {
thread_local WeightStore *activeStore = nullptr;
}

WeightStore::WeightStore(const SourceModel &src) : source_(&src) {
  for (const SourceTensor &t : src.tensors)
    entries[t.name] = Entry{t.dtype, t.shape, t.data, t.nbytes, nullptr,
                            {{"origin", src.format}}};
}

const WeightStore::Entry *WeightStore::find(const std::string &name) const {
  auto it = entries.find(name);
  return it == entries.end() ? nullptr : &it->second;
}

void WeightStore::replace(const std::string &name, DType dtype,
                          std::vector<int64_t> shape, std::vector<uint8_t> bytes,
                          nlohmann::json info, std::vector<uint8_t> aux) {
  const int64_t cols = shape.empty() ? 1 : shape.back();
  const int64_t slabs = shape.size() == 3 ? shape[0] : 1;
  const int64_t slabRows = shape.size() >= 2 ? shape[shape.size() - 2] : 1;
  const int64_t wantAux = needsAux(dtype) ? slabs * auxBytes(dtype, slabRows, cols) : 0;
  if (int64_t(aux.size()) != wantAux)
    throw std::runtime_error("weight '" + name + "' (" + std::string(dtypeName(dtype)) +
                             "): " + std::to_string(aux.size()) + " bytes of side data, expected " +
                             std::to_string(wantAux));
  auto owned = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
  Entry e;
  e.dtype = dtype;
  e.shape = std::move(shape);
  e.data = owned->data();
  e.nbytes = static_cast<int64_t>(owned->size());
  e.owned = std::move(owned);
  e.info = std::move(info);
  if (wantAux)
    e.aux = std::make_shared<const std::vector<uint8_t>>(std::move(aux));
  entries[name] = std::move(e);
}

void WeightStore::dequantizeRows(const Entry &e, int64_t firstRow, int64_t numRows,
                                 float *out) {
  int64_t cols = e.shape.empty() ? 1 : e.shape.back();
  int64_t rb = rowBytes(e.dtype, cols);
  const auto *base = static_cast<const uint8_t *>(e.data);
  if (!needsAux(e.dtype)) {
    for (int64_t r = 0; r < numRows; ++r)
      dequantizeRow(e.dtype, base + (firstRow + r) * rb, out + r * cols, cols);
    return;
  }
  if (!e.aux)
    throw std::runtime_error(std::string(dtypeName(e.dtype)) + " weight without side data");
  const int64_t slabRows = e.shape.size() >= 2 ? e.shape[e.shape.size() - 2] : 1;
  const int64_t per = auxBytes(e.dtype, slabRows, cols);
  for (int64_t r = firstRow; r < firstRow + numRows; ++r)
    dequantizeRowAux(e.dtype, base + r * rb, e.aux->data() + (r / slabRows) * per, r % slabRows,
                     slabRows, out + (r - firstRow) * cols, cols);
}

WeightStore *WeightStore::active() { return activeStore; }

llvm::raw_ostream &WeightStore::progress() const { return quiet_ ? llvm::nulls() : llvm::errs(); }

llvm::raw_ostream &WeightStore::progressStream() {
  return activeStore ? activeStore->progress() : llvm::errs();
}

WeightStore::Scope::Scope(WeightStore &store) : previous(activeStore) {
  activeStore = &store;
}
WeightStore::Scope::~Scope() { activeStore = previous; }

} // namespace llmc
