//===- LowerToKernels.cpp - llm ops -> llmk kernels with fusions ----------===//
// See Passes.td (llm-lower-to-kernels) for the rewrites. Two pattern sets:
// (1) fusion patterns, applied greedily top-down: every llm.layer is inlined,
//     and the consumers that absorb neighbours (attention, mlp, lm_head take
//     the RMSNorm before them and the residual add after them) become their
//     llmk kernels;
// (2) a dialect conversion to the kernel target (llmk legal; of llm only the
//     model, its weights and its return) with one-to-one patterns for what
//     is left (embed, add, unabsorbed norms). An op neither set lowers fails
//     the conversion; ops with no kernel yet are named first.
//===----------------------------------------------------------------------===//
#include "dialects/llm/IR/LlmOps.h"
#include "dialects/llmk/IR/LlmkOps.h"
#include "passes/lowering/Passes.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/DialectConversion.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

using namespace mlir;

namespace llmc::lowering {
#define GEN_PASS_DEF_LOWERTOKERNELSPASS
#include "passes/lowering/Passes.h.inc"

namespace {

RankedTensorType activation(MLIRContext *ctx, int64_t width) {
  return RankedTensorType::get({ShapedType::kDynamic, width}, Float32Type::get(ctx));
}

int64_t rowsOf(Value w) { return cast<RankedTensorType>(w.getType()).getDimSize(0); }

/// The input of a projection and the RMSNorm it absorbs (if x comes from one).
struct NormedInput {
  Value x, norm;
  FloatAttr eps;
  llm::RMSNormOp op;
};
NormedInput absorbNorm(Value x) {
  if (auto n = x.getDefiningOp<llm::RMSNormOp>())
    return {n.getX(), n.getWeight(), n.getEpsAttr(), n};
  return {x, Value(), FloatAttr(), llm::RMSNormOp()};
}

/// Drop a norm whose every consumer absorbed it.
void dropIfDead(PatternRewriter &rewriter, llm::RMSNormOp n) {
  if (n && n->use_empty())
    rewriter.eraseOp(n);
}

/// The residual an op's result is added to, when its one user is an
/// llm.add of it and another value (that add then disappears into the op).
std::pair<llm::AddOp, Value> residualAddOf(Operation *producer) {
  Value result = producer->getResult(0);
  if (!result.hasOneUse())
    return {};
  auto add = dyn_cast<llm::AddOp>(*result.getUsers().begin());
  if (!add)
    return {};
  Value residual = add.getLhs() == result ? add.getRhs() : add.getLhs();
  if (residual == result)
    return {};
  return {add, residual};
}

/// The projection `w` of `x` replacing `producer`: into the residual stream
/// when the producer's one user is an llm.add (which disappears), else a
/// plain product.
void lowerOutputProjection(PatternRewriter &rewriter, Operation *producer, Value x, Value w) {
  if (auto [add, residual] = residualAddOf(producer); add) {
    rewriter.setInsertionPoint(add);
    auto fused = llmk::MatmulAddOp::create(rewriter, add.getLoc(), add.getType(), x, w, residual,
                                           /*layouts=*/nullptr, /*activations=*/nullptr);
    rewriter.replaceOp(add, fused.getResult());
    rewriter.eraseOp(producer);
    return;
  }
  Value result = producer->getResult(0);
  rewriter.setInsertionPoint(producer);
  auto mm = llmk::NormMatmulOp::create(rewriter, producer->getLoc(), result.getType(), x, Value(),
                                       ValueRange{w}, FloatAttr(), nullptr, nullptr);
  rewriter.replaceOp(producer, mm.getResult());
}

/// llm.layer -> its body (block argument: the layer's input; result: the
/// yielded value).
struct InlineLayer final : OpRewritePattern<llm::LayerOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(llm::LayerOp layer, PatternRewriter &rewriter) const override {
    Block &body = layer.getBody().front();
    auto yield = cast<llm::YieldOp>(body.getTerminator());
    Value out = yield.getValue();
    rewriter.inlineBlockBefore(&body, layer, ValueRange{layer.getInput()});
    rewriter.replaceOp(layer, out);
    rewriter.eraseOp(yield);
    return success();
  }
};

/// llm.attention -> norm_matmul(q|k|v) + rope_kv_append + attend + the
/// output projection.
struct FuseAttention final : OpRewritePattern<llm::AttentionOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(llm::AttentionOp a, PatternRewriter &rewriter) const override {
    if (a.getBq())
      return rewriter.notifyMatchFailure(a, "q/k/v biases have no kernel");
    MLIRContext *ctx = a.getContext();
    NormedInput in = absorbNorm(a.getX());
    const int64_t H = a.getNumHeads(), hd = a.getHeadDim();
    rewriter.setInsertionPoint(a);
    auto qkv = llmk::NormMatmulOp::create(
        rewriter, a.getLoc(),
        activation(ctx, rowsOf(a.getWq()) + rowsOf(a.getWk()) + rowsOf(a.getWv())), in.x, in.norm,
        ValueRange{a.getWq(), a.getWk(), a.getWv()}, in.eps, nullptr, nullptr);
    auto q = llmk::RopeKvAppendOp::create(rewriter, a.getLoc(), activation(ctx, H * hd), qkv,
                                          a.getLayerAttr(), a.getNumHeadsAttr(),
                                          a.getNumKvHeadsAttr(), a.getHeadDimAttr(),
                                          a.getRopeThetaAttr(), a.getRopeStyleAttr());
    auto att = llmk::AttendOp::create(rewriter, a.getLoc(), activation(ctx, H * hd), q,
                                      a.getLayerAttr(), a.getNumHeadsAttr(), a.getNumKvHeadsAttr(),
                                      a.getHeadDimAttr(), a.getCausalAttr(), a.getKvPolicyAttr());
    lowerOutputProjection(rewriter, a, att, a.getWo());
    dropIfDead(rewriter, in.op);
    return success();
  }
};

