//===- OnnxAttentionReader.cpp - onnxruntime's GroupQueryAttention --------===//
// onnxruntime-genai's model builder exports attention as one
// com.microsoft GroupQueryAttention node: q, k and v projections (or one
// packed qkv projection in input 0, inputs 1 and 2 empty), past key/value
// inputs, sequence lengths from the attention mask, and, with do_rotary,
// RoPE from half-width cos/sin caches (inputs 7 and 8). Its output goes to
// the output projection. For a fresh sequence (what llmc's runtime computes
// with its own KV cache) it is llm.attention with those weights and RoPE.
//===----------------------------------------------------------------------===//
#include "compiler/import/onnx/OnnxRaiser.h"

#include <cmath>

namespace llmc::onnx_import {

std::optional<Raiser::QkvParts> Raiser::contribAttention(int64_t layer,
                                                         const std::vector<Linear> &lins) {
  if (lins.empty())
    return std::nullopt;
  int gqa = -1;
  for (const Use &u : users(lins[0].out))
    if (node(u.node).op == "GroupQueryAttention" && node(u.node).domain == "com.microsoft")
      gqa = u.node;
  if (gqa < 0)
    return std::nullopt;
  const OnnxNode &n = node(gqa);
  const std::string at = "layer " + std::to_string(layer) + ": " + n.describe();
  const int64_t H = n.intAttr("num_heads", 0), KV = n.intAttr("kv_num_heads", 0);
  if (H <= 0 || KV <= 0 || H % KV)
    fail(at + ": num_heads " + std::to_string(H) + " is not a positive multiple of "
         "kv_num_heads " + std::to_string(KV));
  auto input = [&](size_t i) { return i < n.inputs.size() ? canon(n.input(i)) : std::string(); };
  const bool packed = input(1).empty() && input(2).empty();
  QkvParts p;
  if (packed && lins.size() == 1) {
    const Linear &l = lins[0];
    if (l.outDim % (H + 2 * KV))
      fail(at + ": the packed qkv projection's " + std::to_string(l.outDim) +
           " columns are not (num_heads + 2 kv_num_heads) heads");
    if (!l.bias.empty() || l.nbits || l.dq >= 0)
      fail(at + ": a packed qkv projection with a bias or quantized weights is not raised");
    const int64_t hd = l.outDim / (H + 2 * KV);
    p.q = p.k = p.v = l;
    p.q.outDim = H * hd;
    p.k.col0 = H * hd;
    p.k.outDim = p.v.outDim = KV * hd;
    p.v.col0 = (H + KV) * hd;
  } else if (!packed && lins.size() == 3) {
    Linear *slot[3] = {&p.q, &p.k, &p.v};
    int found = 0;
    for (const Linear &l : lins)
      for (int s = 0; s < 3; ++s)
        if (canon(l.out) == input(size_t(s)))
          *slot[s] = l, ++found;
    if (found != 3)
      fail(at + ": its query, key and value are not the three projections of the norm");
  } else {
    fail(at + ": reads " + std::to_string(lins.size()) + " projections of the norm; llmc "
         "raises q, k, v (inputs 0-2) or one packed qkv (input 0)");
  }
  const int64_t hd = p.q.outDim / H;
  if (n.intAttr("do_rotary", 0) != 1)
    fail(at + ": without do_rotary (RoPE outside the op) it is not raised");
  const float scale = n.floatAttr("scale", 0.0f);
  if (scale != 0.0f && std::fabs(scale * std::sqrt(double(hd)) - 1.0) > 1e-6)
    fail(at + ": scale " + std::to_string(scale) + " is not 1/sqrt(head size " +
         std::to_string(hd) + ")");
  if (n.intAttr("local_window_size", -1) != -1 || n.floatAttr("softcap", 0.0f) != 0.0f ||
      n.intAttr("smooth_softmax", 0) != 0)
    fail(at + ": a local window, softcap or smooth softmax is not raised");
  if (!input(10).empty() || !input(11).empty())
    fail(at + ": an attention bias or head sink input is not raised");
  const OnnxConstant *cs = constant(input(7)), *sn = constant(input(8));
  if (!cs || !sn || cs->shape != sn->shape || cs->shape.size() != 2 || cs->shape[1] * 2 != hd)
    fail(at + ": its cos and sin caches are not constants [positions, " + std::to_string(hd / 2) +
         "]");
  useRopeStyle(n.intAttr("rotary_interleaved", 0) ? RopeStyle::Interleaved : RopeStyle::Half, n);
  if (!claimed_.count(cs->name))
    useCaches(*cs, *sn, true);
  p.context = canon(n.outputs[0]);
  return p;
}

} // namespace llmc::onnx_import
