//===- KvDepthCalibration.cpp - DepthKV per-layer budget calibration -----===//
// One prefill of the calibration prompt, then L + 1 teacher-forced scorings
// of the same tail (full cache, then each layer compressed alone), then the
// clamped proportional allocation. See KvDepthCalibration.h for the steps.
//===----------------------------------------------------------------------===//
#include "passes/kv/KvDepthCalibration.h"
#include "compiler/weights/InMemoryModel.h"
#include "llmc/executor.h"
#include "llmc/tokenizer.h"
#include "llvm/Support/Format.h"
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>
#include <sstream>
#include <stdexcept>

#ifndef LLMC_DATA_DIR
#define LLMC_DATA_DIR ""
#endif

namespace llmc::kv {

namespace {

bool isTokenIdFile(const std::string &path) {
  return path.size() > 4 && path.compare(path.size() - 4, 4, ".ids") == 0;
}

/// -log softmax(logits)[target], computed stably in double.
double nll(const float *logits, int64_t vocab, int32_t target) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < vocab; ++i)
    mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i)
    sum += std::exp(double(logits[i]) - double(mx));
  return std::log(sum) + double(mx) - double(logits[target]);
}

/// Teacher-forces ids[first, first + count) one token per forward on the
/// executor's current cache; the forward of ids[i] predicts ids[i + 1].
/// Returns the mean NLL of the `count` predicted tokens.
double scoreTail(Executor &ex, const std::vector<int32_t> &ids, int64_t first, int64_t count) {
  const int64_t vocab = ex.vocabSize();
  double sum = 0;
  for (int64_t j = 0; j < count; ++j) {
    std::vector<float> logits = ex.forward({ids[size_t(first + j)]});
    if (int64_t(logits.size()) != vocab)
      throw std::runtime_error("depthkv calibration: the model returned " +
                               std::to_string(logits.size()) + " logits, expected " +
                               std::to_string(vocab));
    const double v = nll(logits.data(), vocab, ids[size_t(first + j + 1)]);
    if (!std::isfinite(v))
      throw std::runtime_error("depthkv calibration: non-finite NLL at calibration token " +
                               std::to_string(first + j + 1));
    sum += v;
  }
  return sum / double(count);
}

double seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

} // namespace

std::string defaultDepthCalibrationText() {
  std::string dir = LLMC_DATA_DIR;
  if (const char *env = std::getenv("LLMC_DATA_DIR"); env && *env)
    dir = env;
  if (dir.empty())
    return "";
  return dir + "/calib/default.txt";
}

std::vector<int32_t> readCalibrationTokens(const WeightStore &store, const std::string &path,
                                           int64_t need) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::runtime_error(path + ": cannot read the calibration text");
  std::stringstream ss;
  ss << in.rdbuf();
  std::vector<int32_t> ids;
  if (isTokenIdFile(path)) {
    ids = readTokenIds(ss.str(), path, store.source().config.vocab_size);
  } else {
    const TokenizerData &td = store.source().tokenizer;
    if (td.empty())
      throw std::runtime_error(store.source().path +
                               ": the model has no tokenizer to encode the calibration text " +
                               path + " (give token ids in a .ids file with calib-text=FILE.ids)");
    Tokenizer tok(td);
    ids = tok.encode(ss.str(), /*add_bos=*/true, /*parse_special=*/false);
  }
  if (int64_t(ids.size()) < need)
    throw std::runtime_error(path + ": only " + std::to_string(ids.size()) +
                             " calibration tokens, calib-context needs " + std::to_string(need));
  ids.resize(size_t(need));
  return ids;
}

nlohmann::json probePolicy(double ratio, int64_t window, int64_t sink, int64_t pool) {
  nlohmann::json p;
  p["method"] = "snapkv";
  p["budget"] = ratio;
  p["budget_tokens"] = 0;
  p["window"] = window;
  p["sink"] = sink;
  p["layer_scale"] = 1.0;
  p["mode"] = "prefill";
  p["refresh"] = 16;
  p["pool"] = pool;
  p["kv_quant"] = "none";
  p["seed"] = 0;
  return p;
}

