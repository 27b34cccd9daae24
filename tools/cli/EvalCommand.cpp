//===- EvalCommand.cpp - llmc eval MODEL [--ref REF] ---------------------===//
// The quality harness: perplexity of a model on a text and, with a
// reference model, the KL divergence of its next-token distributions from
// the reference's and their top-1 agreement. The text is tokenized once
// (BOS per the tokenizer), split into consecutive windows of --ctx tokens,
// and each window is run from an empty KV cache; every position but the
// last of a window is scored against the next token. The math lives in
// llmc/metrics.h and the window loop in Evaluation.h, shared with
// `llmc compile --max-kld`.
//===----------------------------------------------------------------------===//
#include "Commands.h"
#include "Evaluation.h"
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

namespace llmc::tool {
namespace {
struct EvalArgs {
  std::string input, ref, text, pipeline, refPipeline, tokenizer;
  int64_t ctx = 512, maxTokens = 4096;
  int threads = 0;
  bool json = false, quiet = false;
  EngineChoice engine;
};

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

/// JSON number, or null for NaN/inf (which JSON cannot represent).
nlohmann::json num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }
/// The --ctx option is returned: whether it was given decides whether a
/// window longer than a model's context is an error or clamped.
CLI::Option *declareEvalOptions(CLI::App &app, EvalArgs &a) {
  CLI::App *cmd = app.add_subcommand(
      "eval", "Measure perplexity on a text and, with --ref, KL divergence and top-1 "
              "agreement against a reference model");
  cmd->add_option("model", a.input, ".llmc artifact or source model to evaluate")->required();
  cmd->add_option("--ref", a.ref,
                  "reference model or artifact (same tokenizer), e.g. the unquantized model");
  cmd->add_option("--text", a.text,
                  "UTF-8 text file to evaluate on (default: data/eval/default.txt), or a "
                  "FILE.ids of whitespace-separated token ids");
  auto *ctxOpt = cmd->add_option("-c,--ctx", a.ctx, "tokens per window (default 512)")
                     ->check(CLI::Range(int64_t(2), int64_t(1) << 20));
  cmd->add_option("--max-tokens", a.maxTokens,
                  "score at most this many positions in all (default 4096)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("-t,--threads", a.threads, "worker threads (0: all cores)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--pipeline", a.pipeline, "pass pipeline for an in-memory compile of MODEL");
  cmd->add_option("--ref-pipeline", a.refPipeline,
                  "pass pipeline for an in-memory compile of --ref");
  cmd->add_option("--tokenizer", a.tokenizer, "llama2.c tokenizer.bin (for both models)");
  cmd->add_flag("--json", a.json, "print one JSON object on stdout, nothing on stderr");
  cmd->add_flag("-q,--quiet", a.quiet, "no progress on stderr");
  addEngineOptions(cmd, a.engine);
  return ctxOpt;
}

/// What an eval run measured, for both output forms.
struct EvalResult {
  std::string textPath;
  size_t textTokens = 0, windows = 0;
  int64_t ctx = 0;
  metrics::EvalSummary summary;
  int64_t forwarded = 0; // tokens run through the model(s)
  double evalS = 0, totalS = 0;
};

/// One progress line per scored window.
void printWindowProgress(size_t w, size_t n, size_t tokens, double secs,
                         const metrics::EvalSummary &so) {
  char buf[256];
  int len = snprintf(buf, sizeof buf, "eval window %zu/%zu: %zu tokens, %.2f s, ppl %.4f",
                     w + 1, n, tokens, secs, so.ppl);
  if (so.has_reference && len > 0 && len < (int)sizeof buf)
    snprintf(buf + len, sizeof buf - len, ", kld %.6f, top1 %.2f%%", so.kld_mean, so.top1);
  progress(buf);
}

void printEvalJson(const EvalArgs &a, const EvalResult &r) {
  const metrics::EvalSummary &s = r.summary;
  nlohmann::json j;
  j["model"] = a.input;
  j["ref"] = a.ref.empty() ? nlohmann::json() : nlohmann::json(a.ref);
  j["text"] = r.textPath;
  j["ppl"] = num(s.ppl);
  j["nll_mean"] = num(s.nll_mean);
  j["kld_mean"] = s.has_reference ? num(s.kld_mean) : nlohmann::json();
  j["kld_p99"] = s.has_reference ? num(s.kld_p99) : nlohmann::json();
  j["kld_max"] = s.has_reference ? num(s.kld_max) : nlohmann::json();
  j["top1"] = s.has_reference ? num(s.top1) : nlohmann::json();
  j["ref_ppl"] = s.has_reference ? num(s.ref_ppl) : nlohmann::json();
  j["tokens"] = s.positions;
  j["ctx"] = r.ctx;
  j["windows"] = r.windows;
  j["seconds"] = r.evalS;
  printf("%s\n", j.dump().c_str());
  fflush(stdout);
}

void printEvalText(const EvalArgs &a, const EvalResult &r, bool withRef) {
  const metrics::EvalSummary &s = r.summary;
  printf("model       %s\n", a.input.c_str());
  if (withRef)
    printf("reference   %s\n", a.ref.c_str());
  printf("text        %s (%zu tokens)\n", r.textPath.c_str(), r.textTokens);
  printf("scored      %lld positions in %zu window(s) of up to %lld tokens\n",
         (long long)s.positions, r.windows, (long long)r.ctx);
  printf("ppl         %.4f\n", s.ppl);
  if (s.has_reference) {
    printf("ref ppl     %.4f\n", s.ref_ppl);
    printf("kld mean    %.6f\n", s.kld_mean);
    printf("kld p99     %.6f\n", s.kld_p99);
    printf("kld max     %.6f\n", s.kld_max);
    printf("top1        %.2f %%\n", s.top1);
  }
  printf("time        %.2f s (%.1f tok/s through the model%s)\n", r.totalS,
         (double)r.forwarded / std::max(r.evalS, 1e-9), withRef ? "s" : "");
  fflush(stdout);
}

int runEval(const EvalArgs &a, bool explicitCtx) {
  const bool quiet = a.quiet || a.json;
  auto t0 = std::chrono::steady_clock::now();

  EvalResult r;
  r.textPath = a.text.empty() ? defaultTextPath(DefaultText::Eval) : a.text;
  std::string text = readEvalText(r.textPath);

  auto art = loadModelOrArtifact(a.input, a.pipeline, a.tokenizer, quiet,
                                 a.engine.verifyWeights);
  requireTokenizer(*art, a.input, r.textPath); // before the reference is loaded
  int64_t ctx = windowFor(*art, a.input, a.ctx, explicitCtx, quiet);

  std::unique_ptr<Artifact> refArt;
  if (!a.ref.empty()) {
    refArt = loadModelOrArtifact(a.ref, a.refPipeline, a.tokenizer, quiet,
                                 a.engine.verifyWeights);
    ctx = std::min(ctx, windowFor(*refArt, a.ref, a.ctx, explicitCtx, quiet));
  }

  ExecutorOptions eo;
  eo.threads = a.threads;
  eo.max_context = ctx;
  a.engine.apply(eo);
  Executor exec(*art, eo);
  warnUntrustedCode(exec);
  std::unique_ptr<Executor> refExec;
  const int64_t vocab = exec.vocabSize();
  if (refArt) {
    ExecutorOptions refEo = eo;
    refEo.kv_row_type = KvRowType::F32; // the reference keeps f32 KV rows
    refExec = std::make_unique<Executor>(*refArt, refEo);
    checkSameVocabulary(*art, a.input, vocab, *refArt, a.ref, refExec->vocabSize());
  }

  std::vector<int32_t> ids = tokenizeEvalText(*art, a.input, text, vocab, r.textPath);
  auto windows = makeWindows((int64_t)ids.size(), ctx, a.maxTokens);
  if (windows.empty())
    throw std::runtime_error(r.textPath + ": the text has " + std::to_string(ids.size()) +
                             " tokens; at least 2 are needed to score anything");
  if (!quiet)
    progress("eval: " + r.textPath + ": " + std::to_string(ids.size()) + " tokens, " +
             std::to_string(windows.size()) + " window(s) of up to " + std::to_string(ctx));

  WindowDone onWindow;
  if (!quiet)
    onWindow = printWindowProgress;
  auto tEval = std::chrono::steady_clock::now();
  r.summary = scoreWindows(exec, refExec.get(), ids, windows, onWindow, &r.forwarded);
  r.evalS = secondsSince(tEval);
  r.totalS = secondsSince(t0);
  r.textTokens = ids.size();
  r.windows = windows.size();
  r.ctx = ctx;

  if (a.json)
    printEvalJson(a, r);
  else
    printEvalText(a, r, refExec != nullptr);
  return kOk;
}
} // namespace

std::function<int()> addEvalCommand(CLI::App &app) {
  auto a = std::make_shared<EvalArgs>();
  CLI::Option *ctxOpt = declareEvalOptions(app, *a);
  return [a, ctxOpt]() { return runEval(*a, /*explicitCtx=*/ctxOpt->count() > 0); };
}

} // namespace llmc::tool
