//===- WeightTypes.cpp - IR element types <-> storage types ------------===//
#include "compiler/weights/WeightTypes.h"
#include "dialects/llm/IR/LlmOps.h"
#include "mlir/IR/BuiltinTypes.h"

using namespace mlir;

namespace llmc {

Type weightElementType(MLIRContext *ctx, DType t) {
  switch (t) {
  case DType::F32:
    return Float32Type::get(ctx);
  case DType::F16:
    return Float16Type::get(ctx);
  case DType::BF16:
    return BFloat16Type::get(ctx);
  default: {
    const DTypeInfo &info = dtypeInfo(t);
    return llm::QuantType::get(ctx, info.name, info.block_size, info.block_bytes);
  }
  }
}

std::optional<DType> dtypeOfElementType(Type t) {
  if (t.isF32())
    return DType::F32;
  if (t.isF16())
    return DType::F16;
  if (t.isBF16())
    return DType::BF16;
  if (auto q = dyn_cast<llm::QuantType>(t)) {
    auto d = dtypeFromName(q.getFormat().str());
    if (d && dtypeInfo(*d).block_size == q.getBlockSize() &&
        dtypeInfo(*d).block_bytes == q.getBlockBytes())
      return d;
  }
  return std::nullopt;
}

} // namespace llmc
