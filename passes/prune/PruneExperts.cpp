//===- PruneExperts.cpp - llm-prune-experts: rank experts, remove some ---===//
// Checks every option against the module's MoE layers, runs the model once
// on calibration text for each MoE layer's input rows, ranks each layer's
// experts (compiler/prune/ExpertScores.h), shares the kept count among
// layers (uniform or water-filling), reports, and slices every MoE layer's
// router rows and stacked expert slabs down to the kept experts.
//===----------------------------------------------------------------------===//
#include "compiler/prune/ExpertScores.h"
#include "dialects/llm/IR/LlmOps.h"
#include "llmc/dtype.h"
#include "llmc/ir_enums.h"
#include "passes/prune/MoeWeights.h"
#include "passes/prune/Passes.h"
#include "mlir/IR/Builders.h"
#include "llvm/Support/Format.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

using namespace mlir;

namespace llmc::prune {
#define GEN_PASS_DEF_PRUNEEXPERTSPASS
#include "passes/prune/Passes.h.inc"

namespace {

struct LayerPlan {
  llm::MoEOp op;
  int64_t block = 0, experts = 0, topK = 0, keep = 0;
  Ranking ranking;
  std::vector<double> change, cost, nu, beta;
  std::vector<int64_t> count, guarded, kept;
  double seconds = 0, runShare = 0;
  std::shared_ptr<RoutedStats> stats; // rescale: the Gram the weights come from
};

class PruneExpertsPass : public impl::PruneExpertsPassBase<PruneExpertsPass> {
public:
  using Base::Base;

  void runOnOperation() override {
    llm::ModelOp model = modelOf(getOperation());
    if (!model) {
      (void)fail("the module has no llm.model");
      return;
    }
    std::vector<LayerPlan> plans;
    model.walk([&](llm::MoEOp m) {
      LayerPlan p;
      p.op = m;
      auto layer = m->getParentOfType<llm::LayerOp>();
      p.block = layer ? int64_t(layer.getIndex()) : -1;
      p.experts = cast<RankedTensorType>(m.getRouter().getType()).getShape()[0];
      p.topK = m.getTopK();
      plans.push_back(std::move(p));
    });
    if (failed(checkOptions(plans)))
      return;
    CalibrationUse use;
    try {
      WeightStore store(getOperation());
      if (!store.hasData()) {
        (void)fail("needs the weights in the IR (llmc compile)");
        return;
      }
      checkFormats(store, plans);
      const std::vector<RowMatrix> inputs =
          captureFfnInputs(getOperation(), store, calib, calibTokens, calibSeq, use);
      for (LayerPlan &p : plans)
        rank(store, p, inputs);
      allocate(plans);
      for (LayerPlan &p : plans)
        finish(store, p, inputs);
      printChoice(plans, use);
      if (!report.empty() && failed(writeReport(plans, use)))
        return;
      if (!dryRun) {
        int64_t most = 0;
        for (LayerPlan &p : plans) {
          rewrite(store, p);
          most = std::max(most, p.keep);
        }
        Builder b(model.getContext());
        NamedAttrList config(model.getConfig());
        config.set("num_experts", b.getI64IntegerAttr(most)); // the widest layer's
        model.setConfigAttr(config.getDictionary(model.getContext()));
      }
    } catch (const std::exception &e) {
      (void)fail(e.what());
    }
  }

private:
  llm::ExpertPruneMethod method_ = llm::ExpertPruneMethod::OMP;
  llm::ExpertAllocation allocation_ = llm::ExpertAllocation::Uniform;

  LogicalResult fail(const Twine &msg) {
    getOperation().emitError() << "llm-prune-experts: " << msg;
    signalPassFailure();
    return failure();
  }

