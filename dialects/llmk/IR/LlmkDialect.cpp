//===- LlmkDialect.cpp - llmk dialect registration --------------*- C++ -*-===//
#include "dialects/llmk/IR/LlmkDialect.h"
#include "dialects/llmk/IR/LlmkOps.h"

using namespace mlir;
using namespace llmc::llmk;

#include "dialects/llmk/IR/LlmkDialect.cpp.inc"

void LlmkDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/llmk/IR/LlmkOps.cpp.inc"
      >();
}
