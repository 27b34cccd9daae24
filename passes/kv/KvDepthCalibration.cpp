//===- KvDepthCalibration.cpp - DepthKV per-layer budget calibration -----===//
// L teacher-forced scorings of the calibration tail on the shared prefill
// (each layer compressed alone), then the clamped proportional allocation.
// See KvDepthCalibration.h for the steps.
//===----------------------------------------------------------------------===//
#include "passes/kv/KvDepthCalibration.h"
#include "llmc/ir_enums.h"
#include "llvm/Support/Format.h"
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace llmc::kv {

nlohmann::json probePolicy(double ratio, int64_t window, int64_t sink, int64_t pool) {
  nlohmann::json p;
  p["method"] = std::string(spelling(KvMethod::SnapKV));
  p["budget"] = ratio;
  p["budget_tokens"] = 0;
  p["window"] = window;
  p["sink"] = sink;
  p["layer_scale"] = 1.0;
  p["mode"] = std::string(spelling(KvMode::Prefill));
  p["refresh"] = 16;
  p["pool"] = pool;
  p["kv_quant"] = std::string(spelling(KvQuant::None));
  p["seed"] = 0;
  return p;
}

std::vector<double> depthLayerScales(const std::vector<double> &delta, double lo, double hi) {
  const size_t L = delta.size();
  double mean = 0;
  for (double d : delta) {
    if (!std::isfinite(d) || d < 0)
      throw std::runtime_error("depthkv allocation: a layer's NLL rise is " + std::to_string(d) +
                               " (must be finite and >= 0)");
    mean += d / double(L);
  }
  const double eps = 1e-3 * mean + 1e-9;
  std::vector<double> s(L);
  for (size_t l = 0; l < L; ++l)
    s[l] = delta[l] + eps;
  return meanOneClamped(s, lo, hi);
}

DepthCalibrationResult calibrateDepth(CalibrationRun &run, const std::vector<int64_t> &layers,
                                      const DepthCalibrationOptions &o) {
  DepthCalibrationResult r;
  r.probeRatio = o.budgetTokens > 0
                     ? std::min(1.0, double(o.budgetTokens) / double(run.promptTokens()))
                     : o.budgetRatio;
  const nlohmann::json probe = probePolicy(r.probeRatio, o.window, o.sink, o.pool);
  r.layers = layers;

  ProgressLog log(run.module());
  log << llvm::format("[llmc] llm-kv-policy depthkv: %lld prompt + %lld scored tokens of %s, "
                      "probe snapkv budget %.4g; prefill %.2fs, full-cache nll %.5f (%.2fs)\n",
                      (long long)run.promptTokens(), (long long)run.scoredTokens(),
                      run.textPath().c_str(), r.probeRatio, run.prefillSeconds(), run.nllFull(),
                      run.fullScoreSeconds());
  log.flush();

  for (size_t i = 0; i < layers.size(); ++i) {
    const auto tl = std::chrono::steady_clock::now();
    int64_t kept = 0;
    const double v = run.probe({{layers[i], probe}}, &kept).nll;
    r.nll.push_back(v);
    r.delta.push_back(std::max(0.0, v - run.nllFull()));
    log << llvm::format("[llmc] depthkv layer %lld (%zu/%zu): delta %.5f (nll %.5f), kept %lld "
                        "of %lld cache entries, %.2fs\n",
                        (long long)layers[i], i + 1, layers.size(), r.delta.back(), v,
                        (long long)kept, (long long)run.fullEntries(), secondsSince(tl));
    log.flush();
  }
  r.scale = depthLayerScales(r.delta);
  std::string scales;
  for (double s : r.scale) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%.3f", scales.empty() ? "" : " ", s);
    scales += buf;
  }
  log << llvm::format("[llmc] llm-kv-policy depthkv: layer_scale %s (%.2fs)\n", scales.c_str(),
                      secondsSince(run.started()));
  log.flush();
  return r;
}

} // namespace llmc::kv
