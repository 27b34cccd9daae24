//===- IrAttributes.cpp - Bytes and JSON held by IR attributes ----------===//
#include "compiler/weights/IrAttributes.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinDialect.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/IR/BuiltinTypes.h"
#include "dialects/llm/IR/LlmOps.h"

using namespace mlir;

namespace llmc {

namespace {
ElementsAttr blobAttr(MLIRContext *ctx, StringRef key, AsmResourceBlob blob, int64_t n) {
  auto type = RankedTensorType::get({n}, IntegerType::get(ctx, 8));
  return DenseResourceElementsAttr::get(type, key, std::move(blob));
}
} // namespace

ElementsAttr ownedBytesAttr(MLIRContext *ctx, StringRef key, std::vector<uint8_t> bytes) {
  auto *owned = new std::vector<uint8_t>(std::move(bytes));
  const int64_t n = int64_t(owned->size());
  ArrayRef<char> data(reinterpret_cast<const char *>(owned->data()), owned->size());
  return blobAttr(ctx, key,
                  UnmanagedAsmResourceBlob::allocateWithAlign(
                      data, 1, [owned](void *, size_t, size_t) { delete owned; }),
                  n);
}

ElementsAttr borrowedBytesAttr(MLIRContext *ctx, StringRef key, const void *data, int64_t n,
                               std::shared_ptr<const void> keepAlive) {
  ArrayRef<char> bytes(static_cast<const char *>(data), size_t(n));
  return blobAttr(ctx, key,
                  UnmanagedAsmResourceBlob::allocateWithAlign(
                      bytes, 1, [keep = std::move(keepAlive)](void *, size_t, size_t) {}),
                  n);
}

std::optional<ArrayRef<uint8_t>> storedBytesOf(ElementsAttr attr, std::vector<uint8_t> &scratch) {
  if (auto r = dyn_cast<DenseResourceElementsAttr>(attr)) {
    AsmResourceBlob *blob = r.getRawHandle().getBlob();
    if (!blob)
      return std::nullopt;
    ArrayRef<char> d = blob->getData();
    return ArrayRef<uint8_t>(reinterpret_cast<const uint8_t *>(d.data()), d.size());
  }
  auto dense = cast<DenseElementsAttr>(attr);
  ArrayRef<char> raw = dense.getRawData();
  const auto *p = reinterpret_cast<const uint8_t *>(raw.data());
  if (!dense.isSplat())
    return ArrayRef<uint8_t>(p, raw.size());
  const int64_t n = dense.getNumElements();
  scratch.clear();
  for (int64_t i = 0; i < n; ++i)
    scratch.insert(scratch.end(), p, p + raw.size());
  return ArrayRef<uint8_t>(scratch);
}

Attribute jsonToAttribute(Builder &b, const nlohmann::json &j) {
  if (j.is_object()) {
    SmallVector<NamedAttribute> entries;
    for (auto &[k, v] : j.items())
      entries.push_back(b.getNamedAttr(k, jsonToAttribute(b, v)));
    return b.getDictionaryAttr(entries);
  }
  if (j.is_array()) {
    SmallVector<Attribute> items;
    for (const nlohmann::json &v : j)
      items.push_back(jsonToAttribute(b, v));
    return b.getArrayAttr(items);
  }
  if (j.is_boolean())
    return b.getBoolAttr(j.get<bool>());
  if (j.is_number_integer())
    return b.getI64IntegerAttr(j.get<int64_t>());
  if (j.is_number())
    return b.getF64FloatAttr(j.get<double>());
  if (j.is_string())
    return b.getStringAttr(j.get<std::string>());
  return b.getUnitAttr();
}

std::string printWithoutData(ModuleOp module) {
  OwningOpRef<ModuleOp> copy = module.clone();
  copy->walk([](Operation *op) {
    if (auto w = dyn_cast<llm::WeightOp>(op)) {
      w.removeValueAttr();
      w.removeAuxAttr();
      w.removeTransformAttr();
    } else if (auto m = dyn_cast<llm::ModelOp>(op)) {
      m.removeTokenizerAttr();
    }
  });
  std::string text;
  llvm::raw_string_ostream os(text);
  copy->print(os);
  return text;
}

} // namespace llmc
