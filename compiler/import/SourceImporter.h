//===- SourceImporter.h - SourceModel -> llm IR -----------------*- C++ -*-===//
#pragma once
#include "compiler/import/SourceModel.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

namespace llmc {
/// The IR element type of a stored weight type (f32/f16/bf16 or !llm.quant).
mlir::Type weightElementType(mlir::MLIRContext *ctx, DType t);
/// The storage type an IR weight element type stands for; nullopt if none.
std::optional<DType> dtypeOfElementType(mlir::Type t);

/// Builds one `llm.model` from a model as read from its file. Throws
/// ImportError naming the file and the missing or misshapen tensor.
mlir::OwningOpRef<mlir::ModuleOp> importSourceModel(mlir::MLIRContext &ctx,
                                                    const SourceModel &src);
} // namespace llmc
