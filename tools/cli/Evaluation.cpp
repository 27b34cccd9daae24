//===- Evaluation.cpp - Scoring a model on a text, shared by eval/compile -===//
#include "Evaluation.h"
#include "Commands.h"
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

#ifndef LLMC_DATA_DIR
#define LLMC_DATA_DIR ""
#endif

namespace llmc::tool {

std::string defaultTextPath(DefaultText which) {
  const bool eval = which == DefaultText::Eval;
  std::string dir;
  if (const char *env = std::getenv("LLMC_DATA_DIR"); env && *env)
    dir = env;
  else
    dir = LLMC_DATA_DIR;
  if (dir.empty())
    throw std::runtime_error(std::string("no default ") + (eval ? "evaluation" : "long") +
                             " text known (set LLMC_DATA_DIR or give --text FILE)");
  return dir + (eval ? "/eval/default.txt" : "/long/licenses.txt");
}

std::string readTextFile(const std::string &path, const std::string &what) {
  std::ifstream f(path, std::ios::binary);
  if (!f)
    throw std::runtime_error(path + ": cannot open " + what);
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad())
    throw std::runtime_error(path + ": error reading " + what);
  std::string s = ss.str();
  if (s.empty())
    throw std::runtime_error(path + ": " + what + " is empty");
  return s;
}

std::string readEvalText(const std::string &path) {
  return readTextFile(path, "the evaluation text");
}

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

void checkSameVocabulary(const Artifact &model, const std::string &modelLabel, int64_t modelVocab,
                         const Artifact &ref, const std::string &refLabel, int64_t refVocab) {
  if (refVocab != modelVocab)
    throw std::runtime_error("--ref " + refLabel + " has a vocabulary of " +
                             std::to_string(refVocab) + " tokens but " + modelLabel + " has " +
                             std::to_string(modelVocab) +
                             "; KL divergence needs both models to share one tokenizer");
  const TokenizerData &mt = model.tokenizer(), &rt = ref.tokenizer();
  if (rt.empty())
    return;
  if (rt.tokens.size() != mt.tokens.size())
    throw std::runtime_error("--ref " + refLabel + " has a tokenizer of " +
                             std::to_string(rt.tokens.size()) + " tokens but " + modelLabel +
                             " has " + std::to_string(mt.tokens.size()) +
                             "; both models must share one tokenizer");
  for (size_t i = 0; i < mt.tokens.size(); ++i)
    if (mt.tokens[i] != rt.tokens[i])
      throw std::runtime_error("--ref " + refLabel + ": token " + std::to_string(i) +
                               " differs from " + modelLabel +
                               "'s; both models must share one tokenizer");
}

bool isTokenIdPath(const std::string &path) {
  return path.size() > 4 && path.compare(path.size() - 4, 4, ".ids") == 0;
}

void requireTokenizer(const Artifact &model, const std::string &label,
                      const std::string &textPath) {
  if (isTokenIdPath(textPath))
    return; // token ids need no tokenizer
  if (model.tokenizer().empty())
    throw std::runtime_error(label + ": the model has no tokenizer, so it cannot read the "
                                     "evaluation text (for llama2.c give --tokenizer, or "
                                     "--text FILE.ids with token ids)");
}

std::vector<int32_t> tokenizeEvalText(const Artifact &model, const std::string &label,
                                      const std::string &text, int64_t vocab,
                                      const std::string &textPath) {
  if (isTokenIdPath(textPath))
    return readTokenIds(text, textPath, vocab);
  requireTokenizer(model, label, textPath);
  Tokenizer tok(model.tokenizer());
  std::vector<int32_t> ids = tok.encode(text, /*add_bos=*/true, /*parse_special=*/false);
  for (int32_t id : ids)
    if (id < 0 || id >= vocab)
      throw std::runtime_error(label + ": the tokenizer produced token " + std::to_string(id) +
                               ", outside the model's vocabulary of " + std::to_string(vocab));
  return ids;
}

metrics::EvalSummary scoreWindows(Executor &model, Executor *ref, const std::vector<int32_t> &ids,
                                  const std::vector<std::pair<int64_t, int64_t>> &windows,
                                  const WindowDone &onWindow, int64_t *forwarded) {
  metrics::EvalAccumulator acc(model.vocabSize());
  for (size_t w = 0; w < windows.size(); ++w) {
    auto tw = std::chrono::steady_clock::now();
    auto [b, e] = windows[w];
    std::vector<int32_t> win(ids.begin() + b, ids.begin() + e);
    if (forwarded)
      *forwarded += (int64_t)win.size() * (ref ? 2 : 1);
    model.reset();
    std::vector<float> logits = model.forward(win, /*all_logits=*/true);
    std::vector<float> refLogits;
    if (ref) {
      ref->reset();
      refLogits = ref->forward(win, /*all_logits=*/true);
    }
    // Row i predicts win[i + 1]; the last row has no target in this window.
    acc.addRows(logits.data(), ref ? refLogits.data() : nullptr, win.data() + 1,
                (int64_t)win.size() - 1);
    if (onWindow)
      onWindow(w, windows.size(), win.size(), secondsSince(tw), acc.summary());
  }
  return acc.summary();
}

metrics::EvalSummary compareOnText(const Artifact &model, const std::string &modelLabel,
                                   const Artifact &ref, const std::string &refLabel,
                                   const std::string &textPath, int64_t maxTokens, int threads,
                                   bool quiet) {
  std::string text = readEvalText(textPath);
  requireTokenizer(model, modelLabel, textPath);
  int64_t ctx = 512;
  for (const Artifact *a : {&model, &ref})
    if (a->config().context_length > 0)
      ctx = std::min<int64_t>(ctx, a->config().context_length);
  ExecutorOptions eo;
  eo.threads = threads;
  eo.max_context = ctx;
  Executor exec(model, eo), refExec(ref, eo);
  checkSameVocabulary(model, modelLabel, exec.vocabSize(), ref, refLabel, refExec.vocabSize());
  std::vector<int32_t> ids = tokenizeEvalText(model, modelLabel, text, exec.vocabSize(), textPath);
  auto windows = makeWindows((int64_t)ids.size(), ctx, maxTokens);
  if (windows.empty())
    throw std::runtime_error(textPath + ": the text has " + std::to_string(ids.size()) +
                             " tokens; at least 2 are needed to score anything");
  WindowDone onWindow;
  if (!quiet)
    onWindow = [](size_t w, size_t n, size_t tokens, double secs,
                  const metrics::EvalSummary &so) {
      char buf[160];
      snprintf(buf, sizeof buf, "kld window %zu/%zu: %zu tokens, %.2f s, kld %.6f", w + 1, n,
               tokens, secs, so.kld_mean);
      progress(buf);
    };
  return scoreWindows(exec, &refExec, ids, windows, onWindow);
}

} // namespace llmc::tool
