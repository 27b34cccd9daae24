//===- Passes.h - Weight quantization passes --------------------*- C++ -*-===//
#pragma once
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace llmc::quant {
#define GEN_PASS_DECL
#include "passes/quant/Passes.h.inc"
#define GEN_PASS_REGISTRATION
#include "passes/quant/Passes.h.inc"
} // namespace llmc::quant
