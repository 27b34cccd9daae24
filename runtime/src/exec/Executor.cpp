//===- Executor.cpp - Run an artifact's Program on the CPU -----------------===//
// Construction resolves every node against the artifact: weights by name,
// shapes checked against the value widths flowing through the program,
// attributes read and checked, small vectors (norm weights, biases)
// converted to f32 once, and one f32 KV cache allocated per attention node.
// forward() then runs the nodes in order over [T, width] activations. An
// optional hook sees the input of every linear projection (calibration), and
// a forward can stop after a given block (attrs.block).
//===----------------------------------------------------------------------===//
#include "llmc/executor.h"

#include "../artifact/JsonFields.h"
#include "KernelPlan.h"
#include "Matmul.h"
#include "OpSpec.h"
#include "PackedWeights.h"
#include "Ops.h"
#include "ThreadPool.h"
#include "../kv/KvCache.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <cmath>
#include <set>
#include <stdexcept>

namespace llmc {

namespace {

enum class Op { Embed, RmsNorm, LayerNorm, Add, Attention, Mlp, Moe, LmHead };

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

/// A node ready to run.
struct Node {
  Op op;
  std::string desc; // "program node 3 (attention)"
  std::vector<int> in;
  int out = -1;
  int64_t width = 0;     // output width
  int64_t inWidth = 0;   // width of in[0]
  WeightMatrix a, b, c, d; // op-specific matrices (see build)
  const TensorView *gate3 = nullptr, *up3 = nullptr, *down3 = nullptr; // moe
  const TensorView *gate3Aux = nullptr, *up3Aux = nullptr, *down3Aux = nullptr; // side data
  std::vector<float> vec0, vec1, qBias, kBias, vBias;
  float eps = 1e-5f;
  ops::AttentionShape att{};
  std::vector<double> invFreq;
  RopeStyle rope = RopeStyle::Half;
  int cache = -1;
  Activation act = Activation::SiLU;
  int64_t ffn = 0, experts = 0, topK = 0;
  bool renormalize = true;
  int index = 0;      // program node index
  int64_t block = -1; // attrs.block
  // Linear-input sites for the hook: attention {q,k,v} {o}; mlp {gate,up}
  // {down}; moe {router} {gate,up} {down} (the last two per expert).
  struct Site {
    std::vector<std::string> roles, weights;
  };
  std::vector<Site> sites;
};


} // namespace

struct Executor::Impl {
  const Artifact &art;
  PackedWeights packed; // weights the compiler stored in the eight-row layout
  ThreadPool pool;
  int64_t maxCtx = 0;
  int64_t pos = 0;
  std::vector<Node> nodes;
  int output = -1;
  std::vector<int64_t> widths; // by value id
  std::vector<std::vector<float>> vals;
  std::vector<int64_t> valRows;
  std::vector<kv::LayerCache> caches;
  std::vector<int64_t> cacheLayers;   // the `layer` of each cache's node
  std::vector<std::string> cacheDesc; // its node, for errors
  bool kvRecord = false;
  // Scratch reused across steps.
  std::vector<float> sq, sk, sv, satt, sg, su, sx, sy, slogits, smoe;
  LinearInputHook hook;
  int64_t hookBlock = -1, stopAfterBlock = -1;
  std::unique_ptr<codegen::GeneratedKernels> generated; // the artifact's generated kernels
  std::string generatedHow;                             // which object, or why none
  std::unique_ptr<PlanEngine> plan; // the kernel plan, when it runs forward()
  std::vector<float> planLogits;

  Impl(const Artifact &a, const ExecutorOptions &o)
      : art(a), packed(a), pool(o.threads), hook(o.linear_input_hook), hookBlock(o.hook_block),
        stopAfterBlock(o.stop_after_block), kvRecord(o.kv_record) {
    int64_t ctx = a.config().context_length;
    maxCtx = o.max_context > 0 ? o.max_context : (ctx > 0 ? std::min<int64_t>(ctx, 4096) : 4096);
    build();
    buildPlan(o);
  }

