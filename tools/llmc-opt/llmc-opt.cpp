//===- llmc-opt.cpp - Runs llmc passes on llm IR -----------------------===//
// mlir-opt with llmc's dialects and passes, plus one thing: every pass run
// on a model the IR owns is recorded in the model (PassRecording.h), the
// same as llmc compile does, so IR taken through llmc-opt compiles to the
// same artifact as the source compiled with the same passes.
//===----------------------------------------------------------------------===//
#include "compiler/Registration.h"
#include "compiler/pipelines/PassRecording.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  llmc::registerLlmcDialects(registry);
  llmc::registerLlmcPasses();
  auto [inputFilename, outputFilename] =
      mlir::registerAndParseCLIOptions(argc, argv, "llmc optimizer driver\n", registry);
  mlir::MlirOptMainConfig config = mlir::MlirOptMainConfig::createFromCLOptions();
  // The pipeline the command line asked for (--pass-pipeline, -p, pass
  // flags), then the recording instrumentation.
  const mlir::MlirOptMainConfig fromCommandLine = config;
  config.setPassPipelineSetupFn([fromCommandLine](mlir::PassManager &pm) {
    if (mlir::failed(fromCommandLine.setupPassPipeline(pm)))
      return mlir::failure();
    llmc::recordPassesInModel(pm);
    return mlir::success();
  });
  if (config.shouldShowDialects() || config.shouldListPasses())
    return mlir::asMainReturnCode(
        mlir::MlirOptMain(argc, argv, inputFilename, outputFilename, registry));
  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> input = mlir::openInputFile(inputFilename, &error);
  if (!input) {
    llvm::errs() << "llmc-opt: " << error << "\n";
    return 1;
  }
  std::unique_ptr<llvm::ToolOutputFile> output = mlir::openOutputFile(outputFilename, &error);
  if (!output) {
    llvm::errs() << "llmc-opt: " << error << "\n";
    return 1;
  }
  if (mlir::failed(mlir::MlirOptMain(output->os(), std::move(input), registry, config)))
    return 1;
  output->keep();
  return 0;
}
