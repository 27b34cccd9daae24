//===- OnnxLayerReader.cpp - Raise attention, MLP, rotary and head -------===//
// The per-layer half of OnnxDecoderReader.cpp (see its header for the
// patterns): each raise* call matches one part of the residual stream,
// checks it, and adds its tensors under llmc's canonical names.
//===----------------------------------------------------------------------===//
#include "compiler/import/onnx/OnnxRaiser.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace llmc::onnx_import {

namespace {
DType dtypeOf(const OnnxConstant &c) {
  switch (c.type) {
  case OnnxType::Float: return DType::F32;
  case OnnxType::Float16: return DType::F16;
  case OnnxType::BFloat16: return DType::BF16;
  default: return DType::F32;
  }
}
} // namespace

void Raiser::addConstant(const std::string &value, const std::string &name,
                         std::vector<int64_t> shape) {
  const OnnxConstant *c = constant(value);
  if (!c || (c->type != OnnxType::Float && c->type != OnnxType::Float16 &&
             c->type != OnnxType::BFloat16))
    fail("'" + value + "' (for " + name + ") is not a float, float16 or bfloat16 constant");
  auto buf = std::make_shared<OwnedBuffer>(); // aligned, unlike a protobuf string
  buf->bytes.assign(c->data, c->data + c->nbytes);
  m_.buffers.push_back(buf);
  m_.tensors.push_back({name, dtypeOf(*c), shape.empty() ? c->shape : shape, buf->bytes.data(),
                        c->nbytes});
  claimed_.insert(canon(value));
}

void Raiser::addNorm(Norm n, const std::string &name) {
  if (!normKind_)
    normKind_ = n.kind;
  else if (*normKind_ != n.kind)
    fail(name + ": a " + std::string(spelling(n.kind)) + " in a model whose first norm is a " +
         std::string(spelling(*normKind_)) + "; llmc raises one norm kind per model");
  if (n.weight.empty()) // torch's layer_norm without a scale: a scale of ones
    addUnitScale(m_, name, constant(embedding_)->shape[1]);
  else
    addConstant(n.weight, name);
  if (!n.bias.empty()) {
    // An all-zero shift (torch's opset-17 LayerNormalization of a norm
    // without one) changes nothing: claimed, not stored, so the model is
    // the one its Hugging Face folder describes.
    const OnnxConstant *b = constant(n.bias);
    bool zero = b && b->isFloat();
    for (int64_t i = 0; zero && i < b->numElements(); ++i)
      zero = b->at(i) == 0.0;
    if (zero)
      claimed_.insert(canon(n.bias));
    else
      addConstant(n.bias, name.substr(0, name.rfind(".weight")) + ".bias");
  }
  char text[32]; // eps as the decimal the exporter was given (1e-5 stored as float32)
  std::snprintf(text, sizeof text, "%.7g", double(float(n.eps)));
  n.eps = std::strtod(text, nullptr);
  if (!normEps_)
    normEps_ = n.eps;
  else if (std::fabs(*normEps_ - n.eps) > 1e-12)
    fail(name + ": epsilon " + std::to_string(n.eps) + " differs from the first norm's " +
         std::to_string(*normEps_));
}

