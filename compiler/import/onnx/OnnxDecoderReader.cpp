//===- OnnxDecoderReader.cpp - Raise an ONNX decoder graph ----------------===//
// readOnnx(): an exported decoder-only LLM (input_ids -> logits) becomes a
// SourceModel with llmc's canonical tensor names, by walking the residual
// stream from the embedding Gather to the logits:
//
//   residual r --RMSNorm--> n --MatMul(W)--> q, k, v   (+ bias: Qwen2)
//     q, k reach the scores MatMul (inputs 0 and 1), v the MatMul after
//     the Softmax (input 1); its result reaches the o_proj MatMul, whose
//     output is added to r: r' = r + o
//   r' --RMSNorm--> n' --MatMul--> gate (SiLU: g * Sigmoid(g)), up;
//     gate * up --MatMul--> down; r'' = r' + down
//   ... --RMSNorm--> MatMul(V columns) --> logits (tied when the head's
//     weight equals the embedding)
//
// RMSNorm is matched as exported (Pow 2, ReduceMean, Add eps, Sqrt, then
// Div 1 / Reciprocal and Mul, or Div; then Mul by the weight) or as the
// fused SimplifiedLayerNormalization. Casts and Identity are looked
// through. Head size and RoPE base come from the rotary inverse
// frequencies (a 1-D constant 1, b^-2/d, b^-4/d, ... feeding Cos/Sin);
// their layout must be rotate-half (the frequencies concatenated twice).
// ONNX MatMul weights are [in, out]; they are transposed to llmc's [out, in].
//
// Nothing is dropped silently: every node the logits depend on must be an
// op these patterns use, and every float constant of more than one element
// it reads must be a weight, bias or norm scale raised here or the rotary
// frequencies; anything else is an ImportError naming the node and op.
//===----------------------------------------------------------------------===//
#include "compiler/import/onnx/OnnxRaiser.h"
#include "compiler/import/hf/HfJson.h"
#include "compiler/import/hf/HfTokenizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <set>
#include <unordered_map>

