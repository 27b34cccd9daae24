//===- CompilePipeline.cpp - The compile pipeline, declared once ---------===//
#include "compiler/pipelines/CompilePipeline.h"
#include "compiler/pipelines/PassRecording.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassRegistry.h"
#include "passes/lowering/Passes.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace llmc {

std::unique_ptr<PassManager> makeCompilePassManager(MLIRContext &ctx, CompilePhase phase,
                                                    const PipelineInstruments &inst) {
  auto pm = std::make_unique<PassManager>(&ctx, ModuleOp::getOperationName());
  pm->enableVerifier(true);
  if (phase == CompilePhase::User)
    recordPassesInModel(*pm);
  if (!inst.crashReproducer.empty())
    pm->enableCrashReproducerGeneration(inst.crashReproducer);
  if (inst.printIrAfterAll) {
    ctx.disableMultithreading(); // MLIR prints IR only from a single-threaded pass manager
    // Weight blobs are not printed (a 1 GB model would print 2 GB of hex).
    OpPrintingFlags flags;
    flags.elideLargeElementsAttrs(16);
    flags.elideLargeResourceString(64);
    pm->enableIRPrinting([](Pass *, Operation *) { return false; },
                         [](Pass *, Operation *) { return true; },
                         /*printModuleScope=*/true, /*printAfterOnlyOnChange=*/false,
                         /*printAfterOnlyOnFailure=*/false, llvm::errs(), flags);
  }
  if (inst.timing)
    pm->enableTiming();
  return pm;
}

std::string anchoredPipeline(const std::string &text) {
  auto start = text.find_first_not_of(" \t");
  if (start == std::string::npos)
    return "";
  std::string p = text.substr(start);
  if (p.rfind("builtin.module(", 0) != 0)
    p = "builtin.module(" + p + ")";
  return p;
}

bool setUserPipeline(PassManager &pm, const std::string &text, std::string &error) {
  const std::string p = anchoredPipeline(text);
  if (p.empty())
    return true;
  llvm::raw_string_ostream errs(error);
  FailureOr<OpPassManager> parsed = parsePassPipeline(p, errs);
  if (failed(parsed))
    return false;
  static_cast<OpPassManager &>(pm) = std::move(*parsed);
  return true;
}

void addLoweringPipeline(OpPassManager &pm) {
  pm.addPass(lowering::createLowerToKernelsPass());
  pm.addPass(lowering::createSelectKernelsPass());
  pm.addPass(lowering::createPlanBuffersPass());
}

void registerCompilePipelines() {
  static bool done = false;
  if (done)
    return;
  done = true;
  PassPipelineRegistration<>("llmc-lower",
                             "The lowering phase of llmc compile: llm-lower-to-kernels, "
                             "llmk-select-kernels, llmk-plan-buffers",
                             [](OpPassManager &pm) { addLoweringPipeline(pm); });
}

} // namespace llmc
