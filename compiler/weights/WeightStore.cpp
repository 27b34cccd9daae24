//===- WeightStore.cpp - The weights the IR holds, by name ---------------===//
#include "compiler/weights/WeightStore.h"
#include "compiler/weights/IrAttributes.h"
#include "compiler/artifact/ProgramExport.h"
#include "compiler/weights/WeightTypes.h"
#include "llmc/artifact.h"
#include "mlir/IR/Diagnostics.h"
#include <stdexcept>

using namespace mlir;

namespace llmc {

llm::ModelOp modelOf(ModuleOp module) {
  llm::ModelOp found;
  module.walk([&](llm::ModelOp m) {
    found = m;
    return WalkResult::interrupt();
  });
  return found;
}

WeightStore::WeightStore(ModuleOp module) : module_(module) {
  module.walk([&](llm::WeightOp w) {
    const std::string name = w.getName().str();
    ops_[name].push_back(w);
    if (entries.count(name))
      return;
    entries[name] = read(w);
    if (!entries[name].data)
      hasData_ = false;
  });
  if (entries.empty())
    hasData_ = false;
}

WeightStore::Entry WeightStore::read(llm::WeightOp w) const {
  const std::string name = w.getName().str();
  auto type = cast<RankedTensorType>(w.getType());
  std::optional<DType> dtype = dtypeOfElementType(type.getElementType());
  if (!dtype)
    throw std::runtime_error("weight '" + name + "' has no storage type");
  Entry e;
  e.dtype = *dtype;
  e.shape.assign(type.getShape().begin(), type.getShape().end());
  if (DictionaryAttr t = w.getTransformAttr())
    e.info = attrToJson(t);
  ElementsAttr value = w.getValueAttr();
  if (!value)
    return e;
  e.expanded = std::make_shared<std::vector<uint8_t>>();
  std::optional<ArrayRef<uint8_t>> bytes = storedBytesOf(value, *e.expanded);
  if (!bytes)
    throw std::runtime_error("weight '" + name + "': its blob has no data (a resource "
                             "section missing from the IR file?)");
  e.data = bytes->data();
  e.nbytes = int64_t(bytes->size());
  if (ElementsAttr aux = w.getAuxAttr()) {
    std::vector<uint8_t> unused;
    std::optional<ArrayRef<uint8_t>> a = storedBytesOf(aux, unused);
    if (!a || !unused.empty())
      throw std::runtime_error("weight '" + name + "': side data must be a blob");
    e.aux = *a;
  }
  return e;
}

const WeightStore::Entry *WeightStore::find(const std::string &name) const {
  auto it = entries.find(name);
  return it == entries.end() ? nullptr : &it->second;
}

std::vector<std::string> WeightStore::names() const {
  std::vector<std::string> out;
  for (auto &[n, e] : entries)
    out.push_back(n);
  return out;
}

void WeightStore::replace(const std::string &name, DType dtype, std::vector<int64_t> shape,
                          std::vector<uint8_t> bytes, nlohmann::json info,
                          std::vector<uint8_t> aux) {
  const int64_t cols = shape.empty() ? 1 : shape.back();
  const int64_t slabs = shape.size() == 3 ? shape[0] : 1;
  const int64_t slabRows = shape.size() >= 2 ? shape[shape.size() - 2] : 1;
  const int64_t wantAux = needsAux(dtype) ? slabs * auxBytes(dtype, slabRows, cols) : 0;
  if (int64_t(aux.size()) != wantAux)
    throw std::runtime_error("weight '" + name + "' (" + std::string(dtypeName(dtype)) +
                             "): " + std::to_string(aux.size()) + " bytes of side data, expected " +
                             std::to_string(wantAux));
  auto it = ops_.find(name);
  if (it == ops_.end())
    throw std::runtime_error("weight '" + name + "' is not in the IR");
  MLIRContext *ctx = module_.getContext();
  Builder b(ctx);
  ElementsAttr value = ownedBytesAttr(ctx, name, std::move(bytes));
  ElementsAttr auxAttr = wantAux ? ownedBytesAttr(ctx, name + kAuxSuffix, std::move(aux))
                                 : ElementsAttr();
  auto dict = cast<DictionaryAttr>(jsonToAttribute(b, info));
  auto type = RankedTensorType::get(shape, weightElementType(ctx, dtype));
  for (llm::WeightOp w : it->second) {
    w.setValueAttr(value);
    if (auxAttr)
      w.setAuxAttr(auxAttr);
    else
      w.removeAuxAttr();
    w.setTransformAttr(dict);
    w.getResult().setType(type);
  }
  entries[name] = read(it->second.front());
}

void WeightStore::dequantizeRows(const Entry &e, int64_t firstRow, int64_t numRows,
                                 float *out) {
  if (!e.data)
    throw std::runtime_error("a weight without data in the IR");
  int64_t cols = e.shape.empty() ? 1 : e.shape.back();
  int64_t rb = rowBytes(e.dtype, cols);
  const auto *base = static_cast<const uint8_t *>(e.data);
  if (!needsAux(e.dtype)) {
    for (int64_t r = 0; r < numRows; ++r)
      dequantizeRow(e.dtype, base + (firstRow + r) * rb, out + r * cols, cols);
    return;
  }
  if (e.aux.empty())
    throw std::runtime_error(std::string(dtypeName(e.dtype)) + " weight without side data");
  const int64_t slabRows = e.shape.size() >= 2 ? e.shape[e.shape.size() - 2] : 1;
  const int64_t per = auxBytes(e.dtype, slabRows, cols);
  for (int64_t r = firstRow; r < firstRow + numRows; ++r)
    dequantizeRowAux(e.dtype, base + r * rb, e.aux.data() + (r / slabRows) * per, r % slabRows,
                     slabRows, out + (r - firstRow) * cols, cols);
}

TokenizerData WeightStore::tokenizer() const {
  llm::ModelOp model = modelOf(module_);
  if (!model || !model.getTokenizerAttr())
    return {};
  std::vector<uint8_t> scratch;
  std::optional<ArrayRef<uint8_t>> bytes = storedBytesOf(model.getTokenizerAttr(), scratch);
  if (!bytes)
    throw std::runtime_error("the model's tokenizer blob has no data");
  nlohmann::json j = nlohmann::json::parse(bytes->begin(), bytes->end(), nullptr, false);
  if (j.is_discarded())
    throw std::runtime_error("the model's tokenizer is not valid JSON");
  return tokenizerFromJson(j);
}

int64_t WeightStore::vocabSize() const {
  llm::ModelOp model = modelOf(module_);
  if (!model)
    return 0;
  if (auto v = dyn_cast_or_null<IntegerAttr>(model.getConfig().get("vocab_size")))
    return v.getInt();
  return 0;
}

std::string WeightStore::sourcePath() const {
  llm::ModelOp model = modelOf(module_);
  if (model && model.getSourceAttr())
    if (auto p = dyn_cast_or_null<StringAttr>(model.getSourceAttr().get("path")))
      return p.str();
  return "the model";
}

void ProgressLog::write_impl(const char *ptr, size_t size) {
  pos_ += size;
  for (size_t i = 0; i < size; ++i) {
    if (ptr[i] == '\n')
      emitLine();
    else
      line_ += ptr[i];
  }
}

void ProgressLog::emitLine() {
  if (!line_.empty())
    emitRemark(op_->getLoc()) << line_;
  line_.clear();
}

ProgressLog::~ProgressLog() {
  flush();
  emitLine();
}

} // namespace llmc
