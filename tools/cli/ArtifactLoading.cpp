//===- ArtifactLoading.cpp - Open a model for a command, engine options ---===//
// The part of model loading that needs only the runtime: artifacts are
// opened here; source models go to the SourceCompiler the llmc binary sets
// (ModelLoading.cpp), and the runtime-only binary has none.
//===----------------------------------------------------------------------===//
#include "Commands.h"
#include <atomic>
#include <cstring>
#include <fstream>

namespace llmc::tool {

namespace {
SourceCompiler &sourceCompiler() {
  static SourceCompiler c;
  return c;
}
} // namespace

void progress(const std::string &msg) { fprintf(stderr, "[llmc] %s\n", msg.c_str()); }

void setSourceCompiler(SourceCompiler compiler) { sourceCompiler() = std::move(compiler); }

bool isArtifactFile(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  char magic[8] = {};
  return f.read(magic, 8) && std::memcmp(magic, kArtifactMagic, 8) == 0;
}

std::unique_ptr<Artifact> loadModelOrArtifact(const std::string &path,
                                              const std::string &pipeline,
                                              const std::string &tokenizer,
                                              bool quiet, bool verifyWeights) {
  if (isArtifactFile(path)) {
    if (!pipeline.empty())
      throw std::runtime_error(path + ": --pipeline applies to source models, "
                                      "not to a compiled artifact");
    return Artifact::open(path, verifyWeights);
  }
  if (!sourceCompiler())
    throw std::runtime_error(path + ": not an .llmc artifact (this runtime-only binary runs "
                                    "compiled artifacts; compile the model with `llmc compile`)");
  return sourceCompiler()(path, pipeline, tokenizer, quiet);
}

GenerationModel openForGeneration(const std::string &path, const std::string &pipeline,
                                  const std::string &tokenizer, bool quiet,
                                  const EngineChoice &engine, ExecutorOptions eo) {
  GenerationModel m;
  m.artifact = loadModelOrArtifact(path, pipeline, tokenizer, quiet, engine.verifyWeights);
  engine.apply(eo);
  m.exec = std::make_unique<Executor>(*m.artifact, eo);
  warnUntrustedCode(*m.exec);
  if (!m.artifact->tokenizer().empty())
    m.tok = std::make_unique<Tokenizer>(m.artifact->tokenizer());
  return m;
}

BatchModel openForBatching(const std::string &path, const std::string &pipeline,
                           const std::string &tokenizer, bool quiet, const EngineChoice &engine,
                           ExecutorOptions eo, const DeviceChoice &device, int64_t sequences,
                           const char *command, int64_t kvPoolBytes) {
  BatchModel m;
  if (!device.cuda) {
    GenerationModel g = openForGeneration(path, pipeline, tokenizer, quiet, engine, eo);
    m.artifact = std::move(g.artifact);
    m.exec = std::move(g.exec);
    m.tok = std::move(g.tok);
    m.engine = makeExecutorBatchEngine(*m.exec);
    return m;
  }
  m.artifact = loadModelOrArtifact(path, pipeline, tokenizer, quiet, engine.verifyWeights);
  m.gpu = openCudaEngine(*m.artifact, engine, eo.max_context, !device.noGraphs, sequences,
                         command, kvPoolBytes);
  if (!m.gpu)
    return m;
  m.engine = cuda::makeCudaBatchEngine(*m.gpu);
  if (!m.artifact->tokenizer().empty())
    m.tok = std::make_unique<Tokenizer>(m.artifact->tokenizer());
  return m;
}

std::string cudaRunInfo(const cuda::CudaEngine &gpu, bool graphs) {
  return gpu.deviceInfo() + (graphs ? ", decode steps as CUDA Graphs" : ", no graphs");
}

void addDeviceOptions(CLI::App *cmd, DeviceChoice &d) {
  cmd->add_option_function<std::string>(
         "--device", [&d](const std::string &s) { d.cuda = s == "cuda"; },
         "cpu (default) or cuda: run the batches on this machine's GPU with the artifact's "
         "CUDA kernels (compiled with --target cuda or cpu,cuda, signed by a trusted key; f16 "
         "KV cache, no prefix sharing); exit 4 when there is no usable GPU")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_flag("--no-graphs", d.noGraphs,
                "--device cuda: launch every decode step's kernels one by one instead of "
                "replaying its captured CUDA Graph");
}

std::string deviceConflicts(const DeviceChoice &d, const EngineChoice &e, int threads) {
  if (!d.cuda)
    return d.noGraphs ? "--no-graphs applies to --device cuda" : "";
  if (threads > 0 || e.library || e.exact || e.engine == Engine::Reference || e.kvType != "f32")
    return "--device cuda runs the artifact's CUDA kernels with their own f16 KV cache: -t, "
           "--library-kernels, --exact-activations, --engine reference and --kv-type do not "
           "apply";
  return "";
}

void EngineChoice::apply(ExecutorOptions &eo) const {
  eo.engine = engine;
  eo.generated_kernels = !library;
  eo.exact_activations = exact;
  eo.trust = signing::loadCodeTrust(trustedKeys, requireSigned);
  eo.kv_row_type = rowType();
}

std::unique_ptr<cuda::CudaEngine> openCudaEngine(const Artifact &art, const EngineChoice &choice,
                                                 int64_t maxContext, bool graphs,
                                                 int64_t sequences, const char *command,
                                                 int64_t kvPoolBytes) {
  cuda::CudaEngineOptions co;
  co.kv_pool_bytes = kvPoolBytes;
  co.max_context = maxContext;
  co.graphs = graphs;
  co.max_sequences = sequences;
  co.trust = signing::loadCodeTrust(choice.trustedKeys, /*requireSigned=*/true);
  std::string why;
  std::unique_ptr<cuda::CudaEngine> gpu = cuda::CudaEngine::open(art, co, why);
  if (!gpu)
    fprintf(stderr, "llmc %s: no usable CUDA device: %s\n", command, why.c_str());
  return gpu;
}

void warnUntrustedCode(const Executor &exec) {
  static std::atomic<bool> said{false};
  const std::string w = exec.untrustedCodeWarning();
  if (!w.empty() && !said.exchange(true))
    fprintf(stderr, "llmc: warning: %s\n", w.c_str());
}

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
      "kernel engine: run the artifact's generated kernels (the default): the stored object "
      "of this CPU's level (or LLMC_ISA's), when the artifact is signed by a trusted key");
  cmd->add_flag("--library-kernels", choice.library,
                "kernel engine: run the runtime's library kernels instead of the artifact's "
                "generated ones")
      ->excludes(gen);
  cmd->add_flag("--exact-activations", choice.exact,
                "kernel engine: keep every product's activations in f32 (by default products "
                "with Q8_0/Q4_0/Q4_1/Q5_0/Q5_1 or gq4s/gq4a/gq8s weights quantize them to int8 "
                "per 32 values and run integer dots, as llama.cpp does)");
  cmd->add_option("--trusted-key", choice.trustedKeys,
                  "public key file (llmc keygen's .pub) whose signed artifacts' generated "
                  "kernels may run, beside the trust store " +
                      signing::defaultTrustDir() + " (repeatable)")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--require-signed", choice.requireSigned,
                "refuse an artifact whose generated kernels are not signed by a trusted key "
                "(default: run the runtime's built-in kernels with a warning)");
  cmd->add_option("--kv-type", choice.kvType,
                  "element type of the KV cache's rows: f32 (default), f16 (blocks of f16 "
                  "rows: half the memory and the bytes attention reads, each entry rounded to "
                  "nearest) or q8_0 (int8 codes with one f16 scale per 32 elements: about a "
                  "quarter of f32's bytes; head_dim a multiple of 32); a --ref model keeps f32")
      ->check(CLI::IsMember({"f32", "f16", "q8_0"}));
  cmd->add_flag("--verify-weights", choice.verifyWeights,
                "hash every tensor of the artifact against its stored checksum before running "
                "(reads the whole file; by default only the header, manifest, tensor bounds "
                "and any native code are checked, and `llmc verify` checks everything)");
}

} // namespace llmc::tool
