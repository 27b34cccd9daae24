//===- BenchCommand.cpp - llmc bench MODEL [-p P] [-n N] [--json] --------===//
// Speed of the CPU executor on one model, in the spirit of llama-bench:
//   prefill  tokens/s of one P-token forward (fresh KV cache per run),
//   decode   tokens/s of N one-token forwards from an empty KV cache, each
//            fed the greedy (argmax) token of the previous step, EOS ignored
//            (llama-bench's tgN also decodes at positions 0..N-1),
//   load     seconds to open + verify the artifact (or read + compile a
//            source model in memory) + set up the executor, as `llmc run`,
//   peak RSS the process's resident high-water mark (VmHWM; ru_maxrss where
//            there is no /proc), MiB, over the whole run.
// Each rate is the median of --reps runs. Prompt ids are deterministic: BOS
// (when the tokenizer has one) then a fixed pseudo-random sequence in the
// vocabulary, so every run and every build sees the same tokens.
// --speculate (with --prompt-file): the decode test becomes -n greedy tokens
// after the file's prompt, plainly and with the drafter, alternating within
// each repetition (BenchSpeculation.h): both rates, the speedup, the mean
// accepted length and the drafter's time.
// Also reported for roofline estimates (bench/cpu_performance.py): the
// weight bytes one decode step reads (every tensor once, except tensors only
// the embedding reads, of which one row) and the KV-cache bytes per cached
// position (f32 K and V of every attention node).
//===----------------------------------------------------------------------===//
#include "BenchSpeculation.h"
#include "llmc/threads.h"
#include "Commands.h"
#include "Evaluation.h"
#include "llmc/cuda_engine.h"
#include "llmc/executor.h"
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <sys/resource.h>
#include <thread>
#include <type_traits>

