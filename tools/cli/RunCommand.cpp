//===- RunCommand.cpp - llmc run MODEL -p TEXT -n N ---------------------===//
// Generates from an artifact (or a source model compiled in memory),
// streaming the continuation to stdout; statistics go to stderr.
//===----------------------------------------------------------------------===//
#include "Commands.h"
#include "SpeculationOptions.h"
#include "llmc/cuda_engine.h"
#include "llmc/executor.h"
#include "llmc/speculative.h"
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace llmc::tool {
namespace {
/// Where `llmc run` runs the model.
enum class RunDevice { Cpu, Cuda };

struct RunArgs {
  std::string input, prompt, promptTokens, dumpLogits, dumpDecodeLogits, pipeline, tokenizer;
  int n = 64, threads = 0;
  int samples = 1; // --samples: independent continuations, sample i seeded seed + i
  PromptChoice p;
  bool quiet = false, noBos = false, ignoreEos = false, printIds = false;
  int64_t ctx = 0, prefillChunk = 0;
  EngineChoice engine;
  SpeculationChoice spec; // --speculate, --draft, --min-confidence, --ngram
  RunDevice device = RunDevice::Cpu;
  bool noGraphs = false;
};

std::vector<int32_t> parseTokenList(const std::string &s) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t pos = 0;
    long v;
    try {
      v = std::stol(item, &pos);
    } catch (...) {
      pos = 0;
    }
    if (pos == 0 || item.find_first_not_of(" \t", pos) != std::string::npos)
      throw std::runtime_error("--prompt-tokens: '" + item + "' is not an integer");
    ids.push_back((int32_t)v);
  }
  if (ids.empty())
    throw std::runtime_error("--prompt-tokens: no token ids given");
  return ids;
}

/// Writes a float32 array [rows, cols] in NumPy .npy format (version 1.0),
/// atomically.
void writeNpy(const std::string &path, const std::vector<float> &data, int64_t rows,
              int64_t cols) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                       std::to_string(rows) + ", " + std::to_string(cols) + "), }";
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    if (!f)
      throw std::runtime_error("cannot write " + path);
    f.write("\x93NUMPY\x01\x00", 8);
    uint16_t hl = (uint16_t)header.size();
    f.write(reinterpret_cast<const char *>(&hl), 2);
    f.write(header.data(), header.size());
    f.write(reinterpret_cast<const char *>(data.data()), data.size() * sizeof(float));
    if (!f)
      throw std::runtime_error("cannot write " + path);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw std::runtime_error("cannot write " + path);
}

