//===- ExecutorBuild.cpp - Set an Executor up for an artifact's Program ---===//
// Construction resolves every node against the artifact: weights by name,
// shapes checked against the value widths flowing through the program,
// attributes read and checked, small vectors (norm weights, biases)
// converted to f32 once, and one f32 KV cache allocated per attention node.
// The kernel plan, when the artifact has one and it is to run forward(),
// is bound to the same weights and caches.
//===----------------------------------------------------------------------===//
#include <cmath>
#include "ExecutorImpl.h"

#include "../artifact/JsonFields.h"
#include "MoeRouting.h"
#include "OpSpec.h"

#include <algorithm>
#include <stdexcept>

namespace llmc {

using exec::Node;
using exec::Op;

namespace {

/// The Op of a program node's op name (one findOpSpec() knows).
Op opOf(const std::string &s) {
  if (s == "embed")
    return Op::Embed;
  if (s == "rms_norm")
    return Op::RmsNorm;
  if (s == "layer_norm")
    return Op::LayerNorm;
  if (s == "add")
    return Op::Add;
  if (s == "attention")
    return Op::Attention;
  if (s == "mlp")
    return Op::Mlp;
  if (s == "moe")
    return Op::Moe;
  return Op::LmHead;
}

std::string shapeStr(const std::vector<int64_t> &s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i)
    r += (i ? "," : "") + (s[i] < 0 ? std::string("?") : std::to_string(s[i]));
  return r + "]";
}

Activation activationOf(const nlohmann::json &at, const std::string &ctx) {
  return jsonf::getEnum<Activation>(at, "activation", ctx, Activation::SiLU, parseActivation,
                                    spellingsActivation());
}

/// The linear-input sites the hook sees for node `pn` (see Node::sites).
std::vector<Node::Site> hookSitesOf(const ProgramNode &pn) {
  std::vector<Node::Site> sites;
  auto site = [&](std::vector<std::string> roles) {
    Node::Site s;
    for (const std::string &r : roles)
      s.weights.push_back(pn.weights.count(r) ? pn.weights.at(r) : std::string());
    s.roles = std::move(roles);
    sites.push_back(std::move(s));
  };
  if (pn.op == "attention") {
    site({"q", "k", "v"});
    site({"o"});
  } else if (pn.op == "mlp") {
    site({"gate", "up"});
    site({"down"});
  } else if (pn.op == "moe") {
    site({"router"});
    site({"gate", "up"});
    site({"down"});
  }
  return sites;
}

} // namespace

WeightMatrix Executor::Impl::matrixOf(const TensorView &t) {
  WeightMatrix w =
      WeightMatrix::of(t, needsAux(t.dtype) ? art.tensor(t.name + kAuxSuffix) : nullptr);
  packed.attach(t.name, w);
  return w;
}

WeightMatrix Executor::Impl::slabOf(const TensorView &t, int64_t e) {
  WeightMatrix w =
      WeightMatrix::slab(t, e, needsAux(t.dtype) ? art.tensor(t.name + kAuxSuffix) : nullptr);
  packed.attach(t.name, w, e);
  return w;
}

const TensorView &Executor::Impl::weight(const ProgramNode &pn, const std::string &desc,
                                         const char *role) {
  auto it = pn.weights.find(role);
  if (it == pn.weights.end())
    throw std::runtime_error(desc + ": missing weight '" + role + "'");
  const TensorView *t = packed.find(it->second);
  if (!t)
    throw std::runtime_error(desc + ": weight '" + it->second + "' (" + role +
                             ") is not in artifact " + art.path());
  return *t;
}

void Executor::Impl::expectShape(const TensorView &t, const std::string &desc, const char *role,
                                 const std::vector<int64_t> &want) {
  bool ok = t.shape.size() == want.size();
  for (size_t i = 0; ok && i < want.size(); ++i)
    ok = want[i] < 0 || want[i] == t.shape[i];
  for (size_t i = 0; ok && i < want.size(); ++i)
    ok = t.shape[i] > 0;
  if (!ok)
    throw std::runtime_error(desc + ": weight '" + t.name + "' (" + role + ") has shape " +
                             shapeStr(t.shape) + ", expected " + shapeStr(want));
}

std::vector<float> Executor::Impl::vectorOf(const TensorView &t) {
  WeightMatrix w = matrixOf(t);
  std::vector<float> v(size_t(w.rows * w.cols));
  for (int64_t r = 0; r < w.rows; ++r)
    loadRow(w, r, v.data() + r * w.cols);
  return v;
}

