//===- OnnxMoeReader.cpp - Raise Mixtral's sparse MoE block ---------------===//
// torch traces MixtralSparseMoeBlock into: a router MatMul [D, E] on the
// normed residual, Softmax, TopK(k), the top-k weights divided by their
// sum, then, expert by expert in order 0..E-1, the rows routed to it
// (NonZero/Gather) through its w1 (gate), w3 (up) and w2 (down), scaled by
// its routing weight and scattered back (ScatterElements/Add), and the sum
// added to the residual. Raised as llmc's MoE: ffn_gate_inp [E, D] and
// ffn_{gate,up}_exps [E, F, D], ffn_down_exps [E, D, F], k experts per
// token with renormalised weights. The experts' order is the order the
// trace ran them in (the graph's node order); their shapes and SiLU/GELU
// gating are checked like a dense MLP's.
//===----------------------------------------------------------------------===//
#include "compiler/import/onnx/OnnxRaiser.h"

#include <algorithm>
#include <cstring>
#include <map>

namespace llmc::onnx_import {

/// k of the router's Softmax -> TopK, whose values must be renormalised
/// (divided by their ReduceSum), as Mixtral does.
int64_t Raiser::topK(int64_t layer, const Linear &router) const {
  const std::string at = "layer " + std::to_string(layer) + ": the MoE router";
  auto soft = userOp(router.out, "Softmax", 0);
  auto top = soft ? userOp(node(*soft).outputs[0], "TopK", 0) : std::nullopt;
  if (!top)
    fail(at + " " + node(router.node).describe() + " is not followed by Softmax and TopK "
                                                   "(only Mixtral-style routing is raised)");
  const OnnxNode &t = node(*top);
  auto k = t.inputs.size() > 1 ? constant(t.input(1)) : nullptr;
  if (!k || k->numElements() != 1 || t.intAttr("largest", 1) != 1)
    fail(t.describe() + ": k is not a constant (or the smallest are taken)");
  bool renormalised = false;
  if (auto sum = userOp(t.outputs[0], "ReduceSum", 0))
    if (auto div = userOp(t.outputs[0], "Div", 0))
      renormalised = canon(node(*div).input(1)) == canon(node(*sum).outputs[0]);
  if (!renormalised)
    fail(t.describe() + ": the top-k routing weights are not divided by their sum (llmc raises "
                        "Mixtral's renormalised routing only)");
  return int64_t(k->at(0));
}

void Raiser::addStacked(const std::vector<Linear> &experts, const std::string &name) {
  const size_t before = m_.tensors.size();
  for (size_t e = 0; e < experts.size(); ++e)
    addLinear(experts[e], name + "#" + std::to_string(e));
  auto buf = std::make_shared<OwnedBuffer>();
  const SourceTensor first = m_.tensors[before];
  for (size_t e = before; e < m_.tensors.size(); ++e) {
    const SourceTensor &t = m_.tensors[e];
    if (t.dtype != first.dtype || t.shape != first.shape)
      fail(name + ": experts of different shapes or types");
    const auto *p = static_cast<const uint8_t *>(t.data);
    buf->bytes.insert(buf->bytes.end(), p, p + t.nbytes);
  }
  m_.tensors.resize(before);
  m_.buffers.push_back(buf);
  m_.tensors.push_back({name + ".weight", first.dtype,
                        {int64_t(experts.size()), first.shape[0], first.shape[1]},
                        buf->bytes.data(), int64_t(buf->bytes.size())});
}

std::string Raiser::raiseMoe(int64_t layer, const std::string &r, const std::string &normed,
                             const Linear &router) {
  const std::string blk = "blk." + std::to_string(layer) + ".",
                    at = "layer " + std::to_string(layer);
  const int64_t E = router.outDim, k = topK(layer, router);
  // Each expert's w1 and w3 read the same routed rows.
  std::map<std::string, std::vector<Linear>> byInput;
  for (const Use &u : matmulsReached(normed, true)) {
    if (u.node == router.node)
      continue;
    for (const Linear &l : linearsFrom(node(u.node).input(0)))
      if (l.node == u.node)
        byInput[canon(node(u.node).input(0))].push_back(l);
  }
  std::vector<std::vector<Linear>> pairs;
  for (auto &[in, ls] : byInput)
    pairs.push_back(ls);
  std::sort(pairs.begin(), pairs.end(),
            [](const auto &a, const auto &b) { return a[0].node < b[0].node; });
  if (int64_t(pairs.size()) != E)
    fail(at + ": the router " + node(router.node).describe() + " scores " + std::to_string(E) +
         " experts; " + std::to_string(pairs.size()) + " expert inputs found");
  std::vector<Linear> gates, ups, downs;
  std::string next;
  for (const auto &p : pairs) {
    const std::optional<Gated> g = p.size() == 2 ? gatedPair(p[0], p[1]) : std::nullopt;
    const std::string hidden = g ? g->hidden : std::string();
    std::vector<Linear> down = hidden.empty() ? std::vector<Linear>{} : linearsFrom(hidden);
    if (down.size() != 1 || !g->gate.bias.empty() || !g->up.bias.empty() || !down[0].bias.empty())
      fail(at + ": expert " + std::to_string(gates.size()) + " (" +
           node(p[0].node).describe() + ") is not act(w1) * w3 -> w2 without biases");
    for (const Use &u : users(r))
      if (node(u.node).op == "Add" && reaches(down[0].out, u.node))
        next = canon(node(u.node).outputs[0]);
    if (next.empty())
      fail(node(down[0].node).describe() + ": the expert's output does not reach the residual "
                                           "stream");
    if (activation_ && *activation_ != g->kind)
      fail(at + ": an expert's activation differs from the first layer's");
    activation_ = g->kind;
    gates.push_back(g->gate);
    ups.push_back(g->up);
    downs.push_back(down[0]);
  }
  if (experts_ && (experts_ != E || expertsPerToken_ != k))
    fail(at + ": " + std::to_string(E) + " experts, top " + std::to_string(k) +
         "; the first MoE layer had " + std::to_string(experts_) + ", top " +
         std::to_string(expertsPerToken_));
  experts_ = E;
  expertsPerToken_ = k;
  ffnDim_ = gates[0].outDim;
  addLinear(router, blk + "ffn_gate_inp");
  addStacked(gates, blk + "ffn_gate_exps");
  addStacked(ups, blk + "ffn_up_exps");
  addStacked(downs, blk + "ffn_down_exps");
  return next;
}

} // namespace llmc::onnx_import