void declareRunOptions(CLI::App &app, RunArgs &a) {
  CLI::App *cmd = app.add_subcommand(
      "run", "Generate text from an artifact, or from a GGUF / HF folder / llama2.c "
             "model compiled in memory");
  cmd->add_option("model", a.input, ".llmc artifact or source model")->required();
  cmd->add_option("-p,--prompt", a.prompt, "prompt text");
  cmd->add_option("--prompt-tokens", a.promptTokens,
                  "comma-separated token ids, bypassing the tokenizer");
  cmd->add_option("-n,--tokens", a.n, "tokens to generate")->check(CLI::NonNegativeNumber);
  addPromptOptions(cmd, a.p, "the prompt", "random seed for sampling");
  cmd->add_option("--samples", a.samples,
                  "draw N independent continuations of the prompt, continuation i sampled "
                  "with --seed + i (as N runs with those seeds would), one line each; the "
                  "statistics are summed (default 1; not with --device cuda or the logit dumps)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("-t,--threads", a.threads, "worker threads (0: all cores)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("-c,--ctx", a.ctx, "maximum context (0: model's, capped at 4096)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--prefill-chunk", a.prefillChunk,
                  "feed the prompt in steps of N tokens: the artifact's prefill KV policy "
                  "compresses after every step, so the cache's peak stays near its budget "
                  "(RDKV prefills in one step); 0: one step (default)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--dump-logits", a.dumpLogits,
                  "write the logits of every prompt position to FILE.npy "
                  "(float32 [tokens, vocab])");
  cmd->add_option("--dump-decode-logits", a.dumpDecodeLogits,
                  "write the logits each generated token was drawn from to FILE.npy "
                  "(float32 [generated, vocab]; the first row is the prompt's last; not with "
                  "--speculate)");
  cmd->add_option("--pipeline", a.pipeline, "pass pipeline for in-memory compiles");
  cmd->add_option("--tokenizer", a.tokenizer, "llama2.c tokenizer.bin");
  cmd->add_flag("--no-bos", a.noBos, "do not prepend BOS");
  cmd->add_flag("--ignore-eos", a.ignoreEos, "keep generating past end-of-sequence");
  cmd->add_flag("--print-ids", a.printIds,
                "print generated token ids (space separated) instead of text");
  cmd->add_flag("-q,--quiet", a.quiet, "no progress or statistics on stderr");
  addSpeculationOptions(cmd, a.spec);
  cmd->add_option("--device", a.device,
                  "cpu (default) or cuda: run on this machine's GPU with the artifact's CUDA "
                  "kernels (compiled with --target cuda or cpu,cuda, signed by a trusted key); "
                  "exit 4 when there is no usable GPU")
      ->transform(CLI::Transformer(std::map<std::string, RunDevice>{{"cpu", RunDevice::Cpu},
                                                                    {"cuda", RunDevice::Cuda}})
                      .description("one of: cpu, cuda"));
  cmd->add_flag("--no-graphs", a.noGraphs,
                "--device cuda: launch every decode step's kernels one by one instead of "
                "replaying its captured CUDA Graph (for comparison)");
  addEngineOptions(cmd, a.engine);
}

/// The prompt as token ids: --prompt-tokens as given, or the prompt text
/// (wrapped in the chat template with --chat) through the tokenizer;
/// throws unless every id is in the vocabulary and the prompt plus -n new
/// tokens fit the context.
template <typename Engine>
std::vector<int32_t> promptIds(const RunArgs &a, const Tokenizer *tok, const Engine &exec) {
  std::vector<int32_t> ids;
  if (!a.promptTokens.empty()) {
    ids = parseTokenList(a.promptTokens);
  } else {
    if (!tok)
      throw std::runtime_error(a.input + ": the model has no tokenizer; use "
                                         "--prompt-tokens (or --tokenizer for llama2.c)");
    ids = encodePrompt(*tok, a.prompt, a.p, !a.noBos);
  }
  for (int32_t id : ids)
    if (id < 0 || id >= exec.vocabSize())
      throw std::runtime_error("token id " + std::to_string(id) +
                               " is outside the vocabulary (size " +
                               std::to_string(exec.vocabSize()) + ")");
  if ((int64_t)ids.size() + a.n > exec.maxContext())
    throw std::runtime_error("prompt (" + std::to_string(ids.size()) + " tokens) + " +
                             std::to_string(a.n) + " new tokens exceed the context of " +
                             std::to_string(exec.maxContext()));
  return ids;
}

/// Streams generated tokens to stdout: text (the whole continuation is
/// decoded and what is new printed, so multi-byte characters split across
/// tokens come out whole), or ids without a tokenizer or with --print-ids.
class TokenPrinter {
public:
  TokenPrinter(const Tokenizer *tok, bool ids) : tok_(ids ? nullptr : tok) {}
  void operator()(int32_t id) {
    out_.push_back(id);
    if (tok_) {
      std::string text = tok_->decode(out_);
      if (text.size() > printed_.size() && text.compare(0, printed_.size(), printed_) == 0) {
        fputs(text.c_str() + printed_.size(), stdout);
        printed_ = text;
      }
    } else {
      printf("%s%d", out_.size() > 1 ? " " : "", id);
    }
    fflush(stdout);
  }
  void finish() {
    printf("\n");
    fflush(stdout);
  }

private:
  const Tokenizer *tok_;
  std::vector<int32_t> out_;
  std::string printed_;
};

/// Samples up to -n tokens after the prompt's `logits`, stopping at a stop
/// token, and streams them to stdout; returns how many were generated.
template <typename Engine>
int generateTokens(const RunArgs &a, Engine &exec, const Tokenizer *tok,
                   const std::vector<int32_t> &stops, Sampler &sampler,
                   std::vector<float> logits) {
  const int64_t vocab = exec.vocabSize();
  int generated = 0;
  TokenPrinter print(tok, a.printIds);
  std::vector<float> drawnFrom; // --dump-decode-logits
  for (int i = 0; i < a.n; ++i) {
    if (!a.dumpDecodeLogits.empty())
      drawnFrom.insert(drawnFrom.end(), logits.begin(), logits.begin() + vocab);
    int32_t next = sampler.sample(logits.data(), vocab);
    if (std::find(stops.begin(), stops.end(), next) != stops.end())
      break;
    ++generated;
    print(next);
    if (i + 1 < a.n)
      logits = exec.forward({next});
  }
  print.finish();
  if (!a.dumpDecodeLogits.empty())
    writeNpy(a.dumpDecodeLogits, drawnFrom, int64_t(drawnFrom.size()) / vocab, vocab);
  return generated;
}

/// generateTokens() with drafts verified by the target (lossless: greedy
/// gives the same tokens, sampling the same distribution).
int generateSpeculative(const RunArgs &a, Executor &exec, spec::Drafter &drafter,
                        const spec::SpecOptions &opts, const Tokenizer *tok,
                        const std::vector<int32_t> &stops, const std::vector<int32_t> &prompt,
                        Sampler &sampler, std::vector<float> logits, spec::SpecStats &stats) {
  TokenPrinter print(tok, a.printIds);
  auto emit = [&](int32_t id) {
    print(id);
    return true;
  };
  const int64_t n = spec::generate(exec, drafter, prompt, std::move(logits), a.n, stops, opts,
                                   sampler, emit, stats);
  print.finish();
  return int(n);
}

/// The statistics lines on stderr (none with --quiet).
void printRunStats(const RunArgs &a, const Executor &exec, double loadS, size_t promptTokens,
                   double prefillS, int generated, double decodeS) {
  if (a.quiet)
    return;
  fprintf(stderr,
          "[llmc] load %.2f s | prompt %zu tokens, %.1f tok/s | generated %d tokens, "
          "%.1f tok/s\n",
          loadS, promptTokens, promptTokens / std::max(prefillS, 1e-9), generated,
          generated > a.samples ? (generated - a.samples) / std::max(decodeS, 1e-9) : 0.0);
  fprintf(stderr, "[llmc] engine %s | generated kernels: %s | activations: %s\n",
          exec.engineName(), exec.generatedKernelsInfo().c_str(),
          exec.activationsInfo().c_str());
  const int64_t chunk = exec.prefillChunkFor(int64_t(promptTokens));
  fprintf(stderr, "[llmc] kv cache %.1f MiB, peak %.1f MiB | prefill in %s\n",
          double(exec.kvCacheBytes()) / (1 << 20), double(exec.kvCachePeakBytes()) / (1 << 20),
          chunk < int64_t(promptTokens) ? ("chunks of " + std::to_string(chunk)).c_str()
                                        : "one step");
}

/// A flag combination CLI11 cannot check: a usage error (exit 2).
int usage(const std::string &msg) {
  fprintf(stderr, "llmc: error: %s\n", msg.c_str());
  return int(kUsage);
}

/// Writes all rows' logits to --dump-logits and keeps the last row.
void dumpLogits(const RunArgs &a, std::vector<float> &logits, int64_t rows, int64_t vocab) {
  writeNpy(a.dumpLogits, logits, rows, vocab);
  logits.erase(logits.begin(), logits.end() - vocab);
}

/// llmc run --device cuda: the artifact's kernel plan on the GPU (CudaEngine).
int runOnCuda(const RunArgs &a) {
  if (a.spec.on() || a.engine.engine == Engine::Reference ||
      a.engine.library || a.engine.kvType != "f32" || a.prefillChunk > 0 || a.threads > 0)
    return usage("--device cuda runs the artifact's CUDA kernels with its own f16 paged KV "
                     "cache and prompt chunks: --speculate, --engine reference, "
                     "--library-kernels, --kv-type, --prefill-chunk and -t do not apply");
  auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<Artifact> art = loadModelOrArtifact(a.input, a.pipeline, a.tokenizer, a.quiet,
                                                      a.engine.verifyWeights);
  std::unique_ptr<cuda::CudaEngine> gpu =
      openCudaEngine(*art, a.engine, a.ctx, !a.noGraphs, 1, "run");
  if (!gpu)
    return kNoDevice;
  std::unique_ptr<Tokenizer> tok;
  if (!art->tokenizer().empty())
    tok = std::make_unique<Tokenizer>(art->tokenizer());
  const double loadS = secondsSince(t0);
  const std::vector<int32_t> ids = promptIds(a, tok.get(), *gpu);
  std::vector<int32_t> stops;
  if (tok && !a.ignoreEos)
    stops = tok->stopTokens();
  Sampler sampler(a.p.sampling);
  auto tp = std::chrono::steady_clock::now();
  const bool all = !a.dumpLogits.empty();
  std::vector<float> logits = gpu->forward(ids, all);
  const double prefillS = secondsSince(tp);
  if (all)
    dumpLogits(a, logits, int64_t(ids.size()), gpu->vocabSize());
  auto td = std::chrono::steady_clock::now();
  const int generated = generateTokens(a, *gpu, tok.get(), stops, sampler, std::move(logits));
  const double decodeS = secondsSince(td);
  if (!a.quiet) {
    const cuda::CudaEngineStats &st = gpu->stats();
    fprintf(stderr,
            "[llmc] load %.2f s | prompt %zu tokens, %.1f tok/s | generated %d tokens, "
            "%.1f tok/s\n",
            loadS, ids.size(), double(ids.size()) / std::max(prefillS, 1e-9), generated,
            generated > 1 ? (generated - 1) / std::max(decodeS, 1e-9) : 0.0);
    const std::string kvType =
        st.polykv_caches == 0 ? "f16"
        : st.polykv_caches == st.kv_caches
            ? "PolyKV"
            : "PolyKV in " + std::to_string(st.polykv_caches) + " of " +
                  std::to_string(st.kv_caches) + " layers, f16 elsewhere";
    fprintf(stderr,
            "[llmc] engine cuda on %s | weights %.1f MiB (uploaded in %.2f s), kv cache %.1f "
            "MiB (%s, paged), activations %.1f MiB | steps: %lld graph replays (%lld "
            "captured), %lld eager\n",
            gpu->deviceInfo().c_str(), double(st.weight_bytes) / (1 << 20), st.upload_seconds,
            double(st.kv_bytes) / (1 << 20), kvType.c_str(), double(st.arena_bytes) / (1 << 20),
            (long long)st.graph_steps, (long long)st.captures, (long long)st.eager_steps);
    fprintf(stderr, "[llmc] kv pool: %lld blocks of 16 positions, %lld in use at most, %lld now\n",
            (long long)st.kv_pool_blocks, (long long)st.kv_blocks_peak,
            (long long)gpu->kvBlocksUsed());
    if (st.kv_compressions > 0 || st.kv_decode_evictions > 0)
      fprintf(stderr,
              "[llmc] kv policy on the GPU: %lld prompt(s) compressed, %lld decode-time "
              "evictions, %lld cache entries evicted (all layers and KV heads)\n",
              (long long)st.kv_compressions, (long long)st.kv_decode_evictions,
              (long long)st.kv_evicted);
  }
  return kOk;
}

int runGeneration(const RunArgs &a) {
  if (a.prompt.empty() && a.promptTokens.empty() && !a.p.chat)
    throw std::runtime_error("give a prompt with -p TEXT or --prompt-tokens IDS");
  if (!a.promptTokens.empty() && (!a.prompt.empty() || a.p.chat))
    throw std::runtime_error("--prompt-tokens cannot be combined with -p or --chat");
  if (a.spec.on() && !a.dumpDecodeLogits.empty())
    return usage("--dump-decode-logits does not apply with --speculate (the target verifies "
                 "several tokens per step)");
  if (a.samples > 1 && (a.device == RunDevice::Cuda || !a.dumpLogits.empty() ||
                        !a.dumpDecodeLogits.empty()))
    return usage("--samples applies to the CPU engine without --dump-logits and "
                 "--dump-decode-logits");
  if (a.device == RunDevice::Cuda)
    return runOnCuda(a);
  if (a.noGraphs)
    return usage("--no-graphs applies to --device cuda");
  auto t0 = std::chrono::steady_clock::now();
  ExecutorOptions eo;
  eo.threads = a.threads;
  eo.max_context = a.ctx;
  eo.prefill_chunk = a.prefillChunk;
  // Medusa heads read the final hidden state (an artifact's own drafter may be one).
  eo.keep_hidden = a.spec.needsHidden();
  GenerationModel model =
      openForGeneration(a.input, a.pipeline, a.tokenizer, a.quiet, a.engine, eo);
  Executor &exec = *model.exec;
  const std::unique_ptr<Tokenizer> &tok = model.tok;
  double loadS = secondsSince(t0);

  std::vector<int32_t> ids = promptIds(a, tok.get(), exec);

  std::vector<int32_t> stops;
  if (tok && !a.ignoreEos)
    stops = tok->stopTokens();
  int64_t vocab = exec.vocabSize();

  if (!a.quiet && !tok && !a.printIds)
    fprintf(stderr, "[llmc] no tokenizer: printing token ids\n");
  spec::SpecOptions specOpts;
  std::unique_ptr<spec::Drafter> drafter;
  if (a.spec.on())
    drafter = a.spec.forCommand(a.engine, a.threads).makeDrafter(*model.artifact, exec, specOpts);
  spec::SpecStats specStats;
  double prefillS = 0, decodeS = 0;
  int generated = 0;
  for (int s = 0; s < a.samples; ++s) { // --samples: each from an empty cache
    if (s > 0)
      exec.reset();
    SamplerOptions so = a.p.sampling;
    so.seed += uint64_t(s);
    Sampler sampler(so);
    auto tp = std::chrono::steady_clock::now();
    const bool all = !a.dumpLogits.empty();
    std::vector<float> logits = exec.forward(ids, all);
    prefillS += secondsSince(tp);
    if (all)
      dumpLogits(a, logits, int64_t(ids.size()), vocab);
    auto td = std::chrono::steady_clock::now();
    generated += !drafter ? generateTokens(a, exec, tok.get(), stops, sampler, std::move(logits))
                          : generateSpeculative(a, exec, *drafter, specOpts, tok.get(), stops,
                                                ids, sampler, std::move(logits), specStats);
    decodeS += secondsSince(td);
  }
  printRunStats(a, exec, loadS, ids.size() * size_t(a.samples), prefillS, generated, decodeS);
  if (drafter && !a.quiet)
    fprintf(stderr,
            "[llmc] speculative (%s, up to %d drafts): %lld target passes with a "
            "draft, %lld of %lld drafts accepted, mean accepted length %.2f tokens per pass, "
            "drafting %.1f ms%s\n",
            drafter->name(), specOpts.max_draft, (long long)specStats.passes,
            (long long)specStats.accepted, (long long)specStats.drafted,
            specStats.meanAccepted(), specStats.draft_seconds * 1e3,
            specStats.tree_passes
                ? (", " + std::to_string(specStats.tree_passes) + " passes over a branching tree")
                      .c_str()
                : "");
  return kOk;
}
} // namespace

std::function<int()> addRunCommand(CLI::App &app) {
  auto a = std::make_shared<RunArgs>();
  declareRunOptions(app, *a);
  return [a]() { return runGeneration(*a); };
}

} // namespace llmc::tool
