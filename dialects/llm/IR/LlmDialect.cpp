//===- LlmDialect.cpp - llm dialect registration ----------------*- C++ -*-===//
#include "dialects/llm/IR/LlmDialect.h"
#include "dialects/llm/IR/LlmOps.h"
#include "dialects/llm/IR/LlmTypes.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace llmc::llm;

#include "dialects/llm/IR/LlmDialect.cpp.inc"
#include "dialects/llm/IR/LlmEnums.cpp.inc"
#define GET_ATTRDEF_CLASSES
#include "dialects/llm/IR/LlmAttrs.cpp.inc"

void LlmDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/llm/IR/LlmAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "dialects/llm/IR/LlmOps.cpp.inc"
      >();
  registerTypes();
}
