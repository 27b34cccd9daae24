//===- ImportCommand.cpp - llmc import MODEL: print the llm IR ----------===//
// Shows what the importer builds (used by the importers' lit tests and to
// feed llmc-opt by hand). Weights stay in the source file; the IR names them.
//===----------------------------------------------------------------------===//
#include "Commands.h"
#include "compiler/Registration.h"
#include "compiler/import/SourceImporter.h"
#include "compiler/driver/Compile.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/raw_ostream.h"

namespace llmc::tool {
namespace {
struct ImportArgs {
  std::string input, tokenizer;
};
} // namespace

std::function<int()> addImportCommand(CLI::App &app) {
  auto args = std::make_shared<ImportArgs>();
  CLI::App *cmd = app.add_subcommand(
      "import", "Print the llm dialect IR of a GGUF file, HF folder or llama2.c checkpoint");
  cmd->add_option("model", args->input, "source model")->required();
  cmd->add_option("--tokenizer", args->tokenizer, "llama2.c tokenizer.bin");
  return [args]() {
    SourceModel src = readModel(args->input, args->tokenizer);
    mlir::DialectRegistry registry;
    registerLlmcDialects(registry);
    mlir::MLIRContext ctx(registry);
    auto module = importSourceModel(ctx, src);
    if (mlir::failed(mlir::verify(*module)))
      throw CompileError(args->input + ": the imported IR does not verify");
    module->print(llvm::outs());
    llvm::outs() << "\n";
    return kOk;
  };
}

} // namespace llmc::tool
