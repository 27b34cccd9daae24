//===- Passes.h - Import passes ---------------------------------*- C++ -*-===//
#pragma once
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace llmc::import {
#define GEN_PASS_DECL
#include "passes/import/Passes.h.inc"
#define GEN_PASS_REGISTRATION
#include "passes/import/Passes.h.inc"
} // namespace llmc::import