std::vector<double> depthLayerScales(const std::vector<double> &delta, double lo, double hi) {
  const size_t L = delta.size();
  if (L == 0)
    return {};
  if (!(lo > 0 && lo <= 1 && hi >= 1))
    throw std::runtime_error("depthkv allocation: the clamp range [" + std::to_string(lo) +
                             ", " + std::to_string(hi) + "] must contain 1");
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
  // sum_l clamp(c * s_l, lo, hi) is continuous and nondecreasing in c, equal
  // to L*lo at c = 0 and L*hi once c * min(s) >= hi: bisect for the c where
  // it is L (mean 1).
  auto total = [&](double c) {
    double t = 0;
    for (double v : s)
      t += std::clamp(c * v, lo, hi);
    return t;
  };
  double cLo = 0, cHi = hi / *std::min_element(s.begin(), s.end());
  for (int it = 0; it < 200 && cHi - cLo > 0; ++it) {
    const double mid = 0.5 * (cLo + cHi);
    if (mid <= cLo || mid >= cHi)
      break;
    (total(mid) < double(L) ? cLo : cHi) = mid;
  }
  const double c = 0.5 * (cLo + cHi);
  std::vector<double> out(L);
  double sum = 0;
  for (size_t l = 0; l < L; ++l)
    sum += out[l] = std::clamp(c * s[l], lo, hi);
  for (double &v : out) // remove the bisection's last rounding from the mean
    v *= double(L) / sum;
  return out;
}

DepthCalibrationResult calibrateDepth(mlir::ModuleOp module, const WeightStore &store,
                                      const std::vector<int64_t> &layers,
                                      const DepthCalibrationOptions &o) {
  DepthCalibrationResult r;
  r.textPath = o.textPath.empty() ? defaultDepthCalibrationText() : o.textPath;
  if (r.textPath.empty())
    throw std::runtime_error("no default calibration text known (set LLMC_DATA_DIR or give "
                             "calib-text=FILE)");
  if (o.score < 1 || o.context < o.score + 2)
    throw std::runtime_error("calib-context " + std::to_string(o.context) +
                             " leaves no prompt before calib-score " + std::to_string(o.score));
  std::vector<int32_t> ids = readCalibrationTokens(store, r.textPath, o.context);
  r.scoredTokens = o.score;
  r.promptTokens = o.context - o.score - 1; // ids[P .. context-1) are fed one at a time
  r.probeRatio = o.budgetTokens > 0
                     ? std::min(1.0, double(o.budgetTokens) / double(r.promptTokens))
                     : o.budgetRatio;
  const nlohmann::json probe = probePolicy(r.probeRatio, o.window, o.sink, o.pool);
  r.layers = layers;

  llvm::raw_ostream &log = WeightStore::progressStream();
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<Artifact> art = buildInMemoryArtifact(module, store);
  ExecutorOptions eo;
  eo.threads = o.threads;
  eo.max_context = o.context;
  eo.kv_record = true;
  Executor ex(*art, eo);
  ex.setKvPolicies({}, /*compress_now=*/false); // whatever the program carries: full cache
  (void)ex.forward(std::vector<int32_t>(ids.begin(), ids.begin() + r.promptTokens));
  std::shared_ptr<const KvSnapshot> prefill = ex.saveKv();
  const int64_t fullEntries = ex.kvCacheEntries();

  auto tb = std::chrono::steady_clock::now();
  r.nllFull = scoreTail(ex, ids, r.promptTokens, r.scoredTokens);
  log << llvm::format("[llmc] llm-kv-policy depthkv: %lld prompt + %lld scored tokens of %s, "
                      "probe snapkv budget %.4g; prefill %.2fs, full-cache nll %.5f (%.2fs)\n",
                      (long long)r.promptTokens, (long long)r.scoredTokens, r.textPath.c_str(),
                      r.probeRatio, std::chrono::duration<double>(tb - t0).count(), r.nllFull,
                      seconds(tb));
  log.flush();

  for (size_t i = 0; i < layers.size(); ++i) {
    const auto tl = std::chrono::steady_clock::now();
    ex.restoreKv(*prefill);
    ex.setKvPolicies({{layers[i], probe}}, /*compress_now=*/true);
    const int64_t kept = ex.kvCacheEntries();
    const double v = scoreTail(ex, ids, r.promptTokens, r.scoredTokens);
    r.nll.push_back(v);
    r.delta.push_back(std::max(0.0, v - r.nllFull));
    log << llvm::format("[llmc] depthkv layer %lld (%zu/%zu): delta %.5f (nll %.5f), kept %lld "
                        "of %lld cache entries, %.2fs\n",
                        (long long)layers[i], i + 1, layers.size(), r.delta.back(), v,
                        (long long)kept, (long long)fullEntries, seconds(tl));
    log.flush();
  }
  ex.restoreKv(*prefill);
  r.scale = depthLayerScales(r.delta);
  std::string scales;
  for (double s : r.scale) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%.3f", scales.empty() ? "" : " ", s);
    scales += buf;
  }
  log << llvm::format("[llmc] llm-kv-policy depthkv: layer_scale %s (%.2fs)\n", scales.c_str(),
                      seconds(t0));
  log.flush();
  return r;
}

} // namespace llmc::kv
