//===- InMemoryModel.h - Run the model being compiled -----------*- C++ -*-===//
// Passes that need activations (calibration for GPTQ/AWQ, sensitivity
// scans) run the model as it stands mid-pipeline: its IR is exported to an
// execution plan and packed with the store's current weights into an
// in-memory artifact that the runtime's Executor runs. This is the one place
// the compiler calls into the runtime; the runtime never calls back.
//===----------------------------------------------------------------------===//
#pragma once
#include "compiler/weights/WeightStore.h"
#include "llmc/artifact.h"
#include "mlir/IR/BuiltinOps.h"
#include <memory>

namespace llmc {

/// Throws std::runtime_error if the IR cannot be exported (the diagnostic is
/// emitted on the offending op first).
std::unique_ptr<Artifact> buildInMemoryArtifact(mlir::ModuleOp module,
                                                const WeightStore &store);

} // namespace llmc
