//===- KernelPlanExport.cpp - llmk IR -> the runtime's kernel plan --------===//
#include "compiler/artifact/KernelPlanExport.h"
#include "compiler/pipelines/CompilePipeline.h"
#include "compiler/artifact/ProgramExport.h"
#include "dialects/llm/IR/LlmOps.h"
#include "dialects/llmk/IR/LlmkOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "passes/lowering/Passes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using nlohmann::json;

namespace llmc {
namespace {

class PlanWriter {
public:
  FailureOr<json> run(llm::ModelOp model) {
    auto arena = model->getAttrOfType<IntegerAttr>("llmk.arena_floats_per_token");
    if (!arena)
      return model.emitOpError("has no buffer plan (run llmk-plan-buffers)"), failure();
    Block &body = model.getBodyBlock();
    if (auto ret = dyn_cast<llm::ReturnOp>(body.back()))
      logits = ret.getLogits();
    json steps = json::array();
    for (Operation &op : body) {
      if (auto w = dyn_cast<llm::WeightOp>(op)) {
        names[w.getResult()] = w.getName().str();
        continue;
      }
      if (isa<llm::ReturnOp>(op))
        continue;
      if (!op.getDialect() || op.getDialect()->getNamespace() != "llmk")
        return op.emitOpError("is not a kernel (lower the model first)"), failure();
      auto step = stepOf(op);
      if (failed(step))
        return failure();
      steps.push_back(std::move(*step));
    }
    return json{{"arena_floats_per_token", arena.getInt()}, {"steps", std::move(steps)}};
  }

private:
  FailureOr<json> slotOf(Operation *user, Value v) {
    int64_t width = cast<RankedTensorType>(v.getType()).getDimSize(1);
    if (v == logits)
      return json::array({-1, width});
    Operation *def = v.getDefiningOp();
    auto off = def ? def->getAttrOfType<IntegerAttr>("arena_offset") : IntegerAttr();
    if (!off)
      return user->emitOpError("reads a value with no arena slot"), failure();
    return json::array({off.getInt(), width});
  }

