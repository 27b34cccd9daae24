//===- KvDepthCalibration.h - DepthKV per-layer budget calibration -*- C++ -*-===//
// DepthKV gives each attention layer a share of the KV budget in proportion
// to how much the model suffers when that layer alone is compressed. This is
// the offline measurement behind `layers=depthkv` / `method=depthkv` of the
// llm-kv-policy pass (our interpretation of the DepthKV abstract, see
// /work/shared/methods/kv_policies.md section 8):
//
//  1. The calibration text (`calib-text`, default data/long/licenses.txt;
//     a `.ids` file gives token ids for models without a tokenizer) is
//     tokenized and its first `context` tokens are used: the first
//     context - score - 1 form the prompt, prefilled ONCE with the Executor
//     recording what every policy needs (kv_record) and saved (saveKv).
//  2. Baseline: the saved prefill with the full cache; the last `score`
//     tokens are teacher-forced one forward each, every forward predicting
//     the next token, so all `score` predictions see the (compressed) cache.
//     Their mean NLL is NLL_full. Then, for each layer l: restore the
//     prefill, compress layer l alone with the probe policy (SnapKV at the
//     deployment budget; a token budget is turned into the ratio
//     tokens / prompt length), score the same tokens: NLL_l, and
//     delta_l = max(0, NLL_l - NLL_full).
//  3. Allocation: s_l = delta_l + eps (eps = 1e-3 * mean delta + 1e-9),
//     scale_l = clamp(c * s_l, 0.05, 4) with c chosen (by bisection) so that
//     the scales have mean 1: proportional to s, the ends clamped and the
//     rest renormalized until the clamps and the mean agree.
//
// The measurement is compiler code but runs the runtime's Executor on the
// model as it stands in the pipeline (an in-memory artifact).
//===----------------------------------------------------------------------===//
#pragma once
#include "compiler/weights/WeightStore.h"
#include "mlir/IR/BuiltinOps.h"
#include <nlohmann/json.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace llmc::kv {

struct DepthCalibrationOptions {
  std::string textPath;  // empty: defaultDepthCalibrationText()
  int64_t context = 1024; // calibration tokens in all (prompt + 1 + scored)
  int64_t score = 32;     // teacher-forced scored tokens at the end
  /// The deployment budget: a ratio in (0, 1], or (when > 0) tokens per
  /// (layer, KV head), converted to a ratio of the calibration prompt.
  double budgetRatio = 0;
  int64_t budgetTokens = 0;
  int64_t window = 32, sink = 4, pool = 7;
  int threads = 0; // Executor threads (0: hardware concurrency)
};

struct DepthCalibrationResult {
  std::string textPath;
  int64_t promptTokens = 0, scoredTokens = 0;
  double probeRatio = 0; // the SnapKV budget ratio each layer was probed at
  double nllFull = 0;    // mean NLL of the scored tokens, full cache
  std::vector<int64_t> layers; // attention layers, ascending
  std::vector<double> nll;     // per layer: mean NLL with that layer compressed
  std::vector<double> delta;   // per layer: max(0, nll - nllFull)
  std::vector<double> scale;   // per layer: layer_scale, mean 1
};

/// data/long/licenses.txt of the source tree ($LLMC_DATA_DIR overrides the
/// data folder); empty when neither is known.
std::string defaultDepthCalibrationText();

/// Token ids of `path` (a `.ids` file, or text encoded with the model's
/// tokenizer, BOS first). Throws std::runtime_error naming the file when it
/// is unreadable, the model has no tokenizer for text, or it has fewer than
/// `need` tokens.
std::vector<int32_t> readCalibrationTokens(const WeightStore &store, const std::string &path,
                                           int64_t need);

/// The SnapKV kv_policy (every contract key) used to probe one layer.
nlohmann::json probePolicy(double ratio, int64_t window, int64_t sink, int64_t pool);

/// Allocation (step 3): per-layer scales from the measured deltas, each in
/// [lo, hi], mean 1. Requires lo <= 1 <= hi; an empty input gives an empty
/// result, all-zero deltas give all ones.
std::vector<double> depthLayerScales(const std::vector<double> &delta, double lo = 0.05,
                                     double hi = 4.0);

/// Steps 1-3 on `module` (weights from `store`) for the attention layers
/// `layers`. Progress lines go to WeightStore::progressStream(). Throws
/// std::runtime_error (the model cannot be exported or run, bad text).
DepthCalibrationResult calibrateDepth(mlir::ModuleOp module, const WeightStore &store,
                                      const std::vector<int64_t> &layers,
                                      const DepthCalibrationOptions &opts);

} // namespace llmc::kv