std::vector<float> Executor::Impl::optionalVector(const ProgramNode &pn, const std::string &desc,
                                                  const char *role, int64_t size) {
  if (!pn.weights.count(role))
    return {};
  const TensorView &t = weight(pn, desc, role);
  expectShape(t, desc, role, {size});
  return vectorOf(t);
}

void Executor::Impl::build() {
  const Program &prog = art.program();
  if (prog.nodes.empty())
    throw std::runtime_error(art.path() + ": the artifact has no program to run");
  sizeValueTable(prog);
  std::set<int64_t> cacheSlots;
  for (size_t idx = 0; idx < prog.nodes.size(); ++idx) {
    const ProgramNode &pn = prog.nodes[idx];
    Node n = startNode(pn, idx);
    switch (n.op) {
    case Op::Embed:
      buildEmbed(n, pn);
      break;
    case Op::RmsNorm:
    case Op::LayerNorm:
      buildNorm(n, pn);
      break;
    case Op::Add:
      buildAdd(n, pn);
      break;
    case Op::Attention:
      buildAttention(n, pn, cacheSlots);
      break;
    case Op::Mlp:
      buildMlp(n, pn);
      break;
    case Op::Moe:
      buildMoe(n, pn);
      break;
    case Op::LmHead:
      buildLmHead(n, pn);
      break;
    }
    widths[size_t(n.out)] = n.width;
    nodes.push_back(std::move(n));
  }
  output = prog.output;
  if (output < 0 || widths[size_t(output)] < 0)
    throw std::runtime_error(art.path() + ": program output value " + std::to_string(output) +
                             " is not defined");
  vals.resize(widths.size());
  valRows.assign(widths.size(), 0);
}

void Executor::Impl::sizeValueTable(const Program &prog) {
  int maxId = prog.output;
  for (const ProgramNode &pn : prog.nodes) {
    maxId = std::max(maxId, pn.out);
    for (int i : pn.in)
      maxId = std::max(maxId, i);
  }
  if (maxId >= (1 << 24))
    throw std::runtime_error(art.path() + ": program value ids are too large");
  widths.assign(size_t(maxId + 1), -1);
}

Node Executor::Impl::startNode(const ProgramNode &pn, size_t idx) {
  Node n;
  n.desc = "program node " + std::to_string(idx) + " (" + pn.op + ")";
  const OpSpec *spec = findOpSpec(pn.op);
  if (!spec)
    throw std::runtime_error(n.desc + ": unknown op '" + pn.op + "'");
  if (int(pn.in.size()) != spec->arity)
    throw std::runtime_error(n.desc + ": takes " + std::to_string(spec->arity) +
                             " input(s), got " + std::to_string(pn.in.size()));
  for (int i : pn.in)
    if (i < 0 || widths[size_t(i)] < 0)
      throw std::runtime_error(n.desc + ": input value " + std::to_string(i) +
                               " is not defined by an earlier node");
  if (pn.out < 0)
    throw std::runtime_error(n.desc + ": bad output value id " + std::to_string(pn.out));
  n.op = opOf(pn.op);
  n.index = int(idx);
  n.block = jsonf::getInt(pn.attrs, "block", n.desc, -1);
  n.sites = hookSitesOf(pn);
  n.in = pn.in;
  n.out = pn.out;
  n.inWidth = pn.in.empty() ? 0 : widths[size_t(pn.in[0])];
  return n;
}

void Executor::Impl::buildEmbed(Node &n, const ProgramNode &pn) {
  const std::string &ctx = n.desc;
  const TensorView &t = weight(pn, ctx, "table");
  expectShape(t, ctx, "table", {-1, -1});
  n.a = matrixOf(t);
  n.width = t.shape[1];
}

void Executor::Impl::buildNorm(Node &n, const ProgramNode &pn) {
  const std::string &ctx = n.desc;
  const int64_t D = n.inWidth;
  const TensorView &w = weight(pn, ctx, "weight");
  expectShape(w, ctx, "weight", {D});
  n.vec0 = vectorOf(w);
  if (n.op == Op::LayerNorm)
    n.vec1 = optionalVector(pn, ctx, "bias", D);
  double eps = jsonf::getDouble(pn.attrs, "eps", ctx, 1e-5);
  if (!(eps >= 0))
    throw std::runtime_error(ctx + ": eps must be >= 0");
  n.eps = float(eps);
  n.width = D;
}

void Executor::Impl::buildAdd(Node &n, const ProgramNode &pn) {
  const std::string &ctx = n.desc;
  const int64_t D = n.inWidth;
  int64_t w1 = widths[size_t(pn.in[1])];
  if (w1 != D)
    throw std::runtime_error(ctx + ": adds values of widths " + std::to_string(D) + " and " +
                             std::to_string(w1));
  n.width = D;
}

