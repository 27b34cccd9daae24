//===- EvalCommand.cpp - llmc eval MODEL [--ref REF] ---------------------===//
// The quality harness: perplexity of a model on a text and, with a
// reference model, the KL divergence of its next-token distributions from
// the reference's and their top-1 agreement. The text is tokenized once
// (BOS per the tokenizer), split into consecutive windows of --ctx tokens,
// and each window is run from an empty KV cache; every position but the
// last of a window is scored against the next token. The math lives in
// llmc/metrics.h so calibration and quality gates share it.
//===----------------------------------------------------------------------===//
#include "Commands.h"
#include "llmc/executor.h"
#include "llmc/metrics.h"
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#ifndef LLMC_DATA_DIR
#define LLMC_DATA_DIR ""
#endif

namespace llmc::tool {
namespace {
struct EvalArgs {
  std::string input, ref, text, pipeline, refPipeline, tokenizer;
  int64_t ctx = 512, maxTokens = 4096;
  int threads = 0;
  bool json = false, quiet = false;
};

/// data/ of the source tree: $LLMC_DATA_DIR, else the compile-time path.
std::string dataDir() {
  if (const char *env = std::getenv("LLMC_DATA_DIR"); env && *env)
    return env;
  return LLMC_DATA_DIR;
}

std::string readTextFile(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  if (!f)
    throw std::runtime_error(path + ": cannot open the evaluation text");
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad())
    throw std::runtime_error(path + ": error reading the evaluation text");
  std::string s = ss.str();
  if (s.empty())
    throw std::runtime_error(path + ": the evaluation text is empty");
  return s;
}

/// The window length to use for one model: the requested --ctx, which must
/// fit the model's context (the default is clamped to it instead).
int64_t windowFor(const Artifact &art, const std::string &label, int64_t ctx, bool explicitCtx,
                  bool quiet) {
  int64_t modelCtx = art.config().context_length;
  if (modelCtx > 0 && ctx > modelCtx) {
    if (explicitCtx)
      throw std::runtime_error("--ctx " + std::to_string(ctx) + " exceeds the context length " +
                               std::to_string(modelCtx) + " of " + label);
    if (!quiet)
      progress("eval: " + label + " has a context of " + std::to_string(modelCtx) +
               " tokens; using windows of " + std::to_string(modelCtx));
    return modelCtx;
  }
  return ctx;
}

/// Windows [begin, end) over the token stream: consecutive, non-overlapping,
/// at most `ctx` tokens each, scoring end - begin - 1 positions each and at
/// most `budget` positions in all. A final window shorter than 2 tokens
/// scores nothing and is dropped.
std::vector<std::pair<int64_t, int64_t>> makeWindows(int64_t nTokens, int64_t ctx,
                                                     int64_t budget) {
  std::vector<std::pair<int64_t, int64_t>> w;
  for (int64_t b = 0; b < nTokens && budget > 0; b += ctx) {
    int64_t len = std::min({ctx, nTokens - b, budget + 1});
    if (len < 2)
      break;
    w.push_back({b, b + len});
    budget -= len - 1;
  }
  return w;
}

/// JSON number, or null for NaN/inf (which JSON cannot represent).
nlohmann::json num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }
} // namespace

