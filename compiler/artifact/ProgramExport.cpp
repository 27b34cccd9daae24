//===- ProgramExport.cpp - llm IR -> the runtime's execution plan -------===//
// The last step of a compile: every llm op becomes one ProgramNode, every
// SSA activation a value id, every llm.weight a named tensor reference. The
// runtime executes the result without MLIR. Nodes inside an llm.layer carry
// attrs.block = the layer's index (what calibration hooks select on).
//===----------------------------------------------------------------------===//
#include "compiler/artifact/ProgramExport.h"
#include "compiler/import/SourceImporter.h"
#include "dialects/llm/IR/LlmOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/TypeSwitch.h"
#include <set>

using namespace mlir;

namespace llmc {
nlohmann::json attrToJson(Attribute a) {
  if (auto b = dyn_cast<BoolAttr>(a))
    return b.getValue();
  if (auto i = dyn_cast<IntegerAttr>(a))
    return i.getInt();
  if (auto f = dyn_cast<FloatAttr>(a))
    return f.getValueAsDouble();
  if (auto s = dyn_cast<StringAttr>(a))
    return s.str();
  if (auto d = dyn_cast<DictionaryAttr>(a)) {
    nlohmann::json j = nlohmann::json::object();
    for (NamedAttribute n : d)
      j[n.getName().str()] = attrToJson(n.getValue());
    return j;
  }
  if (auto arr = dyn_cast<ArrayAttr>(a)) {
    nlohmann::json j = nlohmann::json::array();
    for (Attribute e : arr)
      j.push_back(attrToJson(e));
    return j;
  }
  return nullptr;
}

namespace {

class Exporter {
public:
  FailureOr<ExportedModel> run(ModuleOp module) {
    auto models = llvm::to_vector(module.getOps<llm::ModelOp>());
    if (models.size() != 1)
      return module.emitError() << "expected exactly one 'llm.model', found "
                                << models.size(),
             failure();
    llm::ModelOp model = models.front();
    out.config = attrToJson(model.getConfig());
    tokens = model.getTokens();
    if (failed(walkBlock(model.getBodyBlock())))
      return failure();
    return std::move(out);
  }

private:
  int idOf(Value v) {
    auto it = ids.find(v);
    if (it != ids.end())
      return it->second;
    int id = nextId++;
    ids[v] = id;
    return id;
  }

  LogicalResult walkBlock(Block &block) {
    for (Operation &op : block) {
      LogicalResult r =
          llvm::TypeSwitch<Operation *, LogicalResult>(&op)
              .Case([&](llm::WeightOp w) -> LogicalResult { return addWeight(w); })
              .Case([&](llm::LayerOp l) -> LogicalResult {
                int inId = idOf(l.getInput());
                ids[l.getBody().front().getArgument(0)] = inId;
                int64_t outer = currentBlock;
                currentBlock = int64_t(l.getIndex());
                LogicalResult inner = walkBlock(l.getBody().front());
                currentBlock = outer;
                if (failed(inner))
                  return failure();
                auto y = cast<llm::YieldOp>(l.getBody().front().getTerminator());
                int outId = idOf(y.getValue());
                ids[l.getResult()] = outId;
                return success();
              })
              .Case([&](llm::YieldOp) -> LogicalResult { return success(); })
              .Case([&](llm::ReturnOp r) -> LogicalResult {
                out.program.output = idOf(r.getLogits());
                return success();
              })
              .Case([&](llm::EmbedOp e) -> LogicalResult {
                if (e.getTokens() != tokens)
                  return e.emitOpError("must read the model's token ids");
                return node(e, "embed", {}, {{"table", e.getTable()}});
              })
              .Case([&](llm::RMSNormOp n) -> LogicalResult {
                return node(n, "rms_norm", {n.getX()}, {{"weight", n.getWeight()}},
                            {{"eps", n.getEps().convertToDouble()}});
              })
              .Case([&](llm::LayerNormOp n) -> LogicalResult {
                std::vector<std::pair<std::string, Value>> w = {
                    {"weight", n.getWeight()}};
                if (n.getBias())
                  w.push_back({"bias", n.getBias()});
                return node(n, "layer_norm", {n.getX()}, w,
                            {{"eps", n.getEps().convertToDouble()}});
              })
              .Case([&](llm::AddOp a) -> LogicalResult {
                return node(a, "add", {a.getLhs(), a.getRhs()}, {});
              })
              .Case([&](llm::AttentionOp a) -> LogicalResult {
                std::vector<std::pair<std::string, Value>> w = {
                    {"q", a.getWq()}, {"k", a.getWk()}, {"v", a.getWv()},
                    {"o", a.getWo()}};
                if (a.getBq()) {
                  w.push_back({"q_bias", a.getBq()});
                  w.push_back({"k_bias", a.getBk()});
                  w.push_back({"v_bias", a.getBv()});
                }
                nlohmann::json attrs = {
                    {"layer", a.getLayer()},
                    {"num_heads", a.getNumHeads()},
                    {"num_kv_heads", a.getNumKvHeads()},
                    {"head_dim", a.getHeadDim()},
                    {"rope_theta", a.getRopeTheta().convertToDouble()},
                    {"rope_style", llm::stringifyRopeStyle(a.getRopeStyle()).str()},
                    {"causal", a.getCausal()}};
                if (a.getKvPolicy())
                  attrs["kv_policy"] = attrToJson(*a.getKvPolicy());
                return node(a, "attention", {a.getX()}, w, attrs);
              })
              .Case([&](llm::MLPOp m) -> LogicalResult {
                return node(m, "mlp", {m.getX()},
                            {{"gate", m.getGate()}, {"up", m.getUp()},
                             {"down", m.getDown()}},
                            {{"activation", llm::stringifyActivation(m.getActivation()).str()}});
              })
              .Case([&](llm::MoEOp m) -> LogicalResult {
                int64_t e = cast<RankedTensorType>(m.getRouter().getType()).getShape()[0];
                nlohmann::json attrs = {
                    {"num_experts", e},
                    {"top_k", m.getTopK()},
                    {"activation", llm::stringifyActivation(m.getActivation()).str()},
                    {"renormalize", m.getRenormalize()},
                    {"gating", llm::stringifyMoEGating(m.getGating()).str()}};
                if (auto nu = m.getExpertEnergyAttr()) {
                  attrs["expert_energy"] = std::vector<float>(nu.asArrayRef().begin(),
                                                              nu.asArrayRef().end());
                  attrs["energy_threshold"] = m.getEnergyThreshold().convertToDouble();
                }
                return node(m, "moe", {m.getX()},
                            {{"router", m.getRouter()}, {"gate", m.getGate()},
                             {"up", m.getUp()}, {"down", m.getDown()}},
                            attrs);
              })
              .Case([&](llm::LMHeadOp h) -> LogicalResult {
                return node(h, "lm_head", {h.getX()}, {{"weight", h.getWeight()}});
              })
              .Case([&](llm::SpeculateOp sp) -> LogicalResult { return addSpeculation(sp); })
              .Default([&](Operation *o) -> LogicalResult {
                return o->emitOpError("cannot be exported to the runtime plan; "
                                      "lower it first");
              });
      if (failed(r))
        return failure();
    }
    return success();
  }