namespace llmc::tool {
namespace {
struct BenchArgs {
  std::string input, pipeline, tokenizer;
  int threads = 0, prompt = 512, gen = 128, reps = 3;
  int64_t ctx = 0;
  bool json = false, quiet = false, noWarmup = false;
  EngineChoice engine;
  bool cuda = false, noGraphs = false; // --device cuda, --no-graphs
  int batch = 1;                        // --batch: sequences decoded together (cuda)
  SpeculationChoice spec;               // --speculate and its flags
  std::string promptFile;               // --prompt-file: the text --speculate decodes after
  bool chat = false;                    // --chat: that text in the model's chat template
};

/// The GPU engine seen as bench sees the CPU executor.
struct CudaBenchEngine {
  cuda::CudaEngine &gpu;
  bool graphs;
  std::string info = cudaRunInfo(gpu, graphs);
  std::vector<float> forward(const std::vector<int32_t> &t) { return gpu.forward(t); }
  void reset() { gpu.reset(); }
  int64_t vocabSize() const { return gpu.vocabSize(); }
  int64_t maxContext() const { return gpu.maxContext(); }
  const char *engineName() const { return "cuda"; }
  std::string generatedKernelsInfo() const { return info; }
  std::string activationsInfo() const { return "f32 (KV cache f16, paged)"; }
};

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  if (v.empty())
    return 0.0;
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

/// Peak resident memory of this process, MiB: VmHWM of /proc/self/status,
/// the high-water mark of this process image only. getrusage's ru_maxrss
/// (the fallback) also covers the image exec replaced, so under a large
/// parent (a Python driver) it reports the parent's size instead.
double peakRssMiB() {
  if (FILE *f = fopen("/proc/self/status", "r")) {
    char line[256];
    long kib = -1;
    while (fgets(line, sizeof line, f))
      if (sscanf(line, "VmHWM: %ld kB", &kib) == 1)
        break;
    fclose(f);
    if (kib > 0)
      return double(kib) / 1024.0;
  }
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0; // Linux: KiB
}

/// BOS (if any) then ids from a fixed 64-bit LCG, all in [0, vocab).
std::vector<int32_t> benchTokens(int64_t count, int64_t vocab, int32_t bos) {
  std::vector<int32_t> ids;
  ids.reserve(size_t(count));
  if (count > 0 && bos >= 0 && bos < vocab)
    ids.push_back(bos);
  uint64_t s = 0x9E3779B97F4A7C15ull;
  while ((int64_t)ids.size() < count) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    ids.push_back(int32_t((s >> 33) % uint64_t(vocab)));
  }
  return ids;
}

/// What the artifact holds and what one decode step reads.
struct ModelStats {
  int64_t weightBytes = 0, params = 0, decodeBytes = 0, kvBytesPerPos = 0;
  int64_t otherBytes = 0; // tensors the program reads no weight from (generated code)
  std::map<std::string, int64_t> bytesByType;
};

ModelStats modelStats(const Artifact &art) {
  ModelStats s;
  std::set<std::string> readWhole, embedOnly;
  for (const ProgramNode &n : art.program().nodes)
    for (const auto &kv : n.weights)
      (n.op == "embed" ? embedOnly : readWhole).insert(kv.second);
  // Weights the compiler stored in their kernels' layout: the products read
  // the packed tensor; a row-major copy kept beside it serves the embedding.
  std::map<std::string, std::string> packedTensor; // packed tensor -> weight
  const nlohmann::json packed = art.manifest().value("packed_weights", nlohmann::json::object());
  for (auto &[name, p] : packed.items())
    if (p.contains("tensor") && p["tensor"].is_string())
      packedTensor[p["tensor"].get<std::string>()] = name;
  for (const auto &[tensor, weight] : packedTensor)
    readWhole.erase(weight);
  for (const TensorView &t : art.tensors()) {
    if (auto pk = packedTensor.find(t.name); pk != packedTensor.end()) {
      s.weightBytes += t.nbytes;
      s.bytesByType["rows8"] += t.nbytes;
      s.decodeBytes += t.nbytes;
      const TensorView *rowMajor = art.tensor(pk->second);
      const nlohmann::json &shape = packed[pk->second]["shape"];
      if (!rowMajor && shape.is_array() && shape.size() == 2)
        s.params += shape[0].get<int64_t>() * shape[1].get<int64_t>();
      continue;
    }
    bool isAux = t.name.size() > 4 && t.name.compare(t.name.size() - 4, 4, kAuxSuffix) == 0;
    const std::string base = isAux ? t.name.substr(0, t.name.size() - 4) : t.name;
    if (!readWhole.count(base) && !embedOnly.count(base)) {
      s.otherBytes += t.nbytes; // e.g. the generated kernels' source and objects
      continue;
    }
    s.weightBytes += t.nbytes;
    s.bytesByType[std::string(dtypeName(t.dtype))] += t.nbytes;
    if (!isAux)
      s.params += t.numElements();
    // A tensor only the embedding reads costs one row per token; a tied
    // embedding is also the LM head's matrix and is read whole.
    bool embedRow = embedOnly.count(t.name) && !readWhole.count(t.name);
    s.decodeBytes += embedRow ? t.nbytes / std::max<int64_t>(1, t.rows()) : t.nbytes;
  }
  for (const ProgramNode &n : art.program().nodes) {
    if (n.op != "attention")
      continue;
    const nlohmann::json &a = n.attrs;
    int64_t heads = a.value("num_heads", int64_t(0));
    int64_t kv = a.value("num_kv_heads", heads);
    int64_t hd = a.value("head_dim", int64_t(0));
    s.kvBytesPerPos += 2 * kv * hd * int64_t(sizeof(float));
  }
  return s;
}

std::string modelName(const Artifact &art, const std::string &path) {
  if (!art.config().name.empty())
    return art.config().name;
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string jsonNumber(double v) {
  if (!std::isfinite(v))
    return "null";
  char buf[64];
  snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string rateCell(const std::vector<double> &runs) {
  double m = median(runs);
  double lo = *std::min_element(runs.begin(), runs.end());
  double hi = *std::max_element(runs.begin(), runs.end());
  char buf[96];
  if (runs.size() > 1)
    snprintf(buf, sizeof buf, "%.2f (%.2f-%.2f)", m, lo, hi);
  else
    snprintf(buf, sizeof buf, "%.2f", m);
  return buf;
}

void declareBenchOptions(CLI::App &app, BenchArgs &a) {
  CLI::App *cmd = app.add_subcommand(
      "bench", "Measure prefill and decode speed, load time and peak memory of an "
               "artifact (or a source model compiled in memory)");
  cmd->add_option("model", a.input, ".llmc artifact or source model")->required();
  cmd->add_option("-p,--prompt", a.prompt, "prompt tokens of the prefill test (0: skip)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("-n,--tokens", a.gen, "tokens of the decode test (0: skip)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("-r,--reps", a.reps, "repetitions; each rate is their median")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("-t,--threads", a.threads, "worker threads (0: all cores)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("-c,--ctx", a.ctx, "KV cache size (0: the larger of -p and -n)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--pipeline", a.pipeline, "pass pipeline for in-memory compiles");
  cmd->add_option("--tokenizer", a.tokenizer, "llama2.c tokenizer.bin");
  cmd->add_flag("--json", a.json, "print one JSON object instead of the table");
  cmd->add_flag("--no-warmup", a.noWarmup, "skip the untimed warm-up step");
  cmd->add_flag("-q,--quiet", a.quiet, "no progress on stderr");
  cmd->add_option_function<std::string>(
         "--device", [&a](const std::string &d) { a.cuda = d == "cuda"; },
         "cpu (default) or cuda: the artifact's CUDA kernels on this machine's GPU (exit 4 "
         "without a usable one)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_flag("--no-graphs", a.noGraphs,
                "--device cuda: launch each decode step's kernels instead of replaying its "
                "CUDA Graph");
  cmd->add_option("--batch", a.batch,
                  "--device cuda: sequences decoded together in each step (1-32); the decode "
                  "rate counts all their tokens, and an untimed first pass checks the batched "
                  "logits against each sequence decoded alone")
      ->check(CLI::Range(1, 32));
  addSpeculationOptions(cmd, a.spec);
  cmd->add_option("--prompt-file", a.promptFile,
                  "--speculate: UTF-8 text whose tokens (BOS first) the decode test continues "
                  "(drafts are only as good as the text: a code edit repeats its source, "
                  "random ids repeat nothing)")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--chat", a.chat, "--prompt-file: wrap the text in the model's chat template");
  addEngineOptions(cmd, a.engine);
}

/// What a bench run measured, for both output forms.
struct BenchResult {
  std::vector<double> prefill, decode; // tokens/s of each repetition
  std::optional<SpecBenchResult> spec; // --speculate (decode: its plain runs)
  double loadS = 0, rss = 0, bpw = 0;
  double batchMaxDiff = -1; // --batch > 1: batched vs one-by-one logits, max |diff|
  int threads = 0;
  ModelStats stats;
  std::string name;
};

/// The timed repetitions: a -p token prefill from an empty cache, then -n
/// greedy one-token decode steps from an empty cache (each skipped at 0).
/// `bos`: the tokenizer's BOS id, which starts the prompt (-1: none).
template <typename Engine>
void measureRates(const BenchArgs &a, Engine &exec, int32_t bos, BenchResult &r) {
  const int64_t vocab = exec.vocabSize();
  std::vector<int32_t> prompt = benchTokens(std::max<int64_t>(a.prompt, 1), vocab, bos);
  Sampler greedy({});

  if (!a.noWarmup) { // first touch of every weight page, thread start-up
    exec.reset();
    exec.forward(std::vector<int32_t>(prompt.begin(),
                                      prompt.begin() + std::min<size_t>(prompt.size(), 8)));
    exec.reset();
  }
  for (int rep = 0; rep < a.reps; ++rep) {
    if (a.prompt > 0) {
      exec.reset();
      auto tp = Clock::now();
      std::vector<float> logits = exec.forward(prompt);
      double s = secondsSince(tp);
      if (logits.size() != size_t(vocab))
        throw std::runtime_error(a.input + ": prefill returned no logits");
      r.prefill.push_back(a.prompt / std::max(s, 1e-9));
    }
    if (a.gen > 0) {
      exec.reset();
      int32_t tok = prompt[0];
      auto td = Clock::now();
      for (int i = 0; i < a.gen; ++i) {
        std::vector<float> logits = exec.forward({tok});
        tok = greedy.sample(logits.data(), vocab);
      }
      r.decode.push_back(a.gen / std::max(secondsSince(td), 1e-9));
    }
    if (!a.quiet)
      fprintf(stderr, "[llmc] rep %d/%d done\n", rep + 1, a.reps);
  }
}

/// --device cuda --batch B: B sequences, each started from its own prompt
/// token, decode -n greedy steps together; the rate counts B tokens a step.
/// First (untimed) three steps of each sequence alone, then the same three
/// batched with the same tokens: r.batchMaxDiff is the largest logit
/// difference (the rows of a batched step are computed as alone: 0).
void measureBatchDecode(const BenchArgs &a, cuda::CudaEngine &gpu, int32_t bos, BenchResult &r) {
  const int64_t vocab = gpu.vocabSize(), B = a.batch;
  const std::vector<int32_t> starts = benchTokens(B + 1, vocab, bos);
  std::vector<int64_t> seqs(static_cast<size_t>(B));
  for (int64_t i = 0; i < B; ++i)
    seqs[size_t(i)] = i;
  Sampler greedy({});
  const int checkSteps = int(std::min<int64_t>(3, gpu.maxContext()));
  std::vector<std::vector<int32_t>> fed(static_cast<size_t>(B));
  std::vector<std::vector<float>> alone(static_cast<size_t>(B));
  for (int64_t i = 0; i < B; ++i) {
    gpu.resetSequence(i);
    int32_t tok = starts[size_t(i + 1)];
    for (int k = 0; k < checkSteps; ++k) {
      fed[size_t(i)].push_back(tok);
      std::vector<float> l = gpu.forwardSequence(i, {tok});
      alone[size_t(i)].insert(alone[size_t(i)].end(), l.begin(), l.end());
      tok = greedy.sample(l.data(), vocab);
    }
    gpu.resetSequence(i);
  }
  r.batchMaxDiff = 0;
  for (int k = 0; k < checkSteps; ++k) {
    std::vector<int32_t> toks(static_cast<size_t>(B));
    for (int64_t i = 0; i < B; ++i)
      toks[size_t(i)] = fed[size_t(i)][size_t(k)];
    const std::vector<float> l = gpu.decodeBatch(seqs, toks);
    for (int64_t i = 0; i < B; ++i)
      for (int64_t v = 0; v < vocab; ++v)
        r.batchMaxDiff = std::max<double>(
            r.batchMaxDiff, std::fabs(l[size_t(i * vocab + v)] -
                                      alone[size_t(i)][size_t(k * vocab + v)]));
  }
  for (int rep = 0; rep < a.reps; ++rep) {
    std::vector<int32_t> toks(starts.begin() + 1, starts.end());
    for (int64_t i = 0; i < B; ++i)
      gpu.resetSequence(i);
    auto td = Clock::now();
    for (int step = 0; step < a.gen; ++step) {
      const std::vector<float> l = gpu.decodeBatch(seqs, toks);
      for (int64_t i = 0; i < B; ++i)
        toks[size_t(i)] = greedy.sample(l.data() + i * vocab, vocab);
    }
    r.decode.push_back(double(B) * a.gen / std::max(secondsSince(td), 1e-9));
    if (!a.quiet)
      fprintf(stderr, "[llmc] rep %d/%d done\n", rep + 1, a.reps);
  }
}

/// "[r0, r1, ...]" with jsonNumber's formatting.
std::string jsonArray(const std::vector<double> &v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? ", " : "") + jsonNumber(v[i]);
  return s + "]";
}

/// Median over repetitions of speculative / plain decode tok/s.
double specSpeedup(const SpecBenchResult &s) {
  std::vector<double> r;
  for (size_t i = 0; i < s.plain.size() && i < s.speculative.size(); ++i)
    r.push_back(s.speculative[i] / std::max(s.plain[i], 1e-9));
  return median(r);
}

/// The "speculative" member: null, or the drafter, both rates and what
/// drafting did (summed over the repetitions).
std::string specJson(const BenchResult &r) {
  if (!r.spec)
    return "null";
  const SpecBenchResult &s = *r.spec;
  nlohmann::json j = {{"drafter", s.drafter},
                      {"max_draft", s.maxDraft},
                      {"prompt_tokens", s.promptTokens},
                      {"plain_tok_s", median(s.plain)},
                      {"speculative_tok_s", median(s.speculative)},
                      {"plain_runs", s.plain},
                      {"speculative_runs", s.speculative},
                      {"speedup", specSpeedup(s)},
                      {"mean_accepted", s.stats.meanAccepted()},
                      {"passes", s.stats.passes},
                      {"drafted", s.stats.drafted},
                      {"accepted", s.stats.accepted},
                      {"draft_ms", s.stats.draft_seconds * 1e3},
                      {"tree_nodes", s.treeNodes},
                      {"tree_passes", s.stats.tree_passes},
                      {"tokens_identical", true}};
  return j.dump();
}

template <typename Engine>
void printBenchJson(const BenchArgs &a, const BenchResult &r, const Artifact &art,
                    const Engine &exec) {
  const ModelStats &st = r.stats;
  const double prefillMed = r.prefill.empty() ? NAN : median(r.prefill);
  const double decodeMed = r.decode.empty() ? NAN : median(r.decode);
  std::string types = "{";
  for (const auto &kv : st.bytesByType)
    types += (types.size() > 1 ? ", \"" : "\"") + kv.first + "\": " +
             std::to_string(kv.second);
  types += "}";
  nlohmann::json j; // only for string escaping of the name and path
  printf("{\"prefill_tok_s\": %s, \"decode_tok_s\": %s, \"load_s\": %s, "
         "\"peak_rss_mb\": %s, \"threads\": %d, \"model\": %s, \"path\": %s, "
         "\"prompt_tokens\": %d, \"gen_tokens\": %d, \"reps\": %d, \"ctx\": %lld, "
         "\"file_bytes\": %llu, \"size_bytes\": %lld, \"params\": %lld, \"bpw\": %s, "
         "\"decode_weight_bytes_per_token\": %lld, \"kv_bytes_per_position\": %lld, "
         "\"bytes_by_type\": %s, \"prefill_runs\": %s, \"decode_runs\": %s, "
         "\"engine\": \"%s\", \"generated_kernels\": %s, \"other_bytes\": %lld, "
         "\"activations\": %s, \"batch\": %d, \"batch_max_abs_diff\": %s, "
         "\"speculative\": %s}\n",
         jsonNumber(prefillMed).c_str(), jsonNumber(decodeMed).c_str(),
         jsonNumber(r.loadS).c_str(), jsonNumber(r.rss).c_str(), r.threads,
         nlohmann::json(r.name).dump().c_str(), nlohmann::json(a.input).dump().c_str(),
         a.prompt, a.gen, a.reps, (long long)exec.maxContext(),
         (unsigned long long)art.fileSize(), (long long)st.weightBytes,
         (long long)st.params, jsonNumber(r.bpw).c_str(), (long long)st.decodeBytes,
         (long long)st.kvBytesPerPos, types.c_str(), jsonArray(r.prefill).c_str(),
         jsonArray(r.decode).c_str(), exec.engineName(),
         nlohmann::json(exec.generatedKernelsInfo()).dump().c_str(), (long long)st.otherBytes,
         nlohmann::json(exec.activationsInfo()).dump().c_str(), a.batch,
         r.batchMaxDiff < 0 ? "null" : jsonNumber(r.batchMaxDiff).c_str(),
         specJson(r).c_str());
  fflush(stdout);
}

/// The llama-bench style table: one row per test, then a summary line.
template <typename Engine>
void printBenchTable(const BenchArgs &a, const BenchResult &r, const Engine &exec) {
  char size[32], bpwS[32];
  snprintf(size, sizeof size, "%.2f MiB", double(r.stats.weightBytes) / (1 << 20));
  snprintf(bpwS, sizeof bpwS, "%.2f", r.bpw);
  printf("| %-24s | %12s | %6s | %7s | %8s | %-28s |\n", "model", "size", "bpw", "threads",
         "test", "t/s (median (min-max))");
  printf("| %s | %s | %s | %s | %s | %s |\n", std::string(24, '-').c_str(),
         std::string(12, '-').c_str(), std::string(6, '-').c_str(),
         std::string(7, '-').c_str(), std::string(8, '-').c_str(),
         std::string(28, '-').c_str());
  auto printRow = [&](const std::string &test, const std::vector<double> &runs) {
    printf("| %-24.24s | %12s | %6s | %7d | %8s | %-28s |\n", r.name.c_str(), size, bpwS,
           r.threads, test.c_str(), rateCell(runs).c_str());
  };
  if (!r.prefill.empty())
    printRow("pp" + std::to_string(a.prompt), r.prefill);
  if (!r.decode.empty())
    printRow("tg" + std::to_string(a.gen) + (a.batch > 1 ? " x" + std::to_string(a.batch) : ""),
             r.decode);
  if (r.spec) {
    const SpecBenchResult &s = *r.spec;
    printRow("tg" + std::to_string(a.gen) + " spec", s.speculative);
    printf("after a %lld-token prompt: %s, up to %d drafts: %.2fx plain decoding (median of "
           "paired runs), mean accepted length %.2f tokens per pass (%lld of %lld drafts "
           "accepted), drafting %.1f ms; tokens identical to plain greedy\n",
           (long long)s.promptTokens, s.drafter.c_str(), s.maxDraft, specSpeedup(s),
           s.stats.meanAccepted(), (long long)s.stats.accepted, (long long)s.stats.drafted,
           s.stats.draft_seconds * 1e3);
  }
  if (r.batchMaxDiff >= 0)
    printf("batch of %d: logits within %.3g of each sequence decoded alone\n", a.batch,
           r.batchMaxDiff);
  printf("load %.3f s | peak RSS %.1f MiB | %d rep%s | engine %s | generated kernels: %s | "
         "activations: %s\n",
         r.loadS, r.rss, a.reps, a.reps == 1 ? "" : "s", exec.engineName(),
         exec.generatedKernelsInfo().c_str(), exec.activationsInfo().c_str());
  fflush(stdout);
}

int runBench(const BenchArgs &a) {
  // Flag combinations CLI11 cannot check are usage errors too (exit 2).
  int64_t need = std::max<int64_t>(a.prompt, a.gen);
  auto usage = [](const std::string &msg) {
    fprintf(stderr, "llmc: error: %s\n", msg.c_str());
    return int(kUsage);
  };
  if (need == 0)
    return usage("nothing to measure: -p and -n are both 0");
  if ((a.noGraphs || a.batch > 1) && !a.cuda)
    return usage("--no-graphs and --batch apply to --device cuda");
  if (a.spec.on() && (a.cuda || a.promptFile.empty() || a.gen == 0))
    return usage("--speculate measures CPU decoding after a text: it needs --prompt-file and "
                 "-n above 0, and does not apply to --device cuda");
  if (!a.spec.on() && (!a.promptFile.empty() || a.chat))
    return usage("--prompt-file (and --chat) give the text --speculate decodes after: give "
                 "--speculate");
  if (a.cuda && (a.threads > 0 || a.engine.library || a.engine.engine == Engine::Reference ||
                 a.engine.kvType != "f32"))
    return usage("--device cuda runs the artifact's CUDA kernels: -t, --library-kernels, "
                 "--engine reference and --kv-type do not apply");
  if (a.ctx > 0 && a.ctx < need)
    return usage("--ctx " + std::to_string(a.ctx) + " is smaller than the " +
                 std::to_string(need) + " positions the test needs");
  auto t0 = Clock::now();
  auto art = loadModelOrArtifact(a.input, a.pipeline, a.tokenizer, a.quiet,
                                 a.engine.verifyWeights);
  std::vector<int32_t> specPrompt; // --speculate: the file's tokens
  if (a.spec.on()) {
    if (art->tokenizer().empty())
      throw std::runtime_error(a.input + ": --prompt-file needs the model's tokenizer (the "
                                         "artifact has none)");
    PromptChoice chat;
    chat.chat = a.chat;
    specPrompt = encodePrompt(Tokenizer(art->tokenizer()),
                              readTextFile(a.promptFile, "the prompt file"), chat, true);
    // The prompt, the tokens, and a last draft's entries before they are rewound.
    need = std::max<int64_t>(need, int64_t(specPrompt.size()) + a.gen + 17);
    if (a.ctx > 0 && a.ctx < need)
      throw std::runtime_error("--ctx " + std::to_string(a.ctx) + " is smaller than the " +
                               std::to_string(need) + " positions --speculate needs (the " +
                               std::to_string(specPrompt.size()) + "-token prompt, -n and a draft)");
  }
  int64_t modelCtx = art->config().context_length;
  if (modelCtx > 0 && need > modelCtx)
    throw std::runtime_error(a.input + ": the test needs " + std::to_string(need) +
                             " positions but the model's context is " +
                             std::to_string(modelCtx) + " (lower -p / -n)");
  BenchResult r;
  r.threads = a.threads > 0 ? a.threads : defaultThreadCount();
  const int32_t bos = art->tokenizer().tokens.empty() ? -1 : art->tokenizer().bos_id;
  auto report = [&](auto &engine) {
    bool batched = false;
    if constexpr (std::is_same_v<std::decay_t<decltype(engine)>, CudaBenchEngine>) {
      if (a.batch > 1) { // the prompt test alone, then the batched decode
        BenchArgs prefillOnly = a;
        prefillOnly.gen = 0;
        measureRates(prefillOnly, engine, bos, r);
        if (a.gen > 0)
          measureBatchDecode(a, engine.gpu, bos, r);
        batched = true;
      }
    }
    if constexpr (std::is_same_v<std::decay_t<decltype(engine)>, Executor>) {
      if (a.spec.on()) { // the prompt test, then plain against speculative decoding
        BenchArgs prefillOnly = a;
        prefillOnly.gen = 0;
        if (a.prompt > 0)
          measureRates(prefillOnly, engine, bos, r);
        r.spec = measureSpeculation(engine, *art, a.spec.forCommand(a.engine, a.threads),
                                    specPrompt, a.gen, a.reps, a.quiet);
        r.decode = r.spec->plain;
        batched = true;
      }
    }
    if (!batched)
      measureRates(a, engine, bos, r);
    r.rss = peakRssMiB();
    r.stats = modelStats(*art);
    r.bpw = r.stats.params > 0 ? 8.0 * double(r.stats.weightBytes) / double(r.stats.params) : 0.0;
    r.name = modelName(*art, a.input);
    if (a.json)
      printBenchJson(a, r, *art, engine);
    else
      printBenchTable(a, r, engine);
  };
  if (a.cuda) {
    std::unique_ptr<cuda::CudaEngine> gpu =
        openCudaEngine(*art, a.engine, a.ctx > 0 ? a.ctx : need, !a.noGraphs, a.batch, "bench");
    if (!gpu)
      return kNoDevice;
    r.loadS = secondsSince(t0);
    r.threads = 0; // the GPU's
    CudaBenchEngine engine{*gpu, !a.noGraphs};
    report(engine);
    return kOk;
  }
  ExecutorOptions eo;
  eo.threads = a.threads;
  eo.max_context = a.ctx > 0 ? a.ctx : need;
  eo.keep_hidden = a.spec.needsHidden(); // Medusa heads read the final hidden state
  a.engine.apply(eo);
  Executor exec(*art, eo);
  warnUntrustedCode(exec);
  r.loadS = secondsSince(t0);
  report(exec);
  return kOk;
}
} // namespace

std::function<int()> addBenchCommand(CLI::App &app) {
  auto a = std::make_shared<BenchArgs>();
  declareBenchOptions(app, *a);
  return [a]() { return runBench(*a); };
}

} // namespace llmc::tool
