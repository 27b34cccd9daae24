//===- LowerToKernels.cpp - llm ops -> llmk kernels with fusions ----------===//
// See Passes.td (llm-lower-to-kernels) for the rewrites. Two phases over a
// flattened model: (1) the consumers that absorb neighbours (attention, mlp,
// lm_head absorb the RMSNorm before them and the residual add after them);
// (2) one-to-one rewrites of what is left (embed, add, unabsorbed norms).
//===----------------------------------------------------------------------===//
#include "dialects/llm/IR/LlmOps.h"
#include "dialects/llmk/IR/LlmkOps.h"
#include "passes/lowering/Passes.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"

using namespace mlir;

namespace llmc::lowering {
#define GEN_PASS_DEF_LOWERTOKERNELSPASS
#include "passes/lowering/Passes.h.inc"

namespace {

RankedTensorType activation(MLIRContext *ctx, int64_t width) {
  return RankedTensorType::get({ShapedType::kDynamic, width}, Float32Type::get(ctx));
}

int64_t rowsOf(Value w) { return cast<RankedTensorType>(w.getType()).getDimSize(0); }

/// Replace each llm.layer by its body (its block argument by its input, its
/// result by the yielded value).
void flattenLayers(llm::ModelOp model) {
  for (llm::LayerOp layer : llvm::to_vector(model.getBodyBlock().getOps<llm::LayerOp>())) {
    Block &body = layer.getBody().front();
    auto yield = cast<llm::YieldOp>(body.getTerminator());
    body.getArgument(0).replaceAllUsesWith(layer.getInput());
    Value out = yield.getValue();
    yield.erase();
    layer->getBlock()->getOperations().splice(Block::iterator(layer), body.getOperations());
    layer.getResult().replaceAllUsesWith(out);
    layer.erase();
  }
}

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

class Lowering {
public:
  explicit Lowering(llm::ModelOp model) : model(model), b(model.getContext()) {}

  LogicalResult run() {
    LogicalResult ok = success();
    model.walk([&](Operation *op) {
      if (isa<llm::LayerNormOp, llm::MoEOp>(op)) {
        op->emitOpError("has no kernel lowering yet (the model runs on the reference executor)");
        ok = failure();
      } else if (auto a = dyn_cast<llm::AttentionOp>(op); a && a.getBq()) {
        a.emitOpError("with q/k/v biases has no kernel lowering yet (the model runs on the "
                      "reference executor)");
        ok = failure();
      }
    });
    if (failed(ok))
      return failure();
    flattenLayers(model);
    Block &body = model.getBodyBlock();
    // Snapshot first: absorbing a residual add erases an op further on.
    SmallVector<Operation *> consumers;
    for (Operation &op : body)
      if (isa<llm::AttentionOp, llm::MLPOp, llm::LMHeadOp>(op))
        consumers.push_back(&op);
    for (Operation *op : consumers) {
      if (auto a = dyn_cast<llm::AttentionOp>(op))
        lowerAttention(a);
      else if (auto m = dyn_cast<llm::MLPOp>(op))
        lowerMlp(m);
      else
        lowerHead(cast<llm::LMHeadOp>(op));
    }
    for (Operation &op : llvm::make_early_inc_range(body)) {
      b.setInsertionPoint(&op);
      if (auto e = dyn_cast<llm::EmbedOp>(op)) {
        replace(e, llmk::EmbedOp::create(b, e.getLoc(), e.getType(), e.getTokens(), e.getTable()));
      } else if (auto a = dyn_cast<llm::AddOp>(op)) {
        replace(a, llmk::AddOp::create(b, a.getLoc(), a.getType(), a.getLhs(), a.getRhs()));
      } else if (auto n = dyn_cast<llm::RMSNormOp>(op)) {
        if (n->use_empty())
          n.erase();
        else
          replace(n, llmk::RMSNormOp::create(b, n.getLoc(), n.getType(), n.getX(),
                                             n.getWeight(), n.getEpsAttr()));
      }
    }
    return success();
  }

private:
  void replace(Operation *old, Operation *now) {
    old->replaceAllUsesWith(now);
    old->erase();
  }

