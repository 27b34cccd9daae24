//===- ModelLoading.cpp - Artifact or source model, one entry point -----===//
#include "Commands.h"
#include "compiler/Registration.h"
#include "compiler/driver/Compile.h"
#include "mlir/IR/MLIRContext.h"
#include <chrono>
#include <cstring>
#include <fstream>

namespace llmc::tool {

void progress(const std::string &msg) { fprintf(stderr, "[llmc] %s\n", msg.c_str()); }

bool isArtifactFile(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  char magic[8] = {};
  return f.read(magic, 8) && std::memcmp(magic, kArtifactMagic, 8) == 0;
}

std::unique_ptr<Artifact> loadModelOrArtifact(const std::string &path,
                                              const std::string &pipeline,
                                              const std::string &tokenizer,
                                              bool quiet) {
  if (isArtifactFile(path)) {
    if (!pipeline.empty())
      throw std::runtime_error(path + ": --pipeline applies to source models, "
                                      "not to a compiled artifact");
    return Artifact::open(path);
  }
  auto t0 = std::chrono::steady_clock::now();
  SourceModel src = readModel(path, tokenizer);
  mlir::DialectRegistry registry;
  registerLlmcDialects(registry);
  registerLlmcPasses();
  mlir::MLIRContext ctx(registry);
  CompileOptions opts;
  opts.pipeline = pipeline;
  opts.embedIR = false;
  opts.quiet = quiet;
  if (!quiet)
    opts.progress = progress;
  CompiledModel cm = compileModel(ctx, src, opts);
  ArtifactWriter writer(cm.manifest, cm.tensors);
  auto art = Artifact::fromBuffer(writer.toBuffer(), path, /*verify_tensors=*/false);
  if (!quiet) {
    char buf[128];
    snprintf(buf, sizeof buf, "compiled in memory in %.2f s",
             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    progress(buf);
  }
  return art;
}

} // namespace llmc::tool

namespace llmc::tool {
void addEngineOptions(CLI::App *cmd, EngineChoice &choice) {
  Engine &engine = choice.engine;
  cmd->add_option_function<std::string>(
         "--engine",
         [&engine](const std::string &s) {
           engine = s == "kernels" ? Engine::Kernels
                    : s == "reference" ? Engine::Reference
                                       : Engine::Auto;
         },
         "auto (the artifact's kernel plan when it has one), kernels (the fused kernels of "
         "the kernel plan) or reference (the op-by-op executor)")
      ->check(CLI::IsMember({"auto", "kernels", "reference"}));
  CLI::Option *gen = cmd->add_flag(
      "--generated-kernels", choice.generated,
      "kernel engine: run the artifact's generated kernels (the default): the object built for "
      "this CPU's level, or JIT-compiled for it (or for LLMC_ISA) into $LLMC_JIT_CACHE");
  cmd->add_flag("--library-kernels", choice.library,
                "kernel engine: run the runtime's library kernels instead of the artifact's "
                "generated ones")
      ->excludes(gen);
  cmd->add_flag("--exact-activations", choice.exact,
                "kernel engine: keep every product's activations in f32 (by default products "
                "with Q8_0/Q4_0/Q4_1/Q5_0/Q5_1 or gq4s/gq4a/gq8s weights quantize them to int8 "
                "per 32 values and run integer dots, as llama.cpp does)");
}
} // namespace llmc::tool
