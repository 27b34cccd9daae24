//===- KvPolicy.cpp - llm-kv-policy: validate options, attach kv_policy ---===//
// The compiler side of the KV-cache policies: it checks the options (all of
// them, and the module's attention layers, before any op changes) and writes
// the complete `kv_policy` dictionary of the contract (every key, so the
// runtime needs no defaults) onto each selected llm.attention op. Selection
// and eviction run in the runtime. The budget multipliers are the only
// derived values: per layer, `layer_scale` (layers=pyramid: linear in depth,
// mean 1; layers=depthkv and method=depthkv: measured per layer,
// KvDepthCalibration.h) and per KV head, `head_scale` (heads=calibrated:
// measured per head, KvHeadCalibration.h). The measurements run the model on
// calibration text (one shared prefill, KvCalibrationRun.h), which needs the
// weights of llmc compile.
//===----------------------------------------------------------------------===//
#include "passes/kv/Passes.h"
#include "passes/kv/KvDepthCalibration.h"
#include "passes/kv/KvHeadCalibration.h"
#include "compiler/weights/WeightStore.h"
#include "llmc/ir_enums.h"
#include "dialects/llm/IR/LlmOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <set>

using namespace mlir;

namespace llmc::kv {
#define GEN_PASS_DEF_KVPOLICYPASS
#include "passes/kv/Passes.h.inc"

namespace {

// The methods: one definition, llm::KvMethod (dialects/llm/IR/LlmEnums.td).
const std::string kMethodList(spellingsKvMethod());
constexpr double kPyramidBeta = 20.0;

/// A parsed `budget`: exactly one of ratio / tokens is nonzero.
struct Budget {
  double ratio = 0;
  int64_t tokens = 0;
};

/// "0.1", "10%", ".5" and anything below 1 are ratios; a whole number >= 1
/// is a token count. Range checks are the caller's; this only fails on text
/// that is neither.
std::optional<Budget> parseBudget(llvm::StringRef text) {
  text = text.trim();
  Budget b;
  double v;
  if (text.consume_back("%")) {
    if (text.trim().getAsDouble(v))
      return std::nullopt;
    b.ratio = v / 100.0;
    return b;
  }
  if (text.getAsDouble(v))
    return std::nullopt;
  if (text.contains('.') || v < 1) {
    b.ratio = v;
    return b;
  }
  if (text.getAsInteger(10, b.tokens))
    return std::nullopt;
  return b;
}

/// layer_scale of layer `l` of `L` under layers=pyramid: from
/// 2 - 1/beta (l = 0) down to 1/beta (l = L-1), linear, mean 1. Written as
/// an interpolation between the ends so the ends are exact in f64.
double pyramidScale(int64_t l, int64_t L) {
  if (L <= 1)
    return 1.0;
  const double lo = 1.0 / kPyramidBeta, hi = 2.0 - lo;
  return (hi * double(L - 1 - l) + lo * double(l)) / double(L - 1);
}

/// The kv_policy attribute of a policy object: strings, integers (i64),
/// floats (f64) and arrays of them, keys as they are.
Attribute policyAttr(Builder &bld, const nlohmann::json &j) {
  if (j.is_string())
    return bld.getStringAttr(j.get<std::string>());
  if (j.is_boolean())
    return bld.getBoolAttr(j.get<bool>());
  if (j.is_number_integer())
    return bld.getI64IntegerAttr(j.get<int64_t>());
  if (j.is_number())
    return bld.getF64FloatAttr(j.get<double>());
  if (j.is_array()) {
    SmallVector<Attribute> items;
    for (const nlohmann::json &e : j)
      items.push_back(policyAttr(bld, e));
    return bld.getArrayAttr(items);
  }
  SmallVector<NamedAttribute> entries;
  for (auto it = j.begin(); it != j.end(); ++it)
    entries.push_back(bld.getNamedAttr(it.key(), policyAttr(bld, it.value())));
  return bld.getDictionaryAttr(entries);
}

/// The options after checking, with what they imply filled in.
struct PolicySettings {
  std::string method; // as given
  llm::KvMethod kind = llm::KvMethod::Full;
  Budget budget;
  std::string budgetText; // as given (empty: none)
  std::string mode;       // prefill, decode or both
  std::string layers;     // uniform, pyramid or depthkv
  bool headCal = false;   // heads=calibrated
  std::string headMetric; // nll or kl
  bool depth = false;     // layers=depthkv: measured layer_scale
  std::string depthWho;   // who asked for the depth calibration, for messages
  std::string kvQuant;    // none or polykv
};

/// The module's llm.attention ops and which of them get a policy.
struct AttentionLayers {
  SmallVector<llm::AttentionOp> ops;
  std::set<int64_t> present;    // their layer numbers
  std::set<int64_t> onlyLayers; // option 'only-layers' (empty: all)

