//===- OnnxFusedReader.cpp - Fused projections cut by Slices ---------------===//
// Phi-3 exports one MatMul for q, k and v (qkv_proj) and one for gate and up
// (gate_up_proj), then Slices the result along its last axis: q, k, v at
// constant bounds; gate, up at the halves torch's chunk(2) computes from the
// result's shape (Shape, Gather, Add 1, Div 2, Mul). Each Slice becomes a
// Linear over its columns of the fused weight, so attention and MLP matching
// see the same q, k, v and gate, up they see in separate-projection exports.
//===----------------------------------------------------------------------===//
#include "compiler/import/onnx/OnnxRaiser.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace llmc::onnx_import {

namespace {
int64_t toInt(double d) {
  if (d >= 9.2e18)
    return std::numeric_limits<int64_t>::max();
  if (d <= -9.2e18)
    return std::numeric_limits<int64_t>::min();
  return int64_t(d);
}
} // namespace

/// `v` as an integer when it is a one-element constant or arithmetic on
/// such constants and on the last dimension of `fused` (Gather of its
/// Shape at index 2 or -1: the [batch, sequence, columns] result of a
/// projection), whose size is `columns`; nullopt otherwise.
std::optional<int64_t> Raiser::intValue(const std::string &v, const std::string &fused,
                                        int64_t columns, int depth) const {
  if (depth > 16)
    return std::nullopt;
  if (const OnnxConstant *c = constant(v))
    return c->numElements() == 1 ? std::optional<int64_t>(toInt(c->at(0))) : std::nullopt;
  const int p = producerOf(v);
  if (p < 0)
    return std::nullopt;
  const OnnxNode &n = node(p);
  auto arg = [&](size_t i) {
    return i < n.inputs.size() ? intValue(n.input(i), fused, columns, depth + 1) : std::nullopt;
  };
  if (n.op == "Unsqueeze" || n.op == "Squeeze" || n.op == "Reshape" ||
      (n.op == "Concat" && n.inputs.size() == 1))
    return arg(0);
  if (n.op == "Gather" && n.inputs.size() == 2) {
    const int s = producerOf(n.input(0));
    const auto index = arg(1);
    if (s >= 0 && node(s).op == "Shape" && canon(node(s).input(0)) == canon(fused) && index &&
        (*index == 2 || *index == -1))
      return columns;
    return std::nullopt;
  }
  const auto a = arg(0), b = arg(1);
  constexpr int64_t kLimit = int64_t(1) << 31; // products stay far from overflow
  if (!a || !b || *a > kLimit || *a < -kLimit || *b > kLimit || *b < -kLimit)
    return std::nullopt;
  if (n.op == "Add")
    return *a + *b;
  if (n.op == "Sub")
    return *a - *b;
  if (n.op == "Mul")
    return *a * *b;
  if (n.op == "Div" && *b != 0)
    return *a / *b;
  return std::nullopt;
}

/// The parts of a fused projection `l` whose result only Slices (along the
/// last axis, step 1, bounds that evaluate to integers) and Shape read: one
/// Linear per Slice over its columns, in column order, covering all of
/// them. {} when `l`'s result has other readers.
std::vector<Linear> Raiser::splitFused(const Linear &l) const {
  std::vector<Linear> parts;
  const int64_t N = l.outDim;
  for (const Use &u : users(l.out)) {
    const OnnxNode &n = node(u.node);
    if (n.op == "Shape")
      continue;
    if (n.op != "Slice" || u.slot != 0 || n.inputs.size() < 3)
      return {};
    auto input = [&](size_t i) {
      return i < n.inputs.size() && !n.input(i).empty()
                 ? intValue(n.input(i), l.out, N, 0)
                 : std::nullopt;
    };
    const auto start = input(1), end = input(2), axis = input(3);
    const auto step = n.inputs.size() > 4 && !n.input(4).empty() ? input(4)
                                                                  : std::optional<int64_t>(1);
    if (!start || !end || !axis || (*axis != 2 && *axis != -1) || step != 1)
      fail(n.describe() + " cuts the projection " + node(l.node).describe() +
           " other than along its last axis with step 1 at bounds llmc can evaluate");
    auto clampIndex = [&](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + N : i, 0, N); };
    Linear p = l;
    p.col0 = l.col0 + clampIndex(*start);
    p.outDim = clampIndex(*end) - clampIndex(*start);
    p.out = canon(n.outputs[0]);
    parts.push_back(p);
  }
  if (parts.size() < 2)
    return {};
  if (!l.bias.empty() || l.nbits || l.dq >= 0)
    fail(node(l.node).describe() + ": a fused projection with a bias or quantized weights is "
                                   "not raised");
  std::sort(parts.begin(), parts.end(),
            [](const Linear &a, const Linear &b) { return a.col0 < b.col0; });
  int64_t next = l.col0;
  for (const Linear &p : parts) {
    if (p.col0 != next || p.outDim <= 0)
      fail(node(l.node).describe() + ": its Slices do not cut its " + std::to_string(N) +
           " columns into consecutive parts");
    next = p.col0 + p.outDim;
  }
  if (next != l.col0 + N)
    fail(node(l.node).describe() + ": its Slices leave columns " + std::to_string(next) +
         ".." + std::to_string(l.col0 + N - 1) + " unread");
  return parts;
}

} // namespace llmc::onnx_import
