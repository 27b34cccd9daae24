//===- GenerateCommand.cpp - llmc generate MODEL --prompts FILE ----------===//
// Offline batch generation: every line of FILE is one request (text, or
// comma-separated token ids with --ids), all run by the continuous batcher
// (llmc/batcher.h) at up to --max-batch sequences per step; one JSON line
// per request on stdout, in input order; statistics on stderr.
//===----------------------------------------------------------------------===//
#include "Commands.h"
#include "llmc/batcher.h"
#include "llmc/tokenizer.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace llmc::tool {
namespace {
struct GenerateArgs {
  std::string input, prompts, pipeline, tokenizer;
  int n = 64, threads = 0, maxBatch = 16;
  int64_t stepTokens = 256, ctx = 0, kvPoolMiB = 0;
  PromptChoice p;
  KvPagingChoice kv;
  bool ids = false, quiet = false, noBos = false, ignoreEos = false, statsJson = false;
  bool promptIds = false;
  EngineChoice engine;
  DeviceChoice device;
};

void declareGenerateOptions(CLI::App &app, GenerateArgs &a) {
  CLI::App *cmd = app.add_subcommand(
      "generate", "Generate for many prompts at once (continuous batching): one request per "
                  "line of a file, one JSON line per request on stdout");
  cmd->add_option("model", a.input, ".llmc artifact or source model")->required();
  cmd->add_option("--prompts", a.prompts, "file with one prompt per line ('-': stdin)")
      ->required();
  cmd->add_flag("--ids", a.ids, "each line is comma-separated token ids, not text");
  cmd->add_option("--kv-pool", a.kvPoolMiB,
                  "MiB of KV cache for all sequences (the block pool): a request is admitted "
                  "while the (prompt + -n) positions of those running and its own fit, in "
                  "whole blocks; 0: room for --max-batch whole contexts (default)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--prompt-ids", a.promptIds,
                "also write each request's prompt token ids (\"prompt_ids\"; with --chat, the "
                "rendered template's), e.g. to calibrate drafters on the model's own answers");
  cmd->add_option("-n,--tokens", a.n, "tokens to generate per request")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-batch", a.maxBatch, "sequences per step (default 16)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--step-tokens", a.stepTokens,
                  "tokens per step: one per decoding sequence, the rest prompt chunks "
                  "(default 256; must exceed --max-batch)")
      ->check(CLI::PositiveNumber);
  addPromptOptions(cmd, a.p, "each prompt", "random seed; request i samples with seed + i");
  addKvPagingOptions(cmd, a.kv);
  cmd->add_option("-t,--threads", a.threads, "worker threads (0: all cores)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("-c,--ctx", a.ctx, "maximum context (0: model's, capped at 4096)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--pipeline", a.pipeline, "pass pipeline for in-memory compiles");
  cmd->add_option("--tokenizer", a.tokenizer, "llama2.c tokenizer.bin");
  cmd->add_flag("--no-bos", a.noBos, "do not prepend BOS");
  cmd->add_flag("--ignore-eos", a.ignoreEos, "keep generating past end-of-sequence");
  cmd->add_flag("-q,--quiet", a.quiet, "no progress or statistics on stderr");
  cmd->add_flag("--stats-json", a.statsJson,
                "print the statistics as one JSON object on stderr (prefill and decode "
                "phases timed apart: prefill ends at the step that completes the last prompt)");
  addEngineOptions(cmd, a.engine);
  addDeviceOptions(cmd, a.device);
}

std::vector<int32_t> parseIds(const std::string &line, size_t lineNo) {
  std::vector<int32_t> ids;
  std::stringstream ss(line);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t pos = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &pos);
    } catch (...) {
      pos = 0;
    }
    if (pos == 0 || item.find_first_not_of(" \t\r", pos) != std::string::npos ||
        v < INT32_MIN || v > INT32_MAX)
      throw std::runtime_error("--prompts line " + std::to_string(lineNo) + ": '" + item +
                               "' is not a token id");
    ids.push_back(int32_t(v));
  }
  return ids;
}

/// Every non-empty line of the prompts file as token ids.
std::vector<std::vector<int32_t>> readPrompts(const GenerateArgs &a, const Tokenizer *tok) {
  std::ifstream file;
  std::istream *in = &std::cin;
  if (a.prompts != "-") {
    file.open(a.prompts);
    if (!file)
      throw std::runtime_error("cannot read " + a.prompts);
    in = &file;
  }
  if (!a.ids && !tok)
    throw std::runtime_error(a.input + ": the model has no tokenizer; use --ids (or "
                                       "--tokenizer for llama2.c)");
  std::vector<std::vector<int32_t>> out;
  std::string line;
  for (size_t lineNo = 1; std::getline(*in, line); ++lineNo) {
    if (!line.empty() && line.back() == '\r')
      line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos)
      continue;
    if (a.ids) {
      out.push_back(parseIds(line, lineNo));
      continue;
    }
    out.push_back(encodePrompt(*tok, line, a.p, !a.noBos));
  }
  if (out.empty())
    throw std::runtime_error(a.prompts + ": no prompts (every line is empty)");
  return out;
}

struct Result {
  std::vector<int32_t> tokens;
  std::string finish, error;
};

