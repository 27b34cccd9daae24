//===- LlmDialect.cpp - llm dialect registration ----------------*- C++ -*-===//
#include "dialects/llm/IR/LlmDialect.h"
#include "dialects/llm/IR/LlmOps.h"
#include "dialects/llm/IR/LlmTypes.h"

using namespace mlir;
using namespace llmc::llm;

#include "dialects/llm/IR/LlmDialect.cpp.inc"

void LlmDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/llm/IR/LlmOps.cpp.inc"
      >();
  registerTypes();
}
