//===- Quantize.cpp - llm-quantize: option checks, targets, block loop ---===//
// Option checking and target selection (everything fails before any weight
// is rewritten), then: rtn rounds every target; gptq/awq/osaq walk the blocks in
// order, capturing block l's linear inputs with blocks < l already
// quantized, quantizing block l, and finally RTN for what no block reads.
// Per-tensor `override` entries (GLOB:bits[:group]) give some weights their
// own grid: targets are grouped by grid, one QuantizeContext per grid, and
// every block's captured inputs serve each context in turn.
//===----------------------------------------------------------------------===//
#include "passes/quant/Calibration.h"
#include "llmc/ir_enums.h"
#include "passes/quant/CalibrationSites.h"
#include "passes/quant/FamilyMethods.h"
#include "passes/quant/Passes.h"
#include "passes/quant/QuantizeContext.h"
#include "passes/quant/QuantizeOsaq.h"
#include "compiler/weights/WeightTypes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/GlobPattern.h"
#include "llvm/Support/raw_ostream.h"
#include <chrono>
#include <map>

using namespace mlir;

namespace llmc::quant {
#define GEN_PASS_DEF_QUANTIZEPASS
#include "passes/quant/Passes.h.inc"

namespace {

/// One `override` entry: weights matching `glob` use `spec`.
struct Override {
  std::string text;
  llvm::GlobPattern glob;
  GridSpec spec;
};

bool allDigits(llvm::StringRef s) {
  return !s.empty() && s.size() <= 6 && llvm::all_of(s, [](char c) { return c >= '0' && c <= '9'; });
}

/// Parses "GLOB:bits" or "GLOB:bits:group" (sym from the pass); the error
/// names the entry.
llvm::Expected<Override> parseOverride(const std::string &entry, bool sym, int64_t group) {
  auto bad = [&](const Twine &why) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "bad override '" + entry + "': " + why);
  };
  llvm::SmallVector<llvm::StringRef, 3> parts;
  llvm::StringRef(entry).split(parts, ':');
  if (parts.size() != 2 && parts.size() != 3)
    return bad("expected GLOB:bits or GLOB:bits:group");
  if (parts[0].empty())
    return bad("empty weight-name glob");
  if (!allDigits(parts[1]) || (parts.size() == 3 && !allDigits(parts[2])))
    return bad("bits and group must be positive integers");
  GridSpec spec{0, sym, group};
  spec.bits = std::stoi(parts[1].str());
  if (parts.size() == 3)
    spec.group = std::stoll(parts[2].str());
  try {
    (void)spec.dtype();
  } catch (const std::exception &e) {
    return bad(e.what());
  }
  auto glob = llvm::GlobPattern::create(parts[0]);
  if (!glob) {
    llvm::consumeError(glob.takeError());
    return bad("invalid glob '" + parts[0] + "'");
  }
  return Override{entry, std::move(*glob), spec};
}

/// Every expert of every llm.moe in block `block` must have seen calibration
/// tokens: a calibrated method would otherwise quantize it blind (a silent
/// failure of other tools). Throws naming the first expert that saw none.
void requireExpertCoverage(ModuleOp module, int64_t block,
                           const std::vector<std::unique_ptr<CalibrationSite>> &sites,
                           int64_t calibTokens) {
  module.walk([&](llm::LayerOp l) {
    if (int64_t(l.getIndex()) != block)
      return;
    l.walk([&](llm::MoEOp moe) {
      auto gate = moe.getGate().getDefiningOp<llm::WeightOp>();
      if (!gate)
        return;
      const std::string name = gate.getName().str();
      const int64_t experts = cast<RankedTensorType>(gate.getType()).getShape().front();
      std::set<int64_t> seen;
      for (const auto &s : sites)
        if (s->expert >= 0 && llvm::is_contained(s->weights, name) && s->tokens > 0)
          seen.insert(s->expert);
      for (int64_t e = 0; e < experts; ++e)
        if (!seen.count(e))
          throw std::runtime_error(
              "expert " + std::to_string(e) + " of '" + name + "' (block " +
              std::to_string(block) + ") saw none of the " + std::to_string(calibTokens) +
              " calibration tokens: it cannot be calibrated (use more calib-tokens or a "
              "calibration text that routes tokens to it)");
    });
  });
}

