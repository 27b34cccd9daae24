//===- QuantizeRTN.cpp - Round-to-nearest weight quantization -----------===//
// The baseline every other quantizer is measured against: each group of
// `group` weights of a row gets its own scale (and, asymmetric, minimum), and
// every weight is rounded to the nearest level. Inside a compile the weight
// bytes in the store are rewritten (from whatever type they had: a quantized
// source is dequantized first); under llmc-opt only the IR types change.
//===----------------------------------------------------------------------===//
#include "passes/quant/Passes.h"
#include "compiler/weights/WeightStore.h"
#include "compiler/weights/WeightTypes.h"
#include "dialects/llm/IR/LlmOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/GlobPattern.h"
#include "llvm/Support/raw_ostream.h"
#include <chrono>
#include <cmath>

using namespace mlir;

namespace llmc::quant {
#define GEN_PASS_DEF_QUANTIZERTNPASS
#include "passes/quant/Passes.h.inc"

namespace {

/// The block format RTN writes for (bits, group, sym), if there is one.
std::optional<DType> formatFor(int64_t bits, int64_t group, bool sym) {
  if (group != 32)
    return std::nullopt;
  if (bits == 8 && sym)
    return DType::Q8_0;
  if (bits == 4)
    return sym ? DType::Q4_0 : DType::Q4_1;
  if (bits == 5)
    return sym ? DType::Q5_0 : DType::Q5_1;
  return std::nullopt;
}

/// Matrix weights feed matrix products; vectors (norms, biases) stay as they are.
bool isMatrixWeight(llm::WeightOp w) {
  return cast<RankedTensorType>(w.getType()).getRank() >= 2;
}

struct QuantizeRTNPass final : impl::QuantizeRTNPassBase<QuantizeRTNPass> {
  using Base::Base;

  void runOnOperation() override {
    std::optional<DType> format = formatFor(bits, group, sym);
    if (!format) {
      getOperation().emitError()
          << "llm-quantize-rtn: no storage format for bits=" << static_cast<int64_t>(bits)
          << " group=" << static_cast<int64_t>(group) << " sym=" << (sym ? "true" : "false")
          << " (supported: bits=8 sym, bits=4, bits=5; group=32)";
      return signalPassFailure();
    }
    SmallVector<llvm::GlobPattern> patterns;
    for (const std::string &s : skip) {
      auto p = llvm::GlobPattern::create(s);
      if (!p) {
        getOperation().emitError() << "llm-quantize-rtn: bad skip pattern '" << s << "'";
        return signalPassFailure();
      }
      patterns.push_back(std::move(*p));
    }
    auto skipped = [&](StringRef name) {
      return llvm::any_of(patterns, [&](auto &p) { return p.match(name); });
    };

    // Check every target first: a bad group must fail before any rewrite.
    SmallVector<llm::WeightOp> targets;
    int64_t block = dtypeInfo(*format).block_size;
    WalkResult walk = getOperation().walk([&](llm::WeightOp w) {
      if (!isMatrixWeight(w) || skipped(w.getName()))
        return WalkResult::advance();
      auto type = cast<RankedTensorType>(w.getType());
      if (dtypeOfElementType(type.getElementType()) == format)
        return WalkResult::advance();
      int64_t cols = type.getShape().back();
      if (cols % block != 0) {
        w.emitError() << "llm-quantize-rtn: weight '" << w.getName()
                      << "' has rows of " << cols
                      << " weights, not a multiple of the group size " << block;
        return WalkResult::interrupt();
      }
      targets.push_back(w);
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return signalPassFailure();

    std::unique_ptr<WeightStore> store;
    try {
      store = std::make_unique<WeightStore>(getOperation());
    } catch (const std::exception &e) {
      getOperation().emitError() << "llm-quantize-rtn: " << e.what();
      return signalPassFailure();
    }
    llvm::StringSet<> done;
    for (llm::WeightOp w : targets) {
      auto type = cast<RankedTensorType>(w.getType());
      if (store->hasData() && done.insert(w.getName()).second &&
          failed(rewriteBytes(*store, w, *format)))
        return signalPassFailure();
      w.getResult().setType(RankedTensorType::get(
          type.getShape(), weightElementType(&getContext(), *format)));
    }
    // Users of a retyped weight keep their (unchanged) result types; the ops'
    // verifiers only look at weight shapes, which did not change.
  }

  LogicalResult rewriteBytes(WeightStore &store, llm::WeightOp w, DType format) {
    auto t0 = std::chrono::steady_clock::now();
    const WeightStore::Entry *e = store.find(w.getName().str());
    if (!e)
      return w.emitError() << "weight '" << w.getName() << "' is not in the weight store";
    int64_t cols = e->shape.back();
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < e->shape.size(); ++i)
      rows *= e->shape[i];
    int64_t outRow = rowBytes(format, cols);
    std::vector<uint8_t> bytes(static_cast<size_t>(rows * outRow));
    std::vector<float> row(cols), back(cols);
    double err = 0, ref = 0;
    for (int64_t r = 0; r < rows; ++r) {
      WeightStore::dequantizeRows(*e, r, 1, row.data());
      uint8_t *dst = bytes.data() + r * outRow;
      quantizeRowRef(format, row.data(), dst, cols);
      dequantizeRow(format, dst, back.data(), cols);
      for (int64_t c = 0; c < cols; ++c) {
        double d = double(back[c]) - row[c];
        err += d * d;
        ref += double(row[c]) * row[c];
      }
    }
    double relErr = ref > 0 ? std::sqrt(err / ref) : 0.0;
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    nlohmann::json info = {{"method", "rtn"},
                           {"bits", (int64_t)bits},
                           {"group", (int64_t)group},
                           {"sym", (bool)sym},
                           {"from", std::string(dtypeName(e->dtype))},
                           {"rel_rmse", relErr},
                           {"calibration_tokens", 0}};
    std::vector<int64_t> shape = e->shape;
    DType from = e->dtype;
    store.replace(w.getName().str(), format, shape, std::move(bytes), info);
    ProgressLog(w) << llvm::format("[llmc] quantize %-28s %-12s rtn %s -> %s  rel.err %.4f  %.2fs\n",
                                 w.getName().str().c_str(),
                                 shapeText(shape).c_str(), std::string(dtypeName(from)).c_str(),
                                 std::string(dtypeName(format)).c_str(), relErr, secs);
    return success();
  }

  static std::string shapeText(const std::vector<int64_t> &s) {
    std::string r;
    for (size_t i = 0; i < s.size(); ++i)
      r += (i ? "x" : "") + std::to_string(s[i]);
    return r;
  }
};
} // namespace
} // namespace llmc::quant
