//===- llmc-opt.cpp - Runs llmc passes on llm IR -----------------------===//
#include "compiler/Registration.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  llmc::registerLlmcDialects(registry);
  llmc::registerLlmcPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "llmc optimizer driver\n", registry));
}