/// The checked options: the method, its storage format and its settings.
struct QuantSettings {
  llm::QuantMethod method = llm::QuantMethod::RTN;
  std::string methodName;
  bool family = false;     // a method with its own storage format (aaac, qtea, hbq)
  bool calibrated = false; // a method that runs the model on calibration text
  GridSpec spec;           // the pass's own grid
  DType format;            // the pass's own target format
  AaacPassOptions aaac;
  QteaPassOptions qtea;
  HbqPassOptions hbq;
  OsaqOptions osaq;
  GptqOptions gptq; // act-order, static-groups, damp (the grid comes per context)
  SmallVector<llvm::GlobPattern> skipPatterns;
  std::vector<Override> overrides;
};

/// The weights to rewrite: by target format, with the grid of each format.
struct QuantTargets {
  std::map<DType, std::pair<GridSpec, std::set<std::string>>> byFormat;
  SmallVector<std::pair<llm::WeightOp, DType>> retypeOnly; // every target, for types-only IR
};

using Contexts = std::vector<std::unique_ptr<QuantizeContext>>;

struct QuantizePass final : impl::QuantizePassBase<QuantizePass> {
  using Base::Base;

  void runOnOperation() override {
    // Options and targets fail before any weight is rewritten.
    QuantSettings settings;
    QuantTargets targets;
    if (failed(parseOptions(settings)) || failed(selectTargets(settings, targets)))
      return;
    std::unique_ptr<WeightStore> store;
    try {
      store = std::make_unique<WeightStore>(getOperation());
    } catch (const std::exception &e) {
      reportError(e.what());
      return;
    }
    if (!store->hasData())
      return retypeWithoutData(settings, targets);
    try {
      quantizeTargets(settings, targets, *store);
    } catch (const std::exception &e) {
      reportError(Twine("method=") + settings.methodName + ": " + e.what());
    }
  }

private:
  /// Reports `msg` on the module and fails the pass.
  void reportError(const Twine &msg) {
    getOperation().emitError() << "llm-quantize: " << msg;
    signalPassFailure();
  }
  LogicalResult fail(const Twine &msg) {
    reportError(msg);
    return failure();
  }

  /// Every option, in order; the first that fails is reported.
  LogicalResult parseOptions(QuantSettings &settings) {
    return success(succeeded(parseMethodAndFormat(settings)) &&
                   succeeded(parseMethodOptions(settings)) &&
                   succeeded(parseWeightPatterns(settings)));
  }

  /// The method (one of the closed set defined once in LlmEnums.td) and
  /// the format it writes with bits and group.
  LogicalResult parseMethodAndFormat(QuantSettings &settings) {
    using QM = llm::QuantMethod;
    const std::optional<QM> parsed = llm::symbolizeQuantMethod(method);
    if (!parsed)
      return fail("unknown method '" + method + "' (expected " +
                  std::string(spellingsQuantMethod()) + ")");
    const QM qm = settings.method = *parsed;
    settings.methodName = llm::stringifyQuantMethod(qm).str();
    // Methods with their own storage format; the others write grouped integers.
    settings.family = qm == QM::AAAC || qm == QM::QTEA || qm == QM::HBQ;
    settings.calibrated = qm != QM::RTN && qm != QM::HBQ;
    settings.spec = GridSpec{int(bits), bool(sym), int64_t(group)};
    try {
      if (qm == QM::AAAC)
        settings.format = aaacDType(int(bits), int64_t(group));
      else if (qm == QM::QTEA)
        settings.format = qteaDType(int64_t(group), int(qteaSalient));
      else if (qm == QM::HBQ)
        settings.format = hbqDType(int(bits), int64_t(group));
      else
        settings.format = settings.spec.dtype();
    } catch (const std::exception &e) {
      return fail(Twine("method=") + settings.methodName + " bits=" + Twine(int64_t(bits)) +
                  " group=" + Twine(int64_t(group)) + ": " + e.what());
    }
    return success();
  }

  /// The settings of the individual methods and of the calibration.
  LogicalResult parseMethodOptions(QuantSettings &settings) {
    if (aaacIters <= 0 || !(qteaDeadzone > 0) || !(qteaDecay >= 0) || !(qteaDamp > 0))
      return fail("aaac-iters, qtea-deadzone and qtea-damp must be positive, qtea-decay "
                  "non-negative");
    const std::string table = hbqTable;
    if (table != "mix" && table != "fp1" && table != "fp10" && table != "int")
      return fail("hbq-table must be mix, fp1, fp10 or int, not '" + table + "'");
    settings.aaac.iters = int(aaacIters);
    settings.qtea.deadzone = qteaDeadzone;
    settings.qtea.decay = qteaDecay;
    settings.qtea.damp = qteaDamp;
    settings.hbq.table = table;
    if (calibTokens <= 0 || calibSeq <= 0 || awqSamples <= 0)
      return fail("calib-tokens, calib-seq and awq-samples must be positive");
    if (!(damp > 0))
      return fail("damp must be positive");
    if (!(osaqEps > 0) || !(osaqTemp > 0) || osaqMaxRank < 0 || !(osaqMinTokens >= 0))
      return fail("osaq-eps and osaq-temp must be positive, osaq-max-rank and osaq-min-tokens "
                  "non-negative");
    settings.gptq.actOrder = actOrder;
    settings.gptq.staticGroups = staticGroups;
    settings.gptq.damp = damp;
    settings.osaq.eps = osaqEps;
    settings.osaq.temp = osaqTemp;
    settings.osaq.maxRank = osaqMaxRank;
    settings.osaq.minTokensPerInput = osaqMinTokens;
    return success();
  }

