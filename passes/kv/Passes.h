//===- Passes.h - KV-cache policy passes ------------------------*- C++ -*-===//
#pragma once
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace llmc::kv {
#define GEN_PASS_DECL
#include "passes/kv/Passes.h.inc"
#define GEN_PASS_REGISTRATION
#include "passes/kv/Passes.h.inc"
} // namespace llmc::kv
