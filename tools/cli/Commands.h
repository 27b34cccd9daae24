//===- Commands.h - The llmc subcommands ------------------------*- C++ -*-===//
#pragma once
#include "CLI/CLI.hpp"
#include <chrono>
#include "llmc/artifact.h"
#include "llmc/batcher.h"
#include "llmc/executor.h"
#include "llmc/tokenizer.h"
#include <functional>
#include "llmc/cuda_engine.h"
#include <memory>
#include <string>
#include <vector>

namespace llmc::tool {

/// Exit codes shared by all subcommands.
enum ExitCode : int {
  kOk = 0,
  kError = 1,     // bad input: unreadable/malformed model or artifact, failed compile
  kUsage = 2,     // bad flags (CLI11 also uses non-zero codes for parse errors)
  kKldGate = 3,   // compile --max-kld: the compiled model's mean KLD exceeds the limit
  kNoDevice = 4,  // --device cuda / cuda-check: no usable CUDA device (no driver or no GPU)
};

/// Each registers its subcommand and returns the function that runs it.
std::function<int()> addCompileCommand(CLI::App &app);
std::function<int()> addInspectCommand(CLI::App &app);
std::function<int()> addRunCommand(CLI::App &app);
std::function<int()> addGenerateCommand(CLI::App &app);
std::function<int()> addServeCommand(CLI::App &app);
std::function<int()> addImportCommand(CLI::App &app);
std::function<int()> addEvalCommand(CLI::App &app);
std::function<int()> addBenchCommand(CLI::App &app);
std::function<int()> addEvalLongCommand(CLI::App &app);
std::function<int()> addKeygenCommand(CLI::App &app);
std::function<int()> addVerifyCommand(CLI::App &app);
std::function<int()> addCudaCheckCommand(CLI::App &app);

/// A registered subcommand and the function that runs it.
struct Subcommand {
  std::string name;
  std::function<int()> run;
};
/// Parses argv and runs the chosen subcommand; errors become "TOOL: error:
/// ..." and the exit codes above.
int dispatch(CLI::App &app, int argc, char **argv, const std::vector<Subcommand> &cmds,
             const char *tool);

/// How a source model (not an artifact) becomes one in memory: set by the
/// llmc binary (which links the compiler); the runtime-only binary has
/// none and runs artifacts alone.
using SourceCompiler = std::function<std::unique_ptr<Artifact>(
    const std::string &path, const std::string &pipeline, const std::string &tokenizer,
    bool quiet)>;
void setSourceCompiler(SourceCompiler compiler);
/// llmc: source models are compiled in memory (ModelLoading.cpp).
void useInMemoryCompiler();

/// Opens an .llmc artifact, or reads and compiles a GGUF file, HF folder or
/// llama2.c checkpoint in memory (with the SourceCompiler, when there is
/// one). Throws std::runtime_error. An artifact's structure is always
/// checked (header and manifest checksums, every tensor's bounds, size and
/// alignment, and the signed digest of any native code before it runs);
/// verifyWeights also hashes every tensor's bytes against its checksum
/// (--verify-weights: reads the whole file, ~0.13 s a GB here).
std::unique_ptr<Artifact> loadModelOrArtifact(const std::string &path,
                                              const std::string &pipeline,
                                              const std::string &tokenizer,
                                              bool quiet, bool verifyWeights = false);
bool isArtifactFile(const std::string &path);
/// How forward steps run: --engine auto|kernels|reference,
/// --library-kernels (the kernel engine runs the runtime's library kernels
/// instead of the artifact's generated ones; --generated-kernels, the
/// default, is accepted), --exact-activations (no int8 activations in the
/// kernel engine's products), --trusted-key FILE / --require-signed (whose
/// generated kernels may run; see llmc/signing.h).
struct EngineChoice {
  Engine engine = Engine::Auto;
  bool generated = false; // --generated-kernels: the default, said explicitly
  bool library = false;
  bool exact = false;
  std::vector<std::string> trustedKeys;
  bool requireSigned = false;
  bool verifyWeights = false; // --verify-weights (see loadModelOrArtifact)
  std::string kvType = "f32";  // --kv-type: f32, f16 or q8_0
  KvRowType rowType() const {
    return kvType == "f16" ? KvRowType::F16 : kvType == "q8_0" ? KvRowType::Q8 : KvRowType::F32;
  }
  /// Throws std::runtime_error on an unreadable key file.
  void apply(ExecutorOptions &eo) const;
};
void addEngineOptions(CLI::App *cmd, EngineChoice &choice);
/// The GPU engine for --device cuda on `art` (context, graphs and
/// sequences from the arguments; the artifact's CUDA kernels trusted as
/// `choice` says, a signature always required), or nullptr after a
/// "llmc COMMAND: no usable CUDA device: why" line on stderr (exit with
/// kNoDevice then).
std::unique_ptr<cuda::CudaEngine> openCudaEngine(const Artifact &art, const EngineChoice &choice,
                                                 int64_t maxContext, bool graphs,
                                                 int64_t sequences, const char *command,
                                                 int64_t kvPoolBytes = 0);
/// "<device>, decode steps as CUDA Graphs" (or ", no graphs"): how the GPU
/// engine runs, for bench's and generate's reports.
std::string cudaRunInfo(const cuda::CudaEngine &gpu, bool graphs);
/// One warning line on stderr (once per process) when the executor's
/// artifact carries generated kernels that did not run for want of a
/// trusted signature.
void warnUntrustedCode(const Executor &exec);
void progress(const std::string &msg); // "[llmc] msg" on stderr

/// Seconds from t0 to now (steady clock).
inline double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// A model ready to generate (run, generate, serve): the artifact (or the
/// source model compiled in memory), its executor and its tokenizer (null
/// when it has none). Members in this order: the executor refers to the
/// artifact and goes first.
struct GenerationModel {
  std::unique_ptr<Artifact> artifact;
  std::unique_ptr<Executor> exec;
  std::unique_ptr<Tokenizer> tok;
};
/// loadModelOrArtifact, then an Executor with `eo` and the engine choice
/// (warning about untrusted generated kernels), then the tokenizer.
GenerationModel openForGeneration(const std::string &path, const std::string &pipeline,
                                  const std::string &tokenizer, bool quiet,
                                  const EngineChoice &engine, ExecutorOptions eo);

/// Where generate and serve run their batches: --device cpu|cuda and
/// --no-graphs (cuda: every step launched eagerly).
struct DeviceChoice {
  bool cuda = false, noGraphs = false;
};
void addDeviceOptions(CLI::App *cmd, DeviceChoice &d);
/// Empty, or why flags that set up the CPU engine (-t, --library-kernels,
/// --engine reference, --kv-type, --exact-activations) conflict with
/// --device cuda, or --no-graphs without it.
std::string deviceConflicts(const DeviceChoice &d, const EngineChoice &e, int threads);

/// A model ready for the continuous batcher (generate, serve): the
/// artifact, the executor (cpu) or the GPU engine (cuda), the BatchEngine
/// over it and the tokenizer. Members in destruction order's reverse.
struct BatchModel {
  std::unique_ptr<Artifact> artifact;
  std::unique_ptr<Executor> exec;
  std::unique_ptr<cuda::CudaEngine> gpu;
  std::unique_ptr<BatchEngine> engine; // null: no usable CUDA device (exit kNoDevice)
  std::unique_ptr<Tokenizer> tok;
};
/// openForGeneration on the CPU; with --device cuda the GPU engine with
/// `sequences` sequences of eo.max_context positions.
BatchModel openForBatching(const std::string &path, const std::string &pipeline,
                           const std::string &tokenizer, bool quiet, const EngineChoice &engine,
                           ExecutorOptions eo, const DeviceChoice &device, int64_t sequences,
                           const char *command, int64_t kvPoolBytes = 0);

/// How run and generate make a prompt of text and sample from it: --chat,
/// --system, --temp, --top-k, --top-p, --seed.
struct PromptChoice {
  bool chat = false;
  std::string system;
  SamplerOptions sampling; // temperature 0: greedy
};
/// `what`: "the prompt" or "each prompt"; seedHelp: what --seed does.
void addPromptOptions(CLI::App *cmd, PromptChoice &p, const std::string &what,
                      const std::string &seedHelp);
/// How generate and serve keep the KV caches of a batch: --kv-block,
/// --contiguous-kv, --no-prefix-cache (the rows' type: EngineChoice's --kv-type).
struct KvPagingChoice {
  int64_t block_tokens = 16;
  bool contiguous = false, no_prefix_cache = false;
};
void addKvPagingOptions(CLI::App *cmd, KvPagingChoice &k);
void applyKvPaging(const KvPagingChoice &k, KvRowType rows, BatcherOptions &bo);

/// The text as token ids, wrapped in the model's chat template with --chat
/// (whose special tokens are then parsed); BOS as the tokenizer asks when bos.
std::vector<int32_t> encodePrompt(const Tokenizer &tok, const std::string &text,
                                  const PromptChoice &p, bool bos);

} // namespace llmc::tool
