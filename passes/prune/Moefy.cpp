//===- Moefy.cpp - llm-moefy: dense MLPs cut into experts ----------------===//
// Checks the options against every llm.mlp, runs the dense model once on
// calibration text to get each MLP's input rows, groups each MLP's neurons
// into experts and fits a router (compiler/prune/Moefication.h), and
// replaces the llm.mlp by an llm.moe with unit gating over new f32 weights.
//===----------------------------------------------------------------------===//
#include "compiler/prune/Moefication.h"
#include "dialects/llm/IR/LlmOps.h"
#include "llmc/ir_enums.h"
#include "passes/prune/MoeWeights.h"
#include "passes/prune/Passes.h"
#include "mlir/IR/Builders.h"
#include "llvm/Support/Format.h"

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

using namespace mlir;

namespace llmc::prune {
#define GEN_PASS_DEF_MOEFYPASS
#include "passes/prune/Passes.h.inc"

namespace {

struct BlockResult {
  int64_t block = 0;
  double recall = 0, topkError = 0, seconds = 0;
};

/// Stacks per-expert matrices [rows, cols] into one [E, rows, cols] buffer.
std::vector<float> stacked(const std::vector<RowMatrix> &parts) {
  std::vector<float> out;
  for (const RowMatrix &p : parts)
    out.insert(out.end(), p.data(), p.data() + p.size());
  return out;
}

class MoefyPass : public impl::MoefyPassBase<MoefyPass> {
public:
  using Base::Base;

  void runOnOperation() override {
    llm::ModelOp model = modelOf(getOperation());
    if (!model) {
      (void)fail("the module has no llm.model");
      return;
    }
    SmallVector<llm::MLPOp> mlps;
    model.walk([&](llm::MLPOp m) { mlps.push_back(m); });
    if (failed(checkOptions(mlps)))
      return;
    std::vector<BlockResult> results;
    CalibrationUse use;
    try {
      WeightStore store(getOperation());
      if (!store.hasData()) {
        (void)fail("needs the weights in the IR (llmc compile)");
        return;
      }
      const std::vector<RowMatrix> inputs =
          captureFfnInputs(getOperation(), store, calib, calibTokens, calibSeq, use);
      ProgressLog log(getOperation());
      log << "moefy: " << mlps.size() << " MLPs into " << experts << " experts, top " << topK
          << " (" << use.tokens << " calibration tokens of " << use.path << ")\n";
      for (llm::MLPOp mlp : mlps) {
        const int64_t block = blockOf(mlp);
        if (block < 0 || block >= int64_t(inputs.size()) || inputs[size_t(block)].rows() == 0)
          throw std::runtime_error("no calibration rows reached the MLP of block " +
                                   std::to_string(block));
        results.push_back(convert(store, mlp, block, inputs[size_t(block)]));
        const BlockResult &r = results.back();
        log << "  block " << block << ": router recall " << llvm::format("%.3f", r.recall)
            << ", top-" << topK << " relative error " << llvm::format("%.4f", r.topkError) << " ("
            << llvm::format("%.2f", r.seconds) << " s)\n";
      }
    } catch (const std::exception &e) {
      (void)fail(e.what());
      return;
    }
    llm::ModelOp m = modelOf(getOperation());
    Builder b(m.getContext());
    NamedAttrList config(m.getConfig());
    config.set("num_experts", b.getI64IntegerAttr(experts));
    config.set("num_experts_per_token", b.getI64IntegerAttr(topK));
    m.setConfigAttr(config.getDictionary(m.getContext()));
    if (!report.empty())
      (void)writeReport(results, use);
  }

private:
  LogicalResult fail(const Twine &msg) {
    getOperation().emitError() << "llm-moefy: " << msg;
    signalPassFailure();
    return failure();
  }

  static int64_t blockOf(Operation *op) {
    auto layer = op->getParentOfType<llm::LayerOp>();
    return layer ? int64_t(layer.getIndex()) : -1;
  }

  LogicalResult checkOptions(ArrayRef<llm::MLPOp> mlps) {
    if (experts < 2)
      return fail("experts must be >= 2 (option 'experts')");
    if (topK < 1 || topK > experts)
      return fail("top-k must be in [1, " + Twine(experts) + "] (option 'top-k')");
    if (!llm::symbolizeMoefyClustering(clustering))
      return fail("unknown clustering '" + clustering + "' (coactivation or weights)");
    if (iters < 1)
      return fail("iters must be >= 1");
    if (!(ridge > 0))
      return fail("ridge must be > 0");
    if (calibTokens < 16 || calibSeq < 2)
      return fail("calib-tokens must be >= 16 and calib-seq >= 2");
    if (!report.empty() && !std::ofstream(report.getValue(), std::ios::app))
      return fail("cannot write report '" + report + "'");
    if (mlps.empty())
      return fail("the model has no dense llm.mlp to convert");
    for (llm::MLPOp m : mlps) {
      const int64_t F = cast<RankedTensorType>(m.getGate().getType()).getShape()[0];
      if (F % experts != 0)
        return fail("block " + Twine(blockOf(m)) + ": its " + Twine(F) +
                    " MLP neurons do not split into " + Twine(experts) + " equal experts");
      if (blockOf(m) < 0)
        return fail("an llm.mlp outside any llm.layer");
    }
    return success();
  }

