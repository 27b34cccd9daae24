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

struct QuantizePass final : impl::QuantizePassBase<QuantizePass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto fail = [&](const Twine &msg) {
      module.emitError() << "llm-quantize: " << msg;
      signalPassFailure();
    };
    // The method is one of the closed set defined once in LlmEnums.td.
    using QM = llm::QuantMethod;
    const std::optional<QM> parsed = llm::symbolizeQuantMethod(method);
    if (!parsed)
      return fail("unknown method '" + method + "' (expected " +
                  std::string(spellingsQuantMethod()) + ")");
    const QM qm = *parsed;
    const std::string m = llm::stringifyQuantMethod(qm).str();
    // Methods with their own storage format; the others write grouped integers.
    const bool family = qm == QM::AAAC || qm == QM::QTEA || qm == QM::HBQ;
    const bool calibrated = qm != QM::RTN && qm != QM::HBQ;
    GridSpec spec{int(bits), bool(sym), int64_t(group)};
    DType format;
    try {
      if (qm == QM::AAAC)
        format = aaacDType(int(bits), int64_t(group));
      else if (qm == QM::QTEA)
        format = qteaDType(int64_t(group), int(qteaSalient));
      else if (qm == QM::HBQ)
        format = hbqDType(int(bits), int64_t(group));
      else
        format = spec.dtype();
    } catch (const std::exception &e) {
      return fail(Twine("method=") + m + " bits=" + Twine(int64_t(bits)) +
                  " group=" + Twine(int64_t(group)) + ": " + e.what());
    }
    if (aaacIters <= 0 || !(qteaDeadzone > 0) || !(qteaDecay >= 0) || !(qteaDamp > 0))
      return fail("aaac-iters, qtea-deadzone and qtea-damp must be positive, qtea-decay "
                  "non-negative");
    const std::string table = hbqTable;
    if (table != "mix" && table != "fp1" && table != "fp10" && table != "int")
      return fail("hbq-table must be mix, fp1, fp10 or int, not '" + table + "'");
    AaacPassOptions aaacOpts;
    aaacOpts.iters = int(aaacIters);
    QteaPassOptions qteaOpts;
    qteaOpts.deadzone = qteaDeadzone;
    qteaOpts.decay = qteaDecay;
    qteaOpts.damp = qteaDamp;
    HbqPassOptions hbqOpts;
    hbqOpts.table = table;
    if (calibTokens <= 0 || calibSeq <= 0 || awqSamples <= 0)
      return fail("calib-tokens, calib-seq and awq-samples must be positive");
    if (!(damp > 0))
      return fail("damp must be positive");
    if (!(osaqEps > 0) || !(osaqTemp > 0) || osaqMaxRank < 0 || !(osaqMinTokens >= 0))
      return fail("osaq-eps and osaq-temp must be positive, osaq-max-rank and osaq-min-tokens "
                  "non-negative");
    OsaqOptions osaqOpts;
    osaqOpts.eps = osaqEps;
    osaqOpts.temp = osaqTemp;
    osaqOpts.maxRank = osaqMaxRank;
    osaqOpts.minTokensPerInput = osaqMinTokens;
    SmallVector<llvm::GlobPattern> patterns;
    for (const std::string &s : skip) {
      auto p = llvm::GlobPattern::create(s);
      if (!p) {
        llvm::consumeError(p.takeError());
        return fail("bad skip pattern '" + s + "'");
      }
      patterns.push_back(std::move(*p));
    }
    std::vector<Override> overrides;
    for (const std::string &entry : overrideList) {
      auto o = parseOverride(entry, bool(sym), int64_t(group));
      if (!o)
        return fail(llvm::toString(o.takeError()));
      overrides.push_back(std::move(*o));
    }

    // Targets: matrix weights, by grid. The first matching override decides
    // a weight's grid (even if `skip` matches it too); otherwise skipped
    // weights stay, and the rest take the pass's grid. A weight already in
    // its grid's format is left alone.
    std::map<DType, std::pair<GridSpec, std::set<std::string>>> byFormat;
    SmallVector<std::pair<llm::WeightOp, DType>> retypeOnly;
    WalkResult walk = module.walk([&](llm::WeightOp w) {
      auto type = cast<RankedTensorType>(w.getType());
      if (type.getRank() < 2)
        return WalkResult::advance();
      const GridSpec *chosen = &spec;
      auto o = llvm::find_if(overrides, [&](const Override &o) { return o.glob.match(w.getName()); });
      if (o != overrides.end())
        chosen = &o->spec;
      else if (llvm::any_of(patterns, [&](auto &p) { return p.match(w.getName()); }))
        return WalkResult::advance();
      const DType target = chosen == &spec ? format : chosen->dtype();
      if (dtypeOfElementType(type.getElementType()) == target)
        return WalkResult::advance();
      int64_t cols = type.getShape().back();
      if (cols % chosen->group != 0) {
        w.emitError() << "llm-quantize: weight '" << w.getName() << "' has rows of " << cols
                      << " weights, not a multiple of the group size " << chosen->group
                      << (o != overrides.end() ? " (override '" + o->text + "')" : std::string());
        return WalkResult::interrupt();
      }
      auto &slot = byFormat[target];
      slot.first = *chosen;
      slot.second.insert(w.getName().str());
      retypeOnly.push_back({w, target});
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return signalPassFailure();

    std::unique_ptr<WeightStore> store;
    try {
      store = std::make_unique<WeightStore>(module);
    } catch (const std::exception &e) {
      return fail(e.what());
    }
    if (!store->hasData()) {
      if (calibrated)
        return fail("method=" + m +
                    " needs the weights in the IR (llmc import --emit-resources, or llmc "
                    "compile); on a types-only module only method=rtn and method=hbq run, "
                    "retyping weights");
      for (auto [w, t] : retypeOnly) {
        auto type = cast<RankedTensorType>(w.getType());
        w.getResult().setType(
            RankedTensorType::get(type.getShape(), weightElementType(&getContext(), t)));
      }
      return;
    }

    auto t0 = std::chrono::steady_clock::now();
    try {
      CalibrationData data;
      if (calibrated)
        data = loadCalibration(*store, calib, calibTokens, calibSeq);
      // The pass's own grid first, then each override grid.
      std::vector<std::unique_ptr<QuantizeContext>> contexts;
      QuantizeContext *own = nullptr; // the context of the method's own format
      if (auto it = byFormat.find(format); it != byFormat.end()) {
        contexts.push_back(std::make_unique<QuantizeContext>(
            module, *store, it->second.first, std::move(it->second.second), data.tokens, format));
        own = contexts.back().get();
        byFormat.erase(it);
      }
      for (auto &[t, slot] : byFormat)
        contexts.push_back(std::make_unique<QuantizeContext>(module, *store, slot.first,
                                                             std::move(slot.second), data.tokens));
      if (calibrated) {
        ProgressLog(module) << llvm::format("[llmc] llm-quantize %s: %lld calibration tokens from %s "
                                     "(%zu sequences)\n",
                                     m.c_str(), (long long)data.tokens, data.path.c_str(),
                                     data.sequences.size());
        const int64_t blocks = countBlocks(module);
        BlockCapture capture(data);
        for (int64_t l = 0; l < blocks; ++l) {
          auto tb = std::chrono::steady_clock::now();
          SiteCollector sites(/*wantHessian=*/qm == QM::GPTQ || qm == QM::OSAQ || qm == QM::AAAC ||
                                  qm == QM::QTEA,
                              qm == QM::AWQ ? int64_t(awqSamples) : 0);
          OsaqSplitCollector splits;
          capture.capture(module, *store, l, [&](const LinearInput &in) {
            sites(in);
            if (qm == QM::OSAQ)
              splits(in);
          });
          double capture =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - tb).count();
          requireExpertCoverage(module, l, sites.sites(), data.tokens);
          // Each context quantizes only its own pending weights (AWQ scales
          // a site only when all of its weights belong to one context).
          for (auto &ctx : contexts) {
            if (family) { // override grids of these methods get RTN at the end
              if (ctx.get() != own)
                continue;
              if (qm == QM::AAAC)
                aaacBlock(*ctx, sites.sites(), aaacOpts, l);
              else
                qteaBlock(*ctx, sites.sites(), qteaOpts, l);
            } else if (qm == QM::GPTQ)
              gptqBlock(*ctx, sites.sites(), actOrder, damp);
            else if (qm == QM::OSAQ)
              osaqBlock(*ctx, sites.sites(), splits, osaqOpts, actOrder, damp, l);
            else
              awqBlock(*ctx, sites.sites(), l);
          }
          ProgressLog(module) << llvm::format(
              "[llmc] block %lld/%lld: %zu input sites, capture %.2fs, total %.2fs\n",
              (long long)l + 1, (long long)blocks, sites.sites().size(), capture,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - tb).count());
        }
      }
      for (auto &ctx : contexts) {
        if (ctx.get() == own && qm == QM::AAAC)
          aaacRemaining(*ctx, aaacOpts);
        else if (ctx.get() == own && qm == QM::QTEA)
          qteaRemaining(*ctx, qteaOpts);
        else if (ctx.get() == own && qm == QM::HBQ)
          hbqAll(*ctx, hbqOpts);
        else
          ctx->rtnRemaining();
      }
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      for (auto &ctx : contexts)
        ctx->summarize(m, secs);
    } catch (const std::exception &e) {
      return fail(Twine("method=") + m + ": " + e.what());
    }
  }
};

} // namespace
} // namespace llmc::quant
