//===- Passes.h - Structural pruning passes ---------------------*- C++ -*-===//
#pragma once
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace llmc::prune {
#define GEN_PASS_DECL
#include "passes/prune/Passes.h.inc"
#define GEN_PASS_REGISTRATION
#include "passes/prune/Passes.h.inc"
} // namespace llmc::prune
