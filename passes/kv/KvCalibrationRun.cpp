//===- KvCalibrationRun.cpp - One calibration prefill, many KV-policy probes ===//
// The calibration text, the saved prefill, the teacher-forced tail scoring
// and the clamped mean-1 allocation shared by the DepthKV and per-head
// calibrations of llm-kv-policy. See KvCalibrationRun.h.
//===----------------------------------------------------------------------===//
#include "passes/kv/KvCalibrationRun.h"
#include "compiler/weights/InMemoryModel.h"
#include "llmc/artifact.h"
#include "llmc/executor.h"
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace llmc::kv {

namespace {

/// log softmax(logits) into `out`, computed stably in double.
void logSoftmax(const float *logits, int64_t vocab, std::vector<double> &out) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < vocab; ++i)
    mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i)
    sum += std::exp(double(logits[i]) - double(mx));
  const double lse = std::log(sum) + double(mx);
  out.resize(size_t(vocab));
  for (int64_t i = 0; i < vocab; ++i)
    out[size_t(i)] = double(logits[i]) - lse;
}

} // namespace

double secondsSince(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

std::vector<double> meanOneClamped(const std::vector<double> &w, double lo, double hi) {
  const size_t n = w.size();
  if (n == 0)
    return {};
  if (!(lo > 0 && lo <= 1 && hi >= 1))
    throw std::runtime_error("KV budget allocation: the clamp range [" + std::to_string(lo) +
                             ", " + std::to_string(hi) + "] must contain 1");
  for (double v : w)
    if (!std::isfinite(v) || !(v > 0))
      throw std::runtime_error("KV budget allocation: a weight is " + std::to_string(v) +
                               " (must be finite and > 0)");
  // sum_i clamp(c * w_i, lo, hi) is continuous and nondecreasing in c, equal
  // to n*lo at c = 0 and n*hi once c * min(w) >= hi: bisect for the c where
  // it is n (mean 1).
  auto total = [&](double c) {
    double t = 0;
    for (double v : w)
      t += std::clamp(c * v, lo, hi);
    return t;
  };
  double cLo = 0, cHi = hi / *std::min_element(w.begin(), w.end());
  for (int it = 0; it < 200 && cHi - cLo > 0; ++it) {
    const double mid = 0.5 * (cLo + cHi);
    if (mid <= cLo || mid >= cHi)
      break;
    (total(mid) < double(n) ? cLo : cHi) = mid;
  }
  const double c = 0.5 * (cLo + cHi);
  std::vector<double> out(n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i)
    sum += out[i] = std::clamp(c * w[i], lo, hi);
  for (double &v : out) // remove the bisection's last rounding from the mean
    v *= double(n) / sum;
  return out;
}

CalibrationRun::CalibrationRun(mlir::ModuleOp module, const WeightStore &store,
                               const CalibrationRunOptions &o)
    : module_(module), started_(std::chrono::steady_clock::now()) {
  textPath_ = o.textPath.empty() ? defaultCalibrationPath() : o.textPath;
  if (textPath_.empty())
    throw std::runtime_error("no default calibration text known (give calib-text=FILE)");
  if (o.score < 1 || o.context < o.score + 2)
    throw std::runtime_error("calib-context " + std::to_string(o.context) +
                             " leaves no prompt before calib-score " + std::to_string(o.score));
  ids_ = readCalibrationTokens(store, textPath_,
                               " " + textPath_ +
                                   " (give token ids in a .ids file with calib-text=FILE.ids)",
                               o.context);
  if (int64_t(ids_.size()) < o.context)
    throw std::runtime_error(textPath_ + ": only " + std::to_string(ids_.size()) +
                             " calibration tokens, calib-context needs " +
                             std::to_string(o.context));
  ids_.resize(size_t(o.context));
  scoredTokens_ = o.score;
  promptTokens_ = o.context - o.score - 1; // ids[P .. context-1) are fed one at a time

  artifact_ = buildInMemoryArtifact(module, store);
  ExecutorOptions eo;
  eo.threads = o.threads;
  eo.max_context = o.context;
  eo.kv_record = true;
  executor_ = std::make_unique<Executor>(*artifact_, eo);
  executor_->setKvPolicies({}, /*compress_now=*/false); // whatever the program carries: full
  (void)executor_->forward(std::vector<int32_t>(ids_.begin(), ids_.begin() + promptTokens_));
  prefill_ = executor_->saveKv();
  fullEntries_ = executor_->kvCacheEntries();
  prefillSeconds_ = secondsSince(started_);

  const auto t = std::chrono::steady_clock::now();
  nllFull_ = scoreTail(/*keep=*/true).nll;
  fullScoreSeconds_ = secondsSince(t);
}

CalibrationRun::~CalibrationRun() = default;

ProbeScore CalibrationRun::scoreTail(bool keep) {
  Executor &ex = *executor_;
  const int64_t vocab = ex.vocabSize();
  if (keep)
    fullLogProbs_.assign(size_t(scoredTokens_ * vocab), 0.0f);
  // Caches that decoding changes only by appending (the full cache, or
  // policies that compress prompts only): the whole tail in one
  // verification pass, its rows decode steps, each row the prediction a
  // forward of its token alone would make. Otherwise one forward per token.
  // Recording is off while the tail is scored: nothing compresses after it
  // (the next probe restores the prefill, records and all).
  ex.setKvRecording(false);
  const bool onePass = ex.rewindable();
  if (!onePass)
    ex.setKvRecording(true);
  auto checkCount = [](size_t got, int64_t expected) {
    if (int64_t(got) != expected)
      throw std::runtime_error("KV calibration: the model returned " + std::to_string(got) +
                               " logits, expected " + std::to_string(expected));
  };
  std::vector<float> logits; // the tail's rows [score, vocab] (one pass) or one row
  if (onePass) {
    logits = ex.verify(std::vector<int32_t>(ids_.begin() + promptTokens_,
                                            ids_.begin() + promptTokens_ + scoredTokens_));
    checkCount(logits.size(), scoredTokens_ * vocab);
  }
  std::vector<double> lp;
  double sum = 0, klSum = 0;
  for (int64_t j = 0; j < scoredTokens_; ++j) {
    const int64_t i = promptTokens_ + j; // the forward of ids[i] predicts ids[i + 1]
    if (!onePass) {
      logits = ex.forward({ids_[size_t(i)]});
      checkCount(logits.size(), vocab);
    }
    logSoftmax(logits.data() + (onePass ? j * vocab : 0), vocab, lp);
    const double v = -lp[size_t(ids_[size_t(i + 1)])];
    if (!std::isfinite(v))
      throw std::runtime_error("KV calibration: non-finite NLL at calibration token " +
                               std::to_string(i + 1) + " of " + textPath_);
    sum += v;
    float *ref = fullLogProbs_.data() + j * vocab;
    if (keep) {
      for (int64_t c = 0; c < vocab; ++c)
        ref[c] = float(lp[size_t(c)]);
    } else {
      double kl = 0;
      for (int64_t c = 0; c < vocab; ++c)
        kl += std::exp(double(ref[c])) * (double(ref[c]) - lp[size_t(c)]);
      klSum += std::max(0.0, kl); // >= 0 up to rounding
    }
  }
  return {sum / double(scoredTokens_), klSum / double(scoredTokens_)};
}

ProbeScore CalibrationRun::probe(const std::map<int64_t, nlohmann::json> &byLayer,
                                 int64_t *kept) {
  executor_->restoreKv(*prefill_);
  executor_->setKvPolicies(byLayer, /*compress_now=*/true);
  if (kept)
    *kept = executor_->kvCacheEntries();
  return scoreTail(/*keep=*/false);
}

} // namespace llmc::kv
