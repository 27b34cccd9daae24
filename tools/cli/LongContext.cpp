//===- LongContext.cpp - Long-context tasks for `llmc eval-long` ---------===//
#include "LongContext.h"
#include "llmc/metrics.h"
#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <stdexcept>

namespace llmc::tool::longctx {
namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The classic passkey filler, cycled sentence by sentence.
const char *const kFiller[] = {"The grass is green.", "The sky is blue.", "The sun is yellow.",
                               "Here we go.", "There and back again."};
constexpr int kFillerCount = sizeof(kFiller) / sizeof(kFiller[0]);

// Keys of the multi-needle task: short, common, single words.
const char *const kWords[] = {"apple",  "river",   "lantern", "violet", "compass", "harbor",
                              "meadow", "falcon",  "pepper",  "castle", "glacier", "orchid",
                              "candle", "thunder", "marble",  "willow", "copper",  "saddle",
                              "island", "feather", "cobalt",  "pebble", "anchor",  "maple"};
constexpr int kWordCount = sizeof(kWords) / sizeof(kWords[0]);
constexpr int kMultiNeedles = 4;
// The prompt may fall short of the target by at most this many tokens.
constexpr int64_t kSlack = 16;

/// A number of `n` decimal digits without a leading zero. The reduction is
/// plain modulo (bias below 1e-13) so every platform draws the same keys.
std::string drawDigits(std::mt19937_64 &rng, int n) {
  uint64_t lo = 1;
  for (int i = 1; i < n; ++i)
    lo *= 10;
  return std::to_string(lo + rng() % (9 * lo));
}

/// The prompt text with `n` filler sentences.
std::string promptText(const Tokenizer &tok, const RetrievalTrial &trial, int64_t n, bool chat) {
  std::vector<const Needle *> order;
  for (const Needle &nd : trial.needles)
    order.push_back(&nd);
  std::stable_sort(order.begin(), order.end(),
                   [](const Needle *a, const Needle *b) { return a->depth < b->depth; });
  // Filler sentences run on one line; each needle is a line of its own.
  std::string body;
  bool lineStart = true;
  size_t next = 0;
  for (int64_t i = 0; i <= n; ++i) {
    // Needles whose insertion point is before filler sentence i.
    while (next < order.size() &&
           (int64_t)std::llround(std::clamp(order[next]->depth, 0.0, 1.0) * double(n)) <= i) {
      body += (lineStart ? "" : "\n") + order[next++]->sentence + "\n";
      lineStart = true;
    }
    if (i < n) {
      body += (lineStart ? "" : " ") + std::string(kFiller[i % kFillerCount]);
      lineStart = false;
    }
  }
  if (!lineStart)
    body += '\n';
  std::string user = trial.intro + "\n" + body + trial.question;
  if (!chat)
    return user + " " + trial.answerPrefix;
  return tok.applyChatTemplate({{"user", user}}, /*add_generation_prompt=*/true) +
         trial.answerPrefix;
}
} // namespace

Task parseTask(const std::string &name) {
  if (name == "passkey")
    return Task::Passkey;
  if (name == "multi-needle")
    return Task::MultiNeedle;
  if (name == "ppl")
    return Task::Ppl;
  throw std::runtime_error("unknown task '" + name + "' (expected passkey, multi-needle or ppl)");
}

const char *taskName(Task t) {
  switch (t) {
  case Task::Passkey:
    return "passkey";
  case Task::MultiNeedle:
    return "multi-needle";
  case Task::Ppl:
    return "ppl";
  }
  return "?";
}

double trialDepth(int i, int k) {
  return kMaxNeedleDepth * (k <= 1 ? 0.5 : double(i) / double(k - 1));
}