std::function<int()> addEvalCommand(CLI::App &app) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App *cmd = app.add_subcommand(
      "eval", "Measure perplexity on a text and, with --ref, KL divergence and top-1 "
              "agreement against a reference model");
  cmd->add_option("model", a->input, ".llmc artifact or source model to evaluate")->required();
  cmd->add_option("--ref", a->ref,
                  "reference model or artifact (same tokenizer), e.g. the unquantized model");
  cmd->add_option("--text", a->text,
                  "UTF-8 text file to evaluate on (default: data/eval/default.txt)");
  auto *ctxOpt = cmd->add_option("-c,--ctx", a->ctx, "tokens per window (default 512)")
                     ->check(CLI::Range(int64_t(2), int64_t(1) << 20));
  cmd->add_option("--max-tokens", a->maxTokens,
                  "score at most this many positions in all (default 4096)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("-t,--threads", a->threads, "worker threads (0: all cores)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--pipeline", a->pipeline, "pass pipeline for an in-memory compile of MODEL");
  cmd->add_option("--ref-pipeline", a->refPipeline,
                  "pass pipeline for an in-memory compile of --ref");
  cmd->add_option("--tokenizer", a->tokenizer, "llama2.c tokenizer.bin (for both models)");
  cmd->add_flag("--json", a->json, "print one JSON object on stdout, nothing on stderr");
  cmd->add_flag("-q,--quiet", a->quiet, "no progress on stderr");

  return [a, ctxOpt]() {
    const bool quiet = a->quiet || a->json;
    const bool explicitCtx = ctxOpt->count() > 0;
    auto t0 = std::chrono::steady_clock::now();

    std::string textPath = a->text;
    if (textPath.empty()) {
      std::string dir = dataDir();
      if (dir.empty())
        throw std::runtime_error("no default evaluation text known (set LLMC_DATA_DIR or "
                                 "give --text FILE)");
      textPath = dir + "/eval/default.txt";
    }
    std::string text = readTextFile(textPath);

    auto art = loadModelOrArtifact(a->input, a->pipeline, a->tokenizer, quiet);
    if (art->tokenizer().empty())
      throw std::runtime_error(a->input + ": the model has no tokenizer, so it cannot read the "
                                          "evaluation text (for llama2.c give --tokenizer)");
    int64_t ctx = windowFor(*art, a->input, a->ctx, explicitCtx, quiet);

    std::unique_ptr<Artifact> refArt;
    if (!a->ref.empty()) {
      refArt = loadModelOrArtifact(a->ref, a->refPipeline, a->tokenizer, quiet);
      ctx = std::min(ctx, windowFor(*refArt, a->ref, a->ctx, explicitCtx, quiet));
    }

    ExecutorOptions eo;
    eo.threads = a->threads;
    eo.max_context = ctx;
    Executor exec(*art, eo);
    std::unique_ptr<Executor> refExec;
    const int64_t vocab = exec.vocabSize();
    if (refArt) {
      refExec = std::make_unique<Executor>(*refArt, eo);
      if (refExec->vocabSize() != vocab)
        throw std::runtime_error(
            "--ref " + a->ref + " has a vocabulary of " + std::to_string(refExec->vocabSize()) +
            " tokens but " + a->input + " has " + std::to_string(vocab) +
            "; KL divergence needs both models to share one tokenizer");
      const TokenizerData &mt = art->tokenizer(), &rt = refArt->tokenizer();
      if (!rt.empty() && rt.tokens.size() != mt.tokens.size())
        throw std::runtime_error("--ref " + a->ref + " has a tokenizer of " +
                                 std::to_string(rt.tokens.size()) + " tokens but " + a->input +
                                 " has " + std::to_string(mt.tokens.size()) +
                                 "; both models must share one tokenizer");
      if (!rt.empty()) {
        for (size_t i = 0; i < mt.tokens.size(); ++i)
          if (mt.tokens[i] != rt.tokens[i])
            throw std::runtime_error("--ref " + a->ref + ": token " + std::to_string(i) +
                                     " differs from " + a->input +
                                     "'s; both models must share one tokenizer");
      }
    }

    Tokenizer tok(art->tokenizer());
    std::vector<int32_t> ids = tok.encode(text, /*add_bos=*/true, /*parse_special=*/false);
    for (int32_t id : ids)
      if (id < 0 || id >= vocab)
        throw std::runtime_error(a->input + ": the tokenizer produced token " +
                                 std::to_string(id) + ", outside the model's vocabulary of " +
                                 std::to_string(vocab));
    auto windows = makeWindows((int64_t)ids.size(), ctx, a->maxTokens);
    if (windows.empty())
      throw std::runtime_error(textPath + ": the text has " + std::to_string(ids.size()) +
                               " tokens; at least 2 are needed to score anything");
    if (!quiet)
      progress("eval: " + textPath + ": " + std::to_string(ids.size()) + " tokens, " +
               std::to_string(windows.size()) + " window(s) of up to " + std::to_string(ctx));

    metrics::EvalAccumulator acc(vocab);
    int64_t forwarded = 0; // tokens run through the model(s)
    auto tEval = std::chrono::steady_clock::now();
    for (size_t w = 0; w < windows.size(); ++w) {
      auto tw = std::chrono::steady_clock::now();
      auto [b, e] = windows[w];
      std::vector<int32_t> win(ids.begin() + b, ids.begin() + e);
      forwarded += (int64_t)win.size() * (refExec ? 2 : 1);
      exec.reset();
      std::vector<float> logits = exec.forward(win, /*all_logits=*/true);
      std::vector<float> refLogits;
      if (refExec) {
        refExec->reset();
        refLogits = refExec->forward(win, /*all_logits=*/true);
      }
      // Row i predicts win[i + 1]; the last row has no target in this window.
      acc.addRows(logits.data(), refExec ? refLogits.data() : nullptr, win.data() + 1,
                  (int64_t)win.size() - 1);
      if (!quiet) {
        double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - tw).count();
        metrics::EvalSummary so = acc.summary();
        char buf[256];
        int n = snprintf(buf, sizeof buf, "eval window %zu/%zu: %zu tokens, %.2f s, ppl %.4f",
                         w + 1, windows.size(), win.size(), s, so.ppl);
        if (so.has_reference && n > 0 && n < (int)sizeof buf)
          snprintf(buf + n, sizeof buf - n, ", kld %.6f, top1 %.2f%%", so.kld_mean, so.top1);
        progress(buf);
      }
    }
    metrics::EvalSummary s = acc.summary();
    double evalS =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - tEval).count();
    double totalS = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    if (a->json) {
      nlohmann::json j;
      j["model"] = a->input;
      j["ref"] = a->ref.empty() ? nlohmann::json() : nlohmann::json(a->ref);
      j["text"] = textPath;
      j["ppl"] = num(s.ppl);
      j["nll_mean"] = num(s.nll_mean);
      j["kld_mean"] = s.has_reference ? num(s.kld_mean) : nlohmann::json();
      j["kld_p99"] = s.has_reference ? num(s.kld_p99) : nlohmann::json();
      j["kld_max"] = s.has_reference ? num(s.kld_max) : nlohmann::json();
      j["top1"] = s.has_reference ? num(s.top1) : nlohmann::json();
      j["ref_ppl"] = s.has_reference ? num(s.ref_ppl) : nlohmann::json();
      j["tokens"] = s.positions;
      j["ctx"] = ctx;
      j["windows"] = windows.size();
      j["seconds"] = evalS;
      printf("%s\n", j.dump().c_str());
      fflush(stdout);
      return kOk;
    }
    printf("model       %s\n", a->input.c_str());
    if (refExec)
      printf("reference   %s\n", a->ref.c_str());
    printf("text        %s (%zu tokens)\n", textPath.c_str(), ids.size());
    printf("scored      %lld positions in %zu window(s) of up to %lld tokens\n",
           (long long)s.positions, windows.size(), (long long)ctx);
    printf("ppl         %.4f\n", s.ppl);
    if (s.has_reference) {
      printf("ref ppl     %.4f\n", s.ref_ppl);
      printf("kld mean    %.6f\n", s.kld_mean);
      printf("kld p99     %.6f\n", s.kld_p99);
      printf("kld max     %.6f\n", s.kld_max);
      printf("top1        %.2f %%\n", s.top1);
    }
    printf("time        %.2f s (%.1f tok/s through the model%s)\n", totalS,
           (double)forwarded / std::max(evalS, 1e-9), refExec ? "s" : "");
    fflush(stdout);
    return kOk;
  };
}

} // namespace llmc::tool
