//===- Passes.h - Lowering llm to kernel level ------------------*- C++ -*-===//
#pragma once
#include "dialects/llmk/IR/LlmkDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace llmc::lowering {
#define GEN_PASS_DECL
#include "passes/lowering/Passes.h.inc"
#define GEN_PASS_REGISTRATION
#include "passes/lowering/Passes.h.inc"
} // namespace llmc::lowering
