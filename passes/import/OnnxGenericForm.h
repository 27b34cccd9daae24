//===- OnnxGenericForm.h - ONNX graphs as generic MLIR ----------*- C++ -*-===//
// The form `llmc import model.onnx --onnx-generic` writes and the
// llm-raise-onnx pass reads (see passes/import/Passes.td): a module whose
// body is the ONNX graph node for node, as unregistered onnx.* operations.
//===----------------------------------------------------------------------===//
#pragma once
#include "compiler/import/onnx/OnnxGraph.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

namespace llmc::import {

/// The graph as generic IR (allows unregistered dialects on `ctx`). The
/// constants' bytes are copied into blobs owned by the context.
mlir::OwningOpRef<mlir::ModuleOp> onnxGenericModule(mlir::MLIRContext &ctx,
                                                    const onnx_import::OnnxGraph &g);

/// The graph back from generic IR; constants point into the module's blobs
/// (valid while it lives). Throws ImportError naming the op that is not of
/// the form.
onnx_import::OnnxGraph onnxGraphOf(mlir::ModuleOp module);

/// Whether `module` holds a generic ONNX graph.
bool isOnnxGeneric(mlir::ModuleOp module);

} // namespace llmc::import
