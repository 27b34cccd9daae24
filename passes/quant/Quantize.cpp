//===- Quantize.cpp - llm-quantize: RTN, GPTQ and AWQ into gq formats -----===//
// Option checking and target selection (everything fails before any weight
// is rewritten), then: rtn rounds every target; gptq/awq walk the blocks in
// order, capturing block l's linear inputs with blocks < l already
// quantized, quantizing block l, and finally RTN for what no block reads.
//===----------------------------------------------------------------------===//
#include "passes/quant/Calibration.h"
#include "passes/quant/CalibrationSites.h"
#include "passes/quant/Passes.h"
#include "passes/quant/QuantizeContext.h"
#include "compiler/weights/WeightTypes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/GlobPattern.h"
#include "llvm/Support/raw_ostream.h"
#include <chrono>

using namespace mlir;

namespace llmc::quant {
#define GEN_PASS_DEF_QUANTIZEPASS
#include "passes/quant/Passes.h.inc"

namespace {

struct QuantizePass final : impl::QuantizePassBase<QuantizePass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto fail = [&](const Twine &msg) {
      module.emitError() << "llm-quantize: " << msg;
      signalPassFailure();
    };
    const std::string m = method;
    if (m != "rtn" && m != "gptq" && m != "awq")
      return fail("unknown method '" + m + "' (expected rtn, gptq or awq)");
    GridSpec spec{int(bits), bool(sym), int64_t(group)};
    DType format;
    try {
      format = spec.dtype();
    } catch (const std::exception &e) {
      return fail(Twine("bits=") + Twine(int64_t(bits)) + " group=" + Twine(int64_t(group)) +
                  ": " + e.what());
    }
    if (calibTokens <= 0 || calibSeq <= 0 || awqSamples <= 0)
      return fail("calib-tokens, calib-seq and awq-samples must be positive");
    if (!(damp > 0))
      return fail("damp must be positive");
    SmallVector<llvm::GlobPattern> patterns;
    for (const std::string &s : skip) {
      auto p = llvm::GlobPattern::create(s);
      if (!p)
        return fail("bad skip pattern '" + s + "'");
      patterns.push_back(std::move(*p));
    }

    // Targets: matrix weights not skipped and not already in the format.
    std::set<std::string> targets;
    SmallVector<llm::WeightOp> retypeOnly;
    WalkResult walk = module.walk([&](llm::WeightOp w) {
      auto type = cast<RankedTensorType>(w.getType());
      if (type.getRank() < 2 ||
          llvm::any_of(patterns, [&](auto &p) { return p.match(w.getName()); }) ||
          dtypeOfElementType(type.getElementType()) == format)
        return WalkResult::advance();
      int64_t cols = type.getShape().back();
      if (cols % spec.group != 0) {
        w.emitError() << "llm-quantize: weight '" << w.getName() << "' has rows of " << cols
                      << " weights, not a multiple of the group size " << spec.group;
        return WalkResult::interrupt();
      }
      targets.insert(w.getName().str());
      retypeOnly.push_back(w);
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return signalPassFailure();

    WeightStore *store = WeightStore::active();
    if (!store) {
      if (m != "rtn")
        return fail("method=" + m +
                    " needs weights and calibration data: run it through llmc compile "
                    "(under llmc-opt only method=rtn can run, retyping weights)");
      for (llm::WeightOp w : retypeOnly) {
        auto type = cast<RankedTensorType>(w.getType());
        w.getResult().setType(
            RankedTensorType::get(type.getShape(), weightElementType(&getContext(), format)));
      }
      return;
    }

    auto t0 = std::chrono::steady_clock::now();
    try {
      CalibrationData data;
      if (m != "rtn")
        data = loadCalibration(*store, calib, calibTokens, calibSeq);
      QuantizeContext ctx(module, *store, spec, std::move(targets), data.tokens);
      if (m != "rtn") {
        llvm::errs() << llvm::format("[llmc] llm-quantize %s: %lld calibration tokens from %s "
                                     "(%zu sequences)\n",
                                     m.c_str(), (long long)data.tokens, data.path.c_str(),
                                     data.sequences.size());
        const int64_t blocks = countBlocks(module);
        for (int64_t l = 0; l < blocks; ++l) {
          auto tb = std::chrono::steady_clock::now();
          SiteCollector sites(/*wantHessian=*/m == "gptq", m == "awq" ? int64_t(awqSamples) : 0);
          captureBlock(module, *store, data, l, [&](const LinearInput &in) { sites(in); });
          double capture =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - tb).count();
          if (m == "gptq")
            gptqBlock(ctx, sites.sites(), actOrder, damp);
          else
            awqBlock(ctx, sites.sites(), l);
          llvm::errs() << llvm::format(
              "[llmc] block %lld/%lld: %zu input sites, capture %.2fs, total %.2fs\n",
              (long long)l + 1, (long long)blocks, sites.sites().size(), capture,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - tb).count());
        }
      }
      ctx.rtnRemaining();
      ctx.summarize(m, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    } catch (const std::exception &e) {
      return fail(Twine("method=") + m + ": " + e.what());
    }
  }
};

} // namespace
} // namespace llmc::quant