  /// skip globs and override entries.
  LogicalResult parseWeightPatterns(QuantSettings &settings) {
    for (const std::string &s : skip) {
      auto p = llvm::GlobPattern::create(s);
      if (!p) {
        llvm::consumeError(p.takeError());
        return fail("bad skip pattern '" + s + "'");
      }
      settings.skipPatterns.push_back(std::move(*p));
    }
    for (const std::string &entry : overrideList) {
      auto o = parseOverride(entry, bool(sym), int64_t(group));
      if (!o)
        return fail(llvm::toString(o.takeError()));
      settings.overrides.push_back(std::move(*o));
    }
    return success();
  }

  /// Targets: matrix weights, by grid. The first matching override decides
  /// a weight's grid (even if `skip` matches it too); otherwise skipped
  /// weights stay, and the rest take the pass's grid. A weight already in
  /// its grid's format is left alone.
  LogicalResult selectTargets(const QuantSettings &settings, QuantTargets &targets) {
    const std::vector<Override> &overrides = settings.overrides;
    WalkResult walk = getOperation().walk([&](llm::WeightOp w) {
      auto type = cast<RankedTensorType>(w.getType());
      if (type.getRank() < 2)
        return WalkResult::advance();
      const GridSpec *chosen = &settings.spec;
      auto o = llvm::find_if(
          overrides, [&](const Override &entry) { return entry.glob.match(w.getName()); });
      if (o != overrides.end())
        chosen = &o->spec;
      else if (llvm::any_of(settings.skipPatterns, [&](auto &p) { return p.match(w.getName()); }))
        return WalkResult::advance();
      const DType target = chosen == &settings.spec ? settings.format : chosen->dtype();
      if (dtypeOfElementType(type.getElementType()) == target)
        return WalkResult::advance();
      int64_t cols = type.getShape().back();
      if (cols % chosen->group != 0) {
        w.emitError() << "llm-quantize: weight '" << w.getName() << "' has rows of " << cols
                      << " weights, not a multiple of the group size " << chosen->group
                      << (o != overrides.end() ? " (override '" + o->text + "')" : std::string());
        return WalkResult::interrupt();
      }
      auto &slot = targets.byFormat[target];
      slot.first = *chosen;
      slot.second.insert(w.getName().str());
      targets.retypeOnly.push_back({w, target});
      return WalkResult::advance();
    });
    if (walk.wasInterrupted()) {
      signalPassFailure();
      return failure();
    }
    return success();
  }

  /// A types-only module: only the uncalibrated methods run, retyping the
  /// targets.
  void retypeWithoutData(const QuantSettings &settings, const QuantTargets &targets) {
    if (settings.calibrated) {
      reportError("method=" + settings.methodName +
                  " needs the weights in the IR (llmc import --emit-resources, or llmc "
                  "compile); on a types-only module only method=rtn and method=hbq run, "
                  "retyping weights");
      return;
    }
    for (auto [w, t] : targets.retypeOnly) {
      auto type = cast<RankedTensorType>(w.getType());
      w.getResult().setType(
          RankedTensorType::get(type.getShape(), weightElementType(&getContext(), t)));
    }
  }

  /// Quantizes every target (throws std::runtime_error): calibrated methods
  /// block by block, then whatever remains per context.
  void quantizeTargets(const QuantSettings &settings, QuantTargets &targets, WeightStore &store) {
    auto t0 = std::chrono::steady_clock::now();
    CalibrationData data;
    if (settings.calibrated)
      data = loadCalibration(store, calib, calibTokens, calibSeq);
    QuantizeContext *own = nullptr; // the context of the method's own format
    Contexts contexts = makeContexts(settings, targets, store, data.tokens, own);
    if (settings.calibrated)
      quantizeBlocks(settings, data, store, contexts, own);
    for (auto &ctx : contexts)
      finishContext(settings, *ctx, ctx.get() == own);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (auto &ctx : contexts)
      ctx->summarize(settings.methodName, secs);
  }

