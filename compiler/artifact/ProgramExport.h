//===- ProgramExport.h - llm IR -> the runtime's execution plan -*- C++ -*-===//
#pragma once
#include "llmc/dtype.h"
#include "llmc/program.h"
#include "mlir/IR/BuiltinOps.h"
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace llmc {

struct ExportedWeight {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
};

struct ExportedModel {
  Program program;
  nlohmann::json config;              // from the model's `config` attribute
  std::vector<ExportedWeight> weights; // every weight the program reads, once each
  /// The llm.speculate op's drafter (manifest "speculation"), null without one:
  /// {"method", "max_draft", "ngram"} or, for medusa, also "heads" (count),
  /// "weights": {"heads", "bias"} (tensor names) and "fit".
  nlohmann::json speculation;
};

/// An attribute as JSON (bool, integer, float, string, dictionary, array;
/// null for anything else): how IR attributes reach the manifest.
nlohmann::json attrToJson(mlir::Attribute a);

/// Lowers the single `llm.model` of `module` to a Program. Returns failure
/// after emitting a diagnostic on the offending op.
mlir::FailureOr<ExportedModel> exportProgram(mlir::ModuleOp module);

} // namespace llmc