  int64_t count() const { return int64_t(ops.size()); }
  bool selected(int64_t l) const { return onlyLayers.empty() || onlyLayers.count(l) != 0; }
  /// "N attention layers: 0..N-1", or the numbers one by one when they are
  /// not exactly 0..N-1.
  std::string describe() const {
    const int64_t L = count();
    std::string s = std::to_string(L) + " attention layers: ";
    if (*present.begin() == 0 && *present.rbegin() == L - 1 && int64_t(present.size()) == L)
      return s + "0.." + std::to_string(L - 1);
    llvm::SmallVector<std::string> names;
    for (int64_t l : present)
      names.push_back(std::to_string(l));
    return s + llvm::join(names, ", ");
  }
};

/// Per layer: (layer_scale, the measured NLL rise behind it).
using DepthCalibration = std::map<int64_t, std::pair<double, double>>;
/// Per layer: (head_scale, head_delta), one entry per KV head each.
using HeadCalibration = std::map<int64_t, std::pair<std::vector<double>, std::vector<double>>>;
/// Per selected layer: its kv_policy object.
using LayerPolicies = std::map<int64_t, nlohmann::json>;

struct KvPolicyPass final : impl::KvPolicyPassBase<KvPolicyPass> {
  using Base::Base;

  void runOnOperation() override {
    // Nothing is modified until all options (and the module's layers) pass.
    PolicySettings settings;
    AttentionLayers attention;
    if (failed(parseOptions(settings)) || failed(collectAttentionLayers(settings, attention)))
      return;
    // One prefill of the calibration text serves both calibrations.
    std::unique_ptr<CalibrationRun> run;
    if (failed(openCalibrationRun(settings, run)))
      return;
    DepthCalibration depthCal;
    if (settings.depth && failed(calibrateLayerScales(settings, attention, *run, depthCal)))
      return;
    const LayerPolicies policy = layerPolicies(settings, attention, depthCal);
    HeadCalibration headCal;
    if (settings.headCal && failed(calibrateHeadScales(settings, attention, policy, *run, headCal)))
      return;
    attachPolicies(settings, attention, policy, depthCal, headCal);
  }

private:
  LogicalResult fail(const Twine &msg) {
    getOperation().emitError() << "llm-kv-policy: " << msg;
    signalPassFailure();
    return failure();
  }

  /// Every option, in order; the first that fails is reported.
  LogicalResult parseOptions(PolicySettings &settings) {
    return success(succeeded(parseMethod(settings)) && succeeded(checkCounts(settings)) &&
                   succeeded(parseBudgetOption(settings)) && succeeded(parseMode(settings)) &&
                   succeeded(parseLayers(settings)) && succeeded(parseHeads(settings)) &&
                   succeeded(checkCalibrationOptions(settings)) &&
                   succeeded(parseKvQuant(settings)));
  }

