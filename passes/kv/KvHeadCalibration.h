//===- KvHeadCalibration.h - Per-KV-head budget calibration -------*- C++ -*-===//
// heads=calibrated of the llm-kv-policy pass: within each attention layer,
// KV heads get shares of the layer's budget according to how much the model
// suffers when that head alone is compressed (`head_scale`, one multiplier
// per KV head, mean 1 over the layer's heads, so the layer keeps the total
// that `layers=` gives it). Our interpretation of HeadKV / HeadWiseKV
// (/work/shared/methods/kv_policies.md sections 1 and 9): a measured
// distortion per head instead of a retrieval / summarization diagnostic, and
// HeadKV-style proportional shares mixed with a uniform floor.
//
//  1. One calibration run (KvCalibrationRun.h, shared with DepthKV): the
//     prompt is prefilled once, the tail scored with the full cache
//     (NLL_full).
//  2. For each selected layer l and KV head g: restore the prefill, give
//     layer l its deployment policy (method, budget, window, sink, pool,
//     mode, layer_scale of layers=uniform|pyramid|depthkv) with
//     head_scale = 1 for g and kKeepAll for every other head (the runtime
//     clamps a head's budget to its length, so those keep everything), and
//     kv_quant none (the probe measures eviction only); every other layer
//     keeps its full cache. Score the same tail: with head-metric=nll
//     (default) delta_{l,g} = max(0, NLL_{l,g} - NLL_full); with kl, the
//     mean KL divergence of the tail's next-token distributions from the
//     full-cache ones (HeadWiseKV's distortion; >= 0 and uses the whole
//     distribution, not only the text's next token). L x KV probes (90 on
//     SmolLM2-135M: 30 layers x 3 KV heads), each calib-score forwards.
//  3. Allocation per layer: s_g = delta_g + eps (eps = 1e-3 * the layer's
//     mean delta + 1e-9), share_g = KV * s_g / sum s (mean 1), mixed with a
//     uniform floor as AdaKV / HeadKV do: w_g = 0.8 * share_g + 0.2, then
//     head_scale_g = clamp(c * w_g, 0.05, 4) with c making the mean 1 (c = 1
//     unless a clamp binds, which needs KV > 4).
//===----------------------------------------------------------------------===//
#pragma once
#include "passes/kv/KvCalibrationRun.h"
#include <nlohmann/json.hpp>
#include <cstdint>
#include <vector>

namespace llmc::kv {

/// head_scale of the heads a probe leaves uncompressed.
constexpr double kHeadKeepAll = 1e6;
/// Weight of the proportional share in the allocation (the rest is uniform).
constexpr double kHeadShareMix = 0.8;

enum class HeadMetric { Nll, Kl };

struct HeadProbeLayer {
  int64_t layer = 0;
  int64_t kvHeads = 1;
  nlohmann::json policy; // the layer's deployment kv_policy (every contract key)
};

struct HeadCalibrationResult {
  std::vector<int64_t> layers;                // as given
  std::vector<std::vector<double>> nll;       // [layer][head]: NLL with that head compressed
  std::vector<std::vector<double>> kl;        // [layer][head]: mean KL from the full cache
  std::vector<std::vector<double>> delta;     // [layer][head]: max(0, nll - nllFull) or kl
  std::vector<std::vector<double>> scale;     // [layer][head]: head_scale, mean 1 per layer
};

/// The probe of head `head` of a layer with `kvHeads` KV heads: `deployed`
/// with kv_quant none and head_scale 1 for `head`, kHeadKeepAll elsewhere.
nlohmann::json headProbePolicy(const nlohmann::json &deployed, int64_t kvHeads, int64_t head);

/// Allocation (step 3) for one layer: head_scale from the heads' deltas
/// (finite, >= 0), each in [lo, hi], mean 1. All-equal deltas give all ones.
std::vector<double> headScales(const std::vector<double> &delta, double lo = 0.05,
                               double hi = 4.0);

/// Steps 2-3 on the prepared run. One progress line per layer goes to
/// remarks on the calibrated module (ProgressLog). Throws std::runtime_error (the runtime
/// rejects a policy, the model cannot be run).
HeadCalibrationResult calibrateHeads(CalibrationRun &run,
                                     const std::vector<HeadProbeLayer> &layers,
                                     HeadMetric metric = HeadMetric::Nll);

} // namespace llmc::kv
