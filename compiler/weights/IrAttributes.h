//===- IrAttributes.h - Bytes and JSON held by IR attributes ----*- C++ -*-===//
// The IR owns the model: weight bytes, the tokenizer and provenance live in
// attributes of `llm.weight` and `llm.model`. These helpers make those
// attributes (bytes as `dense_resource` blobs that reference memory without
// copying it) and read them back.
//===----------------------------------------------------------------------===//
#pragma once
#include "mlir/IR/Attributes.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinAttributeInterfaces.h"
#include "mlir/IR/OperationSupport.h"
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace llmc {

/// A 1-D i8 `dense_resource` blob named `key` (uniqued by the context)
/// that takes ownership of `bytes` (no copy).
mlir::ElementsAttr ownedBytesAttr(mlir::MLIRContext *ctx, llvm::StringRef key,
                                  std::vector<uint8_t> bytes);

/// A 1-D i8 `dense_resource` blob named `key` referencing `n` bytes at
/// `data` (no copy); `keepAlive` is held until the context drops the blob.
mlir::ElementsAttr borrowedBytesAttr(mlir::MLIRContext *ctx, llvm::StringRef key,
                                     const void *data, int64_t n,
                                     std::shared_ptr<const void> keepAlive);

/// The stored bytes of `attr`: a blob's data, or a dense literal's raw data.
/// A splat literal is expanded into `scratch` (which then owns the bytes).
/// nullopt when a blob has no data (its resource section was missing).
std::optional<llvm::ArrayRef<uint8_t>> storedBytesOf(mlir::ElementsAttr attr,
                                                     std::vector<uint8_t> &scratch);

/// JSON -> attributes: objects are dictionaries, arrays arrays, integers
/// i64, numbers f64, strings strings, booleans bool; null is a unit attr.
/// (The way back is attrToJson, compiler/artifact/ProgramExport.h.)
mlir::Attribute jsonToAttribute(mlir::Builder &b, const nlohmann::json &j);

/// The IR as a manifest stores it for people to read: the structure, types,
/// provenance and pass history, without weight bytes, side data, transform
/// records (the manifest has those) or the tokenizer.
std::string printWithoutData(mlir::ModuleOp module);

} // namespace llmc