  LogicalResult parseMethod(PolicySettings &settings) {
    settings.method = method;
    if (settings.method.empty())
      return fail(Twine("option 'method' is required (one of ") + kMethodList + ")");
    const std::optional<llm::KvMethod> kind = llm::symbolizeKvMethod(settings.method);
    if (!kind)
      return fail("unknown method '" + settings.method + "' (option 'method': one of " +
                  kMethodList + ")");
    settings.kind = *kind;
    return success();
  }

  /// window, sink, refresh, score-every and pool.
  LogicalResult checkCounts(const PolicySettings &settings) {
    if (window < 1)
      return fail("option 'window' must be >= 1, not " + Twine(int64_t(window)));
    if (sink < 0)
      return fail("option 'sink' must be >= 0, not " + Twine(int64_t(sink)));
    if (refresh < 1)
      return fail("option 'refresh' must be >= 1, not " + Twine(int64_t(refresh)));
    if (scoreEvery < 1)
      return fail("option 'score-every' must be >= 1, not " + Twine(int64_t(scoreEvery)));
    if (scoreEvery != 1 && settings.kind != llm::KvMethod::InertiaKV)
      return fail("option 'score-every' applies to method=inertiakv only (its lazy EMA "
                  "refresh), not method=" + settings.method);
    if (scoreEvery > window)
      return fail("option 'score-every' (" + Twine(int64_t(scoreEvery)) +
                  ") must not exceed 'window' (" + Twine(int64_t(window)) +
                  "): unscored entries must stay in the protected recent window");
    if (pool < 1 || pool % 2 == 0)
      return fail("option 'pool' must be odd and >= 1 (1 = no smoothing), not " +
                  Twine(int64_t(pool)));
    return success();
  }

  LogicalResult parseBudgetOption(PolicySettings &settings) {
    settings.budgetText = budget;
    const std::string &text = settings.budgetText;
    if (settings.kind == llm::KvMethod::Full) {
      if (!text.empty())
        return fail("option 'budget' does not apply to method=full (it keeps every entry)");
      settings.budget.ratio = 1.0;
      return success();
    }
    if (text.empty())
      return fail("option 'budget' is required for method=" + settings.method +
                  " (a ratio in (0, 1] such as 0.1 or 10%, or tokens per layer and KV "
                  "head such as 512)");
    const std::optional<Budget> parsed = parseBudget(text);
    if (!parsed)
      return fail("option 'budget': '" + text +
                  "' is neither a ratio (0.1, 10%) nor a whole token count (512)");
    const Budget &b = settings.budget = *parsed;
    const int64_t minTokens = window + sink + 1;
    if (b.tokens == 0 && !(b.ratio > 0 && b.ratio <= 1))
      return fail("option 'budget': ratio " + text + " is not in (0, 1]");
    if (b.tokens != 0 && b.tokens < minTokens)
      return fail("option 'budget': " + Twine(b.tokens) +
                  " tokens is fewer than window + sink + 1 = " + Twine(minTokens));
    return success();
  }

  LogicalResult parseMode(PolicySettings &settings) {
    using KM = llm::KvMethod;
    std::string &md = settings.mode = mode;
    if (md != "prefill" && md != "decode" && md != "both")
      return fail("option 'mode' must be prefill, decode or both, not '" + md + "'");
    if (settings.kind == KM::InertiaKV) {
      if (!mode.hasValue())
        md = "decode";
      else if (md == "prefill")
        return fail("method=" + settings.method +
                    " evicts while decoding: option 'mode' must be decode or both, not prefill");
    }
    if (settings.kind == KM::RdKV && md != "prefill")
      return fail("method=rdkv assigns bit widths once after the prompt: option 'mode' must be "
                  "prefill, not " + md);
    return success();
  }

