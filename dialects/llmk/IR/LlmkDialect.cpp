//===- LlmkDialect.cpp - llmk dialect registration --------------*- C++ -*-===//
#include "dialects/llmk/IR/LlmkDialect.h"
#include "dialects/llmk/IR/LlmkOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace llmc::llmk;

#include "dialects/llmk/IR/LlmkDialect.cpp.inc"
#include "dialects/llmk/IR/LlmkEnums.cpp.inc"
#define GET_ATTRDEF_CLASSES
#include "dialects/llmk/IR/LlmkAttrs.cpp.inc"

void LlmkDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/llmk/IR/LlmkAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "dialects/llmk/IR/LlmkOps.cpp.inc"
      >();
}