  FailureOr<json> stepOf(Operation &op) {
    json s;
    s["kernel"] = op.getName().stripDialect().str();
    json in = json::array();
    json weights = json::array();
    json attrs = json::object();
    auto addIn = [&](Value v) -> LogicalResult {
      auto slot = slotOf(&op, v);
      if (failed(slot))
        return failure();
      in.push_back(*slot);
      return success();
    };
    auto addWeight = [&](Value v) -> LogicalResult {
      auto it = names.find(v);
      if (it == names.end())
        return op.emitOpError("weight operand does not come from an llm.weight");
      weights.push_back(it->second);
      return success();
    };
    auto addNorm = [&](Value norm, std::optional<APFloat> eps) -> LogicalResult {
      if (!norm)
        return success();
      auto it = names.find(norm);
      if (it == names.end())
        return op.emitOpError("norm operand does not come from an llm.weight");
      s["norm"] = it->second;
      attrs["eps"] = eps ? eps->convertToDouble() : 1e-5;
      return success();
    };
    LogicalResult ok =
        llvm::TypeSwitch<Operation *, LogicalResult>(&op)
            .Case([&](llmk::EmbedOp e) { return addWeight(e.getTable()); })
            .Case([&](llmk::NormMatmulOp m) -> LogicalResult {
              if (failed(addIn(m.getX())) || failed(addNorm(m.getNorm(), m.getEps())))
                return failure();
              for (Value w : m.getWeights())
                if (failed(addWeight(w)))
                  return failure();
              return success();
            })
            .Case([&](llmk::NormGatedMatmulOp m) -> LogicalResult {
              attrs["activation"] = llm::stringifyActivation(m.getActivation()).str();
              if (failed(addIn(m.getX())) || failed(addNorm(m.getNorm(), m.getEps())) ||
                  failed(addWeight(m.getGate())) || failed(addWeight(m.getUp())))
                return failure();
              return success();
            })
            .Case([&](llmk::MatmulAddOp m) -> LogicalResult {
              if (failed(addIn(m.getX())) || failed(addIn(m.getResidual())) ||
                  failed(addWeight(m.getWeight())))
                return failure();
              return success();
            })
            .Case([&](llmk::NormMoeOp m) -> LogicalResult {
              attrs["num_experts"] = cast<RankedTensorType>(m.getRouter().getType()).getDimSize(0);
              attrs["top_k"] = m.getTopK();
              attrs["activation"] = llm::stringifyActivation(m.getActivation()).str();
              attrs["renormalize"] = m.getRenormalize();
              attrs["gating"] = llm::stringifyMoEGating(m.getGating()).str();
              attrs["energy_threshold"] = m.getEnergyThreshold().convertToDouble();
              if (auto nu = m.getExpertEnergyAttr())
                attrs["expert_energy"] = std::vector<float>(nu.asArrayRef().begin(),
                                                            nu.asArrayRef().end());
              if (failed(addIn(m.getX())) || (m.getResidual() && failed(addIn(m.getResidual()))) ||
                  failed(addNorm(m.getNorm(), m.getEps())))
                return failure();
              for (Value w : {m.getRouter(), m.getGate(), m.getUp(), m.getDown()})
                if (failed(addWeight(w)))
                  return failure();
              return success();
            })
            .Case([&](llmk::RopeKvAppendOp r) -> LogicalResult {
              for (const char *k : {"layer", "num_heads", "num_kv_heads", "head_dim", "rope_theta"})
                attrs[k] = attrToJson(r->getAttr(k));
              attrs["rope_style"] = llm::stringifyRopeStyle(r.getRopeStyle()).str();
              return addIn(r.getQkv());
            })
            .Case([&](llmk::AttendOp a) -> LogicalResult {
              for (const char *k : {"layer", "num_heads", "num_kv_heads", "head_dim"})
                attrs[k] = attrToJson(a->getAttr(k));
              attrs["causal"] = a.getCausal();
              if (a.getKvPolicy())
                attrs["kv_policy"] = attrToJson(*a.getKvPolicy());
              return addIn(a.getQ());
            })
            .Case([&](llmk::RMSNormOp n) -> LogicalResult {
              if (failed(addIn(n.getX())) || failed(addNorm(n.getWeight(), n.getEps())))
                return failure();
              return success();
            })
            .Case([&](llmk::AddOp a) -> LogicalResult {
              if (failed(addIn(a.getLhs())) || failed(addIn(a.getRhs())))
                return failure();
              return success();
            })
            .Default([&](Operation *o) -> LogicalResult {
              return o->emitOpError("has no runtime kernel");
            });
    if (failed(ok))
      return failure();
    // The kernel decision of llmk-select-kernels, as the runtime reads it.
    if (auto layouts = op.getAttrOfType<ArrayAttr>("layouts")) {
      json l = json::array();
      for (Attribute a : layouts)
        l.push_back(llmk::stringifyWeightLayout(cast<llmk::WeightLayoutAttr>(a).getValue()).str());
      s["layouts"] = std::move(l);
    }
    if (auto p = op.getAttrOfType<llmk::ActivationPrecisionAttr>("activations"))
      s["activations"] = llmk::stringifyActivationPrecision(p.getValue()).str();
    auto out = slotOf(&op, op.getResult(0));
    if (failed(out))
      return failure();
    if (!in.empty())
      s["in"] = std::move(in);
    s["out"] = std::move(*out);
    if (!weights.empty())
      s["weights"] = std::move(weights);
    if (!attrs.empty())
      s["attrs"] = std::move(attrs);
    return s;
  }

  Value logits;
  llvm::DenseMap<Value, std::string> names;
};

} // namespace

json buildKernelPlan(ModuleOp module, const PipelineInstruments &instruments, std::string &why,
                     OwningOpRef<ModuleOp> *lowered) {
  OwningOpRef<ModuleOp> clone = module.clone();
  std::string diag;
  ScopedDiagnosticHandler capture(module.getContext(), [&](Diagnostic &d) {
    if (diag.empty())
      diag = d.str();
    return success();
  });
  std::unique_ptr<PassManager> pm =
      makeCompilePassManager(*module.getContext(), CompilePhase::Lower, instruments);
  addLoweringPipeline(*pm);
  if (failed(pm->run(*clone))) {
    why = diag.empty() ? "kernel lowering failed" : diag;
    return nullptr;
  }
  auto models = llvm::to_vector(clone->getOps<llm::ModelOp>());
  if (models.size() != 1) {
    why = "expected one llm.model";
    return nullptr;
  }
  auto plan = PlanWriter().run(models.front());
  if (failed(plan)) {
    why = diag.empty() ? "kernel plan export failed" : diag;
    return nullptr;
  }
  if (lowered)
    *lowered = std::move(clone);
  return std::move(*plan);
}

} // namespace llmc