namespace llmc::onnx_import {

void Raiser::index() {
  for (const OnnxNode &n : g_.nodes)
    checkNodeArity(g_, n);
  for (size_t i = 0; i < g_.nodes.size(); ++i)
    for (const auto &o : g_.nodes[i].outputs)
      if (!o.empty())
        producer_[o] = int(i);
  for (size_t i = 0; i < g_.nodes.size(); ++i) {
    const OnnxNode &n = g_.nodes[i];
    if (n.op == "Cast" || n.op == "Identity")
      continue; // aliases: their users are the users of their input
    for (size_t s = 0; s < n.inputs.size(); ++s)
      if (!n.input(s).empty())
        users_[canon(n.input(s))].push_back({int(i), int(s)});
  }
}

/// Looks through Cast and Identity (a float export's casts change nothing).
std::string Raiser::canon(std::string v) const {
  for (int guard = 0; guard < 64; ++guard) {
    auto it = producer_.find(v);
    if (it == producer_.end())
      return v;
    const OnnxNode &n = node(it->second);
    if ((n.op != "Cast" && n.op != "Identity") || n.inputs.empty())
      return v;
    v = n.input(0);
  }
  return v;
}

int Raiser::producerOf(const std::string &v) const {
  auto it = producer_.find(canon(v));
  return it == producer_.end() ? -1 : it->second;
}

const std::vector<Use> &Raiser::users(const std::string &v) const {
  static const std::vector<Use> none;
  auto it = users_.find(canon(v));
  return it == users_.end() ? none : it->second;
}

std::optional<double> Raiser::scalar(const std::string &v) const {
  const OnnxConstant *c = constant(v);
  if (!c || c->numElements() != 1)
    return std::nullopt;
  return c->at(0);
}

/// The first user of `v` with op `op` (taking `v` at `slot`, if given).
std::optional<int> Raiser::userOp(const std::string &v, const char *op, int slot) const {
  for (const Use &u : users(v))
    if (node(u.node).op == op && (slot < 0 || u.slot == slot))
      return u.node;
  return std::nullopt;
}

/// A fused norm op reading the residual at `slot` 0: onnxruntime's
/// SimplifiedLayerNormalization (RMSNorm) or ONNX's LayerNormalization
/// (opset 17+) over the last axis.
std::optional<Norm> Raiser::fusedNorm(const OnnxNode &n, int slot) const {
  if (slot != 0 || n.inputs.size() < 2 || n.outputs.empty())
    return std::nullopt;
  const double e = n.floatAttr("epsilon", 1e-5f);
  if (n.op == "SimplifiedLayerNormalization")
    return Norm{canon(n.outputs[0]), canon(n.input(1)), e};
  if (n.op != "LayerNormalization")
    return std::nullopt;
  if (const int64_t axis = n.intAttr("axis", -1); axis != -1)
    fail(n.describe() + ": LayerNormalization over axis " + std::to_string(axis) +
         "; llmc raises it over the last axis (-1) only");
  Norm out{canon(n.outputs[0]), canon(n.input(1)), e, NormKind::LayerNorm};
  if (n.inputs.size() > 2 && !n.input(2).empty())
    out.bias = canon(n.input(2));
  return out;
}

std::optional<Norm> Raiser::matchNorm(const std::string &r) const {
  if (auto fused = fusedNorms_.find(canon(r)); fused != fusedNorms_.end())
    return fused->second;
  for (const Use &u : users(r)) {
    const OnnxNode &n = node(u.node);
    if (auto f = fusedNorm(n, u.slot))
      return f;
    if (n.op == "Pow" && u.slot == 0 && scalar(n.input(1)) == 2.0)
      if (auto m = matchDecomposedNorm(r, u, NormKind::RMSNorm))
        return m;
    if (n.op == "ReduceMean" && u.slot == 0)
      if (auto m = matchDecomposedLayerNorm(r, u))
        return m;
  }
  return std::nullopt;
}

namespace {
/// Whether ReduceMean node `rm` averages over the last axis only: the
/// attribute (opsets < 18) or input 1 (18+).
bool meanOverLastAxis(const OnnxNode &rm, const OnnxConstant *axesInput) {
  auto axes = rm.intLists.find("axes");
  if (axes != rm.intLists.end() && axes->second != std::vector<int64_t>{-1})
    return false;
  if (rm.inputs.size() > 1 && !rm.input(1).empty())
    return axesInput && axesInput->numElements() == 1 && axesInput->at(0) == -1.0;
  return axes != rm.intLists.end(); // no axes: a mean over every axis
}
} // namespace

/// LayerNorm as torch exports it below opset 17: m = ReduceMean(r);
/// d = r - m; then d / sqrt(ReduceMean(d^2) + eps) [* w] [+ b].
std::optional<Norm> Raiser::matchDecomposedLayerNorm(const std::string &r,
                                                     const Use &mean) const {
  const OnnxNode &rm = node(mean.node);
  if (!meanOverLastAxis(rm, rm.inputs.size() > 1 ? constant(rm.input(1)) : nullptr))
    return std::nullopt;
  for (const Use &u : users(rm.outputs[0])) {
    const OnnxNode &sub = node(u.node);
    if (sub.op != "Sub" || u.slot != 1 || canon(sub.input(0)) != canon(r))
      continue;
    for (const Use &p : users(sub.outputs[0]))
      if (node(p.node).op == "Pow" && p.slot == 0 && scalar(node(p.node).input(1)) == 2.0)
        if (auto m = matchDecomposedNorm(sub.outputs[0], p, NormKind::LayerNorm))
          return m;
  }
  return std::nullopt;
}

std::optional<Norm> Raiser::matchDecomposedNorm(const std::string &r, const Use &pow,
                                                NormKind kind) const {
  auto mean = userOp(node(pow.node).outputs[0], "ReduceMean", 0);
  if (!mean)
    return std::nullopt;
  const OnnxNode &rm = node(*mean);
  if (!meanOverLastAxis(rm, rm.inputs.size() > 1 ? constant(rm.input(1)) : nullptr))
    return std::nullopt;
  auto add = userOp(node(*mean).outputs[0], "Add");
  if (!add)
    return std::nullopt;
  const OnnxNode &a = node(*add);
  std::optional<double> eps = scalar(a.input(0)) ? scalar(a.input(0)) : scalar(a.input(1));
  auto sq = eps ? userOp(a.outputs[0], "Sqrt") : std::nullopt;
  if (!sq)
    return std::nullopt;
  std::string y;
  const std::string s = node(*sq).outputs[0];
  if (auto div = userOp(s, "Div", 1)) {
    const OnnxNode &d = node(*div);
    if (canon(d.input(0)) == canon(r))
      y = d.outputs[0];
    else if (scalar(d.input(0)) == 1.0)
      if (auto mul = userOp(d.outputs[0], "Mul"))
        y = node(*mul).outputs[0];
  } else if (auto rec = userOp(s, "Reciprocal")) {
    if (auto mul = userOp(node(*rec).outputs[0], "Mul"))
      y = node(*mul).outputs[0];
  }
  if (y.empty())
    return std::nullopt;
  const OnnxNode &scaled = node(producerOf(y));
  if (scaled.op == "Mul" && canon(scaled.input(0)) != canon(r) &&
      canon(scaled.input(1)) != canon(r))
    return std::nullopt; // x * (1/sqrt(...)) must scale the residual itself
  for (const Use &u : users(y)) {
    const OnnxNode &w = node(u.node);
    if (w.op != "Mul")
      continue;
    const std::string other = w.input(size_t(1 - u.slot));
    const OnnxConstant *c = constant(other);
    if (c && c->isFloat() && c->shape.size() == 1) {
      Norm n{canon(w.outputs[0]), canon(other), *eps, kind};
      if (kind == NormKind::LayerNorm)
        matchShift(n);
      return n;
    }
  }
  if (kind != NormKind::LayerNorm)
    return std::nullopt;
  // torch's layer_norm without elementwise_affine (OLMo): no scale.
  Norm n{canon(y), "", *eps, kind};
  matchShift(n);
  return n;
}

void Raiser::matchShift(Norm &n) const {
  const auto &us = users(n.out);
  if (us.size() != 1 || node(us[0].node).op != "Add")
    return;
  const OnnxNode &a = node(us[0].node);
  const std::string other = a.input(size_t(1 - us[0].slot));
  const OnnxConstant *c = constant(other);
  if (c && c->isFloat() && c->shape.size() == 1) {
    n.bias = canon(other);
    n.out = canon(a.outputs[0]);
  }
}

bool Raiser::isWeightMatMul(int n) const {
  const OnnxNode &x = node(n);
  if (x.op == "MatMulNBits" && x.domain == "com.microsoft")
    return x.inputs.size() >= 3 && constant(x.input(1)) && constant(x.input(2));
  if (x.op != "MatMul" || x.inputs.size() != 2)
    return false;
  if (const OnnxConstant *c = constant(x.input(1)))
    return c->isFloat() && c->shape.size() == 2;
  const int t = producerOf(x.input(1));
  if (t >= 0 && node(t).op == "DequantizeLinear" && node(t).inputs.size() >= 2)
    return constant(node(t).input(0)) && constant(node(t).input(0))->shape.size() == 2 &&
           constant(node(t).input(1));
  return t >= 0 && node(t).op == "Transpose" && constant(node(t).input(0)) &&
         constant(node(t).input(0))->shape.size() == 2;
}

std::vector<Linear> Raiser::linearsFrom(const std::string &v) const {
  std::vector<Linear> out;
  for (const Use &u : users(v)) {
    if (u.slot != 0 || !isWeightMatMul(u.node))
      continue;
    const OnnxNode &mm = node(u.node);
    Linear l;
    l.node = u.node;
    const OnnxConstant *w = constant(mm.input(1));
    if (mm.op == "MatMulNBits") { // [N, blocks, bytes] codes: dequantized by addLinear
      l.weight = canon(mm.input(1));
      l.nbits = true;
      l.in = mm.intAttr("K", 0);
      l.outDim = mm.intAttr("N", 0);
      if (mm.inputs.size() > 5 && !mm.input(5).empty())
        l.bias = canon(mm.input(5));
    } else if (const int q = producerOf(mm.input(1));
               !w && q >= 0 && node(q).op == "DequantizeLinear") {
      l.dq = q;
      l.weight = canon(node(q).input(0));
      l.in = constant(l.weight)->shape[0];
      l.outDim = constant(l.weight)->shape[1];
    } else if (w) {
      l.weight = canon(mm.input(1));
      l.in = w->shape[0];
      l.outDim = w->shape[1];
    } else { // MatMul(x, Transpose(W [out, in]))
      const OnnxNode &t = node(producerOf(mm.input(1)));
      auto perm = t.intLists.find("perm");
      if (perm != t.intLists.end() && perm->second != std::vector<int64_t>{1, 0})
        continue;
      l.weight = canon(t.input(0));
      l.transposed = true;
      l.in = constant(l.weight)->shape[1];
      l.outDim = constant(l.weight)->shape[0];
    }
    l.out = canon(mm.outputs[0]);
    for (const Use &b : users(l.out)) {
      const OnnxNode &add = node(b.node);
      const OnnxConstant *c = add.op == "Add" ? constant(add.input(size_t(1 - b.slot))) : nullptr;
      if (c && c->isFloat() && c->shape == std::vector<int64_t>{l.outDim}) {
        l.bias = canon(add.input(size_t(1 - b.slot)));
        l.out = canon(add.outputs[0]);
      }
    }
    out.push_back(l);
  }
  return out;
}

/// Visits every use data from `from` flows into, once per node, not through
/// Shape (whose output is metadata). `visit` returns Flow::Stop to go no
/// further past that node, Flow::Done to end the walk.
void Raiser::walkForward(const std::string &from,
                         const std::function<Flow(const Use &)> &visit) const {
  std::set<int> seen;
  std::vector<std::string> todo{canon(from)};
  while (!todo.empty()) {
    const std::string x = todo.back();
    todo.pop_back();
    for (const Use &u : users(x)) {
      if (node(u.node).op == "Shape" || !seen.insert(u.node).second)
        continue;
      const Flow f = visit(u);
      if (f == Flow::Done)
        return;
      if (f == Flow::Continue)
        for (const auto &o : node(u.node).outputs)
          todo.push_back(canon(o));
    }
  }
}

std::vector<Use> Raiser::matmulsReached(const std::string &v, bool weights) const {
  std::vector<Use> hits;
  walkForward(v, [&](const Use &u) {
    const std::string &op = node(u.node).op;
    if (op != "MatMul" && op != "MatMulNBits")
      return Flow::Continue;
    if (isWeightMatMul(u.node) == weights)
      hits.push_back(u);
    return Flow::Stop;
  });
  return hits;
}

/// Whether data flows from `from` into node `target` (not through Shape).
bool Raiser::reaches(const std::string &from, int target) const {
  bool found = false;
  walkForward(from, [&](const Use &u) {
    found = u.node == target;
    return found ? Flow::Done : Flow::Continue;
  });
  return found;
}

/// The Add of residual `r` and `branch`; its output, canonical.
std::string Raiser::residualAdd(const std::string &r, const std::string &branch) {
  for (const Use &u : users(r)) {
    const OnnxNode &n = node(u.node);
    if (n.op == "Add" && canon(n.input(size_t(1 - u.slot))) == canon(branch))
      return canon(n.outputs[0]);
    const bool simplified = n.op == "SkipSimplifiedLayerNormalization";
    if ((simplified || n.op == "SkipLayerNormalization") && u.slot < 2 &&
        n.inputs.size() >= 3 && canon(n.input(size_t(1 - u.slot))) == canon(branch)) {
      // Inputs: input, skip, gamma, [beta: SkipLayerNormalization only], [bias].
      const size_t biasSlot = simplified ? 3 : 4;
      if (n.inputs.size() > biasSlot && !n.input(biasSlot).empty())
        fail(n.describe() + ": a skip-norm bias is not raised");
      // The sum is output 3; the last norm of a model may not expose it.
      const std::string sum = n.outputs.size() > 3 && !n.outputs[3].empty()
                                  ? canon(n.outputs[3])
                                  : "#sum of " + n.name;
      Norm fused{canon(n.outputs[0]), canon(n.input(2)), n.floatAttr("epsilon", 1e-5f),
                 simplified ? NormKind::RMSNorm : NormKind::LayerNorm};
      if (!simplified && n.inputs.size() > 3 && !n.input(3).empty())
        fused.bias = canon(n.input(3));
      fusedNorms_[sum] = fused;
      return sum;
    }
  }
  return {};
}

bool Raiser::isGraphOutput(const std::string &v) const {
  return std::any_of(g_.outputs.begin(), g_.outputs.end(),
                     [&](const std::string &o) { return canon(o) == canon(v); });
}

/// The Gather of token ids (a graph input) from a 2-D float constant.
int Raiser::embeddingGather() const {
  for (size_t i = 0; i < g_.nodes.size(); ++i) {
    const OnnxNode &n = g_.nodes[i];
    if (n.op != "Gather" || n.inputs.size() != 2)
      continue;
    const OnnxConstant *table = constant(n.input(0));
    const std::string ids = canon(n.input(1));
    if (table && table->isFloat() && table->shape.size() == 2 &&
        std::find(g_.inputs.begin(), g_.inputs.end(), ids) != g_.inputs.end())
      return int(i);
  }
  fail("no embedding (a Gather of a graph input's token ids from a 2-D float table)");
}

void Raiser::fillConfig(int64_t layers) {
  ModelConfig &c = m_.config;
  const OnnxConstant &emb = *constant(embedding_);
  c.architecture = attentionBias_ ? "qwen2" : experts_ > 0 ? "mixtral" : "llama";
  c.num_experts = experts_;
  c.num_experts_per_token = expertsPerToken_;
  c.vocab_size = emb.shape[0];
  c.hidden_size = emb.shape[1];
  c.intermediate_size = ffnDim_;
  c.num_layers = layers;
  if (headDim_ <= 0 || qDim_ % headDim_ || kvDim_ % headDim_)
    fail("q (" + std::to_string(qDim_) + " columns) and k (" + std::to_string(kvDim_) +
         ") are not whole heads of the rotary head size " + std::to_string(headDim_));
  c.head_dim = headDim_;
  c.num_heads = qDim_ / headDim_;
  c.num_kv_heads = kvDim_ / headDim_;
  c.rope_theta = ropeBase_;
  c.rope_style = ropeStyle_.value_or(RopeStyle::Half);
  c.norm_eps = normEps_.value_or(1e-5);
  c.norm = normKind_.value_or(NormKind::RMSNorm);
  c.activation = activation_.value_or(Activation::SiLU);
  c.attention_bias = attentionBias_;
}

/// The inputs a serving export adds (optimum's with-past layout), which
/// llmc's runtime makes redundant: it keeps its own KV cache (past empty),
/// attends to every earlier position (attention_mask all ones) and counts
/// positions from 0 (position_ids 0..n-1). The raised model computes what
/// the graph computes for exactly those values.
bool Raiser::servingInput(const std::string &name) {
  return name == "attention_mask" || name == "position_ids" ||
         name.rfind("past_key_values.", 0) == 0 || name.rfind("past.", 0) == 0;
}

/// Every node the logits depend on is an op of the raised patterns, and
/// every float constant (more than one element) it reads was raised.
void Raiser::checkCoverage(const std::string &logits) const {
  static const std::set<std::string> kOps = {
      "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Reciprocal", "ReduceMean", "Neg", "MatMul",
      "Gather", "Cast", "Identity", "Constant", "ConstantOfShape", "Shape", "Reshape",
      "Transpose", "Unsqueeze", "Squeeze", "Concat", "Slice", "Expand", "Range", "Equal",
      "Where", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Not", "Trilu",
      "Softmax", "Sigmoid", "Erf", "Gelu", "Cos", "Sin", "Max", "Min", "IsNaN", "CumSum", "ScatterND",
      "SimplifiedLayerNormalization", "LayerNormalization", "MatMulNBits",
      // Mixtral's routing as traced: top-k, renormalisation, token selection
      "TopK", "ReduceSum", "NonZero", "Split", "Flatten", "ScatterElements", "OneHot",
      "GatherElements", "GatherND", "Tile", "DequantizeLinear",
      // onnxruntime's transformer optimizer: fused skip-norm and RoPE
      "SkipSimplifiedLayerNormalization", "SkipLayerNormalization", "RotaryEmbedding",
      // onnxruntime-genai's builder: attention as one op
      "GroupQueryAttention"};
  std::set<int> seen;
  std::vector<int> todo{producer_.at(logits)};
  while (!todo.empty()) {
    const int i = todo.back();
    todo.pop_back();
    if (!seen.insert(i).second)
      continue;
    const OnnxNode &n = node(i);
    if (!kOps.count(n.op) || (!n.domain.empty() && n.domain != "com.microsoft"))
      fail(n.describe() + " is not part of a decoder pattern llmc raises");
    for (const auto &in : n.inputs) {
      if (in.empty())
        continue;
      const OnnxConstant *c = g_.constant(in);
      if (c && c->isFloat() && c->numElements() > 1 && !claimed_.count(in))
        fail(n.describe() + " reads the constant '" + in + "' " + shapeString(c->shape) +
             ", which no raised pattern accounts for");
      if (std::find(g_.inputs.begin(), g_.inputs.end(), in) != g_.inputs.end() &&
          in != ids_ && !servingInput(in))
        fail(n.describe() + " reads the graph input '" + in + "'; llmc raises graphs whose "
             "inputs are the token ids, attention_mask, position_ids and past key/values");
      auto p = producer_.find(in);
      if (p != producer_.end())
        todo.push_back(p->second);
    }
  }
}

/// config.json beside the model gives the context length and the name, and
/// must agree with what the graph says; tokenizer.json gives the tokenizer.
void Raiser::readSideFiles() {
  const std::string dir = parentDir(g_.path), cfgPath = joinPath(dir, "config.json");
  ModelConfig &c = m_.config;
  std::string base = g_.path.substr(g_.path.find_last_of('/') == std::string::npos
                                        ? 0
                                        : g_.path.find_last_of('/') + 1);
  c.name = base.substr(0, base.rfind(".onnx"));
  if (c.name == "model") { // optimum's and our exports: the folder names the model
    const std::string d = dir == "." ? std::string() : dir;
    if (!d.empty())
      c.name = d.substr(d.find_last_of('/') == std::string::npos ? 0 : d.find_last_of('/') + 1);
  }
  nlohmann::json cfg = nlohmann::json::object();
  if (fileExists(cfgPath)) {
    cfg = hf::parseJsonFile(cfgPath);
    const std::pair<const char *, int64_t> agree[] = {
        {"vocab_size", c.vocab_size},         {"hidden_size", c.hidden_size},
        {"intermediate_size", c.intermediate_size}, {"num_hidden_layers", c.num_layers},
        {"num_attention_heads", c.num_heads}, {"num_key_value_heads", c.num_kv_heads}};
    for (const auto &[key, have] : agree)
      if (auto v = hf::optInt(cfg, key, cfgPath); v && *v != have)
        fail("the graph has " + std::string(key) + " " + std::to_string(have) + ", " + cfgPath +
             " says " + std::to_string(*v));
    // Values the graph holds only as float32 (eps, the RoPE frequencies):
    // config.json's exact number where it agrees, an error where it does not.
    const bool layerNorm = c.norm == NormKind::LayerNorm;
    const char *epsKey = layerNorm ? "layer_norm_eps" : "rms_norm_eps";
    if (auto eps = hf::optNumber(cfg, epsKey, cfgPath)) {
      if (float(*eps) != float(c.norm_eps))
        fail(std::string("the graph's ") + (layerNorm ? "LayerNorm" : "RMSNorm") +
             " epsilon is " + std::to_string(c.norm_eps) + ", " + cfgPath + " says " +
             std::to_string(*eps));
      c.norm_eps = *eps;
    }
    if (auto theta = hf::optNumber(cfg, "rope_theta", cfgPath)) {
      if (!ropeFits(ropeFreqs_, ropeTol_, *theta))
        fail("the graph's rotary frequencies give base " + std::to_string(c.rope_theta) + ", " +
             cfgPath + " says " + std::to_string(*theta));
      c.rope_theta = *theta;
    }
    // The family's name where config.json's model_type agrees with the
    // structure raised (the name is informational; the config says the rest).
    if (auto t = hf::optString(cfg, "model_type", cfgPath)) {
      const bool plain = !c.attention_bias && c.num_experts == 0;
      if (((*t == "mistral" || *t == "phi3") && plain && !layerNorm) ||
          (*t == "olmo" && plain && layerNorm))
        c.architecture = *t;
    }
    c.context_length = hf::optInt(cfg, "max_position_embeddings", cfgPath).value_or(0);
    if (auto n = hf::optString(cfg, "_name_or_path", cfgPath); n && !n->empty())
      c.name = *n;
    m_.metadata.push_back({"onnx.config", cfgPath});
  }
  if (c.context_length <= 0 && cachePositions_ > 0) {
    c.context_length = cachePositions_;
    m_.metadata.push_back({"onnx.context_length", "the rotary caches' rows"});
  }
  if (c.context_length <= 0) {
    c.context_length = 2048;
    m_.metadata.push_back({"onnx.context_length", "2048 assumed (no config.json beside the "
                                                  "model; the graph does not say)"});
  }
  m_.tokenizer = hf::readHfTokenizer(dir, cfg, m_.metadata);
}

SourceModel Raiser::run() {
  m_.format = "onnx";
  m_.path = g_.path;
  const int gather = embeddingGather();
  embedding_ = canon(node(gather).input(0));
  ids_ = canon(node(gather).input(1));
  addConstant(embedding_, "token_embd.weight");
  std::string r = canon(node(gather).outputs[0]);
  const int64_t vocab = constant(embedding_)->shape[0];
  std::string logits;
  int64_t layer = 0;
  for (; logits.empty(); ++layer) {
    if (layer > 4096)
      fail("more than 4096 layers: the residual stream does not end in logits");
    auto n = matchNorm(r);
    std::vector<Linear> head = n ? linearsFrom(n->out) : std::vector<Linear>{};
    // The head: one projection to the vocabulary whose result is a graph
    // output (a fused qkv of vocabulary width is not one).
    if (head.size() == 1 && head[0].outDim == vocab) {
      if (isGraphOutput(head[0].out)) {
        addNorm(*n, "output_norm.weight");
        raiseHead(head[0]);
        logits = head[0].out;
        break;
      }
      if (splitFused(head[0]).empty())
        fail("the LM head's result '" + head[0].out + "' is not a graph output");
    }
    r = raiseAttention(layer, r);
    r = raiseMlp(layer, r);
  }
  readRotary();
  fillConfig(layer);
  checkCoverage(logits);
  readSideFiles();
  std::string assumed;
  for (const auto &in : g_.inputs)
    if (servingInput(in) && in.rfind("past", 0) != 0)
      assumed += (assumed.empty() ? "" : ", ") + in;
  if (std::any_of(g_.inputs.begin(), g_.inputs.end(),
                  [](const std::string &in) { return in.rfind("past", 0) == 0; }))
    assumed += std::string(assumed.empty() ? "" : ", ") + "past key/values";
  if (!assumed.empty())
    m_.metadata.push_back({"onnx.serving_inputs", assumed + ": raised for a fresh sequence "
                                                            "(mask all ones, positions from 0, "
                                                            "no past); llmc keeps the KV cache"});
  m_.metadata.push_back({"onnx.producer", g_.producer});
  m_.metadata.push_back({"onnx.opset", std::to_string(g_.opset)});
  validateSourceModel(m_);
  return std::move(m_);
}

} // namespace llmc::onnx_import

namespace llmc {

namespace onnx_import {
SourceModel raiseOnnxDecoder(const OnnxGraph &g) {
  Raiser raiser(g);
  return raiser.run(); // every tensor copied out of the graph's constants
}
} // namespace onnx_import

SourceModel readOnnx(const std::string &path) {
  return onnx_import::raiseOnnxDecoder(onnx_import::readOnnxGraph(path));
}

} // namespace llmc