  LogicalResult addSpeculation(llm::SpeculateOp sp) {
    if (!out.speculation.is_null())
      return sp.emitOpError("is the model's second; one drafter per model");
    nlohmann::json j = {{"method", llm::stringifySpecMethod(sp.getMethod()).str()},
                        {"max_draft", sp.getMaxDraft()}};
    if (sp.getMethod() == llm::SpecMethod::Ngram)
      j["ngram"] = sp.getNgram();
    if (sp.getTreeNodes() > 0)
      j["tree_nodes"] = sp.getTreeNodes();
    if (auto skip = sp.getSkipBlocksAttr())
      j["skip_blocks"] = std::vector<int64_t>(skip.asArrayRef().begin(), skip.asArrayRef().end());
    if (sp.getHeads()) {
      auto h = weightNames.find(sp.getHeads()), b = weightNames.find(sp.getBias());
      if (h == weightNames.end() || b == weightNames.end())
        return sp.emitOpError("'heads' and 'bias' must come from 'llm.weight'");
      j["heads"] = cast<RankedTensorType>(sp.getHeads().getType()).getShape()[0];
      j["weights"] = {{"heads", h->second}, {"bias", b->second}};
      if (auto v = sp.getDraftVocabAttr())
        j["draft_vocab"] = std::vector<int32_t>(v.asArrayRef().begin(), v.asArrayRef().end());
    }
    if (auto fit = sp.getFitAttr())
      j["fit"] = attrToJson(fit);
    out.speculation = std::move(j);
    return success();
  }

  LogicalResult addWeight(llm::WeightOp w) {
    auto type = cast<RankedTensorType>(w.getType());
    auto dt = dtypeOfElementType(type.getElementType());
    if (!dt)
      return w.emitOpError("element type ")
             << type.getElementType()
             << " has no runtime storage format";
    weightNames[w.getResult()] = w.getName().str();
    if (seen.insert(w.getName().str()).second)
      out.weights.push_back({w.getName().str(), *dt,
                             std::vector<int64_t>(type.getShape().begin(),
                                                  type.getShape().end())});
    return success();
  }

  LogicalResult node(Operation *op, const std::string &kind,
                     std::vector<Value> inputs,
                     std::vector<std::pair<std::string, Value>> weights,
                     nlohmann::json attrs = nlohmann::json::object()) {
    ProgramNode n;
    n.op = kind;
    for (Value v : inputs)
      n.in.push_back(idOf(v));
    for (auto &[role, v] : weights) {
      auto it = weightNames.find(v);
      if (it == weightNames.end())
        return op->emitOpError("operand '")
               << role << "' must come from an 'llm.weight'";
      n.weights[role] = it->second;
    }
    n.attrs = std::move(attrs);
    if (currentBlock >= 0)
      n.attrs["block"] = currentBlock;
    n.out = idOf(op->getResult(0));
    out.program.nodes.push_back(std::move(n));
    return success();
  }

  ExportedModel out;
  Value tokens;
  llvm::DenseMap<Value, int> ids;
  llvm::DenseMap<Value, std::string> weightNames;
  std::set<std::string> seen;
  int nextId = 0;
  int64_t currentBlock = -1; // index of the llm.layer being walked
};
} // namespace

FailureOr<ExportedModel> exportProgram(ModuleOp module) {
  return Exporter().run(module);
}

} // namespace llmc