  /// One QuantizeContext per target format: the pass's own grid first
  /// (`own`, null if it has no targets), then each override grid.
  Contexts makeContexts(const QuantSettings &settings, QuantTargets &targets, WeightStore &store,
                        int64_t dataTokens, QuantizeContext *&own) {
    ModuleOp module = getOperation();
    auto &byFormat = targets.byFormat;
    Contexts contexts;
    if (auto it = byFormat.find(settings.format); it != byFormat.end()) {
      contexts.push_back(std::make_unique<QuantizeContext>(module, store, it->second.first,
                                                           std::move(it->second.second),
                                                           dataTokens, settings.format));
      own = contexts.back().get();
      byFormat.erase(it);
    }
    for (auto &[t, slot] : byFormat)
      contexts.push_back(std::make_unique<QuantizeContext>(module, store, slot.first,
                                                           std::move(slot.second), dataTokens));
    return contexts;
  }

  /// Walks the blocks in order: block l's linear inputs are captured with
  /// blocks < l already quantized, then block l is quantized.
  void quantizeBlocks(const QuantSettings &settings, const CalibrationData &data,
                      WeightStore &store, Contexts &contexts, QuantizeContext *own) {
    ModuleOp module = getOperation();
    ProgressLog(module) << llvm::format("[llmc] llm-quantize %s: %lld calibration tokens from %s "
                                        "(%zu sequences)\n",
                                        settings.methodName.c_str(), (long long)data.tokens,
                                        data.path.c_str(), data.sequences.size());
    const int64_t blocks = countBlocks(module);
    BlockCapture capture(data);
    for (int64_t l = 0; l < blocks; ++l)
      quantizeBlock(settings, capture, store, l, blocks, contexts, own, data.tokens);
  }

  void quantizeBlock(const QuantSettings &settings, BlockCapture &capture, WeightStore &store,
                     int64_t l, int64_t blocks, Contexts &contexts, QuantizeContext *own,
                     int64_t dataTokens) {
    using QM = llm::QuantMethod;
    const QM qm = settings.method;
    ModuleOp module = getOperation();
    auto tb = std::chrono::steady_clock::now();
    SiteCollector sites(/*wantHessian=*/qm == QM::GPTQ || qm == QM::OSAQ || qm == QM::AAAC ||
                            qm == QM::QTEA,
                        qm == QM::AWQ ? int64_t(awqSamples) : 0);
    OsaqSplitCollector splits;
    capture.capture(module, store, l, [&](const LinearInput &in) {
      sites(in);
      if (qm == QM::OSAQ)
        splits(in);
    });
    double captureSecs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - tb).count();
    requireExpertCoverage(module, l, sites.sites(), dataTokens);
    // Each context quantizes only its own pending weights (AWQ scales
    // a site only when all of its weights belong to one context).
    for (auto &ctx : contexts) {
      if (settings.family) { // override grids of these methods get RTN at the end
        if (ctx.get() != own)
          continue;
        if (qm == QM::AAAC)
          aaacBlock(*ctx, sites.sites(), settings.aaac, l);
        else
          qteaBlock(*ctx, sites.sites(), settings.qtea, l);
      } else if (qm == QM::GPTQ)
        gptqBlock(*ctx, sites.sites(), settings.gptq);
      else if (qm == QM::OSAQ)
        osaqBlock(*ctx, sites.sites(), splits, settings.osaq, settings.gptq, l);
      else
        awqBlock(*ctx, sites.sites(), l);
    }
    ProgressLog(module) << llvm::format(
        "[llmc] block %lld/%lld: %zu input sites, capture %.2fs, total %.2fs\n",
        (long long)l + 1, (long long)blocks, sites.sites().size(), captureSecs,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - tb).count());
  }

  /// What no block quantized: the family methods' own format by the
  /// method, everything else by RTN.
  void finishContext(const QuantSettings &settings, QuantizeContext &ctx, bool isOwn) {
    using QM = llm::QuantMethod;
    if (isOwn && settings.method == QM::AAAC)
      aaacRemaining(ctx, settings.aaac);
    else if (isOwn && settings.method == QM::QTEA)
      qteaRemaining(ctx, settings.qtea);
    else if (isOwn && settings.method == QM::HBQ)
      hbqAll(ctx, settings.hbq);
    else
      ctx.rtnRemaining();
  }
};

} // namespace
} // namespace llmc::quant