void Raiser::addLinear(const Linear &l, const std::string &name) {
  if (l.nbits || l.dq >= 0) {
    auto buf = l.nbits ? dequantizeNBits(l) : dequantizeQdq(l);
    m_.buffers.push_back(buf);
    m_.tensors.push_back({name + ".weight", DType::F32, {l.outDim, l.in}, buf->bytes.data(),
                          int64_t(buf->bytes.size())});
    if (!l.bias.empty())
      addConstant(l.bias, name + ".bias");
    return;
  }
  const OnnxConstant &c = *constant(l.weight);
  if (c.type != OnnxType::Float && c.type != OnnxType::Float16 && c.type != OnnxType::BFloat16)
    fail(node(l.node).describe() + ": weight '" + l.weight + "' is " +
         onnxTypeName(int32_t(c.type)) + "; llmc raises float, float16 and bfloat16 weights");
  // Columns [col0, col0 + outDim) of the weight: all of it, or one part of
  // a fused projection.
  const size_t e = size_t(onnxTypeBits(c.type) / 8);
  const int64_t total = l.transposed ? c.shape[0] : c.shape[1];
  auto buf = std::make_shared<OwnedBuffer>();
  buf->bytes.resize(size_t(l.outDim * l.in) * e);
  if (l.transposed) { // [total, in]: the rows are the columns
    std::memcpy(buf->bytes.data(), c.data + size_t(l.col0 * l.in) * e, buf->bytes.size());
  } else { // [in, total] -> [out, in]
    for (int64_t i = 0; i < l.in; ++i)
      for (int64_t o = 0; o < l.outDim; ++o)
        std::memcpy(buf->bytes.data() + size_t(o * l.in + i) * e,
                    c.data + size_t(i * total + l.col0 + o) * e, e);
  }
  m_.buffers.push_back(buf);
  m_.tensors.push_back({name + ".weight", dtypeOf(c), {l.outDim, l.in}, buf->bytes.data(),
                        int64_t(buf->bytes.size())});
  claimed_.insert(l.weight);
  if (!l.bias.empty())
    addConstant(l.bias, name + ".bias");
}

/// q, k, v as exported attention computes them: q and k reach the scores
/// MatMul, v the MatMul after the Softmax (separate projections, or one cut
/// by Slices: OnnxFusedReader.cpp).
Raiser::QkvParts Raiser::softmaxAttention(int64_t layer, std::vector<Linear> lins) {
  if (lins.size() == 1) // Phi-3's qkv_proj: one MatMul, its result sliced
    if (std::vector<Linear> parts = splitFused(lins[0]); parts.size() == 3)
      lins = parts;
  if (lins.size() != 3)
    fail("layer " + std::to_string(layer) + ": the attention norm feeds " +
         std::to_string(lins.size()) + " weight MatMuls; llmc raises separate q, k, v "
         "projections or one sliced into three");
  const Linear *q = nullptr, *k = nullptr, *v = nullptr;
  int scores = -1, context = -1;
  for (const Linear &l : lins) {
    std::vector<Use> hits = matmulsReached(l.out, false);
    if (hits.size() != 1)
      fail(node(l.node).describe() + " reaches " + std::to_string(hits.size()) +
           " attention MatMuls; expected one");
    if (hits[0].slot == 0) {
      q = &l;
      scores = hits[0].node;
    }
  }
  for (const Linear &l : lins) {
    const Use h = matmulsReached(l.out, false)[0];
    if (&l == q)
      continue;
    if (h.node == scores && h.slot == 1)
      k = &l;
    else if (h.slot == 1) {
      v = &l;
      context = h.node;
    }
  }
  if (!q || !k || !v || producerOf(node(context).input(0)) < 0 ||
      node(producerOf(node(context).input(0))).op != "Softmax" ||
      !reaches(node(scores).outputs[0], context))
    fail("layer " + std::to_string(layer) + ": the q, k, v projections do not form "
         "softmax(q k^T) v attention as llmc knows it");
  return QkvParts{*q, *k, *v, canon(node(context).outputs[0])};
}

std::string Raiser::raiseAttention(int64_t layer, const std::string &r) {
  const std::string blk = "blk." + std::to_string(layer) + ".";
  auto n = matchNorm(r);
  if (!n)
    fail("layer " + std::to_string(layer) + ": no RMSNorm or LayerNorm reads the residual "
         "stream '" + r + "'");
  addNorm(*n, blk + "attn_norm.weight");
  std::vector<Linear> lins = linearsFrom(n->out);
  std::optional<QkvParts> parts = contribAttention(layer, lins);
  if (!parts)
    parts = softmaxAttention(layer, std::move(lins));
  const Linear *q = &parts->q, *k = &parts->k, *v = &parts->v;
  std::vector<Use> proj = matmulsReached(parts->context, true);
  if (proj.size() != 1)
    fail("layer " + std::to_string(layer) + ": the attention's result reaches " +
         std::to_string(proj.size()) + " weight MatMuls; expected the output projection alone");
  std::optional<Linear> o;
  for (const Linear &l : linearsFrom(node(proj[0].node).input(0)))
    if (l.node == proj[0].node)
      o = l;
  const std::string next = o ? residualAdd(r, o->out) : std::string();
  if (next.empty())
    fail(node(proj[0].node).describe() + ": the output projection is not added to the "
                                         "residual stream");
  if (!o->bias.empty() || (q->bias.empty() != k->bias.empty()) ||
      (q->bias.empty() != v->bias.empty()))
    fail("layer " + std::to_string(layer) + ": llmc raises q, k and v biases together and no "
                                            "output-projection bias");
  attentionBias_ = !q->bias.empty();
  qDim_ = q->outDim;
  kvDim_ = k->outDim;
  if (v->outDim != kvDim_)
    fail(node(v->node).describe() + ": v has " + std::to_string(v->outDim) +
         " columns, k has " + std::to_string(kvDim_));
  addLinear(*q, blk + "attn_q");
  addLinear(*k, blk + "attn_k");
  addLinear(*v, blk + "attn_v");
  addLinear(*o, blk + "attn_output");
  return next;
}

