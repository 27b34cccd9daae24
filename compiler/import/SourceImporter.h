//===- SourceImporter.h - SourceModel -> llm IR -----------------*- C++ -*-===//
#pragma once
#include "compiler/import/SourceModel.h"
#include "compiler/weights/WeightTypes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

namespace llmc {

/// Builds one `llm.model` from a model as read from its file. With
/// `carryWeights` the IR owns the model: every weight's bytes (referenced,
/// not copied), the tokenizer and the provenance; without, only names and
/// types (the importers' lit tests). Throws ImportError naming the file and
/// the missing or misshapen tensor.
mlir::OwningOpRef<mlir::ModuleOp> importSourceModel(mlir::MLIRContext &ctx,
                                                    const SourceModel &src,
                                                    bool carryWeights = true);
} // namespace llmc