  /// Drop a norm whose every consumer absorbed it.
  void dropIfDead(llm::RMSNormOp n) {
    if (n && n->use_empty())
      n.erase();
  }

  /// The projection `w` of `x` whose result `result` is written: into the
  /// residual stream when its one user is an llm.add (which disappears),
  /// else as a plain product.
  void lowerOutputProjection(Operation *producer, Value x, Value w) {
    Value result = producer->getResult(0);
    if (result.hasOneUse()) {
      if (auto add = dyn_cast<llm::AddOp>(*result.getUsers().begin())) {
        Value residual = add.getLhs() == result ? add.getRhs() : add.getLhs();
        if (residual != result) {
          b.setInsertionPoint(add);
          auto fused = llmk::MatmulAddOp::create(b, add.getLoc(), add.getType(), x, w, residual,
                                                  /*layouts=*/nullptr, /*activations=*/nullptr);
          add.replaceAllUsesWith(fused.getResult());
          add.erase();
          producer->erase();
          return;
        }
      }
    }
    b.setInsertionPoint(producer);
    auto mm = llmk::NormMatmulOp::create(b, producer->getLoc(), result.getType(), x, Value(),
                                         ValueRange{w}, FloatAttr(), nullptr, nullptr);
    replace(producer, mm);
  }

  void lowerAttention(llm::AttentionOp a) {
    MLIRContext *ctx = a.getContext();
    NormedInput in = absorbNorm(a.getX());
    const int64_t H = a.getNumHeads(), KV = a.getNumKvHeads(), hd = a.getHeadDim();
    b.setInsertionPoint(a);
    auto qkv = llmk::NormMatmulOp::create(
        b, a.getLoc(), activation(ctx, rowsOf(a.getWq()) + rowsOf(a.getWk()) + rowsOf(a.getWv())),
        in.x, in.norm, ValueRange{a.getWq(), a.getWk(), a.getWv()}, in.eps, nullptr, nullptr);
    auto q = llmk::RopeKvAppendOp::create(b, a.getLoc(), activation(ctx, H * hd), qkv,
                                          a.getLayerAttr(), a.getNumHeadsAttr(),
                                          a.getNumKvHeadsAttr(), a.getHeadDimAttr(),
                                          a.getRopeThetaAttr(), a.getRopeStyleAttr());
    auto att = llmk::AttendOp::create(b, a.getLoc(), activation(ctx, H * hd), q, a.getLayerAttr(),
                                      a.getNumHeadsAttr(), a.getNumKvHeadsAttr(),
                                      a.getHeadDimAttr(), a.getCausalAttr(), a.getKvPolicyAttr());
    (void)KV;
    lowerOutputProjection(a, att, a.getWo());
    dropIfDead(in.op);
  }

  void lowerMlp(llm::MLPOp m) {
    NormedInput in = absorbNorm(m.getX());
    b.setInsertionPoint(m);
    auto gu = llmk::NormGatedMatmulOp::create(
        b, m.getLoc(), activation(m.getContext(), rowsOf(m.getGate())), in.x, in.norm,
        m.getGate(), m.getUp(), in.eps, m.getActivationAttr(), nullptr, nullptr);
    lowerOutputProjection(m, gu, m.getDown());
    dropIfDead(in.op);
  }

  void lowerHead(llm::LMHeadOp h) {
    NormedInput in = absorbNorm(h.getX());
    b.setInsertionPoint(h);
    auto mm = llmk::NormMatmulOp::create(b, h.getLoc(), h.getType(), in.x, in.norm,
                                         ValueRange{h.getWeight()}, in.eps, nullptr, nullptr);
    replace(h, mm);
    dropIfDead(in.op);
  }

  llm::ModelOp model;
  OpBuilder b;
};

struct LowerToKernelsPass final : impl::LowerToKernelsPassBase<LowerToKernelsPass> {
  using Base::Base;
  void runOnOperation() override {
    for (llm::ModelOp model : llvm::to_vector(getOperation().getOps<llm::ModelOp>()))
      if (failed(Lowering(model).run()))
        return signalPassFailure();
  }
};

} // namespace
} // namespace llmc::lowering
