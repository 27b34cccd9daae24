//===- LlmTypes.cpp - llm dialect types -------------------------*- C++ -*-===//
#include "dialects/llm/IR/LlmTypes.h"
#include "dialects/llm/IR/LlmDialect.h"
#include "dialects/llm/IR/LlmOps.h"
#include "llmc/dtype.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace llmc::llm;

#define GET_TYPEDEF_CLASSES
#include "dialects/llm/IR/LlmTypes.cpp.inc"

LogicalResult QuantType::verify(function_ref<InFlightDiagnostic()> emitError,
                                StringRef format, int64_t blockSize,
                                int64_t blockBytes) {
  if (format.empty())
    return emitError() << "quantized format needs a name";
  if (blockSize <= 0 || blockBytes <= 0)
    return emitError() << "quantized format '" << format
                       << "' needs a positive block size and byte count, got block = "
                       << blockSize << ", bytes = " << blockBytes;
  // The geometry must be the format's own (the runtime's table of formats,
  // parametric families included), so a type cannot claim another layout.
  const std::optional<llmc::DType> dtype = llmc::dtypeFromName(format.str());
  if (!dtype || llmc::dtypeInfo(*dtype).block_size == 1)
    return emitError() << "unknown quantized format '" << format << "'";
  const llmc::DTypeInfo &info = llmc::dtypeInfo(*dtype);
  if (info.block_size != blockSize || info.block_bytes != blockBytes)
    return emitError() << "quantized format '" << format << "' packs " << info.block_size
                       << " weights into " << info.block_bytes << " bytes, not block = "
                       << blockSize << ", bytes = " << blockBytes;
  return success();
}

void LlmDialect::registerTypes() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "dialects/llm/IR/LlmTypes.cpp.inc"
      >();
}