/// llm.mlp -> norm_gated_matmul(gate, up) + the down projection.
struct FuseMlp final : OpRewritePattern<llm::MLPOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(llm::MLPOp m, PatternRewriter &rewriter) const override {
    NormedInput in = absorbNorm(m.getX());
    rewriter.setInsertionPoint(m);
    auto gu = llmk::NormGatedMatmulOp::create(
        rewriter, m.getLoc(), activation(m.getContext(), rowsOf(m.getGate())), in.x, in.norm,
        m.getGate(), m.getUp(), in.eps, m.getActivationAttr(), nullptr, nullptr);
    lowerOutputProjection(rewriter, m, gu, m.getDown());
    dropIfDead(rewriter, in.op);
    return success();
  }
};

/// llm.moe -> norm_moe: the RMSNorm before it and the residual add after it
/// absorbed; the experts run only for the rows routed to them.
struct FuseMoe final : OpRewritePattern<llm::MoEOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(llm::MoEOp m, PatternRewriter &rewriter) const override {
    NormedInput in = absorbNorm(m.getX());
    auto [add, residual] = residualAddOf(m);
    Operation *replaced = add ? add.getOperation() : m.getOperation();
    rewriter.setInsertionPoint(replaced);
    auto moe = llmk::NormMoeOp::create(
        rewriter, m.getLoc(), m.getType(), in.x, in.norm, m.getRouter(), m.getGate(), m.getUp(),
        m.getDown(), residual, in.eps, m.getTopKAttr(), m.getActivationAttr(),
        m.getRenormalizeAttr(), m.getGatingAttr(), m.getExpertEnergyAttr(),
        m.getEnergyThresholdAttr(), /*layouts=*/nullptr, /*activations=*/nullptr);
    rewriter.replaceOp(replaced, moe.getResult());
    if (add)
      rewriter.eraseOp(m);
    dropIfDead(rewriter, in.op);
    return success();
  }
};

