//===- ModelLoading.cpp - Source models compiled in memory (llmc only) --===//
#include "Commands.h"
#include "compiler/Registration.h"
#include "compiler/driver/Compile.h"
#include "mlir/IR/MLIRContext.h"
#include <chrono>

namespace llmc::tool {

namespace {
/// A GGUF file, HF folder or llama2.c checkpoint compiled in memory.
std::unique_ptr<Artifact> compileInMemory(const std::string &path, const std::string &pipeline,
                                          const std::string &tokenizer, bool quiet) {
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
  opts.cpuLevels = {codegen::targetIsa()}; // run here, now: the one level that runs
  if (!quiet)
    opts.progress = progress;
  CompiledModel cm = compileModel(ctx, src, opts);
  ArtifactWriter writer(cm.manifest, cm.tensors);
  auto art = Artifact::fromBuffer(writer.toBuffer(), path, /*verify_tensors=*/false);
  art->markBuiltInThisProcess(); // its kernels come from this process's compiler
  if (!quiet) {
    char buf[128];
    snprintf(buf, sizeof buf, "compiled in memory in %.2f s",
             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    progress(buf);
  }
  return art;
}

} // namespace

void useInMemoryCompiler() { setSourceCompiler(compileInMemory); }

} // namespace llmc::tool