void Executor::Impl::buildAttention(Node &n, const ProgramNode &pn, std::set<int64_t> &cacheSlots) {
  const nlohmann::json &at = pn.attrs;
  const std::string &ctx = n.desc;
  const int64_t D = n.inWidth;
  int64_t H = jsonf::getInt(at, "num_heads", ctx);
  int64_t KV = jsonf::getInt(at, "num_kv_heads", ctx, H);
  int64_t hd = jsonf::getInt(at, "head_dim", ctx);
  if (H <= 0 || KV <= 0 || hd <= 0 || H % KV != 0)
    throw std::runtime_error(ctx + ": bad head counts (num_heads " + std::to_string(H) +
                             ", num_kv_heads " + std::to_string(KV) + ", head_dim " +
                             std::to_string(hd) + "); num_heads must be a multiple of num_kv_heads");
  if (hd % 2)
    throw std::runtime_error(ctx + ": head_dim " + std::to_string(hd) + " must be even for RoPE");
  const TensorView &q = weight(pn, ctx, "q"), &k = weight(pn, ctx, "k"),
                   &v = weight(pn, ctx, "v"), &o = weight(pn, ctx, "o");
  expectShape(q, ctx, "q", {H * hd, D});
  expectShape(k, ctx, "k", {KV * hd, D});
  expectShape(v, ctx, "v", {KV * hd, D});
  expectShape(o, ctx, "o", {-1, H * hd});
  n.a = matrixOf(q);
  n.b = matrixOf(k);
  n.c = matrixOf(v);
  n.d = matrixOf(o);
  n.width = o.shape[0];
  n.qBias = optionalVector(pn, ctx, "q_bias", H * hd);
  n.kBias = optionalVector(pn, ctx, "k_bias", KV * hd);
  n.vBias = optionalVector(pn, ctx, "v_bias", KV * hd);
  n.att.heads = H;
  n.att.kv_heads = KV;
  n.att.head_dim = hd;
  n.att.causal = jsonf::getBool(at, "causal", ctx, true);
  double theta = jsonf::getDouble(at, "rope_theta", ctx, 10000.0);
  if (!(theta > 0))
    throw std::runtime_error(ctx + ": rope_theta must be positive");
  n.invFreq = ops::ropeFrequencies(theta, hd);
  n.rope = jsonf::getEnum<RopeStyle>(at, "rope_style", ctx, std::nullopt, parseRopeStyle,
                                     spellingsRopeStyle());
  addKvCache(n, at, cacheSlots);
}

void Executor::Impl::addKvCache(Node &n, const nlohmann::json &at, std::set<int64_t> &cacheSlots) {
  const std::string &ctx = n.desc;
  kv::Policy policy;
  if (const nlohmann::json *kp = jsonf::find(at, "kv_policy")) {
    if (kp->is_object() && kp->value("kind", "") == "sliding_window") {
      n.att.window = jsonf::getInt(*kp, "window", ctx + " kv_policy");
      if (n.att.window <= 0)
        throw std::runtime_error(ctx + ": kv_policy window must be positive");
    } else {
      policy = kv::parsePolicy(*kp, ctx, n.att.kv_heads);
    }
  }
  int64_t layer = jsonf::getInt(at, "layer", ctx);
  if (layer < 0 || !cacheSlots.insert(layer).second)
    throw std::runtime_error(ctx + ": KV cache slot (layer " + std::to_string(layer) +
                             ") is negative or used by another attention node");
  const WeightMatrix wo = n.d;
  n.cache = int(caches.size());
  caches.emplace_back(policy, layer, n.att.heads, n.att.kv_heads, n.att.head_dim, n.att.window,
                      n.width, [wo](int64_t r, float *dst) { loadRow(wo, r, dst); });
  caches.back().setRecording(kvRecord);
  cacheLayers.push_back(layer);
  cacheDesc.push_back(ctx);
}

void Executor::Impl::buildMlp(Node &n, const ProgramNode &pn) {
  const std::string &ctx = n.desc;
  const int64_t D = n.inWidth;
  const TensorView &g = weight(pn, ctx, "gate"), &u = weight(pn, ctx, "up"),
                   &dn = weight(pn, ctx, "down");
  expectShape(g, ctx, "gate", {-1, D});
  int64_t F = g.shape[0];
  expectShape(u, ctx, "up", {F, D});
  expectShape(dn, ctx, "down", {-1, F});
  n.a = matrixOf(g);
  n.b = matrixOf(u);
  n.c = matrixOf(dn);
  n.ffn = F;
  n.act = activationOf(pn.attrs, ctx);
  n.width = dn.shape[0];
}