/// The activation of `g` as exported: SiLU as g * Sigmoid(g), exact GELU as
/// (g * (1 + Erf(g / sqrt2))) * 0.5 (or with g * 0.5 first, or x * 1/sqrt2,
/// or the opset-20 Gelu op without approximation). "" if neither.
std::string Raiser::activationOf(const std::string &g, Activation &kind) const {
  auto other = [&](const Use &u) { return canon(node(u.node).input(size_t(1 - u.slot))); };
  auto mulBy = [&](const std::string &v, const std::string &with) -> std::string {
    for (const Use &u : users(v))
      if (node(u.node).op == "Mul" && other(u) == canon(with))
        return canon(node(u.node).outputs[0]);
    return {};
  };
  auto mulByScalar = [&](const std::string &v, double c) -> std::string {
    for (const Use &u : users(v))
      if (node(u.node).op == "Mul" && scalar(other(u)) &&
          std::fabs(*scalar(other(u)) - c) < 1e-6 * c)
        return canon(node(u.node).outputs[0]);
    return {};
  };
  if (auto sig = userOp(g, "Sigmoid")) {
    kind = Activation::SiLU;
    return mulBy(g, node(*sig).outputs[0]);
  }
  kind = Activation::GELU;
  if (auto gelu = userOp(g, "Gelu", 0)) {
    const OnnxNode &n = node(*gelu);
    auto approx = n.strings.find("approximate");
    return approx != n.strings.end() && approx->second != "none" ? std::string()
                                                                 : canon(n.outputs[0]);
  }
  std::string scaled; // g / sqrt(2)
  for (const Use &u : users(g)) {
    const OnnxNode &n = node(u.node);
    const auto c = u.slot == 0 ? scalar(n.input(1)) : std::nullopt;
    if ((n.op == "Div" && c && std::fabs(*c - M_SQRT2) < 1e-5) ||
        (n.op == "Mul" && c && std::fabs(*c - M_SQRT1_2) < 1e-5))
      scaled = canon(n.outputs[0]);
  }
  auto erf = scaled.empty() ? std::nullopt : userOp(scaled, "Erf");
  std::string onePlus;
  for (const Use &u : erf ? users(node(*erf).outputs[0]) : std::vector<Use>{})
    if (node(u.node).op == "Add" && scalar(other(u)) == 1.0)
      onePlus = canon(node(u.node).outputs[0]);
  if (onePlus.empty())
    return {};
  if (std::string x = mulBy(onePlus, g); !x.empty()) // (g * (1 + erf)) * 0.5
    return mulByScalar(x, 0.5);
  const std::string half = mulByScalar(g, 0.5); // (g * 0.5) * (1 + erf)
  return half.empty() ? std::string() : mulBy(onePlus, half);
}