  LogicalResult checkOptions(const std::vector<LayerPlan> &plans) {
    if (method.empty())
      return fail("option 'method' is required (one of omp, frequency, norm or greedy)");
    auto m = llm::symbolizeExpertPruneMethod(method);
    if (!m)
      return fail("unknown method '" + method + "' (option 'method': one of omp, frequency, norm "
                  "or greedy)");
    method_ = *m;
    auto a = llm::symbolizeExpertAllocation(allocation);
    if (!a)
      return fail("unknown allocation '" + allocation + "' (uniform or waterfill)");
    allocation_ = *a;
    if (!(ratio > 0.0 && ratio < 1.0))
      return fail("ratio must be in (0, 1)");
    if (allocation_ == llm::ExpertAllocation::Waterfill && method_ != llm::ExpertPruneMethod::OMP &&
        method_ != llm::ExpertPruneMethod::Greedy)
      return fail("allocation=waterfill needs an error curve: method omp or greedy");
    if (!(lambda >= 0.0))
      return fail("lambda must be >= 0");
    if (!(adaptiveEnergy >= 0.0 && adaptiveEnergy <= 1.0))
      return fail("adaptive-energy must be in [0, 1] (0: off)");
    if (!(protect >= 0.0))
      return fail("protect must be >= 0 (0: off)");
    if (rescale && method_ != llm::ExpertPruneMethod::OMP)
      return fail("rescale=true goes with method=omp (its least-squares weights)");
    if (calibTokens < 16 || calibSeq < 2)
      return fail("calib-tokens must be >= 16 and calib-seq >= 2");
    if (plans.empty())
      return fail("the model has no llm.moe layer (llm-moefy makes one from a dense MLP)");
    int64_t total = 0, floor = 0;
    for (const LayerPlan &p : plans) {
      if (p.block < 0)
        return fail("an llm.moe outside any llm.layer");
      total += p.experts;
      floor += p.topK;
    }
    const int64_t budget = keepBudget(plans);
    if (budget >= total)
      return fail("ratio " + std::to_string(ratio.getValue()) + " removes no expert of " +
                  Twine(total));
    if (budget < floor)
      return fail("ratio " + std::to_string(ratio.getValue()) + " keeps " + Twine(budget) +
                  " experts, fewer than the layers' top k (" + Twine(floor) + ")");
    if (!report.empty() && !std::ofstream(report.getValue(), std::ios::app))
      return fail("cannot write report '" + report + "'");
    return success();
  }

  int64_t keepBudget(const std::vector<LayerPlan> &plans) const {
    int64_t total = 0;
    for (const LayerPlan &p : plans)
      total += p.experts;
    return int64_t(std::llround((1.0 - ratio) * double(total)));
  }

  static void checkFormats(const WeightStore &store, std::vector<LayerPlan> &plans) {
    for (LayerPlan &p : plans)
      for (Value v : {p.op.getRouter(), p.op.getGate(), p.op.getUp(), p.op.getDown()}) {
        const WeightStore::Entry *e = store.find(nameOfWeight(v));
        if (!e || !e->data)
          throw std::runtime_error("block " + std::to_string(p.block) +
                                   ": an MoE weight has no data in the IR (llmc compile)");
        if (needsAux(e->dtype))
          throw std::runtime_error("'" + nameOfWeight(v) + "' is " + std::string(dtypeName(e->dtype)) +
                                   " (side data per expert): prune experts before quantizing");
      }
  }

  void rank(const WeightStore &store, LayerPlan &p, const std::vector<RowMatrix> &inputs) {
    if (p.block >= int64_t(inputs.size()) || inputs[size_t(p.block)].rows() == 0)
      throw std::runtime_error("no calibration rows reached the MoE of block " +
                               std::to_string(p.block));
    const RowMatrix &x = inputs[size_t(p.block)];
    const auto t0 = std::chrono::steady_clock::now();
    const MoeLayer m = readMoe(store, p.op);
    const Routes routes = route(m, x);
    const RoutedStats s = routedStats(m, x, routes);
    p.count = s.count;
    p.nu = s.meanNorm;
    switch (method_) {
    case llm::ExpertPruneMethod::Frequency:
      p.ranking = rankByScore(std::vector<double>(s.count.begin(), s.count.end()));
      break;
    case llm::ExpertPruneMethod::Norm:
      p.ranking = rankByScore(s.meanNorm);
      break;
    case llm::ExpertPruneMethod::OMP:
      p.ranking = ompRanking(s);
      break;
    case llm::ExpertPruneMethod::Greedy: {
      std::vector<RowMatrix> dense;
      for (int64_t e = 0; e < m.experts(); ++e)
        dense.push_back(expertOutput(m, e, x));
      p.ranking = greedyRanking(m, x, dense);
      break;
    }
    }
    p.guarded = protectOutliers(p.ranking, s.maxAbs, protect);
    p.change = routingChange(p.ranking, routes, p.experts);
    if (!p.ranking.err.empty()) {
      p.cost.resize(p.ranking.err.size());
      for (size_t k = 0; k < p.cost.size(); ++k)
        p.cost[k] = p.ranking.err[k] + lambda * p.change[k];
    }
    p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rescale) // the weights depend on the final keep count: see finish()
      p.stats = std::make_shared<RoutedStats>(s);
  }

