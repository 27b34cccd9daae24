//===- KvCalibrationRun.h - One calibration prefill, many KV-policy probes -*- C++ -*-===//
// What the calibrated budget allocations of llm-kv-policy (DepthKV's
// per-layer `layer_scale`, the per-KV-head `head_scale` of heads=calibrated)
// share: the model as it stands in the pipeline (an in-memory artifact) runs
// on calibration text, the prompt is prefilled ONCE with the Executor
// recording what every policy needs (kv_record) and saved (saveKv); a probe
// restores that prefill, installs some layers' kv_policy objects (compressing
// as after a prompt), teacher-forces the same tail and returns its mean NLL.
// The full-cache NLL is measured once when the run is built.
//
// The calibration text (default data/calib/default.txt of the source tree,
// see compiler/weights/CalibrationText.h; a `.ids` file holds token ids for
// models without a tokenizer) gives its first `context` tokens: the first
// context - score - 1 are the prompt, the last `score` + 1 are fed as
// decode steps, each predicting the next token, so all `score` predictions
// see the (compressed) cache: in one verification pass (Executor::verify)
// when the probe's policies leave decoding alone (rewindable), else one
// forward per token. A probe reports their mean NLL and
// the mean KL divergence of their next-token distributions from the
// full-cache ones (kept from the first scoring: score x vocab floats).
//
// Also here: the clamped proportional allocation both calibrations end with.
//===----------------------------------------------------------------------===//
#pragma once
#include "compiler/weights/CalibrationText.h"
#include "compiler/weights/WeightStore.h"
#include "mlir/IR/BuiltinOps.h"
#include <nlohmann/json.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace llmc {
class Artifact;
class Executor;
struct KvSnapshot;
} // namespace llmc

namespace llmc::kv {

/// Multipliers clamp(c * w_i, lo, hi) with the one c > 0 that makes their
/// mean 1 (found by bisection, then the last rounding divided out): the
/// allocation in proportion to the weights `w` (finite, > 0), clamped at
/// both ends and the rest renormalized until clamps and mean agree.
/// Requires 0 < lo <= 1 <= hi; an empty input gives an empty result.
std::vector<double> meanOneClamped(const std::vector<double> &w, double lo, double hi);

struct CalibrationRunOptions {
  std::string textPath;   // empty: defaultCalibrationPath()
  int64_t context = 1024; // calibration tokens in all (prompt + 1 + scored)
  int64_t score = 32;     // teacher-forced scored tokens at the end
  int threads = 0;        // Executor threads (0: hardware concurrency)
};

/// What a probe measures on the scored tail.
struct ProbeScore {
  double nll = 0; // mean NLL of the scored tokens
  double kl = 0;  // mean KL(full-cache || probe) of their next-token distributions
};

class CalibrationRun {
public:
  /// Builds the in-memory artifact of `module`, prefills the calibration
  /// prompt with the full cache and scores the tail once (nllFull). Throws
  /// std::runtime_error (no text, bad text, the model cannot be exported or
  /// run, a non-finite NLL).
  CalibrationRun(mlir::ModuleOp module, const WeightStore &store,
                 const CalibrationRunOptions &opts);
  ~CalibrationRun();
  CalibrationRun(const CalibrationRun &) = delete;
  CalibrationRun &operator=(const CalibrationRun &) = delete;

  const std::string &textPath() const { return textPath_; }
  int64_t promptTokens() const { return promptTokens_; }
  int64_t scoredTokens() const { return scoredTokens_; }
  double prefillSeconds() const { return prefillSeconds_; }
  double nllFull() const { return nllFull_; }
  double fullScoreSeconds() const { return fullScoreSeconds_; }
  int64_t fullEntries() const { return fullEntries_; } // cache entries after the prefill
  std::chrono::steady_clock::time_point started() const { return started_; }

  /// One probe: restore the prefill, give the listed attention layers these
  /// kv_policy objects (every other layer the full cache), compress them as
  /// after a prompt, and score the tail. `kept` (if given) receives the
  /// cache entries right after the compression.
  ProbeScore probe(const std::map<int64_t, nlohmann::json> &byLayer, int64_t *kept = nullptr);
  /// The module being calibrated (where progress remarks point).
  mlir::ModuleOp module() const { return module_; }

private:
  /// Teacher-forces the tail on the current cache. With `keep`, stores its
  /// log-probabilities as the full-cache reference (KL is then 0).
  ProbeScore scoreTail(bool keep);

  mlir::ModuleOp module_;
  std::string textPath_;
  std::vector<int32_t> ids_;
  std::vector<float> fullLogProbs_; // [score][vocab], full cache
  int64_t promptTokens_ = 0, scoredTokens_ = 0, fullEntries_ = 0;
  double prefillSeconds_ = 0, nllFull_ = 0, fullScoreSeconds_ = 0;
  std::chrono::steady_clock::time_point started_;
  std::unique_ptr<Artifact> artifact_;
  std::unique_ptr<Executor> executor_;
  std::shared_ptr<const KvSnapshot> prefill_;
};

/// Seconds since `since`, for progress lines.
double secondsSince(std::chrono::steady_clock::time_point since);

} // namespace llmc::kv
