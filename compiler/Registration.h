//===- Registration.h - Everything llmc registers with MLIR -----*- C++ -*-===//
// Both tools call these, so `llmc` and `llmc-opt` agree on what exists.
//===----------------------------------------------------------------------===//
#pragma once
#include "mlir/IR/DialectRegistry.h"

namespace llmc {
void registerLlmcDialects(mlir::DialectRegistry &registry);
void registerLlmcPasses();
} // namespace llmc