  void allocate(std::vector<LayerPlan> &plans) const {
    const int64_t budget = keepBudget(plans);
    if (allocation_ == llm::ExpertAllocation::Waterfill) {
      std::vector<std::vector<double>> cost;
      std::vector<int64_t> floor;
      for (const LayerPlan &p : plans) {
        cost.push_back(p.cost);
        floor.push_back(std::max<int64_t>(p.topK, int64_t(p.guarded.size())));
      }
      const std::vector<int64_t> keep = waterfill(cost, floor, budget);
      for (size_t l = 0; l < plans.size(); ++l)
        plans[l].keep = keep[l];
      return;
    }
    for (LayerPlan &p : plans) // uniform: the same share of every layer
      p.keep = std::clamp<int64_t>(std::llround((1.0 - ratio) * double(p.experts)), p.topK,
                                   p.experts);
  }

  void finish(const WeightStore &store, LayerPlan &p, const std::vector<RowMatrix> &inputs) {
    p.kept.assign(p.ranking.order.begin(), p.ranking.order.begin() + p.keep);
    std::sort(p.kept.begin(), p.kept.end());
    if (p.stats)
      p.beta = ompWeights(*p.stats, p.kept);
    if (adaptiveEnergy > 0.0) {
      std::vector<bool> alive(size_t(p.experts), false);
      for (int64_t e : p.kept)
        alive[size_t(e)] = true;
      const MoeLayer m = readMoe(store, p.op);
      p.runShare = adaptiveRunShare(m, inputs[size_t(p.block)], alive, p.nu, adaptiveEnergy);
    }
  }

  static std::string list(const std::vector<int64_t> &v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i)
      s += (i ? "," : "") + std::to_string(v[i]);
    return s;
  }

  void printChoice(const std::vector<LayerPlan> &plans, const CalibrationUse &use) {
    ProgressLog log(getOperation());
    int64_t total = 0, kept = 0;
    double seconds = 0;
    for (const LayerPlan &p : plans) {
      total += p.experts;
      kept += p.keep;
      seconds += p.seconds;
    }
    log << "prune-experts " << method << " (" << allocation << ") over " << plans.size()
        << " MoE layers (" << use.tokens << " calibration tokens of " << use.path << ")\n";
    for (const LayerPlan &p : plans) {
      log << "  block " << p.block << ": keep " << p.keep << " of " << p.experts << " {"
          << list(p.kept) << "}";
      if (!p.ranking.err.empty())
        log << ", error " << llvm::format("%.4f", p.ranking.err[size_t(p.keep)]);
      log << ", routing change " << llvm::format("%.3f", p.change[size_t(p.keep)]);
      if (!p.guarded.empty())
        log << ", protected {" << list(p.guarded) << "}";
      if (adaptiveEnergy > 0.0)
        log << ", " << llvm::format("%.2f", p.runShare) << " of top " << p.topK << " run";
      log << " (" << llvm::format("%.2f", p.seconds) << " s)\n";
    }
    log << "keeping " << kept << " of " << total << " experts; search " << llvm::format("%.2f", seconds)
        << " s" << (dryRun ? " (dry run: nothing changed)" : "") << "\n";
  }

