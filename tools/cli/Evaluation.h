//===- Evaluation.h - Scoring a model on a text, shared by eval/compile -*- C++ -*-===//
// The pieces of `llmc eval` that `llmc compile --max-kld` reuses: the
// default evaluation text, the window split, the same-tokenizer check, and
// the loop that runs each window through a model (and a reference) from an
// empty KV cache and accumulates llmc/metrics.h's per-position metrics.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/artifact.h"
#include "llmc/executor.h"
#include "llmc/metrics.h"
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace llmc::tool {

/// The texts in data/ that commands read when not given one.
enum class DefaultText {
  Eval,        // data/eval/default.txt: llmc eval, compile --max-kld
  LongContext, // data/long/licenses.txt: eval-long --task ppl
};
/// The path of `which` under $LLMC_DATA_DIR or the compile-time data/.
/// Throws std::runtime_error when neither is known.
std::string defaultTextPath(DefaultText which);
/// The whole file; throws std::runtime_error naming the file and `what`
/// (e.g. "the prompt file") if it cannot be read or is empty.
std::string readTextFile(const std::string &path, const std::string &what);
/// readTextFile(path, "the evaluation text").
std::string readEvalText(const std::string &path);

/// Consecutive, non-overlapping windows [begin, end) of at most `ctx`
/// tokens, scoring end - begin - 1 positions each and at most `budget`
/// positions in all; a final window shorter than 2 tokens is dropped.
std::vector<std::pair<int64_t, int64_t>> makeWindows(int64_t nTokens, int64_t ctx,
                                                     int64_t budget);

/// Throws unless `ref` can be compared with `model` position by position:
/// the same vocabulary size and (when `ref` has one) the same token list.
void checkSameVocabulary(const Artifact &model, const std::string &modelLabel, int64_t modelVocab,
                         const Artifact &ref, const std::string &refLabel, int64_t refVocab);

/// Throws unless the model has a tokenizer to read the evaluation text at
/// textPath (a ".ids" file holds token ids and needs none).
void requireTokenizer(const Artifact &model, const std::string &label,
                      const std::string &textPath);

/// The text as token ids of `model`'s tokenizer (with BOS), or, for a
/// ".ids" textPath, the ids it lists; throws if the model has no tokenizer
/// or an id falls outside [0, vocab).
std::vector<int32_t> tokenizeEvalText(const Artifact &model, const std::string &label,
                                      const std::string &text, int64_t vocab,
                                      const std::string &textPath);

/// Called after each window: index (0-based), window count, window tokens,
/// seconds for the window, and the running summary.
using WindowDone = std::function<void(size_t, size_t, size_t, double, const metrics::EvalSummary &)>;

/// Runs every window through `model` and, if not null, `ref` (each from an
/// empty KV cache, all logits) and scores row i against token i + 1.
/// Returns the summary; `forwarded` (if given) counts tokens run in all.
metrics::EvalSummary scoreWindows(Executor &model, Executor *ref, const std::vector<int32_t> &ids,
                                  const std::vector<std::pair<int64_t, int64_t>> &windows,
                                  const WindowDone &onWindow = {}, int64_t *forwarded = nullptr);

/// KL divergence of `model` from `ref` on the text at `textPath`: windows of
/// up to 512 tokens (clamped to both models' contexts), at most `maxTokens`
/// scored positions. Progress lines unless `quiet`.
metrics::EvalSummary compareOnText(const Artifact &model, const std::string &modelLabel,
                                   const Artifact &ref, const std::string &refLabel,
                                   const std::string &textPath, int64_t maxTokens, int threads,
                                   bool quiet);

} // namespace llmc::tool
