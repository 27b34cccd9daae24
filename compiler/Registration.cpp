//===- Registration.cpp - Everything llmc registers with MLIR ---*- C++ -*-===//
#include "compiler/Registration.h"
#include "compiler/pipelines/CompilePipeline.h"
#include "dialects/llm/IR/LlmDialect.h"
#include "dialects/llmk/IR/LlmkDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "passes/import/Passes.h"
#include "passes/kv/Passes.h"
#include "passes/lowering/Passes.h"
#include "passes/prune/Passes.h"
#include "passes/quant/Passes.h"
#include "passes/spec/Passes.h"
#include "mlir/Transforms/Passes.h"

namespace llmc {
void registerLlmcDialects(mlir::DialectRegistry &registry) {
  registry.insert<llm::LlmDialect, llmk::LlmkDialect, mlir::func::FuncDialect>();
}

void registerLlmcPasses() {
  // Generic cleanups usable in --pipeline strings.
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerSymbolDCEPass();
  import::registerImportPasses();
  quant::registerQuantPasses();
  kv::registerKvPasses();
  prune::registerPrunePasses();
  spec::registerSpecPasses();
  lowering::registerLoweringPasses();
  registerCompilePipelines();
}
} // namespace llmc