  LogicalResult writeReport(const std::vector<LayerPlan> &plans, const CalibrationUse &use) {
    nlohmann::json j = {{"method", method.getValue()},
                        {"allocation", allocation.getValue()},
                        {"ratio", ratio.getValue()},
                        {"lambda", lambda.getValue()},
                        {"adaptive_energy", adaptiveEnergy.getValue()},
                        {"calibration", {{"path", use.path}, {"tokens", use.tokens},
                                         {"sequences", use.sequences}}},
                        {"layers", nlohmann::json::array()}};
    double seconds = 0;
    for (const LayerPlan &p : plans) {
      seconds += p.seconds;
      nlohmann::json l = {{"block", p.block},     {"experts", p.experts},
                          {"top_k", p.topK},      {"keep", p.keep},
                          {"kept", p.kept},       {"order", p.ranking.order},
                          {"err", p.ranking.err}, {"routing_change", p.change},
                          {"routed_tokens", p.count}, {"mean_norm", p.nu},
                          {"protected", p.guarded}, {"seconds", p.seconds}};
      if (adaptiveEnergy > 0.0)
        l["experts_run_per_token"] = p.runShare;
      if (!p.beta.empty())
        l["beta"] = p.beta;
      j["layers"].push_back(l);
    }
    j["search_seconds"] = seconds;
    std::ofstream f(report.getValue());
    f << j.dump(1) << "\n";
    if (!f)
      return fail("cannot write report '" + report + "'");
    return success();
  }

  /// Weight `v` with only the kept experts' slabs (each `rows` rows of its
  /// 2-D view); with `scale`, dequantized to f32 and slab e scaled by it.
  void slice(WeightStore &store, Value v, const LayerPlan &p, int64_t rows,
             const std::vector<double> *scale) {
    const std::string name = nameOfWeight(v);
    const WeightStore::Entry *e = store.find(name);
    const int64_t cols = e->shape.back();
    std::vector<int64_t> shape = e->shape;
    shape[0] = int64_t(p.kept.size());
    nlohmann::json info = e->info.is_object() ? e->info : nlohmann::json::object();
    info["pruned_experts"] = {{"method", method.getValue()},
                              {"kept", p.kept},
                              {"of", p.experts},
                              {"calibration_tokens", calibTokens.getValue()}};
    if (scale) {
      std::vector<float> out;
      for (int64_t x : p.kept) {
        RowMatrix m = weightRows(store, v, x * rows, rows);
        m *= float((*scale)[size_t(x)]);
        out.insert(out.end(), m.data(), m.data() + m.size());
      }
      info["rescaled"] = true;
      store.replace(name, DType::F32, shape, f32Bytes(out), info);
      return;
    }
    const int64_t rb = rowBytes(e->dtype, cols);
    const auto *base = static_cast<const uint8_t *>(e->data);
    std::vector<uint8_t> bytes;
    for (int64_t x : p.kept)
      bytes.insert(bytes.end(), base + x * rows * rb, base + (x + 1) * rows * rb);
    store.replace(name, e->dtype, shape, std::move(bytes), info);
  }

  void rewrite(WeightStore &store, LayerPlan &p) {
    llm::MoEOp op = p.op;
    const auto fshape = cast<RankedTensorType>(op.getGate().getType()).getShape();
    const auto dshape = cast<RankedTensorType>(op.getDown().getType()).getShape();
    slice(store, op.getRouter(), p, 1, nullptr);
    slice(store, op.getGate(), p, fshape[1], nullptr);
    slice(store, op.getUp(), p, fshape[1], nullptr);
    slice(store, op.getDown(), p, dshape[1], p.beta.empty() ? nullptr : &p.beta);
    Builder b(op.getContext());
    if (adaptiveEnergy > 0.0) {
      SmallVector<float> nu;
      for (int64_t x : p.kept)
        nu.push_back(float(p.nu[size_t(x)]));
      op.setExpertEnergyAttr(b.getDenseF32ArrayAttr(nu));
      op.setEnergyThresholdAttr(b.getF64FloatAttr(adaptiveEnergy));
    } else if (auto old = op.getExpertEnergyAttr()) {
      SmallVector<float> nu;
      for (int64_t x : p.kept)
        nu.push_back(old[size_t(x)]);
      op.setExpertEnergyAttr(b.getDenseF32ArrayAttr(nu));
    }
  }
};

} // namespace
} // namespace llmc::prune
