//===- Compile.h - SourceModel -> artifact ----------------------*- C++ -*-===//
// The whole compile: import to llm IR, run the user's pipeline, verify,
// export the execution plan, and gather the manifest and weight bytes.
//===----------------------------------------------------------------------===//
#pragma once
#include "compiler/import/SourceModel.h"
#include "compiler/pipelines/CompilePipeline.h"
#include "compiler/weights/WeightStore.h"
#include "llmc/artifact.h"
#include "llmc/codegen.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace llmc {

struct CompileOptions {
  /// Textual pass pipeline (e.g. "builtin.module(canonicalize)" or just
  /// "canonicalize,cse"); empty runs no pass.
  std::string pipeline;
  bool embedIR = true; // store the final IR text in the manifest
  /// Calibration text (or .ids token file) for passes whose `calib` option
  /// is empty; empty: data/calib/default.txt.
  std::string calibPath;
  std::function<void(const std::string &)> progress;
  /// Passes print no progress lines (their errors still go to stderr).
  bool quiet = false;
  /// --mlir-print-ir-after-all, --mlir-timing, a crash reproducer.
  PipelineInstruments instruments;
  /// Lower the final IR to kernels and store the kernel plan the runtime
  /// runs (false: the artifact runs on the reference executor only).
  bool kernels = true;
  /// Generate the kernels the plan multiplies with as C++, build them for
  /// the baseline x86-64 and this host's level, and store source and objects
  /// (needs kernels; skipped with a progress line when no compiler exists).
  bool codegen = true;
  /// The code generators to run (needs kernels and codegen): the CPU's
  /// (objects the runtime runs today) and CUDA's (cubin/PTX sections; a
  /// requested CUDA target that cannot be built is a CompileError).
  bool targetCpu = true, targetCuda = false;
  /// The x86-64 levels the CPU target builds objects for (empty: all six;
  /// {targetIsa()} for a model compiled in memory to run in this process).
  std::vector<codegen::IsaLevel> cpuLevels;
};

/// Valid while the MLIRContext it was compiled in lives (the weights are
/// the IR's blobs, owned by the context).
struct CompiledModel {
  mlir::OwningOpRef<mlir::ModuleOp> module; // the final IR
  std::shared_ptr<WeightStore> store;       // its weights, by name
  nlohmann::json manifest; // without "tensors" (the writer adds it)
  std::vector<ArtifactWriter::Tensor> tensors;
  std::string irText;
  std::vector<std::unique_ptr<std::string>> blobs; // generated source and objects
};

struct CompileError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Imports `src` (the IR then owns the model) and compiles it. Throws
/// CompileError (pipeline or verification failure; MLIR diagnostics have
/// been printed to stderr) or ImportError.
CompiledModel compileModel(mlir::MLIRContext &ctx, const SourceModel &src,
                           const CompileOptions &opts);

/// Compiles a module that carries its model (weights, tokenizer, source:
/// importSourceModel, or llmc import --emit-resources read back). The same
/// IR and pipeline give the same artifact bytes whichever way it came.
CompiledModel compileModule(mlir::MLIRContext &ctx, mlir::OwningOpRef<mlir::ModuleOp> module,
                            const CompileOptions &opts);

} // namespace llmc
