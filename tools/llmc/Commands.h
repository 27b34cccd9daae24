//===- Commands.h - The llmc subcommands ------------------------*- C++ -*-===//
#pragma once
#include "CLI/CLI.hpp"
#include "llmc/artifact.h"
#include "llmc/executor.h"
#include <functional>
#include <memory>
#include <string>

namespace llmc::tool {

/// Exit codes shared by all subcommands.
enum ExitCode : int {
  kOk = 0,
  kError = 1,     // bad input: unreadable/malformed model or artifact, failed compile
  kUsage = 2,     // bad flags (CLI11 also uses non-zero codes for parse errors)
  kKldGate = 3,   // compile --max-kld: the compiled model's mean KLD exceeds the limit
};

/// Each registers its subcommand and returns the function that runs it.
std::function<int()> addCompileCommand(CLI::App &app);
std::function<int()> addInspectCommand(CLI::App &app);
std::function<int()> addRunCommand(CLI::App &app);
std::function<int()> addImportCommand(CLI::App &app);
std::function<int()> addEvalCommand(CLI::App &app);
std::function<int()> addBenchCommand(CLI::App &app);
std::function<int()> addEvalLongCommand(CLI::App &app);

/// Opens an .llmc artifact, or reads and compiles a GGUF file, HF folder or
/// llama2.c checkpoint in memory. Throws std::runtime_error.
std::unique_ptr<Artifact> loadModelOrArtifact(const std::string &path,
                                              const std::string &pipeline,
                                              const std::string &tokenizer,
                                              bool quiet);
bool isArtifactFile(const std::string &path);
/// How forward steps run: --engine auto|kernels|reference,
/// --library-kernels (the kernel engine runs the runtime's library kernels
/// instead of the artifact's generated ones; --generated-kernels, the
/// default, is accepted), --exact-activations (no int8 activations in the
/// kernel engine's products).
struct EngineChoice {
  Engine engine = Engine::Auto;
  bool generated = false; // --generated-kernels: the default, said explicitly
  bool library = false;
  bool exact = false;
  void apply(ExecutorOptions &eo) const {
    eo.engine = engine;
    eo.generated_kernels = !library;
    eo.exact_activations = exact;
  }
};
void addEngineOptions(CLI::App *cmd, EngineChoice &choice);
void progress(const std::string &msg); // "[llmc] msg" on stderr

} // namespace llmc::tool