  LogicalResult parseLayers(PolicySettings &settings) {
    using KM = llm::KvMethod;
    std::string &ly = settings.layers = layers;
    if (ly != "uniform" && ly != "pyramid" && ly != "depthkv")
      return fail("option 'layers' must be uniform, pyramid or depthkv, not '" + ly + "'");
    if (settings.kind == KM::DepthKV) {
      if (layers.hasValue() && ly != "depthkv")
        return fail("method=depthkv implies layers=depthkv, not layers=" + ly +
                    " (use method=snapkv for uniform budgets)");
      ly = "depthkv";
    }
    if (settings.kind == KM::PyramidKV) {
      if (layers.hasValue() && ly != "pyramid")
        return fail("method=pyramidkv implies layers=pyramid, not layers=" + ly +
                    (ly == "depthkv" ? " (use method=depthkv for calibrated budgets)"
                                     : " (use method=snapkv for uniform budgets)"));
      ly = "pyramid";
    }
    if (settings.kind == KM::Full && ly != "uniform")
      return fail("method=full keeps every entry: option 'layers' must be uniform, not " + ly);
    settings.depth = ly == "depthkv";
    settings.depthWho = settings.kind == KM::DepthKV ? "method=depthkv" : "layers=depthkv";
    return success();
  }

  /// heads and head-metric.
  LogicalResult parseHeads(PolicySettings &settings) {
    using KM = llm::KvMethod;
    const std::string hd = heads;
    if (hd != "uniform" && hd != "calibrated")
      return fail("option 'heads' must be uniform or calibrated, not '" + hd + "'");
    settings.headCal = hd == "calibrated";
    if (settings.headCal && settings.kind == KM::Full)
      return fail("method=full keeps every entry: option 'heads' must be uniform, not calibrated");
    if (settings.headCal && settings.kind == KM::LaProx)
      return fail("method=laprox selects across a layer's KV heads jointly (per-head budgets "
                  "only set the layer's total): option 'heads' must be uniform, not calibrated");
    if (settings.headCal && settings.kind == KM::RdKV)
      return fail("method=rdkv allocates bits across a layer's KV heads itself: option 'heads' "
                  "must be uniform, not calibrated");
    settings.headMetric = headMetric;
    if (settings.headMetric != "nll" && settings.headMetric != "kl")
      return fail("option 'head-metric' must be nll or kl, not '" + settings.headMetric + "'");
    if (!settings.headCal && headMetric.hasValue())
      return fail("option 'head-metric' applies only to heads=calibrated");
    return success();
  }

  /// calib-text, calib-context and calib-score: only with a calibration,
  /// and then leaving a prompt the budget can compress.
  LogicalResult checkCalibrationOptions(const PolicySettings &settings) {
    if (!settings.depth && !settings.headCal) {
      if (calibText.hasValue() || calibContext.hasValue() || calibScore.hasValue())
        return fail("options 'calib-text', 'calib-context' and 'calib-score' apply only to "
                    "layers=depthkv (or method=depthkv) and heads=calibrated");
      return success();
    }
    if (calibScore < 1)
      return fail("option 'calib-score' must be >= 1, not " + Twine(int64_t(calibScore)));
    const int64_t calibPrompt = calibContext - calibScore - 1;
    const int64_t minPrompt = window + sink + 1;
    if (calibPrompt < minPrompt)
      return fail("option 'calib-context': " + Twine(int64_t(calibContext)) +
                  " tokens leave a calibration prompt of " + Twine(calibPrompt) +
                  " tokens before the " + Twine(int64_t(calibScore)) +
                  " scored ones (calib-score + 1), fewer than window + sink + 1 = " +
                  Twine(minPrompt));
    const Budget &b = settings.budget;
    if (b.tokens != 0 && b.tokens >= calibPrompt)
      return fail("option 'budget': " + Twine(b.tokens) +
                  " tokens keep the whole calibration prompt of " + Twine(calibPrompt) +
                  " tokens, so no " + (settings.depth ? "layer" : "KV head") +
                  " could be measured (raise calib-context)");
    // A head's budget is window + (C - window) * layer_scale * head_scale:
    // with C <= window on the calibration prompt no head_scale changes
    // anything, and a probe could not keep the other heads whole.
    const double cCalib = b.tokens ? double(b.tokens) : std::ceil(b.ratio * double(calibPrompt));
    if (settings.headCal && cCalib <= double(window))
      return fail("option 'budget': ratio " + settings.budgetText + " keeps " +
                  Twine(int64_t(cCalib)) + " of the " + Twine(calibPrompt) +
                  " calibration prompt tokens, no more than the window of " +
                  Twine(int64_t(window)) +
                  ", so heads=calibrated could not measure a head (raise calib-context)");
    return success();
  }