  void buildPlan(const ExecutorOptions &o);

  void build();
  /// The tensor as a matrix, with its side data when its format has some.
  WeightMatrix matrixOf(const TensorView &t);
  const TensorView &weight(const ProgramNode &pn, const std::string &desc, const char *role);
  void expectShape(const TensorView &t, const std::string &desc, const char *role,
                   const std::vector<int64_t> &want);
  std::vector<float> vectorOf(const TensorView &t);

  std::vector<float> &value(int id, int64_t rows, int64_t width) {
    std::vector<float> &v = vals[size_t(id)];
    v.resize(size_t(rows * width));
    valRows[size_t(id)] = rows;
    return v;
  }

  void run(const Node &n, const std::vector<int32_t> &tokens, bool allLogits);

  /// Nodes [first, last) of block `block`, its one input from earlier nodes
  /// and its one output read by later nodes (or the program output); throws
  /// when the block is missing, not contiguous or has several of either.
  struct BlockSpan {
    size_t first = 0, last = 0;
    int input = -1, output = -1;
  };
  BlockSpan blockSpan(int64_t block) const;
  /// Show the hook the input x [rows, cols] of site `site` of node n.
  void observe(const Node &n, size_t site, const float *x, int64_t rows, int64_t cols,
               int64_t expert = -1) {
    if (!hook || (hookBlock >= 0 && n.block != hookBlock) || site >= n.sites.size())
      return;
    LinearInput in;
    in.node = n.index;
    in.block = n.block;
    in.expert = expert;
    in.roles = &n.sites[site].roles;
    in.weights = &n.sites[site].weights;
    in.x = x;
    in.rows = rows;
    in.cols = cols;
    hook(in);
  }
  void runAttention(const Node &n);
  void runMlp(const Node &n);
  void runMoe(const Node &n);
};

WeightMatrix Executor::Impl::matrixOf(const TensorView &t) {
  WeightMatrix w =
      WeightMatrix::of(t, needsAux(t.dtype) ? art.tensor(t.name + kAuxSuffix) : nullptr);
  packed.attach(t.name, w);
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

void Executor::Impl::build() {
  const Program &prog = art.program();
  if (prog.nodes.empty())
    throw std::runtime_error(art.path() + ": the artifact has no program to run");
  int maxId = prog.output;
  for (const ProgramNode &pn : prog.nodes) {
    maxId = std::max(maxId, pn.out);
    for (int i : pn.in)
      maxId = std::max(maxId, i);
  }
  if (maxId >= (1 << 24))
    throw std::runtime_error(art.path() + ": program value ids are too large");
  widths.assign(size_t(maxId + 1), -1);
  std::set<int64_t> cacheSlots;

  for (size_t idx = 0; idx < prog.nodes.size(); ++idx) {
    const ProgramNode &pn = prog.nodes[idx];
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
    auto site = [&](std::vector<std::string> roles) {
      Node::Site s;
      for (const std::string &r : roles)
        s.weights.push_back(pn.weights.count(r) ? pn.weights.at(r) : std::string());
      s.roles = std::move(roles);
      n.sites.push_back(std::move(s));
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
    n.in = pn.in;
    n.out = pn.out;
    n.inWidth = pn.in.empty() ? 0 : widths[size_t(pn.in[0])];
    const int64_t D = n.inWidth;
    const nlohmann::json &at = pn.attrs;
    const std::string &ctx = n.desc;
    auto actAttr = [&]() {
      return jsonf::getEnum<Activation>(at, "activation", ctx, Activation::SiLU, parseActivation,
                                        spellingsActivation());
    };

    switch (n.op) {
    case Op::Embed: {
      const TensorView &t = weight(pn, ctx, "table");
      expectShape(t, ctx, "table", {-1, -1});
      n.a = matrixOf(t);
      n.width = t.shape[1];
      break;
    }
    case Op::RmsNorm:
    case Op::LayerNorm: {
      const TensorView &w = weight(pn, ctx, "weight");
      expectShape(w, ctx, "weight", {D});
      n.vec0 = vectorOf(w);
      if (n.op == Op::LayerNorm && pn.weights.count("bias")) {
        const TensorView &b = weight(pn, ctx, "bias");
        expectShape(b, ctx, "bias", {D});
        n.vec1 = vectorOf(b);
      }
      double eps = jsonf::getDouble(at, "eps", ctx, 1e-5);
      if (!(eps >= 0))
        throw std::runtime_error(ctx + ": eps must be >= 0");
      n.eps = float(eps);
      n.width = D;
      break;
    }
    case Op::Add: {
      int64_t w1 = widths[size_t(pn.in[1])];
      if (w1 != D)
        throw std::runtime_error(ctx + ": adds values of widths " + std::to_string(D) + " and " +
                                 std::to_string(w1));
      n.width = D;
      break;
    }
    case Op::Attention: {
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
      if (pn.weights.count("q_bias")) {
        const TensorView &t = weight(pn, ctx, "q_bias");
        expectShape(t, ctx, "q_bias", {H * hd});
        n.qBias = vectorOf(t);
      }
      if (pn.weights.count("k_bias")) {
        const TensorView &t = weight(pn, ctx, "k_bias");
        expectShape(t, ctx, "k_bias", {KV * hd});
        n.kBias = vectorOf(t);
      }
      if (pn.weights.count("v_bias")) {
        const TensorView &t = weight(pn, ctx, "v_bias");
        expectShape(t, ctx, "v_bias", {KV * hd});
        n.vBias = vectorOf(t);
      }
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
      kv::Policy policy;
      if (const nlohmann::json *kp = jsonf::find(at, "kv_policy")) {
        if (kp->is_object() && kp->value("kind", "") == "sliding_window") {
          n.att.window = jsonf::getInt(*kp, "window", ctx + " kv_policy");
          if (n.att.window <= 0)
            throw std::runtime_error(ctx + ": kv_policy window must be positive");
        } else {
          policy = kv::parsePolicy(*kp, ctx, KV);
        }
      }
      int64_t layer = jsonf::getInt(at, "layer", ctx);
      if (layer < 0 || !cacheSlots.insert(layer).second)
        throw std::runtime_error(ctx + ": KV cache slot (layer " + std::to_string(layer) +
                                 ") is negative or used by another attention node");
      const WeightMatrix wo = n.d;
      n.cache = int(caches.size());
      caches.emplace_back(policy, layer, H, KV, hd, n.att.window, n.width,
                          [wo](int64_t r, float *dst) { loadRow(wo, r, dst); });
      caches.back().setRecording(kvRecord);
      cacheLayers.push_back(layer);
      cacheDesc.push_back(ctx);
      break;
    }
    case Op::Mlp: {
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
      n.act = actAttr();
      n.width = dn.shape[0];
      break;
    }
    case Op::Moe: {
      const TensorView &r = weight(pn, ctx, "router");
      expectShape(r, ctx, "router", {-1, D});
      int64_t E = r.shape[0];
      int64_t ne = jsonf::getInt(at, "num_experts", ctx, E);
      if (ne != E)
        throw std::runtime_error(ctx + ": num_experts " + std::to_string(ne) +
                                 " does not match the router's " + std::to_string(E) + " rows");
      int64_t k = jsonf::getInt(at, "top_k", ctx);
      if (k < 1 || k > E)
        throw std::runtime_error(ctx + ": top_k " + std::to_string(k) + " must be in [1, " +
                                 std::to_string(E) + "]");
      const TensorView &g = weight(pn, ctx, "gate"), &u = weight(pn, ctx, "up"),
                       &dn = weight(pn, ctx, "down");
      expectShape(g, ctx, "gate", {E, -1, D});
      int64_t F = g.shape[1];
      expectShape(u, ctx, "up", {E, F, D});
      expectShape(dn, ctx, "down", {E, -1, F});
      n.a = matrixOf(r);
      n.gate3 = &g;
      n.up3 = &u;
      n.down3 = &dn;
      n.gate3Aux = art.tensor(g.name + kAuxSuffix);
      n.up3Aux = art.tensor(u.name + kAuxSuffix);
      n.down3Aux = art.tensor(dn.name + kAuxSuffix);
      n.ffn = F;
      n.experts = E;
      n.topK = k;
      n.renormalize = jsonf::getBool(at, "renormalize", ctx, true);
      n.act = actAttr();
      n.width = dn.shape[1];
      break;
    }
    case Op::LmHead: {
      const TensorView &w = weight(pn, ctx, "weight");
      expectShape(w, ctx, "weight", {-1, D});
      n.a = matrixOf(w);
      n.width = w.shape[0];
      break;
    }
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

void Executor::Impl::buildPlan(const ExecutorOptions &o) {
  const bool present = hasKernelPlan(art.manifest());
  const bool refOnly = bool(hook) || stopAfterBlock >= 0;
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
  plan = std::make_unique<PlanEngine>(art.manifest()["kernel_plan"], bind);
  if (plan->vocab() != widths[size_t(output)])
    throw std::runtime_error(art.path() + ": the kernel plan's logits width " +
                             std::to_string(plan->vocab()) + " differs from the program's " +
                             std::to_string(widths[size_t(output)]));
}

void Executor::Impl::runAttention(const Node &n) {
  const std::vector<float> &xv = vals[size_t(n.in[0])];
  const int64_t T = valRows[size_t(n.in[0])], D = n.inWidth;
  const int64_t H = n.att.heads, hd = n.att.head_dim, KV = n.att.kv_heads;
  const int64_t qd = H * hd, kvd = KV * hd;
  sq.resize(size_t(T * qd));
  sk.resize(size_t(T * kvd));
  sv.resize(size_t(T * kvd));
  satt.resize(size_t(T * qd));
  const MatmulJob qkv[3] = {
      {&n.a, sq.data(), qd, n.qBias.empty() ? nullptr : n.qBias.data()},
      {&n.b, sk.data(), kvd, n.kBias.empty() ? nullptr : n.kBias.data()},
      {&n.c, sv.data(), kvd, n.vBias.empty() ? nullptr : n.vBias.data()}};
  observe(n, 0, xv.data(), T, D);
  matmulMany(pool, qkv, 3, xv.data(), T, D); // one parallel loop for all three

  kv::LayerCache &kc = caches[size_t(n.cache)];
  const int64_t p0 = pos;
  pool.parallelFor(0, T, 0, [&](int64_t lo, int64_t hi) {
    std::vector<float> cs(static_cast<size_t>(hd));
    for (int64_t t = lo; t < hi; ++t) {
      ops::applyRope(sq.data() + t * qd, H, hd, p0 + t, n.invFreq, n.rope, cs.data());
      ops::applyRope(sk.data() + t * kvd, KV, hd, p0 + t, n.invFreq, n.rope, cs.data());
    }
  });
  kc.append(sk.data(), sv.data(), T, kvd, p0);
  kc.attend(pool, sq.data(), T, satt.data());
  kc.afterStep(sq.data(), T, p0);
  observe(n, 1, satt.data(), T, qd);
  std::vector<float> &out = value(n.out, T, n.width);
  matmul(pool, n.d, satt.data(), T, qd, out.data(), n.width);
}

void Executor::Impl::runMlp(const Node &n) {
  const std::vector<float> &xv = vals[size_t(n.in[0])];
  const int64_t T = valRows[size_t(n.in[0])], D = n.inWidth, F = n.ffn;
  sg.resize(size_t(T * F));
  su.resize(size_t(T * F));
  // Gate and up in one loop; each row block gets its activation right away.
  const MatmulJob gateUp[2] = {{&n.a, sg.data(), F, nullptr}, {&n.b, su.data(), F, nullptr}};
  const RowEpilogue activate = [&](int64_t r0, int64_t nr) {
    for (int64_t t = 0; t < T; ++t)
      ops::gatedActivation(n.act, sg.data() + t * F + r0, su.data() + t * F + r0, nr);
  };
  observe(n, 0, xv.data(), T, D);
  matmulMany(pool, gateUp, 2, xv.data(), T, D, &activate);
  observe(n, 1, sg.data(), T, F);
  std::vector<float> &out = value(n.out, T, n.width);
  matmul(pool, n.c, sg.data(), T, F, out.data(), n.width);
}

void Executor::Impl::runMoe(const Node &n) {
  const std::vector<float> &xv = vals[size_t(n.in[0])];
  const int64_t T = valRows[size_t(n.in[0])], D = n.inWidth, F = n.ffn, E = n.experts;
  const int64_t Dout = n.width;
  slogits.resize(size_t(T * E));
  observe(n, 0, xv.data(), T, D);
  matmul(pool, n.a, xv.data(), T, D, slogits.data(), E);

  // Route: softmax over all experts, keep the top k (lowest id on ties).
  std::vector<std::vector<std::pair<int64_t, float>>> routed(static_cast<size_t>(E));
  std::vector<int64_t> order(static_cast<size_t>(E));
  std::vector<double> prob(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    const float *l = slogits.data() + t * E;
    float mx = *std::max_element(l, l + E);
    double sum = 0;
    for (int64_t e = 0; e < E; ++e)
      sum += prob[size_t(e)] = std::exp(double(l[e]) - mx);
    for (int64_t e = 0; e < E; ++e) {
      prob[size_t(e)] /= sum;
      order[size_t(e)] = e;
    }
    std::partial_sort(order.begin(), order.begin() + n.topK, order.end(), [&](int64_t a, int64_t b) {
      return prob[size_t(a)] > prob[size_t(b)] || (prob[size_t(a)] == prob[size_t(b)] && a < b);
    });
    double kept = 0;
    for (int64_t i = 0; i < n.topK; ++i)
      kept += prob[size_t(order[size_t(i)])];
    for (int64_t i = 0; i < n.topK; ++i) {
      int64_t e = order[size_t(i)];
      double w = n.renormalize ? prob[size_t(e)] / kept : prob[size_t(e)];
      routed[size_t(e)].push_back({t, float(w)});
    }
  }

  smoe.assign(size_t(T * Dout), 0.0f);
  for (int64_t e = 0; e < E; ++e) {
    const auto &list = routed[size_t(e)];
    if (list.empty())
      continue;
    const int64_t Te = int64_t(list.size());
    sx.resize(size_t(Te * D));
    for (int64_t i = 0; i < Te; ++i)
      std::copy(xv.data() + list[size_t(i)].first * D, xv.data() + (list[size_t(i)].first + 1) * D,
                sx.data() + i * D);
    sg.resize(size_t(Te * F));
    su.resize(size_t(Te * F));
    sy.resize(size_t(Te * Dout));
    observe(n, 1, sx.data(), Te, D, e);
    matmul(pool, WeightMatrix::slab(*n.gate3, e, n.gate3Aux), sx.data(), Te, D, sg.data(), F);
    matmul(pool, WeightMatrix::slab(*n.up3, e, n.up3Aux), sx.data(), Te, D, su.data(), F);
    ops::gatedActivation(n.act, sg.data(), su.data(), Te * F);
    observe(n, 2, sg.data(), Te, F, e);
    matmul(pool, WeightMatrix::slab(*n.down3, e, n.down3Aux), sg.data(), Te, F, sy.data(), Dout);
    for (int64_t i = 0; i < Te; ++i) {
      float w = list[size_t(i)].second;
      float *o = smoe.data() + list[size_t(i)].first * Dout;
      const float *y = sy.data() + i * Dout;
      for (int64_t k = 0; k < Dout; ++k)
        o[k] += w * y[k];
    }
  }
  std::vector<float> &out = value(n.out, T, Dout); // may alias the input: written last
  std::copy(smoe.begin(), smoe.end(), out.begin());
}

void Executor::Impl::run(const Node &n, const std::vector<int32_t> &tokens, bool allLogits) {
  switch (n.op) {
  case Op::Embed: {
    const int64_t T = int64_t(tokens.size());
    std::vector<float> &out = value(n.out, T, n.width);
    for (int64_t t = 0; t < T; ++t)
      loadRow(n.a, tokens[size_t(t)], out.data() + t * n.width);
    return;
  }
  case Op::RmsNorm:
  case Op::LayerNorm: {
    const int64_t R = valRows[size_t(n.in[0])];
    const float *x = vals[size_t(n.in[0])].data();
    std::vector<float> &out = value(n.out, R, n.width);
    if (n.op == Op::RmsNorm)
      ops::rmsNorm(x, n.vec0.data(), out.data(), R, n.width, n.eps);
    else
      ops::layerNorm(x, n.vec0.data(), n.vec1.empty() ? nullptr : n.vec1.data(), out.data(), R,
                     n.width, n.eps);
    return;
  }
  case Op::Add: {
    const int64_t R = valRows[size_t(n.in[0])];
    if (valRows[size_t(n.in[1])] != R)
      throw std::runtime_error(n.desc + ": inputs have different numbers of rows");
    // Copy inputs first: the output may alias an input id.
    sx.assign(vals[size_t(n.in[0])].begin(), vals[size_t(n.in[0])].end());
    const std::vector<float> &b = vals[size_t(n.in[1])];
    for (size_t i = 0; i < sx.size(); ++i)
      sx[i] += b[i];
    std::vector<float> &out = value(n.out, R, n.width);
    std::copy(sx.begin(), sx.end(), out.begin());
    return;
  }
  case Op::Attention:
    runAttention(n);
    return;
  case Op::Mlp:
    runMlp(n);
    return;
  case Op::Moe:
    runMoe(n);
    return;
  case Op::LmHead: {
    const int64_t R = valRows[size_t(n.in[0])];
    const bool lastOnly = !allLogits && n.out == output;
    const int64_t rows = lastOnly ? std::min<int64_t>(R, 1) : R;
    sx.assign(vals[size_t(n.in[0])].begin() + (R - rows) * n.inWidth, vals[size_t(n.in[0])].end());
    std::vector<float> &out = value(n.out, rows, n.width);
    matmul(pool, n.a, sx.data(), rows, n.inWidth, out.data(), n.width);
    return;
  }
  }
}

Executor::Executor(const Artifact &artifact, ExecutorOptions opts)
    : impl(std::make_unique<Impl>(artifact, opts)) {}

Executor::~Executor() = default;

std::vector<float> Executor::forward(const std::vector<int32_t> &tokens, bool all_logits) {
  Impl &m = *impl;
  const int64_t n = int64_t(tokens.size());
  if (n == 0)
    throw std::runtime_error("Executor::forward: no tokens given");
  if (m.pos + n > m.maxCtx)
    throw std::runtime_error("Executor::forward: positions " + std::to_string(m.pos) + ".." +
                             std::to_string(m.pos + n - 1) + " exceed the maximum context of " +
                             std::to_string(m.maxCtx) + " tokens");
  for (const Node &node : m.nodes)
    if (node.op == Op::Embed)
      for (int32_t id : tokens)
        if (id < 0 || id >= node.a.rows)
          throw std::runtime_error("Executor::forward: token id " + std::to_string(id) +
                                   " is out of range [0, " + std::to_string(node.a.rows) + ")");
  if (m.plan) {
    m.plan->run(m.pool, m.caches, tokens, m.pos, all_logits, m.planLogits);
    m.pos += n;
    return m.planLogits;
  }
  size_t end = m.nodes.size();
  if (m.stopAfterBlock >= 0) {
    end = 0;
    for (size_t i = 0; i < m.nodes.size(); ++i)
      if (m.nodes[i].block == m.stopAfterBlock)
        end = i + 1;
    if (end == 0)
      throw std::runtime_error("Executor::forward: stop_after_block " +
                               std::to_string(m.stopAfterBlock) + " names no block of " +
                               m.art.path());
  }
  for (size_t i = 0; i < end; ++i)
    m.run(m.nodes[i], tokens, all_logits);
  m.pos += n;
  if (end < m.nodes.size())
    return {};
  const std::vector<float> &out = m.vals[size_t(m.output)];
  const int64_t w = m.widths[size_t(m.output)], rows = m.valRows[size_t(m.output)];
  if (all_logits)
    return std::vector<float>(out.begin(), out.begin() + rows * w);
  return std::vector<float>(out.begin() + (rows - 1) * w, out.begin() + rows * w);
}

Executor::Impl::BlockSpan Executor::Impl::blockSpan(int64_t block) const {
  BlockSpan s;
  bool found = false;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].block != block)
      continue;
    if (found && i != s.last)
      throw std::runtime_error("block " + std::to_string(block) + " of " + art.path() +
                               " is not contiguous in the program");
    if (!found)
      s.first = i;
    found = true;
    s.last = i + 1;
  }
  if (!found)
    throw std::runtime_error("no block " + std::to_string(block) + " in " + art.path());
  auto inside = [&](int value) {
    for (size_t i = s.first; i < s.last; ++i)
      if (nodes[i].out == value)
        return true;
    return false;
  };
  for (size_t i = s.first; i < s.last; ++i)
    for (int v : nodes[i].in)
      if (!inside(v) && v != s.input) {
        if (s.input >= 0)
          throw std::runtime_error("block " + std::to_string(block) + " has several inputs");
        s.input = v;
      }
  for (size_t i = s.last; i < nodes.size(); ++i)
    for (int v : nodes[i].in)
      if (inside(v) && v != s.output) {
        if (s.output >= 0)
          throw std::runtime_error("block " + std::to_string(block) + " has several outputs");
        s.output = v;
      }
  if (s.output < 0 && inside(output))
    s.output = output;
  if (s.input < 0 || s.output < 0)
    throw std::runtime_error("block " + std::to_string(block) + " has no input or output");
  return s;
}

std::vector<float> Executor::blockInput(const std::vector<int32_t> &tokens, int64_t block) {
  Impl &m = *impl;
  if (tokens.empty() || int64_t(tokens.size()) > m.maxCtx)
    throw std::runtime_error("Executor::blockInput: " + std::to_string(tokens.size()) +
                             " tokens (1.." + std::to_string(m.maxCtx) + " allowed)");
  const Impl::BlockSpan span = m.blockSpan(block);
  for (size_t i = 0; i < span.first; ++i) {
    if (m.nodes[i].op == Op::Attention)
      throw std::runtime_error("Executor::blockInput: attention before block " +
                               std::to_string(block) + " (use forwardBlock block by block)");
    if (m.nodes[i].op == Op::Embed)
      for (int32_t id : tokens)
        if (id < 0 || id >= m.nodes[i].a.rows)
          throw std::runtime_error("Executor::blockInput: token id " + std::to_string(id) +
                                   " is out of range");
    m.run(m.nodes[i], tokens, false);
  }
  const int64_t rows = m.valRows[size_t(span.input)], w = m.widths[size_t(span.input)];
  const std::vector<float> &v = m.vals[size_t(span.input)];
  return std::vector<float>(v.begin(), v.begin() + rows * w);
}

std::vector<float> Executor::forwardBlock(int64_t block, const std::vector<float> &hidden) {
  Impl &m = *impl;
  const Impl::BlockSpan span = m.blockSpan(block);
  const int64_t w = m.widths[size_t(span.input)];
  if (hidden.empty() || int64_t(hidden.size()) % w != 0)
    throw std::runtime_error("Executor::forwardBlock: " + std::to_string(hidden.size()) +
                             " values are not whole rows of width " + std::to_string(w));
  const int64_t T = int64_t(hidden.size()) / w;
  if (m.pos + T > m.maxCtx)
    throw std::runtime_error("Executor::forwardBlock: positions beyond the maximum context of " +
                             std::to_string(m.maxCtx));
  std::vector<float> &in = m.value(span.input, T, w);
  std::copy(hidden.begin(), hidden.end(), in.begin());
  static const std::vector<int32_t> noTokens;
  for (size_t i = span.first; i < span.last; ++i)
    m.run(m.nodes[i], noTokens, true);
  m.pos += T;
  const int64_t rows = m.valRows[size_t(span.output)], ow = m.widths[size_t(span.output)];
  const std::vector<float> &v = m.vals[size_t(span.output)];
  return std::vector<float>(v.begin(), v.begin() + rows * ow);
}

int64_t Executor::pos() const { return impl->pos; }
const char *Executor::engineName() const { return impl->plan ? "kernels" : "reference"; }
std::string Executor::untrustedCodeWarning() const {
  const std::string &h = impl->generatedHow;
  return h.rfind("not run: ", 0) == 0 ? h.substr(9) : "";
}

std::string Executor::generatedKernelsInfo() const {
  if (!impl->plan)
    return "none (reference engine)";
  if (!impl->generated)
    return impl->generatedHow;
  return impl->generatedHow + ", " + std::to_string(impl->generated->size()) + " kernels for " +
         std::to_string(impl->plan->generatedProducts()) + " products and " +
         std::to_string(impl->plan->generatedOps()) + " of " + std::to_string(impl->plan->ops()) +
         " other ops";
}
std::string Executor::activationsInfo() const {
  if (!impl->plan || impl->plan->int8Products() == 0)
    return "f32";
  char mib[32];
  snprintf(mib, sizeof mib, "%.1f", double(impl->plan->rows8Bytes()) / (1 << 20));
  // Weights come packed from the compiler; older artifacts are packed here.
  return "int8 in " + std::to_string(impl->plan->int8Products()) + " products (" +
         (impl->packed.empty() ? "" : "eight-row layouts packed at compile time; ") +
         "repacked at load: " + mib + " MiB)";
}
void Executor::reset() {
  impl->pos = 0;
  for (kv::LayerCache &c : impl->caches)
    c.reset();
}
int64_t Executor::vocabSize() const { return impl->widths[size_t(impl->output)]; }
int64_t Executor::maxContext() const { return impl->maxCtx; }
int64_t Executor::kvCacheEntries() const {
  int64_t e = 0;
  for (const kv::LayerCache &c : impl->caches)
    e += c.entries();
  return e;
}

struct KvSnapshot {
  std::vector<kv::LayerCache> caches;
  int64_t pos = 0;
};

std::shared_ptr<const KvSnapshot> Executor::saveKv() const {
  auto s = std::make_shared<KvSnapshot>();
  s->caches = impl->caches;
  s->pos = impl->pos;
  return s;
}

void Executor::restoreKv(const KvSnapshot &snapshot) {
  if (snapshot.caches.size() != impl->caches.size())
    throw std::runtime_error("Executor::restoreKv: the snapshot is of another program");
  std::vector<kv::LayerCache> copy(snapshot.caches); // storage sized to the entries
  impl->caches.swap(copy);
  impl->pos = snapshot.pos;
}

void Executor::setKvPolicies(const std::map<int64_t, nlohmann::json> &by_layer, bool compress_now) {
  Impl &m = *impl;
  std::vector<kv::Policy> policies(m.caches.size());
  for (const auto &[layer, json] : by_layer) {
    auto it = std::find(m.cacheLayers.begin(), m.cacheLayers.end(), layer);
    if (it == m.cacheLayers.end())
      throw std::runtime_error("Executor::setKvPolicies: no attention node has layer " +
                               std::to_string(layer));
    size_t i = size_t(it - m.cacheLayers.begin());
    if (!json.is_null())
      policies[i] = kv::parsePolicy(json, m.cacheDesc[i], m.caches[i].kvHeads());
  }
  for (size_t i = 0; i < m.caches.size(); ++i)
    m.caches[i].setPolicy(policies[i], compress_now);
}

int64_t Executor::kvCacheBytes() const {
  int64_t bytes = 0;
  for (const kv::LayerCache &c : impl->caches)
    bytes += c.bytes();
  return bytes;
}

} // namespace llmc
