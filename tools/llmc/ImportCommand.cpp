//===- ImportCommand.cpp - llmc import MODEL: the llm IR ----------------===//
// Shows what the importer builds. Without --emit-resources the IR names
// weights and types only (what the importers' lit tests check); with it the
// IR owns the model (weights as blobs, tokenizer, provenance) and can be
// taken through llmc-opt and back into llmc compile, which then writes the
// same artifact as compiling the source with the same passes.
//===----------------------------------------------------------------------===//
#include "Commands.h"
#include "compiler/Registration.h"
#include "compiler/driver/Compile.h"
#include "compiler/driver/IrFile.h"
#include "compiler/import/SourceImporter.h"
#include "compiler/import/onnx/OnnxGraph.h"
#include "passes/import/OnnxGenericForm.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"

namespace llmc::tool {
namespace {
struct ImportArgs {
  std::string input, tokenizer, output = "-";
  bool emitResources = false, emitBytecode = false, onnxGeneric = false;
};
} // namespace

std::function<int()> addImportCommand(CLI::App &app) {
  auto args = std::make_shared<ImportArgs>();
  CLI::App *cmd = app.add_subcommand(
      "import",
      "Print the llm dialect IR of a GGUF file, HF folder, ONNX model or llama2.c checkpoint");
  cmd->add_option("model", args->input, "source model")->required();
  cmd->add_option("--tokenizer", args->tokenizer, "llama2.c tokenizer.bin");
  cmd->add_option("-o,--output", args->output,
                  "where to write the IR (default: stdout); written atomically; a name "
                  "ending in .mlirbc implies --emit-bytecode");
  cmd->add_flag("--emit-resources", args->emitResources,
                "the IR carries the model: every weight's bytes as a dense_resource blob, "
                "the tokenizer and the provenance (for llmc-opt, then llmc compile IR.mlirbc)");
  cmd->add_flag("--onnx-generic", args->onnxGeneric,
                "an ONNX model's graph as it is, node for node (unregistered onnx.* ops, "
                "constants as blobs), not raised: llmc-opt --allow-unregistered-dialect "
                "--llm-raise-onnx raises it");
  cmd->add_flag("--emit-bytecode", args->emitBytecode,
                "write MLIR bytecode (blobs stored raw and read back in place)");
  return [args]() {
    const bool bytecode = args->emitBytecode || (args->output.size() > 7 &&
                                                 args->output.substr(args->output.size() - 7) == ".mlirbc");
    if (bytecode && args->output == "-") {
      fprintf(stderr, "llmc import: bytecode needs -o FILE (not a terminal)\n");
      return int(kUsage);
    }
    mlir::DialectRegistry registry;
    registerLlmcDialects(registry);
    mlir::MLIRContext ctx(registry);
    if (args->onnxGeneric) {
      if (args->emitResources) {
        fprintf(stderr, "llmc import: --onnx-generic already carries the constants; "
                        "--emit-resources applies to raised IR\n");
        return int(kUsage);
      }
      auto module = import::onnxGenericModule(ctx, onnx_import::readOnnxGraph(args->input));
      writeIrFile(*module, args->output, bytecode);
      return int(kOk);
    }
    SourceModel src = readModel(args->input, args->tokenizer);
    auto module = importSourceModel(ctx, src, args->emitResources);
    if (mlir::failed(mlir::verify(*module)))
      throw CompileError(args->input + ": the imported IR does not verify");
    writeIrFile(*module, args->output, bytecode);
    return int(kOk);
  };
}

} // namespace llmc::tool
