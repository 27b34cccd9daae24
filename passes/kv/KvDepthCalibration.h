//===- KvDepthCalibration.h - DepthKV per-layer budget calibration -*- C++ -*-===//
// DepthKV gives each attention layer a share of the KV budget in proportion
// to how much the model suffers when that layer alone is compressed. This is
// the offline measurement behind `layers=depthkv` / `method=depthkv` of the
// llm-kv-policy pass (our interpretation of the DepthKV abstract, see
// /work/shared/methods/kv_policies.md section 8):
//
//  1. One calibration run (KvCalibrationRun.h): the calibration prompt is
//     prefilled once and saved; its tail of `score` tokens, teacher-forced
//     with the full cache, gives NLL_full.
//  2. For each layer l: restore the prefill, compress layer l alone with the
//     probe policy (SnapKV at the deployment budget; a token budget is
//     turned into the ratio tokens / prompt length), score the same tokens:
//     NLL_l, and delta_l = max(0, NLL_l - NLL_full).
//  3. Allocation: s_l = delta_l + eps (eps = 1e-3 * mean delta + 1e-9),
//     scale_l = clamp(c * s_l, 0.05, 4) with c chosen (by bisection) so that
//     the scales have mean 1: proportional to s, the ends clamped and the
//     rest renormalized until the clamps and the mean agree.
//===----------------------------------------------------------------------===//
#pragma once
#include "passes/kv/KvCalibrationRun.h"
#include <nlohmann/json.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace llmc::kv {

struct DepthCalibrationOptions {
  /// The deployment budget: a ratio in (0, 1], or (when > 0) tokens per
  /// (layer, KV head), converted to a ratio of the calibration prompt.
  double budgetRatio = 0;
  int64_t budgetTokens = 0;
  int64_t window = 32, sink = 4, pool = 7;
};

struct DepthCalibrationResult {
  double probeRatio = 0;       // the SnapKV budget ratio each layer was probed at
  std::vector<int64_t> layers; // attention layers, ascending
  std::vector<double> nll;     // per layer: mean NLL with that layer compressed
  std::vector<double> delta;   // per layer: max(0, nll - nllFull)
  std::vector<double> scale;   // per layer: layer_scale, mean 1
};

/// The SnapKV kv_policy (every contract key) used to probe one layer.
nlohmann::json probePolicy(double ratio, int64_t window, int64_t sink, int64_t pool);

/// Allocation (step 3): per-layer scales from the measured deltas (finite,
/// >= 0), each in [lo, hi], mean 1. Requires lo <= 1 <= hi; an empty input
/// gives an empty result, all-zero deltas give all ones.
std::vector<double> depthLayerScales(const std::vector<double> &delta, double lo = 0.05,
                                     double hi = 4.0);

/// Steps 2-3 on the prepared run for the attention layers `layers`.
/// Progress lines (one per layer) are remarks on the calibrated module (ProgressLog).
/// Throws std::runtime_error (the model cannot be run).
DepthCalibrationResult calibrateDepth(CalibrationRun &run, const std::vector<int64_t> &layers,
                                      const DepthCalibrationOptions &opts);

} // namespace llmc::kv
