//===- EvalLongCommand.cpp - llmc eval-long MODEL --task T --context N ---===//
// The long-context harness: how well a model (and its KV-cache policy)
// uses a context of N tokens.
//  - passkey: retrieve a 5-digit key hidden at depths 0..1 of N tokens of
//    filler; accuracy over --trials prompts.
//  - multi-needle: four "special magic numbers" in the filler, one asked
//    for per trial; accuracy.
//  - ppl: perplexity of the last --score-tokens of the first N tokens of a
//    long text, teacher-forced one token per forward after one prefill.
// Each prompt goes through the Executor in ONE forward (where KV policies
// compress the cache), then one forward per generated or scored token.
// Prompt building and scoring live in LongContext.h.
//===----------------------------------------------------------------------===//
#include "Commands.h"
#include "EvalLongSweep.h"
#include "Evaluation.h"
#include "LongContext.h"
#include <algorithm>
#include <chrono>
#include <functional>
#include <cmath>
#include <cstdio>

namespace llmc::tool {
namespace {
using namespace longctx;

struct EvalLongArgs {
  EngineChoice engine;
  std::string input, task, text, pipeline, tokenizer, policies;
  int64_t context = 0, scoreTokens = 256, prefillChunk = 0;
  int trials = 5, threads = 0;
  uint64_t seed = 0;
  bool json = false, quiet = false, chat = false;
};

// Generated tokens allowed per answer: a leading space or word and the
// digits of a 5-digit key / 7-digit magic number, with room to spare.
constexpr int kPasskeyNewTokens = 8;
constexpr int kMultiNeedleNewTokens = 12;
// KV entries beyond the prompt and the answer (the prompt may also be a
// few tokens shorter than --context; never longer).
constexpr int64_t kContextMargin = 16;
// A follow-up question's teacher-forced "\n<prefix>" (e.g. "The special
// magic number for thunder is": about 10 tokens), with room to spare.
constexpr int64_t kFollowUpTokens = 24;

int answerTokens(Task task) {
  return task == Task::MultiNeedle ? kMultiNeedleNewTokens : kPasskeyNewTokens;
}

/// KV entries a retrieval prompt needs after its `context` tokens: every
/// answer (multi-needle asks its four needles in turn) and the margin.
int64_t retrievalTail(Task task) {
  const int64_t questions = task == Task::MultiNeedle ? 4 : 1;
  return questions * answerTokens(task) + (questions - 1) * kFollowUpTokens + kContextMargin;
}

void note(bool quiet, const std::string &msg) {
  if (!quiet)
    fprintf(stderr, "[eval-long] %s\n", msg.c_str());
}

/// JSON number, or null for NaN/inf (which JSON cannot represent).
nlohmann::json num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

double rate(int64_t n, double secs) { return n > 0 && secs > 0 ? double(n) / secs : NAN; }

std::string fmt(const char *f, double v) {
  char buf[64];
  snprintf(buf, sizeof buf, f, v);
  return buf;
}

/// Everything a run reports, for both output forms.
struct Report {
  Task task = Task::Passkey;
  int64_t context = 0, tokens = 0, kvBytes = 0;
  int64_t kvPeakBytes = 0;  // the most the KV caches held, prefill included
  int64_t prefillChunk = 0; // the chunk the prompt was fed in (its length: one step)
  double prefillS = 0, decodeTokS = NAN, seconds = 0;
  // Retrieval tasks: prompts, questions asked (multi-needle asks four per
  // prompt) and questions answered correctly.
  int trials = 0, asked = 0, correct = 0;
  nlohmann::json results = nlohmann::json::array();
  // ppl.
  double ppl = NAN, nllMean = NAN;
  int64_t scored = 0;
  std::string text;
};

Report runRetrieval(const EvalLongArgs &a, Task task, const Artifact &art, int64_t context) {
  if (art.tokenizer().empty())
    throw std::runtime_error(a.input + ": the model has no tokenizer, so the " +
                             std::string(taskName(task)) +
                             " task cannot build its prompt (for llama2.c give --tokenizer; "
                             "--task ppl accepts --text FILE.ids)");
  Tokenizer tok(art.tokenizer());
  const bool multi = task == Task::MultiNeedle;
  const int maxNew = answerTokens(task);
  std::vector<RetrievalTrial> trials =
      multi ? multiNeedleTrials(a.trials, a.seed) : passkeyTrials(a.trials, a.seed);

  ExecutorOptions eo;
  a.engine.apply(eo);
  eo.threads = a.threads;
  eo.max_context = context + retrievalTail(task);
  eo.prefill_chunk = a.prefillChunk;
  Executor exec(art, eo);
  warnUntrustedCode(exec);

  Report r;
  r.task = task;
  r.context = context;
  r.trials = (int)trials.size();
  double prefillTotal = 0, decodeSecs = 0;
  int64_t decodeForwards = 0;
  for (size_t i = 0; i < trials.size(); ++i) {
    const RetrievalTrial &t = trials[i];
    BuiltPrompt p = buildPrompt(tok, t, context, a.chat);
    for (int32_t id : p.ids)
      if (id < 0 || id >= exec.vocabSize())
        throw std::runtime_error(a.input + ": the tokenizer produced token " +
                                 std::to_string(id) + ", outside the model's vocabulary of " +
                                 std::to_string(exec.vocabSize()));
    exec.reset();
    exec.resetKvPeak();
    r.prefillChunk = exec.prefillChunkFor(int64_t(p.ids.size()));
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<float> logits = exec.forward(p.ids);
    const double prefill = secondsSince(t0);
    std::vector<GenerationResult> answers = answerAll(exec, tok, std::move(logits), t, maxNew);
    const GenerationResult &g = answers.front();
    const bool ok = g.digits == t.answer;
    nlohmann::json followUps = nlohmann::json::array();
    for (size_t j = 0; j < answers.size(); ++j) {
      const bool okj = answers[j].digits == expectedAnswer(t, j);
      r.correct += okj;
      r.asked += 1;
      decodeSecs += answers[j].decodeSeconds;
      decodeForwards += answers[j].decodeForwards;
      if (j > 0)
        followUps.push_back({{"depth", t.followUps[j - 1].depth},
                             {"answer", expectedAnswer(t, j)},
                             {"got", answers[j].digits},
                             {"ok", okj}});
    }
    r.tokens = std::max<int64_t>(r.tokens, (int64_t)p.ids.size());
    r.kvPeakBytes = std::max(r.kvPeakBytes, exec.kvCachePeakBytes());
    prefillTotal += prefill;
    r.results.push_back({{"depth", t.depth},
                         {"answer", t.answer},
                         {"got", g.digits},
                         {"text", g.text},
                         {"ok", ok},
                         {"prompt_tokens", p.ids.size()},
                         {"prefill_s", prefill}});
    if (!followUps.empty())
      r.results.back()["follow_ups"] = std::move(followUps);
    note(a.quiet, "trial " + std::to_string(i + 1) + "/" + std::to_string(trials.size()) +
                      " depth " + fmt("%.2f", t.depth) + ": " + (ok ? "ok" : "FAIL") + " (" +
                      t.label + ", got " + (g.digits.empty() ? "no digits" : g.digits) +
                      (ok ? "" : " in '" + g.text + "'") + "; " +
                      std::to_string(p.ids.size()) + " tokens, prefill " +
                      fmt("%.2f", prefill) + " s)");
  }
  r.prefillS = prefillTotal / double(std::max(1, r.trials));
  r.decodeTokS = rate(decodeForwards, decodeSecs);
  r.kvBytes = exec.kvCacheBytes();
  return r;
}

Report runPpl(const EvalLongArgs &a, const Artifact &art, int64_t context, int64_t scoreTokens) {
  std::string textPath = a.text.empty() ? defaultTextPath(DefaultText::LongContext) : a.text;
  std::string text = readEvalText(textPath);
  requireTokenizer(art, a.input, textPath);
  ExecutorOptions eo;
  a.engine.apply(eo);
  eo.threads = a.threads;
  eo.max_context = context;
  eo.prefill_chunk = a.prefillChunk;
  Executor exec(art, eo);
  warnUntrustedCode(exec);
  std::vector<int32_t> ids = tokenizeEvalText(art, a.input, text, exec.vocabSize(), textPath);
  if ((int64_t)ids.size() < context)
    throw std::runtime_error(textPath + ": the text has " + std::to_string(ids.size()) +
                             " tokens, fewer than --context " + std::to_string(context));
  ids.resize(size_t(context));
  note(a.quiet, "ppl: " + textPath + ": prefill " + std::to_string(context - scoreTokens) +
                    " tokens, then score " + std::to_string(scoreTokens) + " one by one");
  TailScore s = scoreTail(exec, ids, scoreTokens);
  note(a.quiet, "ppl: prefill " + fmt("%.2f", s.prefillSeconds) + " s, ppl " +
                    fmt("%.4f", s.ppl) + " over " + std::to_string(s.scored) + " tokens");
  Report r;
  r.task = Task::Ppl;
  r.context = context;
  r.tokens = context;
  r.text = textPath;
  r.ppl = s.ppl;
  r.nllMean = s.nllMean;
  r.scored = s.scored;
  r.prefillS = s.prefillSeconds;
  r.decodeTokS = rate(s.decodeForwards, s.decodeSeconds);
  r.kvBytes = exec.kvCacheBytes();
  r.kvPeakBytes = exec.kvCachePeakBytes();
  r.prefillChunk = exec.prefillChunkFor(context - scoreTokens);
  return r;
}
/// One row of a policy sweep.
struct SweepRow {
  int correct = 0, asked = 0, trials = 0;
  double nll = 0, compressS = 0, decodeS = 0;
  int64_t scored = 0, decodeForwards = 0, kvBytes = 0, kvEntries = 0;
};

/// The sweep's results: one line (or JSON object) per policy.
void printSweepRows(const EvalLongArgs &a, Task task, int64_t context,
                    const std::vector<SweepPolicy> &policies, const std::vector<SweepRow> &rows,
                    double prefillS) {
  const bool retrieval = task != Task::Ppl;
  for (size_t k = 0; k < policies.size(); ++k) {
    const SweepRow &r = rows[k];
    const double n = double(std::max(1, r.trials));
    nlohmann::json j;
    j["task"] = taskName(task);
    j["context"] = context;
    j["policy"] = policies[k].options;
    if (retrieval) {
      j["accuracy"] = double(r.correct) / double(std::max(1, r.asked));
      const Interval ci = wilson95(r.correct, r.asked);
      j["accuracy_ci95"] = {ci.lo, ci.hi};
      j["correct"] = r.correct;
      j["asked"] = r.asked;
      j["trials"] = r.trials;
    } else {
      j["ppl"] = num(r.scored > 0 ? std::exp(r.nll / double(r.scored)) : NAN);
      j["scored"] = r.scored;
    }
    j["kv_bytes"] = int64_t(double(r.kvBytes) / n);
    j["kv_entries"] = int64_t(double(r.kvEntries) / n);
    j["decode_tok_s"] = num(rate(r.decodeForwards, r.decodeS));
    j["compress_s"] = r.compressS / n;
    j["prefill_s"] = prefillS;
    if (a.json) {
      printf("%s\n", j.dump().c_str());
    } else {
      printf("%-48s %s %-8s kv %8.1f MiB  decode %6.1f tok/s  compress %6.1f ms\n",
             policies[k].options.c_str(), retrieval ? "accuracy" : "ppl",
             retrieval ? fmt("%.3f", double(r.correct) / double(std::max(1, r.asked))).c_str()
                       : fmt("%.3f", j["ppl"].is_null() ? NAN : j["ppl"].get<double>()).c_str(),
             double(r.kvBytes) / n / (1024.0 * 1024.0), rate(r.decodeForwards, r.decodeS),
             1000 * r.compressS / n);
    }
  }
  fflush(stdout);
}

/// A policy sweep in progress: the executor (recording what policies
/// need), the policies, and what each has scored so far.
struct PolicySweep {
  Executor &exec;
  const std::vector<SweepPolicy> &policies;
  std::vector<SweepRow> rows;
  double prefillTotal = 0; // seconds of the full-cache prefills
  int prompts = 0;         // prefills so far

