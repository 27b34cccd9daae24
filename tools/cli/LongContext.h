//===- LongContext.h - Long-context tasks for `llmc eval-long` --*- C++ -*-===//
// The pieces of the long-context harness that do not depend on the command
// line: building retrieval prompts of a given token length (filler text with
// "needles" at chosen depths, tokenized with the model's own tokenizer),
// generating them deterministically from a seed, running one prompt through
// an Executor (one prefill forward, then greedy decoding one token per
// forward) and scoring the answer, and the teacher-forced perplexity of the
// tail of a long text. KV-cache policies act on the prefill forward, so the
// prompt is always fed in one call.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/executor.h"
#include "llmc/tokenizer.h"
#include <cstdint>
#include <string>
#include <vector>

namespace llmc::tool::longctx {

enum class Task { Passkey, MultiNeedle, Ppl };
/// "passkey" | "multi-needle" | "ppl"; throws std::runtime_error otherwise.
Task parseTask(const std::string &name);
const char *taskName(Task t);

/// One fact hidden in the filler: `sentence` is inserted at `depth` in
/// [0, 1] (0: before the first filler sentence, 1: after the last).
struct Needle {
  std::string sentence;
  double depth = 0;
};

/// A further question about the same prompt, asked after the first answer:
/// "\n" + `prefix` is teacher-forced, then the model completes it.
struct FollowUp {
  std::string prefix; // e.g. "The special magic number for river is"
  std::string answer;
  double depth = 0;   // depth of the needle it asks for
};

/// A retrieval prompt and what a correct answer contains.
struct RetrievalTrial {
  std::string intro;        // instruction before the filler
  std::vector<Needle> needles;
  std::string question;     // asked after the filler, e.g. "What is the pass key?"
  std::string answerPrefix; // the completion starts here, e.g. "The pass key is"
  std::string answer;       // the digits a correct answer starts with
  double depth = 0;         // depth of the needle that is asked for
  std::string label;        // e.g. "key 12345" or "'violet' 1234567"
  std::vector<FollowUp> followUps; // multi-needle: the other needles, asked in turn
};

/// The deepest a passkey needle goes: depth 0.85 leaves at least 15% of the
/// filler (over 100 tokens at 1k) between it and the question, so no needle
/// lies in a policy's always-kept recent window (32 tokens).
constexpr double kMaxNeedleDepth = 0.85;

/// Depth of trial i of k: kMaxNeedleDepth * i / (k - 1), evenly spread over
/// [0, kMaxNeedleDepth]; half of it for k = 1.
double trialDepth(int i, int k);

/// Deterministic trials from `seed` (std::mt19937_64, whose sequence the C++
/// standard fixes, with a portable reduction to digits).
/// passkey: one 5-digit key per trial at trialDepth(i, k).
std::vector<RetrievalTrial> passkeyTrials(int k, uint64_t seed);
/// multi-needle: four "special magic number" needles with 7-digit values at
/// depths 0.1, 0.35, 0.6, 0.85 and distinct words per trial; every trial
/// asks for all four, starting with needle i mod 4 (so each needle comes
/// first equally often): the first as the prompt's answer, the others as
/// follow-ups.
std::vector<RetrievalTrial> multiNeedleTrials(int k, uint64_t seed);

/// A tokenized prompt: `ids` has at most `target` and, unless even the
/// prompt without filler is longer, at least target - 16 tokens.
struct BuiltPrompt {
  std::vector<int32_t> ids;
  int64_t fillerSentences = 0;
};

/// The prompt of `trial` at `target` tokens, from the tokenizer of the
/// model: an instruction, filler sentences with the needles inserted at
/// their depths, the question, and the answer prefix (with `chat`, the
/// instruction, filler and question are the user turn of the model's chat
/// template and the answer prefix starts the assistant turn). Throws
/// std::runtime_error when `target` cannot hold the prompt without filler.
BuiltPrompt buildPrompt(const Tokenizer &tok, const RetrievalTrial &trial, int64_t target,
                        bool chat);

/// The first run of ASCII digits in `text` ("" when there is none).
std::string firstDigitRun(const std::string &text);

/// What running one retrieval prompt gave.
struct GenerationResult {
  std::vector<int32_t> generated;
  std::string text;           // decoded continuation
  std::string digits;         // firstDigitRun(text)
  double prefillSeconds = 0;  // the one prompt forward
  double decodeSeconds = 0;   // the single-token forwards
  int64_t decodeForwards = 0; // how many single-token forwards ran
};

/// Resets `exec`, runs the prompt in one forward, then greedily decodes up
/// to `maxNew` tokens (one forward per token after the first), stopping at
/// a stop token or once a run of digits has ended.
GenerationResult generateAnswer(Executor &exec, const Tokenizer &tok,
                                const std::vector<int32_t> &prompt, int maxNew);
/// The decoding half of generateAnswer: `logits` are the prompt's last row
/// (KV-policy sweeps run the prompt once and decode under each policy).
GenerationResult continueAnswer(Executor &exec, const Tokenizer &tok, std::vector<float> logits,
                                int maxNew);

/// Every answer of `trial` from the state after its prompt, whose last row
/// is `logits`: the first answer, then for each follow-up the tokens still
/// unfed (the previous answer's last token) and "\n" + its prefix are
/// teacher-forced one token per forward and the model completes it.
/// Element j answers question j (0: the prompt's; j > 0: followUps[j - 1]).
std::vector<GenerationResult> answerAll(Executor &exec, const Tokenizer &tok,
                                        std::vector<float> logits, const RetrievalTrial &trial,
                                        int maxNew);

/// The answer question j of `trial` expects (j as in answerAll).
const std::string &expectedAnswer(const RetrievalTrial &trial, size_t j);

/// The 95% Wilson score interval of a proportion of `correct` out of `n`
/// (z = 1.96); [0, 1] when n = 0. Unlike the normal approximation it stays
/// inside [0, 1] and is not empty at 0 or n correct.
struct Interval {
  double lo = 0, hi = 1;
};
Interval wilson95(int64_t correct, int64_t n);

/// Teacher-forced negative log-likelihood of the last `scoreTokens` of
/// `ids`: resets `exec`, feeds ids[0, n - S) in one forward (its last row
/// scores ids[n - S]), then ids[n - S, n - 1) one token per forward, each
/// scoring the next token.
struct TailScore {
  int64_t scored = 0;
  double nllMean = 0;
  double ppl = 0;
  double prefillSeconds = 0;
  double decodeSeconds = 0;
  int64_t decodeForwards = 0;
};
TailScore scoreTail(Executor &exec, const std::vector<int32_t> &ids, int64_t scoreTokens);
/// The scoring half of scoreTail, after the prompt ids[0, n - S) has run
/// and given `logits` (its last row).
TailScore continueScore(Executor &exec, const std::vector<int32_t> &ids, int64_t scoreTokens,
                        std::vector<float> logits);

} // namespace llmc::tool::longctx
