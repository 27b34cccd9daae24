//===- IrFile.h - llm IR files that carry their model ------------*- C++ -*-===//
// `llmc import --emit-resources` writes, and `llmc compile` reads, IR files
// that own their model: text (.mlir, blobs as hex) or MLIR bytecode
// (.mlirbc, blobs read in place from the mapped file, nothing copied).
//===----------------------------------------------------------------------===//
#pragma once
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include <string>

namespace llmc {

/// True for a path naming an IR file (.mlir or .mlirbc).
bool isIrFile(const std::string &path);

/// Parses and verifies an IR file (text or bytecode, by its content).
/// Diagnostics go to stderr; throws CompileError naming the file.
mlir::OwningOpRef<mlir::ModuleOp> readIrFile(mlir::MLIRContext &ctx, const std::string &path);

/// Writes `module` to `path` atomically (nothing is left behind on failure):
/// bytecode when `bytecode`, else text with every blob in full. "-" is stdout.
void writeIrFile(mlir::ModuleOp module, const std::string &path, bool bytecode);

} // namespace llmc