  PolicySweep(Executor &e, const std::vector<SweepPolicy> &p)
      : exec(e), policies(p), rows(p.size()) {}

  /// Runs `decode(k)` for each policy k on a copy of the current
  /// (prefilled) cache compressed by that policy, timing the compression
  /// and recording the cache size; then restores the full cache and no
  /// policies.
  void forEachPolicy(const std::function<void(size_t)> &decode) {
    auto snapshot = exec.saveKv();
    for (size_t k = 0; k < policies.size(); ++k) {
      exec.restoreKv(*snapshot);
      auto t0 = std::chrono::steady_clock::now();
      exec.setKvPolicies(policies[k].byLayer, /*compress_now=*/true);
      rows[k].compressS += secondsSince(t0);
      decode(k);
      rows[k].kvBytes += exec.kvCacheBytes();
      rows[k].kvEntries += exec.kvCacheEntries();
    }
    exec.restoreKv(*snapshot);
    exec.setKvPolicies({}, false);
  }

  /// A full-cache prefill of `ids`, timed; returns its logits.
  std::vector<float> prefill(const std::vector<int32_t> &ids) {
    exec.reset();
    auto t0 = std::chrono::steady_clock::now();
    std::vector<float> logits = exec.forward(ids);
    prefillTotal += secondsSince(t0);
    ++prompts;
    return logits;
  }
};

/// Policy k answers every question of one retrieval trial from its
/// compressed cache; returns its marks ("+" retrieved, "-" not; one per
/// question).
std::string answerWithPolicy(PolicySweep &sweep, size_t k, const Tokenizer &tok,
                             const std::vector<float> &logits, const RetrievalTrial &trial,
                             int maxNew) {
  std::vector<GenerationResult> answers = answerAll(sweep.exec, tok, logits, trial, maxNew);
  SweepRow &row = sweep.rows[k];
  row.trials += 1;
  std::string marks;
  for (size_t j = 0; j < answers.size(); ++j) {
    const bool ok = answers[j].digits == expectedAnswer(trial, j);
    row.correct += ok;
    row.asked += 1;
    row.decodeS += answers[j].decodeSeconds;
    row.decodeForwards += answers[j].decodeForwards;
    marks += ok ? "+" : "-";
  }
  return marks.size() > 1 ? "[" + marks + "]" : marks;
}

/// The retrieval tasks: each trial's prompt is prefilled once, then every
/// policy answers it.
void sweepRetrieval(const EvalLongArgs &a, Task task, const Artifact &art, int64_t context,
                    PolicySweep &sweep) {
  if (art.tokenizer().empty())
    throw std::runtime_error(a.input + ": the model has no tokenizer, so the " +
                             std::string(taskName(task)) + " task cannot build its prompt");
  Tokenizer tok(art.tokenizer());
  const bool multi = task == Task::MultiNeedle;
  const int maxNew = answerTokens(task);
  std::vector<RetrievalTrial> trials =
      multi ? multiNeedleTrials(a.trials, a.seed) : passkeyTrials(a.trials, a.seed);
  for (size_t i = 0; i < trials.size(); ++i) {
    BuiltPrompt p = buildPrompt(tok, trials[i], context, a.chat);
    std::vector<float> logits = sweep.prefill(p.ids);
    std::string marks;
    sweep.forEachPolicy(
        [&](size_t k) { marks += answerWithPolicy(sweep, k, tok, logits, trials[i], maxNew); });
    note(a.quiet, "trial " + std::to_string(i + 1) + "/" + std::to_string(trials.size()) +
                      " depth " + fmt("%.2f", trials[i].depth) + ": " + marks +
                      " (one mark per policy, + retrieved)");
  }
}

/// Policy k teacher-forces the scored tail from its compressed cache.
void scoreTailWithPolicy(PolicySweep &sweep, size_t k, const EvalLongArgs &a,
                         const std::vector<int32_t> &ids, int64_t scoreTokens,
                         const std::vector<float> &logits) {
  TailScore s = continueScore(sweep.exec, ids, scoreTokens, logits);
  SweepRow &row = sweep.rows[k];
  row.nll += s.nllMean * double(s.scored);
  row.scored += s.scored;
  row.trials += 1;
  row.decodeS += s.decodeSeconds;
  row.decodeForwards += s.decodeForwards;
  note(a.quiet, "policy '" + sweep.policies[k].options + "': ppl " +
                    fmt("%.4f", std::exp(s.nllMean)));
}

/// The ppl task: the text's first context - scoreTokens tokens are
/// prefilled once, then every policy scores the rest.
void sweepPpl(const EvalLongArgs &a, const Artifact &art, int64_t context, int64_t scoreTokens,
              PolicySweep &sweep) {
  std::string textPath = a.text.empty() ? defaultTextPath(DefaultText::LongContext) : a.text;
  std::string text = readEvalText(textPath);
  requireTokenizer(art, a.input, textPath);
  std::vector<int32_t> ids =
      tokenizeEvalText(art, a.input, text, sweep.exec.vocabSize(), textPath);
  if ((int64_t)ids.size() < context)
    throw std::runtime_error(textPath + ": the text has " + std::to_string(ids.size()) +
                             " tokens, fewer than --context " + std::to_string(context));
  ids.resize(size_t(context));
  std::vector<float> logits =
      sweep.prefill(std::vector<int32_t>(ids.begin(), ids.end() - scoreTokens));
  sweep.forEachPolicy(
      [&](size_t k) { scoreTailWithPolicy(sweep, k, a, ids, scoreTokens, logits); });
}

/// --policies: every prompt is prefilled once with the full cache
/// (recording what policies need); each policy then gets a copy of that
/// cache, compresses it and decodes. One JSON object per policy with --json.
ExitCode runSweep(const EvalLongArgs &a, Task task, const Artifact &art, int64_t context,
             int64_t scoreTokens) {
  std::vector<SweepPolicy> policies = readSweepPolicies(a.policies, a.input, a.tokenizer);
  for (const auto &[layer, p] : programPolicies(art))
    if (!p.is_null())
      throw std::runtime_error(a.input + ": --policies needs a model without KV policies "
                                         "(layer " + std::to_string(layer) + " has one)");
  const bool retrieval = task != Task::Ppl;
  ExecutorOptions eo;
  a.engine.apply(eo);
  eo.threads = a.threads;
  eo.kv_record = true;
  eo.max_context = retrieval ? context + retrievalTail(task) : context;
  Executor exec(art, eo);
  warnUntrustedCode(exec);
  PolicySweep sweep(exec, policies);
  if (retrieval)
    sweepRetrieval(a, task, art, context, sweep);
  else
    sweepPpl(a, art, context, scoreTokens, sweep);
  printSweepRows(a, task, context, policies, sweep.rows,
                 sweep.prefillTotal / double(std::max(1, sweep.prompts)));
  return kOk;
}

/// The --score-tokens option is returned: whether it was given decides
/// whether it may exceed half the context.
CLI::Option *declareEvalLongOptions(CLI::App &app, EvalLongArgs &a) {
  CLI::App *cmd = app.add_subcommand(
      "eval-long", "Long-context harness: passkey / multi-needle retrieval accuracy or "
                   "perplexity at a context of N tokens");
  cmd->add_option("model", a.input, ".llmc artifact or source model to evaluate")->required();
  cmd->add_option("--task", a.task,
                  "passkey (find a 5-digit key at depths 0..1), multi-needle (one of four "
                  "7-digit numbers), or ppl (perplexity of the last --score-tokens of N tokens)")
      ->required();
  cmd->add_option("-c,--context", a.context,
                  "prompt length in tokens (passkey/multi-needle: within 16 below N; ppl: the "
                  "first N tokens of the text)")
      ->required()
      ->check(CLI::Range(int64_t(64), int64_t(1) << 24));
  cmd->add_option("--trials", a.trials,
                  "retrieval prompts (default 5; trial i puts the needle at depth i/(K-1))")
      ->check(CLI::Range(1, 10000));
  cmd->add_option("--seed", a.seed, "seed of the keys and needle words (default 0)");
  cmd->add_option("--text", a.text,
                  "ppl: UTF-8 text file (default: data/long/licenses.txt), or a FILE.ids of "
                  "whitespace-separated token ids");
  auto *scoreOpt =
      cmd->add_option("--score-tokens", a.scoreTokens,
                      "ppl: teacher-forced tokens at the end of the context (default 256, "
                      "at most half the context when not given)")
          ->check(CLI::PositiveNumber);
  cmd->add_flag("--chat", a.chat,
                "retrieval: ask in the model's chat template (the answer prefix starts the "
                "assistant turn)");
  cmd->add_option("-t,--threads", a.threads, "worker threads (0: all cores)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--pipeline", a.pipeline, "pass pipeline for an in-memory compile of MODEL");
  cmd->add_option("--tokenizer", a.tokenizer, "llama2.c tokenizer.bin");
  cmd->add_option("--policies", a.policies,
                  "KV-policy sweep: FILE with one llm-kv-policy option string per line "
                  "(e.g. 'method=snapkv budget=0.1'); each prompt is prefilled once and every "
                  "policy decodes from a copy of that cache; one JSON object per policy "
                  "with --json");
  cmd->add_option("--prefill-chunk", a.prefillChunk,
                  "feed each prompt in steps of N tokens: prefill KV policies compress after "
                  "every step, so the cache's peak stays near the budget (not with "
                  "--policies; RDKV prefills in one step); 0: one step (default)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--json", a.json, "print one JSON object on stdout");
  cmd->add_flag("-q,--quiet", a.quiet, "no progress on stderr");
  addEngineOptions(cmd, a.engine);
  return scoreOpt;
}

/// The ppl task's scored tokens: --score-tokens, below the context, or by
/// default at most half the context; throws on flags of the other tasks.
int64_t checkTaskFlags(const EvalLongArgs &a, Task task, bool explicitScore) {
  const bool retrieval = task != Task::Ppl;
  if (retrieval && !a.text.empty())
    throw std::runtime_error("--text applies to --task ppl only; the " +
                             std::string(taskName(task)) + " task builds its own prompts");
  if (retrieval && explicitScore)
    throw std::runtime_error("--score-tokens applies to --task ppl only");
  if (!retrieval && a.chat)
    throw std::runtime_error("--chat applies to the passkey and multi-needle tasks only");
  int64_t scoreTokens = a.scoreTokens;
  if (!retrieval) {
    if (explicitScore && scoreTokens >= a.context)
      throw std::runtime_error("--score-tokens " + std::to_string(scoreTokens) +
                               " must be below --context " + std::to_string(a.context));
    if (!explicitScore)
      scoreTokens = std::min<int64_t>(scoreTokens, a.context / 2);
  }
  return scoreTokens;
}

void printReportJson(const EvalLongArgs &a, const Report &r) {
  const bool retrieval = r.task != Task::Ppl;
  const double accuracy = r.asked > 0 ? double(r.correct) / double(r.asked) : NAN;
  nlohmann::json j;
  j["task"] = taskName(r.task);
  j["model"] = a.input;
  j["context"] = r.context;
  if (retrieval) {
    j["accuracy"] = accuracy;
    const Interval ci = wilson95(r.correct, r.asked);
    j["accuracy_ci95"] = {ci.lo, ci.hi};
    j["trials"] = r.trials;
    j["asked"] = r.asked;
    j["correct"] = r.correct;
    j["seed"] = a.seed;
    j["chat"] = a.chat;
    j["results"] = r.results;
  } else {
    j["ppl"] = num(r.ppl);
    j["nll_mean"] = num(r.nllMean);
    j["scored"] = r.scored;
    j["text"] = r.text;
  }
  j["tokens"] = r.tokens;
  j["kv_bytes"] = r.kvBytes;
  j["kv_peak_bytes"] = r.kvPeakBytes;
  j["prefill_chunk"] = r.prefillChunk;
  j["prefill_s"] = r.prefillS;
  j["decode_tok_s"] = num(r.decodeTokS);
  j["seconds"] = r.seconds;
  printf("%s\n", j.dump().c_str());
  fflush(stdout);
}

void printReportText(const EvalLongArgs &a, const Report &r) {
  const bool retrieval = r.task != Task::Ppl;
  const double accuracy = r.asked > 0 ? double(r.correct) / double(r.asked) : NAN;
  printf("task        %s%s\n", taskName(r.task), a.chat ? " (chat template)" : "");
  printf("model       %s\n", a.input.c_str());
  printf("context     %lld tokens\n", (long long)r.context);
  if (retrieval) {
    for (size_t i = 0; i < r.results.size(); ++i) {
      const nlohmann::json &t = r.results[i];
      std::string got = t["got"].get<std::string>();
      printf("trial %-5zu depth %.2f  %-4s  answer %s, got %s (%lld tokens)\n", i + 1,
             t["depth"].get<double>(), t["ok"].get<bool>() ? "ok" : "FAIL",
             t["answer"].get<std::string>().c_str(), got.empty() ? "-" : got.c_str(),
             (long long)t["prompt_tokens"].get<int64_t>());
    }
    const Interval ci = wilson95(r.correct, r.asked);
    printf("accuracy    %.4f (%d/%d; 95%% Wilson interval %.3f-%.3f)\n", accuracy, r.correct,
           r.asked, ci.lo, ci.hi);
  } else {
    printf("text        %s\n", r.text.c_str());
    printf("scored      last %lld of %lld tokens\n", (long long)r.scored,
           (long long)r.context);
    printf("ppl         %.4f\n", r.ppl);
  }
  printf("kv_bytes    %lld (%.1f MiB; peak %.1f MiB)\n", (long long)r.kvBytes,
         double(r.kvBytes) / (1024.0 * 1024.0), double(r.kvPeakBytes) / (1024.0 * 1024.0));
  printf("prefill in  %s\n", r.prefillChunk > 0 && r.prefillChunk < r.tokens
                                  ? ("chunks of " + std::to_string(r.prefillChunk) + " tokens").c_str()
                                  : "one step");
  printf("prefill     %.2f s%s\n", r.prefillS, retrieval ? " per trial" : "");
  if (std::isfinite(r.decodeTokS))
    printf("decode      %.1f tok/s\n", r.decodeTokS);
  else
    printf("decode      -\n");
  printf("time        %.2f s\n", r.seconds);
  fflush(stdout);
}

int runEvalLong(const EvalLongArgs &a, bool explicitScore) {
  auto t0 = std::chrono::steady_clock::now();
  const Task task = parseTask(a.task);
  const bool retrieval = task != Task::Ppl;
  const int64_t scoreTokens = checkTaskFlags(a, task, explicitScore);

  if (!a.policies.empty() && a.prefillChunk > 0)
    throw std::runtime_error("--prefill-chunk does not combine with --policies: the sweep "
                             "prefills with the full cache and compresses copies of it");
  if (!a.policies.empty() && !a.pipeline.empty())
    throw std::runtime_error("--policies and --pipeline do not combine: the sweep sets the "
                             "KV policies itself");
  auto art = loadModelOrArtifact(a.input, a.pipeline, a.tokenizer, a.quiet,
                                 a.engine.verifyWeights);
  const int64_t modelCtx = art->config().context_length;
  if (modelCtx > 0 && a.context > modelCtx)
    throw std::runtime_error("--context " + std::to_string(a.context) +
                             " exceeds the context length " + std::to_string(modelCtx) +
                             " of " + a.input);

  if (!a.policies.empty())
    return runSweep(a, task, *art, a.context, scoreTokens);
  Report r = retrieval ? runRetrieval(a, task, *art, a.context)
                       : runPpl(a, *art, a.context, scoreTokens);
  r.seconds = secondsSince(t0);
  if (a.json)
    printReportJson(a, r);
  else
    printReportText(a, r);
  return kOk;
}
} // namespace

std::function<int()> addEvalLongCommand(CLI::App &app) {
  auto a = std::make_shared<EvalLongArgs>();
  CLI::Option *scoreOpt = declareEvalLongOptions(app, *a);
  return [a, scoreOpt]() { return runEvalLong(*a, /*explicitScore=*/scoreOpt->count() > 0); };
}

} // namespace llmc::tool