/// llm.lm_head -> norm_matmul with the final norm.
struct FuseHead final : OpRewritePattern<llm::LMHeadOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(llm::LMHeadOp h, PatternRewriter &rewriter) const override {
    NormedInput in = absorbNorm(h.getX());
    rewriter.setInsertionPoint(h);
    auto mm = llmk::NormMatmulOp::create(rewriter, h.getLoc(), h.getType(), in.x, in.norm,
                                         ValueRange{h.getWeight()}, in.eps, nullptr, nullptr);
    rewriter.replaceOp(h, mm.getResult());
    dropIfDead(rewriter, in.op);
    return success();
  }
};

struct EmbedToKernel final : OpConversionPattern<llm::EmbedOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(llm::EmbedOp e, OpAdaptor in,
                                ConversionPatternRewriter &rewriter) const override {
    rewriter.replaceOpWithNewOp<llmk::EmbedOp>(e, e.getType(), in.getTokens(), in.getTable());
    return success();
  }
};

struct AddToKernel final : OpConversionPattern<llm::AddOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(llm::AddOp a, OpAdaptor in,
                                ConversionPatternRewriter &rewriter) const override {
    rewriter.replaceOpWithNewOp<llmk::AddOp>(a, a.getType(), in.getLhs(), in.getRhs());
    return success();
  }
};

/// A norm no consumer absorbed (it has other users): its own kernel.
struct NormToKernel final : OpConversionPattern<llm::RMSNormOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(llm::RMSNormOp n, OpAdaptor in,
                                ConversionPatternRewriter &rewriter) const override {
    if (n->use_empty()) {
      rewriter.eraseOp(n);
      return success();
    }
    rewriter.replaceOpWithNewOp<llmk::RMSNormOp>(n, n.getType(), in.getX(), in.getWeight(),
                                                 n.getEpsAttr());
    return success();
  }
};

/// Ops with no kernel yet, named before any rewrite.
LogicalResult checkLowerable(llm::ModelOp model) {
  LogicalResult ok = success();
  model.walk([&](Operation *op) {
    if (isa<llm::LayerNormOp>(op)) {
      op->emitOpError("has no kernel lowering yet (the model runs on the reference executor)");
      ok = failure();
    } else if (auto a = dyn_cast<llm::AttentionOp>(op); a && a.getBq()) {
      a.emitOpError("with q/k/v biases has no kernel lowering yet (the model runs on the "
                    "reference executor)");
      ok = failure();
    }
  });
  return ok;
}

LogicalResult lowerModel(llm::ModelOp model) {
  MLIRContext *ctx = model.getContext();
  if (failed(checkLowerable(model)))
    return failure();
  // The drafter is not part of the step: the manifest's "speculation"
  // (ProgramExport, from the llm IR) carries it; the plan is the target's.
  for (llm::SpeculateOp sp : llvm::to_vector(model.getBodyBlock().getOps<llm::SpeculateOp>()))
    sp.erase();
  RewritePatternSet fusions(ctx);
  fusions.add<InlineLayer, FuseAttention, FuseMlp, FuseMoe, FuseHead>(ctx);
  GreedyRewriteConfig config;
  config.setUseTopDownTraversal(true).enableFolding(false).enableConstantCSE(false);
  config.setRegionSimplificationLevel(GreedySimplifyRegionLevel::Disabled);
  if (failed(applyPatternsGreedily(model, std::move(fusions), config)))
    return model.emitOpError("kernel fusion did not converge");

  ConversionTarget target(*ctx);
  target.addLegalDialect<llmk::LlmkDialect>();
  target.addIllegalDialect<llm::LlmDialect>();
  target.addLegalOp<llm::ModelOp, llm::WeightOp, llm::ReturnOp>();
  RewritePatternSet oneToOne(ctx);
  oneToOne.add<EmbedToKernel, AddToKernel, NormToKernel>(ctx);
  return applyPartialConversion(model, target, std::move(oneToOne));
}

struct LowerToKernelsPass final : impl::LowerToKernelsPassBase<LowerToKernelsPass> {
  using Base::Base;
  void runOnOperation() override {
    for (llm::ModelOp model : llvm::to_vector(getOperation().getOps<llm::ModelOp>()))
      if (failed(lowerModel(model)))
        return signalPassFailure();
  }
};

} // namespace
} // namespace llmc::lowering
