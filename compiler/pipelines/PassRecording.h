//===- PassRecording.h - The IR remembers the passes run on it --*- C++ -*-===//
// Every pass that runs on a model the IR owns (an `llm.model` with a
// `source`) is appended, as its full textual form with every option, to
// the model's `passes` attribute. llmc compile and llmc-opt install the same
// instrumentation, so a model taken through `llmc import --emit-resources`
// and `llmc-opt` carries the same history as one compiled directly, and the
// artifact's manifest takes its "pipeline" from there.
//===----------------------------------------------------------------------===//
#pragma once
#include "mlir/Pass/PassManager.h"
#include <string>

namespace llmc {

/// Adds the recording instrumentation to `pm`.
void recordPassesInModel(mlir::PassManager &pm);

/// Sets option `calib` of every top-level pass of `pm` that has one and
/// left it empty (llmc compile --calib); returns how many it set.
int setDefaultCalibration(mlir::OpPassManager &pm, const std::string &path);

} // namespace llmc
