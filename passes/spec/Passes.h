//===- Passes.h - Speculative-decoding passes -------------------*- C++ -*-===//
#pragma once
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace llmc::spec {
#define GEN_PASS_DECL
#include "passes/spec/Passes.h.inc"
#define GEN_PASS_REGISTRATION
#include "passes/spec/Passes.h.inc"
} // namespace llmc::spec
