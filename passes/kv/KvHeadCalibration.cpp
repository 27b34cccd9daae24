//===- KvHeadCalibration.cpp - Per-KV-head budget calibration -------------===//
// L x KV teacher-forced scorings of the calibration tail on the shared
// prefill (each KV head compressed alone under its layer's deployment
// policy), then per layer the floor-mixed proportional allocation. See
// KvHeadCalibration.h for the steps.
//===----------------------------------------------------------------------===//
#include "passes/kv/KvHeadCalibration.h"
#include "llvm/Support/Format.h"
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace llmc::kv {

namespace {

std::string joined(const std::vector<double> &v, const char *fmt) {
  std::string s;
  for (double x : v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, fmt, x);
    s += (s.empty() ? "" : " ") + std::string(buf);
  }
  return s;
}

} // namespace

nlohmann::json headProbePolicy(const nlohmann::json &deployed, int64_t kvHeads, int64_t head) {
  if (head < 0 || head >= kvHeads)
    throw std::runtime_error("heads=calibrated: KV head " + std::to_string(head) +
                             " of a layer with " + std::to_string(kvHeads) + " KV heads");
  nlohmann::json p = deployed;
  p["kv_quant"] = "none";
  nlohmann::json hs = nlohmann::json::array();
  for (int64_t g = 0; g < kvHeads; ++g)
    hs.push_back(g == head ? 1.0 : kHeadKeepAll);
  p["head_scale"] = hs;
  return p;
}

std::vector<double> headScales(const std::vector<double> &delta, double lo, double hi) {
  const size_t KV = delta.size();
  if (KV == 0)
    return {};
  double sum = 0;
  for (double d : delta) {
    if (!std::isfinite(d) || d < 0)
      throw std::runtime_error("heads=calibrated allocation: a KV head's NLL rise is " +
                               std::to_string(d) + " (must be finite and >= 0)");
    sum += d;
  }
  const double eps = 1e-3 * sum / double(KV) + 1e-9;
  const double total = sum + double(KV) * eps;
  std::vector<double> w(KV);
  for (size_t g = 0; g < KV; ++g) {
    const double share = double(KV) * (delta[g] + eps) / total; // mean 1
    w[g] = kHeadShareMix * share + (1.0 - kHeadShareMix);
  }
  return meanOneClamped(w, lo, hi);
}

HeadCalibrationResult calibrateHeads(CalibrationRun &run,
                                     const std::vector<HeadProbeLayer> &layers,
                                     HeadMetric metric) {
  HeadCalibrationResult r;
  int64_t probes = 0;
  for (const HeadProbeLayer &hl : layers)
    probes += hl.kvHeads;
  ProgressLog log(run.module());
  const std::string method =
      layers.empty() ? std::string("?") : layers.front().policy.value("method", "?");
  log << llvm::format("[llmc] llm-kv-policy heads=calibrated: %lld prompt + %lld scored tokens "
                      "of %s, probe %s per KV head (%lld probes, delta = %s); prefill %.2fs, "
                      "full-cache nll %.5f (%.2fs)\n",
                      (long long)run.promptTokens(), (long long)run.scoredTokens(),
                      run.textPath().c_str(), method.c_str(), (long long)probes,
                      metric == HeadMetric::Kl ? "kl" : "nll rise",
                      run.prefillSeconds(), run.nllFull(), run.fullScoreSeconds());
  log.flush();

  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < layers.size(); ++i) {
    const HeadProbeLayer &hl = layers[i];
    const auto tl = std::chrono::steady_clock::now();
    std::vector<double> nll, kl, delta;
    for (int64_t g = 0; g < hl.kvHeads; ++g) {
      const ProbeScore v = run.probe({{hl.layer, headProbePolicy(hl.policy, hl.kvHeads, g)}});
      nll.push_back(v.nll);
      kl.push_back(v.kl);
      delta.push_back(metric == HeadMetric::Kl ? v.kl : std::max(0.0, v.nll - run.nllFull()));
    }
    std::vector<double> scale = headScales(delta);
    log << llvm::format("[llmc] heads layer %lld (%zu/%zu): delta %s, head_scale %s, %.2fs\n",
                        (long long)hl.layer, i + 1, layers.size(), joined(delta, "%.5f").c_str(),
                        joined(scale, "%.3f").c_str(), secondsSince(tl));
    log.flush();
    r.layers.push_back(hl.layer);
    r.nll.push_back(std::move(nll));
    r.kl.push_back(std::move(kl));
    r.delta.push_back(std::move(delta));
    r.scale.push_back(std::move(scale));
  }
  log << llvm::format("[llmc] llm-kv-policy heads=calibrated: %lld probes in %.2fs\n",
                      (long long)probes, secondsSince(t0));
  log.flush();
  return r;
}

} // namespace llmc::kv