/// `a` and `b` as gate and up, in whichever roles fit: the first whose
/// activated projection is multiplied by the other; else one whose
/// projection is activated (hidden ""); nullopt if neither is.
std::optional<Gated> Raiser::gatedPair(const Linear &a, const Linear &b) const {
  std::optional<Gated> activated;
  for (int gi = 0; gi < 2; ++gi) {
    Gated g{gi == 0 ? a : b, gi == 0 ? b : a, {}, Activation::SiLU};
    const std::string act = activationOf(g.gate.out, g.kind);
    if (act.empty())
      continue;
    for (const Use &u : users(act))
      if (node(u.node).op == "Mul" && canon(node(u.node).input(size_t(1 - u.slot))) == g.up.out)
        g.hidden = canon(node(u.node).outputs[0]);
    if (!g.hidden.empty())
      return g;
    if (!activated)
      activated = g;
  }
  return activated;
}

std::string Raiser::raiseMlp(int64_t layer, const std::string &r) {
  const std::string blk = "blk." + std::to_string(layer) + ".", at = "layer " +
                                                                    std::to_string(layer);
  auto n = matchNorm(r);
  if (!n)
    fail(at + ": no RMSNorm or LayerNorm before the MLP reads the residual stream '" + r + "'");
  addNorm(*n, blk + "ffn_norm.weight");
  std::vector<Linear> lins = linearsFrom(n->out);
  if (lins.size() == 1) {
    std::vector<Linear> parts = splitFused(lins[0]); // Phi-3's gate_up_proj
    if (parts.size() != 2)
      return raiseMoe(layer, r, n->out, lins[0]);
    lins = parts;
  }
  for (const Use &u : lins.empty() ? users(n->out) : std::vector<Use>{}) {
    const OnnxNode &flat = node(u.node); // MoE blocks route [tokens, D] rows
    if (flat.op != "Reshape" && flat.op != "Flatten")
      continue;
    std::vector<Linear> router = linearsFrom(flat.outputs[0]);
    if (router.size() == 1)
      return raiseMoe(layer, r, canon(flat.outputs[0]), router[0]);
  }
  if (lins.size() != 2)
    fail(at + ": the MLP norm feeds " + std::to_string(lins.size()) + " weight MatMuls; "
         "llmc raises gated MLPs and Mixtral-style MoE (plain MLPs are not raised yet)");
  if (std::optional<Gated> g = gatedPair(lins[0], lins[1])) {
    std::vector<Linear> down = g->hidden.empty() ? std::vector<Linear>{} : linearsFrom(g->hidden);
    if (down.size() != 1)
      fail(at + ": act(gate) * up does not feed one down projection");
    const std::string next = residualAdd(r, down[0].out);
    if (next.empty())
      fail(node(down[0].node).describe() + ": the down projection is not added to the "
                                           "residual stream");
    if (!g->gate.bias.empty() || !g->up.bias.empty() || !down[0].bias.empty())
      fail(at + ": MLP biases are not raised");
    if (activation_ && *activation_ != g->kind)
      fail(at + ": its activation differs from the first layer's");
    activation_ = g->kind;
    ffnDim_ = g->gate.outDim;
    addLinear(g->gate, blk + "ffn_gate");
    addLinear(g->up, blk + "ffn_up");
    addLinear(down[0], blk + "ffn_down");
    return next;
  }
  std::string feeds;
  for (const Linear &l : lins)
    for (const Use &u : users(l.out))
      feeds += (feeds.empty() ? "" : ", ") + node(u.node).describe();
  fail(at + ": the MLP projections " + node(lins[0].node).describe() + " and " +
       node(lins[1].node).describe() + " feed " + feeds + ": neither goes through SiLU "
       "(x * Sigmoid(x)) or exact GELU (x/2 * (1 + Erf(x/sqrt 2))); other activations (the "
       "tanh GELU approximation among them) are not raised");
}

void Raiser::raiseHead(const Linear &head) {
  const OnnxConstant &emb = *constant(embedding_);
  addLinear(head, "output");
  const SourceTensor &out = m_.tensors.back();
  if (out.dtype == dtypeOf(emb) && out.nbytes == emb.nbytes &&
      std::memcmp(out.data, m_.find("token_embd.weight")->data, size_t(out.nbytes)) == 0) {
    m_.tensors.pop_back(); // the embedding, transposed: a tied head
    m_.config.tied_embeddings = true;
  }
  if (!head.bias.empty())
    fail(node(head.node).describe() + ": an LM-head bias is not raised");
}

} // namespace llmc::onnx_import