int runGenerate(const GenerateArgs &a) {
  if (const std::string bad = deviceConflicts(a.device, a.engine, a.threads); !bad.empty()) {
    fprintf(stderr, "llmc: error: %s\n", bad.c_str());
    return kUsage;
  }
  auto t0 = std::chrono::steady_clock::now();
  ExecutorOptions eo;
  eo.threads = a.threads;
  eo.max_context = a.ctx;
  BatchModel model = openForBatching(a.input, a.pipeline, a.tokenizer, a.quiet, a.engine, eo,
                                     a.device, a.maxBatch, "generate", a.kvPoolMiB << 20);
  if (!model.engine)
    return kNoDevice;
  const std::unique_ptr<Tokenizer> &tok = model.tok;
  const std::vector<std::vector<int32_t>> prompts = readPrompts(a, tok.get());

  BatcherOptions bo;
  bo.max_batch = a.maxBatch;
  bo.step_tokens = a.stepTokens;
  bo.max_queue = int64_t(prompts.size());
  bo.kv_pool_bytes = a.kvPoolMiB << 20;
  applyKvPaging(a.kv, a.engine.rowType(), bo);
  Batcher batcher(*model.engine, bo); // throws invalid_argument for step_tokens <= max_batch
  std::vector<Result> results(prompts.size());
  std::vector<int32_t> stops;
  if (tok && !a.ignoreEos)
    stops = tok->stopTokens();
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest r;
    r.prompt = prompts[i];
    r.max_tokens = a.n;
    r.sampling = a.p.sampling;
    r.sampling.seed = a.p.sampling.seed + i;
    r.stop_tokens = stops;
    Result &res = results[i];
    GenerationEvents ev;
    ev.on_token = [&res](int32_t t) { res.tokens.push_back(t); };
    ev.on_finish = [&res](FinishReason why, const std::string &err) {
      res.finish = finishReasonName(why);
      res.error = err;
    };
    try {
      batcher.submit(std::move(r), std::move(ev));
    } catch (const std::invalid_argument &e) {
      throw std::runtime_error("--prompts request " + std::to_string(i + 1) + ": " + e.what());
    }
  }
  const double loadS = secondsSince(t0);
  int64_t promptTotal = 0;
  for (const auto &p : prompts)
    promptTotal += int64_t(p.size());
  auto tg = std::chrono::steady_clock::now();
  int64_t batchSum = 0, generatedAtPrefill = -1;
  double prefillS = 0;
  while (batcher.step()) {
    const BatcherStats st = batcher.stats();
    batchSum += st.last_batch;
    if (generatedAtPrefill < 0 && st.prompt_tokens + st.prefix_hit_tokens >= promptTotal) {
      prefillS = secondsSince(tg); // every prompt is in: decode only from here
      generatedAtPrefill = st.generated_tokens;
    }
  }
  const double genS = secondsSince(tg);

  int failed = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    nlohmann::json j = {{"index", i}, {"prompt_tokens", prompts[i].size()},
                        {"tokens", results[i].tokens}, {"finish_reason", results[i].finish}};
    if (a.promptIds)
      j["prompt_ids"] = prompts[i];
    if (tok)
      j["text"] = tok->decode(results[i].tokens);
    if (!results[i].error.empty()) {
      j["error"] = results[i].error;
      ++failed;
    }
    printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
  fflush(stdout);
  const BatcherStats st = batcher.stats();
  if (a.statsJson) {
    const int64_t decoded = st.generated_tokens - std::max<int64_t>(generatedAtPrefill, 0);
    const double decodeS = genS - prefillS;
    nlohmann::json j = {{"requests", prompts.size()}, {"steps", st.steps},
                        {"mean_batch", st.steps ? double(batchSum) / double(st.steps) : 0.0},
                        {"peak_batch", st.peak_batch}, {"prompt_tokens", st.prompt_tokens},
                        {"generated_tokens", st.generated_tokens}, {"load_s", loadS},
                        {"prefill_s", prefillS}, {"decode_s", decodeS},
                        {"prefill_tok_s", prefillS > 0 ? double(st.prompt_tokens) / prefillS : 0.0},
                        {"decode_tokens", decoded},
                        {"decode_tok_s", decodeS > 0 ? double(decoded) / decodeS : 0.0},
                        {"engine", model.engine->name()},
                        {"kv_pool_blocks", st.pool.capacity_blocks},
                        {"generated_kernels",
                         model.exec ? model.exec->generatedKernelsInfo()
                                    : "CUDA kernels on " +
                                          cudaRunInfo(*model.gpu, !a.device.noGraphs)}};
    if (model.gpu) // the most KV blocks in use at once (after the policies' evictions)
      j["kv_blocks_peak"] = model.gpu->stats().kv_blocks_peak;
    fprintf(stderr, "%s\n", j.dump().c_str());
  } else if (!a.quiet)
    fprintf(stderr,
            "[llmc] load %.2f s | %zu requests, %lld steps, mean batch %.1f | prompt %lld "
            "tokens, generated %lld tokens in %.2f s: %.1f tok/s | engine %s\n",
            loadS, prompts.size(), (long long)st.steps,
            st.steps ? double(batchSum) / double(st.steps) : 0.0, (long long)st.prompt_tokens,
            (long long)st.generated_tokens, genS,
            double(st.generated_tokens) / std::max(genS, 1e-9), model.engine->name().c_str());
  if (failed)
    throw std::runtime_error(std::to_string(failed) + " request(s) failed (see \"error\")");
  return kOk;
}
} // namespace

std::function<int()> addGenerateCommand(CLI::App &app) {
  auto a = std::make_shared<GenerateArgs>();
  declareGenerateOptions(app, *a);
  return [a]() { return runGenerate(*a); };
}

} // namespace llmc::tool
