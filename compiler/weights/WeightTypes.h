//===- WeightTypes.h - IR element types <-> storage types -------*- C++ -*-===//
#pragma once
#include "llmc/dtype.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Types.h"
#include <optional>

namespace llmc {
/// The IR element type of a stored weight type (f32/f16/bf16 or !llm.quant).
mlir::Type weightElementType(mlir::MLIRContext *ctx, DType t);
/// The storage type an IR weight element type stands for; nullopt if none.
std::optional<DType> dtypeOfElementType(mlir::Type t);
} // namespace llmc
