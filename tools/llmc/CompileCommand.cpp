//===- CompileCommand.cpp - llmc compile MODEL -o OUT.llmc --------------===//
#include "Commands.h"
#include "compiler/Registration.h"
#include "compiler/driver/Compile.h"
#include "mlir/IR/MLIRContext.h"
#include <chrono>
#include <sys/stat.h>

namespace llmc::tool {
namespace {
struct CompileArgs {
  std::string input, output, pipeline, tokenizer;
  bool noIR = false, quiet = false;
};
} // namespace

std::function<int()> addCompileCommand(CLI::App &app) {
  auto args = std::make_shared<CompileArgs>();
  CLI::App *cmd = app.add_subcommand(
      "compile", "Compile a model (GGUF file, Hugging Face folder or llama2.c "
                 ".bin) into one .llmc artifact");
  cmd->add_option("model", args->input, "GGUF file, HF folder (config.json + "
                                        "*.safetensors) or llama2.c checkpoint")
      ->required();
  cmd->add_option("-o,--output", args->output, "artifact to write (atomically)")
      ->required();
  cmd->add_option("--pipeline", args->pipeline,
                  "pass pipeline, e.g. 'canonicalize,cse' or "
                  "'builtin.module(canonicalize)'; recorded in the manifest");
  cmd->add_option("--tokenizer", args->tokenizer,
                  "llama2.c tokenizer.bin (llama2.c checkpoints only)");
  cmd->add_flag("--no-ir", args->noIR, "do not embed the final IR in the manifest");
  cmd->add_flag("-q,--quiet", args->quiet, "no progress lines");

  return [args]() {
    auto t0 = std::chrono::steady_clock::now();
    auto secs = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    auto say = [&](const std::string &s) {
      if (!args->quiet)
        progress(s);
    };
    say("reading " + args->input);
    SourceModel src = readModel(args->input, args->tokenizer);
    char buf[256];
    snprintf(buf, sizeof buf, "read %s model '%s': %zu tensors in %.2f s",
             src.format.c_str(), src.config.architecture.c_str(),
             src.tensors.size(), secs());
    say(buf);

    mlir::DialectRegistry registry;
    registerLlmcDialects(registry);
    registerLlmcPasses();
    mlir::MLIRContext ctx(registry);
    CompileOptions opts;
    opts.pipeline = args->pipeline;
    opts.embedIR = !args->noIR;
    opts.progress = say;
    CompiledModel cm = compileModel(ctx, src, opts);

    ArtifactWriter writer(cm.manifest, cm.tensors);
    writer.writeFile(args->output);
    struct stat st;
    double mb = ::stat(args->output.c_str(), &st) == 0 ? st.st_size / 1048576.0 : 0;
    snprintf(buf, sizeof buf, "wrote %s (%.1f MiB, %zu tensors) in %.2f s total",
             args->output.c_str(), mb, cm.tensors.size(), secs());
    say(buf);
    return kOk;
  };
}

} // namespace llmc::tool