  LogicalResult parseKvQuant(PolicySettings &settings) {
    settings.kvQuant = kvQuant;
    const std::string &kq = settings.kvQuant;
    if (kq != "none" && kq != "polykv")
      return fail("option 'kv-quant' must be none or polykv, not '" + kq + "'");
    if (settings.kind == llm::KvMethod::RdKV && kq != "none")
      return fail("method=rdkv chooses its own bit widths: option 'kv-quant' must be none, "
                  "not " + kq);
    return success();
  }

  /// The module's attention layers, checked against only-layers (and, for
  /// layers=pyramid, numbered 0..L-1).
  LogicalResult collectAttentionLayers(const PolicySettings &settings, AttentionLayers &attention) {
    getOperation().walk([&](llm::AttentionOp op) { attention.ops.push_back(op); });
    const int64_t L = attention.count();
    if (L == 0)
      return fail("the module has no llm.attention op to attach a KV policy to");
    for (llm::AttentionOp op : attention.ops)
      attention.present.insert(int64_t(op.getLayer()));
    for (int64_t l : onlyLayers)
      if (!attention.present.count(l))
        return fail("option 'only-layers': layer " + Twine(l) +
                    " is not an attention layer of this module (it has " +
                    attention.describe() + ")");
    if (settings.layers == "pyramid")
      for (llm::AttentionOp op : attention.ops)
        if (int64_t(op.getLayer()) < 0 || int64_t(op.getLayer()) >= L) {
          op.emitError() << "llm-kv-policy: layers=pyramid needs the attention layers "
                            "numbered 0.."
                         << L - 1 << ", found layer " << int64_t(op.getLayer());
          signalPassFailure();
          return failure();
        }
    attention.onlyLayers = std::set<int64_t>(onlyLayers.begin(), onlyLayers.end());
    return success();
  }

  /// The model run on the calibration text, when a calibration needs it
  /// (null otherwise).
  LogicalResult openCalibrationRun(const PolicySettings &settings,
                                   std::unique_ptr<CalibrationRun> &run) {
    if (!settings.depth && !settings.headCal)
      return success();
    ModuleOp module = getOperation();
    const std::string who = settings.depth ? settings.depthWho : "heads=calibrated";
    CalibrationRunOptions ro;
    ro.textPath = calibText;
    ro.context = calibContext;
    ro.score = calibScore;
    try {
      WeightStore store(module);
      if (!store.hasData())
        return fail(who + " runs the model on calibration text to measure each " +
                    (settings.depth ? "layer" : "KV head") +
                    "'s sensitivity: it needs the weights in the IR (llmc import "
                    "--emit-resources, or llmc compile)");
      run = std::make_unique<CalibrationRun>(module, store, ro);
    } catch (const std::exception &e) {
      return fail(who + " calibration: " + e.what());
    }
    return success();
  }

  /// DepthKV measures every attention layer (the scales have mean 1 over
  /// all L layers, like the pyramid's, whichever are selected).
  LogicalResult calibrateLayerScales(const PolicySettings &settings,
                                     const AttentionLayers &attention, CalibrationRun &run,
                                     DepthCalibration &depthCal) {
    DepthCalibrationOptions co;
    co.budgetRatio = settings.budget.ratio;
    co.budgetTokens = settings.budget.tokens;
    co.window = window;
    co.sink = sink;
    co.pool = pool;
    try {
      DepthCalibrationResult r = calibrateDepth(
          run, std::vector<int64_t>(attention.present.begin(), attention.present.end()), co);
      for (size_t i = 0; i < r.layers.size(); ++i)
        depthCal[r.layers[i]] = {r.scale[i], r.delta[i]};
    } catch (const std::exception &e) {
      return fail(settings.depthWho + " calibration: " + e.what());
    }
    return success();
  }