std::vector<RetrievalTrial> passkeyTrials(int k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<RetrievalTrial> out;
  for (int i = 0; i < k; ++i) {
    RetrievalTrial t;
    std::string key = drawDigits(rng, 5);
    t.intro = "There is an important piece of information hidden inside a lot of irrelevant "
              "text. Find it and memorize it. I will quiz you about the important information "
              "there.";
    t.depth = trialDepth(i, k);
    t.needles.push_back({"The pass key is " + key + ". Remember it. " + key + " is the pass key.",
                         t.depth});
    t.question = "What is the pass key?";
    t.answerPrefix = "The pass key is";
    t.answer = key;
    t.label = "key " + key;
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<RetrievalTrial> multiNeedleTrials(int k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<RetrievalTrial> out;
  for (int i = 0; i < k; ++i) {
    // Four distinct words (partial Fisher-Yates) and four distinct values.
    std::vector<int> idx(kWordCount);
    for (int w = 0; w < kWordCount; ++w)
      idx[size_t(w)] = w;
    for (int j = 0; j < kMultiNeedles; ++j)
      std::swap(idx[size_t(j)], idx[size_t(j + int(rng() % uint64_t(kWordCount - j)))]);
    std::vector<std::string> values;
    while ((int)values.size() < kMultiNeedles) {
      std::string v = drawDigits(rng, 7);
      if (std::find(values.begin(), values.end(), v) == values.end())
        values.push_back(v);
    }
    RetrievalTrial t;
    t.intro = "There are several special magic numbers hidden inside a lot of irrelevant text. "
              "Find them and memorize them. I will quiz you about them.";
    std::vector<std::string> words;
    for (int j = 0; j < kMultiNeedles; ++j) {
      words.push_back(kWords[idx[size_t(j)]]);
      t.needles.push_back({"The special magic number for " + words.back() + " is " +
                               values[size_t(j)] + ".",
                           0.1 + (kMaxNeedleDepth - 0.1) * double(j) / (kMultiNeedles - 1)});
    }
    const int first = i % kMultiNeedles;
    std::string asked;
    for (int q = 0; q < kMultiNeedles; ++q) {
      const int j = (first + q) % kMultiNeedles;
      asked += (q == 0 ? "" : q + 1 == kMultiNeedles ? " and " : ", ") + words[size_t(j)];
      const std::string prefix = "The special magic number for " + words[size_t(j)] + " is";
      if (q == 0) {
        t.answerPrefix = prefix;
        t.answer = values[size_t(j)];
        t.depth = t.needles[size_t(j)].depth;
      } else {
        t.followUps.push_back({prefix, values[size_t(j)], t.needles[size_t(j)].depth});
      }
    }
    t.question = "What are the special magic numbers for " + asked + "?";
    t.label = "'" + words[size_t(first)] + "' " + t.answer + " first of 4";
    out.push_back(std::move(t));
  }
  return out;
}

BuiltPrompt buildPrompt(const Tokenizer &tok, const RetrievalTrial &trial, int64_t target,
                        bool chat) {
  auto encode = [&](int64_t n) {
    return tok.encode(promptText(tok, trial, n, chat), /*add_bos=*/true,
                      /*parse_special=*/chat);
  };
  BuiltPrompt best{encode(0), 0};
  const int64_t base = (int64_t)best.ids.size();
  if (base > target)
    throw std::runtime_error("--context " + std::to_string(target) +
                             " is too short: the prompt without filler text already takes " +
                             std::to_string(base) + " tokens");
  if (base >= target - kSlack)
    return best;
  // Tokens per filler sentence, measured on a sample, guides the search;
  // the token count is then checked exactly (merges across sentence
  // boundaries make it not quite additive). `lo` fits, `hi` does not.
  const int64_t probe = 40;
  double per = std::max(1.0, double((int64_t)encode(probe).size() - base) / double(probe));
  int64_t lo = 0, hi = -1, n = std::max<int64_t>(1, int64_t(double(target - base) / per));
  for (int iter = 0; iter < 64; ++iter) {
    std::vector<int32_t> ids = encode(n);
    int64_t c = (int64_t)ids.size();
    if (c <= target) {
      lo = n;
      best = {std::move(ids), n};
      if (c >= target - kSlack)
        return best;
      n += std::max<int64_t>(1, int64_t(double(target - c) / per));
    } else {
      hi = n;
      n -= std::max<int64_t>(1, int64_t(std::ceil(double(c - target) / per)));
    }
    if (hi >= 0) {
      if (hi - lo <= 1)
        break;
      n = std::clamp(n, lo + 1, hi - 1);
    }
    n = std::max<int64_t>(n, lo + 1);
  }
  return best;
}

std::string firstDigitRun(const std::string &text) {
  size_t b = text.find_first_of("0123456789");
  if (b == std::string::npos)
    return "";
  size_t e = text.find_first_not_of("0123456789", b);
  return text.substr(b, e == std::string::npos ? std::string::npos : e - b);
}

GenerationResult generateAnswer(Executor &exec, const Tokenizer &tok,
                                const std::vector<int32_t> &prompt, int maxNew) {
  exec.reset();
  auto t0 = Clock::now();
  std::vector<float> logits = exec.forward(prompt);
  const double prefill = since(t0);
  GenerationResult r = continueAnswer(exec, tok, std::move(logits), maxNew);
  r.prefillSeconds = prefill;
  return r;
}

GenerationResult continueAnswer(Executor &exec, const Tokenizer &tok, std::vector<float> logits,
                                int maxNew) {
  GenerationResult r;
  const std::vector<int32_t> stops = tok.stopTokens();
  const int64_t vocab = exec.vocabSize();
  while ((int)r.generated.size() < maxNew) {
    int64_t next = metrics::argmax(logits.data(), vocab);
    if (next < 0)
      throw std::runtime_error("the model produced no finite logit (NaN) while decoding");
    if (std::find(stops.begin(), stops.end(), (int32_t)next) != stops.end())
      break;
    r.generated.push_back((int32_t)next);
    r.text = tok.decode(r.generated);
    // Stop once a run of digits is followed by something else: the answer
    // is scored on the first run only.
    size_t b = r.text.find_first_of("0123456789");
    if (b != std::string::npos && r.text.find_first_not_of("0123456789", b) != std::string::npos)
      break;
    if ((int)r.generated.size() == maxNew)
      break;
    auto td = Clock::now();
    logits = exec.forward({(int32_t)next});
    r.decodeSeconds += since(td);
    ++r.decodeForwards;
  }
  r.digits = firstDigitRun(r.text);
  return r;
}

std::vector<GenerationResult> answerAll(Executor &exec, const Tokenizer &tok,
                                        std::vector<float> logits, const RetrievalTrial &trial,
                                        int maxNew) {
  std::vector<GenerationResult> out;
  out.push_back(continueAnswer(exec, tok, std::move(logits), maxNew));
  for (const FollowUp &f : trial.followUps) {
    const GenerationResult &prev = out.back();
    // continueAnswer stops before feeding its last token; feed it first.
    std::vector<int32_t> forced;
    if (!prev.generated.empty())
      forced.push_back(prev.generated.back());
    for (int32_t id : tok.encode("\n" + f.prefix, /*add_bos=*/false, /*parse_special=*/false))
      forced.push_back(id);
    double secs = 0;
    for (int32_t id : forced) {
      auto t0 = Clock::now();
      logits = exec.forward({id});
      secs += since(t0);
    }
    GenerationResult g = continueAnswer(exec, tok, std::move(logits), maxNew);
    g.decodeSeconds += secs;
    g.decodeForwards += int64_t(forced.size());
    out.push_back(std::move(g));
  }
  return out;
}

const std::string &expectedAnswer(const RetrievalTrial &trial, size_t j) {
  return j == 0 ? trial.answer : trial.followUps.at(j - 1).answer;
}

Interval wilson95(int64_t correct, int64_t n) {
  if (n <= 0)
    return {};
  const double z = 1.959963984540054, p = double(correct) / double(n), nn = double(n);
  const double centre = (p + z * z / (2 * nn)) / (1 + z * z / nn);
  const double half = z / (1 + z * z / nn) * std::sqrt(p * (1 - p) / nn + z * z / (4 * nn * nn));
  return {std::max(0.0, centre - half), std::min(1.0, centre + half)};
}

TailScore scoreTail(Executor &exec, const std::vector<int32_t> &ids, int64_t scoreTokens) {
  const int64_t n = (int64_t)ids.size(), s = scoreTokens;
  if (s < 1 || s >= n)
    throw std::runtime_error("cannot score the last " + std::to_string(s) + " of " +
                             std::to_string(n) + " tokens (need 1 <= score tokens < context)");
  exec.reset();
  auto t0 = Clock::now();
  std::vector<float> logits =
      exec.forward(std::vector<int32_t>(ids.begin(), ids.begin() + (n - s)));
  const double prefill = since(t0);
  TailScore r = continueScore(exec, ids, scoreTokens, std::move(logits));
  r.prefillSeconds = prefill;
  return r;
}

TailScore continueScore(Executor &exec, const std::vector<int32_t> &ids, int64_t scoreTokens,
                        std::vector<float> logits) {
  const int64_t n = (int64_t)ids.size(), s = scoreTokens;
  TailScore r;
  const int64_t vocab = exec.vocabSize();
  double sum = 0;
  for (int64_t i = n - s; i < n; ++i) {
    if (ids[size_t(i)] < 0 || ids[size_t(i)] >= vocab)
      throw std::runtime_error("token " + std::to_string(ids[size_t(i)]) +
                               " is outside the model's vocabulary of " + std::to_string(vocab));
    sum += metrics::nll(logits.data(), vocab, ids[size_t(i)]);
    ++r.scored;
    if (i + 1 < n) {
      auto td = Clock::now();
      logits = exec.forward({ids[size_t(i)]});
      r.decodeSeconds += since(td);
      ++r.decodeForwards;
    }
  }
  r.nllMean = sum / double(r.scored);
  r.ppl = metrics::perplexityFromMeanNll(r.nllMean);
  return r;
}

} // namespace llmc::tool::longctx
