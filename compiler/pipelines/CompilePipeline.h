//===- CompilePipeline.h - The compile pipeline, declared once --*- C++ -*-===//
// Every pass llmc compile runs, in order, and how it is instrumented:
//
//   import (IR owns the model) ─▶ phase "user": the --pipeline passes, each
//   recorded in the model and verified ─▶ export of the llm-level program
//   ─▶ phase "lower" (the registered pipeline `llmc-lower`, on a copy):
//   llm-lower-to-kernels ─▶ llmk-select-kernels (layouts, activation
//   precision) ─▶ llmk-plan-buffers ─▶ kernel plan ─▶ weights packed as
//   selected ─▶ codegen for every x86-64 level ─▶ artifact (signed)
//
// Both phases run in PassManagers configured here, with the instruments any
// MLIR tool has (--mlir-print-ir-after-all, --mlir-timing, a crash
// reproducer) and the verifier after every pass. llmc-opt runs the same
// passes: a user pipeline, and `llmc-lower` as a named pipeline.
//===----------------------------------------------------------------------===//
#pragma once
#include "mlir/Pass/PassManager.h"
#include <string>

namespace llmc {

struct PipelineInstruments {
  bool printIrAfterAll = false; // IR after each pass on stderr (weight blobs elided)
  bool timing = false;          // pass timing report on stderr, per phase
  std::string crashReproducer;  // write a reproducer here when a pass fails or crashes
};

enum class CompilePhase { User, Lower };

/// A PassManager on builtin.module for `phase`, with the instruments and the
/// pass recording.
std::unique_ptr<mlir::PassManager> makeCompilePassManager(mlir::MLIRContext &ctx,
                                                          CompilePhase phase,
                                                          const PipelineInstruments &inst);

/// "a,b" or "builtin.module(a,b)" as "builtin.module(a,b)"; "" for none.
std::string anchoredPipeline(const std::string &text);

/// Makes the user's textual pipeline the passes of `pm` (its instruments
/// stay); on a parse error returns false with the message in `error`.
bool setUserPipeline(mlir::PassManager &pm, const std::string &text, std::string &error);

/// The lowering phase: llm-lower-to-kernels, llmk-select-kernels (with
/// `generatedKernels`: the kernels are generated too), llmk-plan-buffers.
void addLoweringPipeline(mlir::OpPassManager &pm);

/// Registers `llmc-lower` (the lowering phase) for llmc-opt and --pipeline.
void registerCompilePipelines();

} // namespace llmc