  /// The policy of each selected layer, without per-head budgets.
  LayerPolicies layerPolicies(const PolicySettings &settings, const AttentionLayers &attention,
                              const DepthCalibration &depthCal) const {
    LayerPolicies policy;
    for (llm::AttentionOp op : attention.ops) {
      const int64_t l = int64_t(op.getLayer());
      if (!attention.selected(l))
        continue;
      double scale = 1.0;
      if (settings.layers == "pyramid")
        scale = pyramidScale(l, attention.count());
      else if (settings.depth)
        scale = depthCal.at(l).first;
      nlohmann::json &p = policy[l];
      p["method"] = settings.method;
      p["budget"] = settings.budget.ratio;
      p["budget_tokens"] = settings.budget.tokens;
      p["window"] = int64_t(window);
      p["sink"] = int64_t(sink);
      p["layer_scale"] = scale;
      p["mode"] = settings.mode;
      p["refresh"] = int64_t(refresh);
      p["pool"] = int64_t(pool);
      p["kv_quant"] = settings.kvQuant;
      p["seed"] = int64_t(seed);
      if (settings.kind == llm::KvMethod::InertiaKV)
        p["score_every"] = int64_t(scoreEvery);
    }
    return policy;
  }

  /// Per-head budgets within each selected layer, probed under that
  /// layer's own policy (its layer_scale included).
  LogicalResult calibrateHeadScales(const PolicySettings &settings,
                                    const AttentionLayers &attention, const LayerPolicies &policy,
                                    CalibrationRun &run, HeadCalibration &headCal) {
    std::vector<HeadProbeLayer> probe;
    for (llm::AttentionOp op : attention.ops)
      if (attention.selected(int64_t(op.getLayer())))
        probe.push_back(HeadProbeLayer{int64_t(op.getLayer()), int64_t(op.getNumKvHeads()),
                                       policy.at(int64_t(op.getLayer()))});
    std::sort(probe.begin(), probe.end(),
              [](const HeadProbeLayer &a, const HeadProbeLayer &b) { return a.layer < b.layer; });
    try {
      HeadCalibrationResult r = calibrateHeads(
          run, probe, settings.headMetric == "kl" ? HeadMetric::Kl : HeadMetric::Nll);
      for (size_t i = 0; i < r.layers.size(); ++i)
        headCal[r.layers[i]] = {r.scale[i], r.delta[i]};
    } catch (const std::exception &e) {
      return fail(std::string("heads=calibrated calibration: ") + e.what());
    }
    return success();
  }

  /// Writes kv_policy onto the selected ops (replacing any earlier policy).
  void attachPolicies(const PolicySettings &settings, const AttentionLayers &attention,
                      const LayerPolicies &policy, const DepthCalibration &depthCal,
                      const HeadCalibration &headCal) {
    Builder bld(&getContext());
    for (llm::AttentionOp op : attention.ops) {
      const int64_t l = int64_t(op.getLayer());
      if (!attention.selected(l))
        continue;
      nlohmann::json p = policy.at(l);
      if (settings.depth) // the measured NLL rise behind layer_scale
        p["depthkv_delta"] = depthCal.at(l).second;
      if (settings.headCal) { // the per-head budgets and the NLL rises behind them
        p["head_scale"] = headCal.at(l).first;
        p["head_delta"] = headCal.at(l).second;
      }
      op.setKvPolicyAttr(cast<DictionaryAttr>(policyAttr(bld, p)));
    }
  }
};

} // namespace
} // namespace llmc::kv
