//===- KernelPlanExport.h - llmk IR -> the runtime's kernel plan -*- C++ -*-===//
#pragma once
#include "compiler/pipelines/CompilePipeline.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include <nlohmann/json.hpp>
#include <string>

namespace llmc {

/// Lowers a clone of `module` (llm ops, after the user's pipeline) with the
/// lowering phase (CompilePipeline.h) and returns the manifest's
/// "kernel_plan": {"arena_floats_per_token", "steps": [{"kernel", "in":
/// [[offset, width]...], "out": [offset, width] (-1: the logits), "weights":
/// [names], "norm": name, "attrs": {...}}]}. When the model has an op with
/// no kernel lowering, returns null and sets `why` to the diagnostic.
/// `lowered`, when given, receives the lowered clone (what codegen reads).
nlohmann::json buildKernelPlan(mlir::ModuleOp module, const PipelineInstruments &instruments,
                               std::string &why,
                               mlir::OwningOpRef<mlir::ModuleOp> *lowered = nullptr);

} // namespace llmc
