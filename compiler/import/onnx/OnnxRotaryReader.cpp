//===- OnnxRotaryReader.cpp - Head size and RoPE base from the graph -----===//
// Exports carry RoPE in one of two forms: the inverse frequencies (a 1-D
// constant 1, b^(-2/d), ... that positions multiply before Cos and Sin, as
// transformers >= 4.45 computes it), or precomputed cos and sin caches
// ([max positions, d] constants gathered by position, as older rotary
// classes and Mixtral's in 4.46 do). Either gives d (the head size) and b;
// the layout must be rotate-half (the frequencies concatenated twice).
//===----------------------------------------------------------------------===//
#include "compiler/import/onnx/OnnxRaiser.h"

#include <cmath>

namespace llmc::onnx_import {

namespace {
/// Relative precision of frequencies stored as `c`: their type's, or
/// float16's / bfloat16's when every float32 value is one of those (a
/// half-precision model's buffer widened back by the exporter).
double storedPrecision(const OnnxConstant &c) {
  auto all = [&](auto roundTrip) {
    for (int64_t j = 0; j < c.numElements(); ++j)
      if (double(roundTrip(float(c.at(j)))) != c.at(j))
        return false;
    return true;
  };
  if (c.type == OnnxType::BFloat16 ||
      (c.type == OnnxType::Float && all([](float v) { return bf16ToFloat(floatToBf16(v)); })))
    return 1.0 / 128;
  if (c.type == OnnxType::Float16 ||
      (c.type == OnnxType::Float && all([](float v) { return halfToFloat(floatToHalf(v)); })))
    return 1.0 / 1024;
  return c.type == OnnxType::Double ? 1e-12 : 4e-7;
}
} // namespace

void Raiser::readRotary() {
  for (size_t i = 0; i < g_.nodes.size(); ++i) {
    const OnnxNode &cs = g_.nodes[i];
    if (cs.op != "Cos" && cs.op != "Sin")
      continue;
    for (const Use &u : users(cs.outputs[0])) {
      const OnnxNode &mul = node(u.node);
      auto s = mul.op == "Mul" ? scalar(mul.input(size_t(1 - u.slot))) : std::nullopt;
      if (s && std::fabs(*s - 1.0) > 1e-6)
        fail(mul.describe() + ": rotary attention scaling " + std::to_string(*s) +
             " (RoPE scaling) is not raised");
    }
    const int cat = producerOf(cs.input(0));
    if (cat < 0 || node(cat).op != "Concat" || node(cat).inputs.size() != 2 ||
        canon(node(cat).input(0)) != canon(node(cat).input(1)))
      fail(cs.describe() + ": the rotary angles are not the frequencies concatenated twice "
                           "(rotate-half); interleaved RoPE is not raised");
    std::set<int> seen;
    std::vector<std::string> todo{canon(node(cat).input(0))};
    while (!todo.empty()) { // back from the angles to the inverse frequencies
      const std::string x = todo.back();
      todo.pop_back();
      const OnnxConstant *c = constant(x);
      if (c && c->isFloat() && c->numElements() >= 2 && !claimed_.count(x)) {
        std::vector<double> f(size_t(c->numElements()));
        for (size_t j = 0; j < f.size(); ++j)
          f[j] = c->at(int64_t(j));
        useFrequencies(f, storedPrecision(*c), cs.describe() + ": rotary frequencies '" + x + "'");
        claimed_.insert(x);
        continue;
      }
      const int p = producerOf(x);
      if (p >= 0 && node(p).op != "Shape" && seen.insert(p).second)
        for (const auto &in : node(p).inputs)
          if (!in.empty())
            todo.push_back(canon(in));
    }
  }
  if (headDim_ == 0)
    readRotaryEmbeddingOps();
  if (headDim_ == 0)
    readRotaryCaches();
  if (headDim_ == 0)
    fail("no rotary embedding found (neither Cos/Sin of positions times inverse frequencies "
         "nor cos/sin cache constants)");
}

/// cos and sin caches: 2-D float constants [P, d] with cos row 0 all ones
/// and sin row 0 all zeros, the two halves of each row equal. Frequency j
/// is the angle of (cos, sin) at position 1, refined at the last position
/// (the angle grows with the position; its float rounding does not).
void Raiser::readRotaryCaches() {
  std::vector<const OnnxConstant *> cosines, sines;
  for (const auto &[name, c] : g_.constants) {
    if (!c.isFloat() || c.shape.size() != 2 || c.shape[0] < 2 || c.shape[1] < 4 ||
        c.shape[1] % 2 || claimed_.count(name))
      continue;
    bool one = true, zero = true;
    for (int64_t j = 0; j < c.shape[1]; ++j) {
      one = one && c.at(j) == 1.0;
      zero = zero && c.at(j) == 0.0;
    }
    if (one)
      cosines.push_back(&c);
    else if (zero)
      sines.push_back(&c);
  }
  for (const OnnxConstant *cs : cosines)
    for (const OnnxConstant *sn : sines)
      if (cs->shape == sn->shape)
        useCaches(*cs, *sn, false);
}

/// onnxruntime's RotaryEmbedding contrib op (what its transformer optimizer
/// fuses RoPE into): inputs x, position_ids, cos_cache and sin_cache
/// [P, d/2]; rotate-half, or pairs (2i, 2i+1) when `interleaved`; the whole head unless
/// `rotary_embedding_dim`.
void Raiser::readRotaryEmbeddingOps() {
  for (const OnnxNode &n : g_.nodes) {
    if (n.op != "RotaryEmbedding")
      continue;
    const OnnxConstant *cs = n.inputs.size() >= 4 ? constant(n.input(2)) : nullptr,
                       *sn = n.inputs.size() >= 4 ? constant(n.input(3)) : nullptr;
    if (!cs || !sn || cs->shape != sn->shape || cs->shape.size() != 2)
      fail(n.describe() + ": its cos and sin caches are not constants of one shape [P, d/2]");
    useRopeStyle(n.intAttr("interleaved", 0) != 0 ? RopeStyle::Interleaved : RopeStyle::Half, n);
    if (const int64_t dim = n.intAttr("rotary_embedding_dim", 0);
        dim != 0 && dim != 2 * cs->shape[1])
      fail(n.describe() + ": partial rotary (rotary_embedding_dim) is not raised");
    if (n.floatAttr("scale", 1.0f) != 1.0f)
      fail(n.describe() + ": a RoPE scale is not raised");
    if (!claimed_.count(cs->name))
      useCaches(*cs, *sn, true);
  }
}

/// Records the rotation of a contrib op's RoPE; every such op must agree.
void Raiser::useRopeStyle(RopeStyle style, const OnnxNode &n) {
  if (ropeStyle_ && *ropeStyle_ != style)
    fail(n.describe() + ": rotates " + std::string(spelling(style)) + " where an earlier "
         "rotary op rotates " + std::string(spelling(*ropeStyle_)));
  ropeStyle_ = style;
}

/// Frequencies from cos and sin caches, one row per position: frequency j
/// is the angle of (cos, sin) at position 1, refined at the last position
/// (the angle grows with the position; its float rounding does not). Full
/// width caches hold each half twice (rotate-half); `halfWidth` ones once.
void Raiser::useCaches(const OnnxConstant &cs, const OnnxConstant &sn, bool halfWidth) {
  const int64_t P = cs.shape[0], w = cs.shape[1], half = halfWidth ? w : w / 2;
  if (P < 2 || half < 2)
    fail("rotary caches '" + cs.name + "': " + shapeString(cs.shape) + " is too small");
  std::vector<double> f(static_cast<size_t>(half));
  for (int64_t j = 0; j < half; ++j) {
    if (!halfWidth && (cs.at(w + j) != cs.at(w + j + half) || sn.at(w + j) != sn.at(w + j + half)))
      fail("rotary cache '" + cs.name + "': the two halves of a row differ (interleaved "
           "RoPE is not raised)");
    const double coarse = std::atan2(sn.at(w + j), cs.at(w + j));
    const int64_t last = (P - 1) * w + j;
    const double angle = std::atan2(sn.at(last), cs.at(last));
    const double turns = std::round((coarse * double(P - 1) - angle) / (2 * M_PI));
    f[size_t(j)] = (angle + 2 * M_PI * turns) / double(P - 1);
  }
  useFrequencies(f, 2e-4, "rotary caches '" + cs.name + "', '" + sn.name + "'");
  claimed_.insert(cs.name);
  claimed_.insert(sn.name);
  cachePositions_ = P;
}

/// Records head size 2 * f.size() and the base b of f = 1, b^(-2/d), ...;
/// `what` names the source in errors.
void Raiser::useFrequencies(const std::vector<double> &f, double tol, const std::string &what) {
  const int64_t hd = 2 * int64_t(f.size());
  const std::optional<double> base = ropeBaseOf(f, tol);
  if (!base)
    fail(what + " are not 1, b^(-2/d), ... (scaled RoPE is not raised)");
  if (headDim_ && (headDim_ != hd || std::fabs(ropeBase_ / *base - 1) > 1e-3))
    fail(what + ": a second rotary embedding with other frequencies");
  headDim_ = hd;
  ropeBase_ = *base;
  ropeFreqs_ = f;
  ropeTol_ = tol;
}

/// The RoPE base: estimated from the smallest frequency (the most precise),
/// replaced by the whole number nearest it when that reproduces every
/// frequency as well (exports store 10000 as float32 frequencies, which
/// read back as 10000.0005); nullopt if some frequency is not b^(-2j/d)
/// within `tol` (scaled RoPE).
std::optional<double> Raiser::ropeBaseOf(const std::vector<double> &f, double tol) const {
  const int64_t half = int64_t(f.size()), hd = 2 * half;
  if (half < 2 || !(f.back() > 0))
    return std::nullopt;
  const double estimate = std::pow(f.back(), -double(hd) / double(2 * (half - 1)));
  if (ropeFits(f, tol, std::round(estimate)))
    return std::round(estimate);
  return ropeFits(f, tol, estimate) ? std::optional<double>(estimate) : std::nullopt;
}

bool Raiser::ropeFits(const std::vector<double> &f, double tol, double base) const {
  const int64_t half = int64_t(f.size()), hd = 2 * half;
  for (int64_t j = 0; j < half; ++j) {
    const double want = std::pow(base, -double(2 * j) / double(hd));
    if (std::fabs(f[size_t(j)] - want) > tol * want)
      return false;
  }
  return true;
}

} // namespace llmc::onnx_import
