//===- SelectKernels.cpp - llmk-select-kernels ---------------------------===//
// Writes the target's kernel decision on every llmk product: the layout of
// each weight (row_major or rows8) and the precision of its activations
// (f32 or int8). The artifact writer packs rows8 weights at compile time;
// the runtime executes what these attributes say.
//===----------------------------------------------------------------------===//
#include "compiler/weights/WeightTypes.h"
#include "dialects/llm/IR/LlmOps.h"
#include "dialects/llmk/IR/LlmkOps.h"
#include "passes/lowering/Passes.h"
#include "runtime/src/kernels/dot_int8.h"
#include "runtime/src/kernels/rows8.h"

namespace llmc::lowering {
#define GEN_PASS_DEF_SELECTKERNELSPASS
#include "passes/lowering/Passes.h.inc"
} // namespace llmc::lowering

using namespace mlir;

namespace llmc::lowering {
namespace {

struct WeightFacts {
  DType dtype = DType::F32;
  int64_t rows = 0, cols = 0;
};

/// A matrix, or one expert's slab of a [experts, rows, cols] tensor (slabs
/// are packed one after another, so each must be whole groups of 8 rows).
std::optional<WeightFacts> factsOf(Value w) {
  auto type = dyn_cast<RankedTensorType>(w.getType());
  if (!type || (type.getRank() != 2 && type.getRank() != 3))
    return std::nullopt;
  std::optional<DType> dtype = dtypeOfElementType(type.getElementType());
  if (!dtype)
    return std::nullopt;
  const int64_t r = type.getRank();
  return WeightFacts{*dtype, type.getDimSize(r - 2), type.getDimSize(r - 1)};
}

class SelectKernels : public impl::SelectKernelsPassBase<SelectKernels> {
public:
  using SelectKernelsPassBase::SelectKernelsPassBase;

  void runOnOperation() override {
    if (target != "x86-64") {
      getOperation().emitError() << "llmk-select-kernels: unknown target '" << target
                                 << "' (known: x86-64)";
      return signalPassFailure();
    }
    getOperation().walk([&](Operation *op) {
      if (auto m = dyn_cast<llmk::NormMatmulOp>(op))
        decide(op, m.getWeights());
      else if (auto g = dyn_cast<llmk::NormGatedMatmulOp>(op))
        decide(op, ValueRange{g.getGate(), g.getUp()});
      else if (auto a = dyn_cast<llmk::MatmulAddOp>(op))
        decide(op, ValueRange{a.getWeight()});
      else if (auto moe = dyn_cast<llmk::NormMoeOp>(op))
        decide(op, ValueRange{moe.getRouter(), moe.getGate(), moe.getUp(), moe.getDown()},
               /*f32Leading=*/1);
    });
  }

private:
  /// The x86-64 kernels' layout for a weight.
  llmk::WeightLayout layoutOf(const std::optional<WeightFacts> &f) const {
    if (!f)
      return llmk::WeightLayout::row_major;
    const std::optional<DType> layout = kernels::rows8Layout(f->dtype);
    if (!layout || f->rows % kernels::kRows8 != 0 || f->cols % 32 != 0)
      return llmk::WeightLayout::row_major;
    // Every eight-row layout has a vector kernel in the runtime's library
    // and in generated code, so the choice does not depend on codegen
    // (Q4_K's groups are super-blocks of 256).
    if (*layout == DType::Q4_K && f->cols % 256 != 0)
      return llmk::WeightLayout::row_major;
    return llmk::WeightLayout::rows8;
  }

  /// `f32Leading`: how many leading weights always read f32 activations
  /// row-major (an MoE router: routing is a discrete choice that int8
  /// rounding of its input would flip between near-tied experts).
  void decide(Operation *op, ValueRange weights, size_t f32Leading = 0) {
    MLIRContext *ctx = op->getContext();
    SmallVector<Attribute> layouts;
    bool int8 = false;
    for (auto [i, w] : llvm::enumerate(weights)) {
      if (i < f32Leading) {
        layouts.push_back(llmk::WeightLayoutAttr::get(ctx, llmk::WeightLayout::row_major));
        continue;
      }
      std::optional<WeightFacts> f = factsOf(w);
      llmk::WeightLayout l = layoutOf(f);
      layouts.push_back(llmk::WeightLayoutAttr::get(ctx, l));
      int8 |= f && f->cols % kernels::kInt8Block == 0 &&
              (l == llmk::WeightLayout::rows8 || kernels::hasInt8Dot(f->dtype));
    }
    op->setAttr("layouts", ArrayAttr::get(ctx, layouts));
    op->setAttr("activations",
                llmk::ActivationPrecisionAttr::get(ctx, int8 ? llmk::ActivationPrecision::int8
                                                              : llmk::ActivationPrecision::f32));
  }
};

} // namespace
} // namespace llmc::lowering