void Executor::Impl::buildMoe(Node &n, const ProgramNode &pn) {
  const std::string &ctx = n.desc;
  const int64_t D = n.inWidth;
  const TensorView &r = weight(pn, ctx, "router");
  expectShape(r, ctx, "router", {-1, D});
  const int64_t E = r.shape[0];
  n.moe = ops::readMoeRouting(pn.attrs, E, ctx);
  const TensorView &g = weight(pn, ctx, "gate"), &u = weight(pn, ctx, "up"),
                   &dn = weight(pn, ctx, "down");
  expectShape(g, ctx, "gate", {E, -1, D});
  const int64_t F = g.shape[1];
  expectShape(u, ctx, "up", {E, F, D});
  expectShape(dn, ctx, "down", {E, -1, F});
  n.a = matrixOf(r);
  for (int64_t e = 0; e < E; ++e)
    for (const TensorView *t : {&g, &u, &dn})
      n.experts.push_back(slabOf(*t, e));
  n.ffn = F;
  n.act = activationOf(pn.attrs, ctx);
  n.width = dn.shape[1];
}

void Executor::Impl::buildLmHead(Node &n, const ProgramNode &pn) {
  const std::string &ctx = n.desc;
  const int64_t D = n.inWidth;
  const TensorView &w = weight(pn, ctx, "weight");
  expectShape(w, ctx, "weight", {-1, D});
  n.a = matrixOf(w);
  n.width = w.shape[0];
}

void Executor::Impl::buildPlan(const ExecutorOptions &o) {
  const bool present = hasKernelPlan(art.manifest());
  const bool refOnly = bool(hook) || stopAfterBlock >= 0;
  if (!o.skip_blocks.empty() && (o.engine == Engine::Reference || !present || refOnly))
    throw std::runtime_error(art.path() + ": skipping blocks (self-speculation) needs the "
                             "kernel engine and the artifact's kernel plan");
  if (o.engine == Engine::Reference || (o.engine == Engine::Auto && (!present || refOnly)))
    return;
  if (!present)
    throw std::runtime_error(art.path() + ": the artifact has no kernel plan (compiled without "
                             "kernels, or its model has ops with no kernel lowering); use the "
                             "reference engine");
  if (refOnly)
    throw std::runtime_error("the kernel engine has no linear-input hook or stop_after_block; "
                             "use the reference engine");
  PlanBindings bind;
  bind.matrix = [&](const std::string &name, const std::string &ctx) {
    const TensorView *t = packed.find(name);
    if (!t || t->shape.size() != 2)
      throw std::runtime_error(ctx + ": weight '" + name + "' is not a matrix of " + art.path());
    return matrixOf(*t);
  };
  bind.slabs = [&](const std::string &name, const std::string &ctx) {
    return packed.expertSlabs(name, ctx);
  };
  bind.vector = [&](const std::string &name, const std::string &ctx) {
    const TensorView *t = art.tensor(name);
    if (!t || t->shape.size() != 1)
      throw std::runtime_error(ctx + ": weight '" + name + "' is not a vector of " + art.path());
    return vectorOf(*t);
  };
  bind.cache = [&](int64_t layer, const std::string &ctx) {
    auto it = std::find(cacheLayers.begin(), cacheLayers.end(), layer);
    if (it == cacheLayers.end())
      throw std::runtime_error(ctx + ": no attention layer " + std::to_string(layer) +
                               " in the program");
    return int(it - cacheLayers.begin());
  };
  bind.int8_activations = !o.exact_activations;
  bind.release = [this](const uint8_t *data, int64_t bytes) { art.releasePages(data, uint64_t(bytes)); };
  bind.pool = &pool;
  if (o.generated_kernels) {
    generated = codegen::GeneratedKernels::load(art, o.trust, generatedHow);
    bind.generated = generated.get();
  } else {
    generatedHow = "generated kernels disabled";
  }
  plan = std::make_unique<PlanEngine>(
      o.skip_blocks.empty() ? art.manifest()["kernel_plan"]
                            : planWithoutBlocks(art.manifest()["kernel_plan"], o.skip_blocks),
      bind);
  if (plan->vocab() != widths[size_t(output)])
    throw std::runtime_error(art.path() + ": the kernel plan's logits width " +
                             std::to_string(plan->vocab()) + " differs from the program's " +
                             std::to_string(widths[size_t(output)]));
}

} // namespace llmc