  /// Groups block `block`'s neurons, fits its router, rewrites the IR.
  BlockResult convert(const WeightStore &store, llm::MLPOp mlp, int64_t block, const RowMatrix &x) {
    const auto t0 = std::chrono::steady_clock::now();
    const RowMatrix gate = weightMatrix(store, mlp.getGate()), up = weightMatrix(store, mlp.getUp()),
                    down = weightMatrix(store, mlp.getDown());
    const auto act = static_cast<Activation>(mlp.getActivation());
    const RowMatrix h = gatedHidden(x, gate, up, act); // [N, F]
    RowMatrix features;
    if (*llm::symbolizeMoefyClustering(clustering) == llm::MoefyClustering::Coactivation) {
      const int64_t cols = std::min<int64_t>(h.rows(), 2048), stride = h.rows() / cols;
      features.resize(h.cols(), cols);
      for (int64_t c = 0; c < cols; ++c)
        features.col(c) = h.row(c * stride).transpose().cwiseAbs();
    } else {
      features.resize(gate.rows(), gate.cols() + up.cols());
      features << gate, up;
    }
    const std::vector<int64_t> group =
        balancedClusters(features, experts, iters, uint64_t(seed) * 1000003u + uint64_t(block));
    MoeLayer layer = splitMlp(gate, up, down, group, experts, act);
    layer.topK = topK;

    // Each expert's output (from h's columns) gives the router's targets.
    const int64_t N = x.rows(), Dout = down.rows(), per = gate.rows() / experts;
    RowMatrix truth(N, int64_t(experts));
    std::vector<RowMatrix> outputs;
    for (int64_t e = 0; e < experts; ++e) {
      RowMatrix he(N, per);
      int64_t i = 0;
      for (int64_t j = 0; j < int64_t(group.size()); ++j)
        if (group[size_t(j)] == e)
          he.col(i++) = h.col(j);
      outputs.push_back(he * layer.down[size_t(e)].transpose());
      truth.col(e) = outputs.back().rowwise().norm();
    }
    layer.router = fitRouter(x, truth, ridge);
    BlockResult r;
    r.block = block;
    r.recall = topKRecall(x * layer.router.transpose(), truth, topK);
    const Routes routes = route(layer, x, {});
    RowMatrix y = RowMatrix::Zero(N, Dout), yk = RowMatrix::Zero(N, Dout);
    for (const RowMatrix &o : outputs)
      y += o;
    for (int64_t t = 0; t < N; ++t)
      for (const auto &[e, g] : routes.tokens[size_t(t)])
        yk.row(t) += outputs[size_t(e)].row(t);
    r.topkError = double((y - yk).squaredNorm()) / std::max(1e-30, double(y.squaredNorm()));
    rewrite(store, mlp, block, layer);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  }

  void rewrite(const WeightStore &store, llm::MLPOp mlp, int64_t block, const MoeLayer &layer) {
    OpBuilder b(mlp);
    const std::string p = "blk." + std::to_string(block) + ".";
    const int64_t D = layer.router.cols(), F = layer.gate[0].rows(), Dout = layer.down[0].rows();
    for (const char *n : {"ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight",
                          "ffn_down_exps.weight"})
      if (store.find(p + n))
        throw std::runtime_error("weight '" + p + n + "' already exists");
    const WeightStore::Entry *src = store.find(nameOfWeight(mlp.getGate()));
    nlohmann::json info = {{"transform", "moefy"},
                           {"experts", experts.getValue()},
                           {"top_k", topK.getValue()},
                           {"clustering", clustering.getValue()},
                           {"from", std::string(dtypeName(src->dtype))}};
    Location loc = mlp.getLoc();
    std::vector<float> router(layer.router.data(), layer.router.data() + layer.router.size());
    auto r = createF32Weight(b, loc, p + "ffn_gate_inp.weight", {experts, D}, router, info);
    auto g = createF32Weight(b, loc, p + "ffn_gate_exps.weight", {experts, F, D},
                             stacked(layer.gate), info);
    auto u = createF32Weight(b, loc, p + "ffn_up_exps.weight", {experts, F, D}, stacked(layer.up),
                             info);
    auto d = createF32Weight(b, loc, p + "ffn_down_exps.weight", {experts, Dout, F},
                             stacked(layer.down), info);
    MLIRContext *ctx = b.getContext();
    auto moe = llm::MoEOp::create(
        b, loc, mlp.getType(), mlp.getX(), r, g, u, d, b.getI64IntegerAttr(topK),
        llm::ActivationAttr::get(ctx, mlp.getActivation()), b.getBoolAttr(false),
        llm::MoEGatingAttr::get(ctx, llm::MoEGating::Unit), DenseF32ArrayAttr(),
        b.getF64FloatAttr(0.0));
    SmallVector<Operation *> dense = {mlp.getGate().getDefiningOp(), mlp.getUp().getDefiningOp(),
                                      mlp.getDown().getDefiningOp()};
    mlp.getResult().replaceAllUsesWith(moe.getResult());
    mlp.erase();
    for (Operation *w : dense)
      if (w && w->use_empty())
        w->erase();
  }

  LogicalResult writeReport(const std::vector<BlockResult> &results, const CalibrationUse &use) {
    nlohmann::json j = {{"experts", experts.getValue()},
                        {"top_k", topK.getValue()},
                        {"clustering", clustering.getValue()},
                        {"calibration", {{"path", use.path}, {"tokens", use.tokens}}},
                        {"blocks", nlohmann::json::array()}};
    for (const BlockResult &r : results)
      j["blocks"].push_back({{"block", r.block},
                             {"router_recall", r.recall},
                             {"topk_rel_error", r.topkError},
                             {"seconds", r.seconds}});
    std::ofstream f(report.getValue());
    f << j.dump(1) << "\n";
    if (!f)
      return fail("cannot write report '" + report + "'");
    return success();
  }
};

} // namespace
} // namespace llmc::prune
