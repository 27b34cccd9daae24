//===- QuantizeAwq.cpp - llm-quantize method=awq, one block ---------------===//
// Scale groups and where their scales fold (the IR says which op made x):
//   q,k,v  -> the rms_norm/layer_norm feeding the attention (gain, bias)
//   o      -> v's output rows (and bias), only when num_heads == num_kv_heads
//   gate,up-> the norm feeding the MLP
//   down   -> up's output rows (act(gate) * up is linear in up)
// A group is scaled only when the producer is used by this op alone (a
// shared norm or weight cannot take two different scales); otherwise its
// weights get clip search + RTN only. Then clip search (not for q, k) and
// RTN for every weight of the block. The loss is the output MSE of the
// group's linears on sampled calibration inputs (a simplification of AWQ's
// whole-module loss for attention). MoE expert tensors are left to RTN.
//===----------------------------------------------------------------------===//
#include "passes/quant/CalibrationSites.h"
#include "passes/quant/QuantizeContext.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"
#include <chrono>
#include <cmath>

using namespace mlir;

namespace llmc::quant {
namespace {

std::string weightName(Value v) {
  if (auto w = dyn_cast_or_null<llm::WeightOp>(v ? v.getDefiningOp() : nullptr))
    return w.getName().str();
  return "";
}

/// A weight whose single llm.weight op has a single use (safe to change).
bool soleUse(QuantizeContext &ctx, const std::string &name) {
  auto ops = ctx.opsOf(name);
  if (name.empty() || ops.size() != 1)
    return false;
  llm::WeightOp op = ops.front();
  return op.getResult().hasOneUse();
}

struct NormFold {
  std::string weight, bias;
};

/// The norm producing x, if its scales can be folded into it.
std::optional<NormFold> foldableNorm(QuantizeContext &ctx, Value x) {
  Operation *def = x.getDefiningOp();
  if (!def || !x.hasOneUse())
    return std::nullopt;
  NormFold f;
  if (auto n = dyn_cast<llm::RMSNormOp>(def)) {
    f.weight = weightName(n.getWeight());
  } else if (auto n = dyn_cast<llm::LayerNormOp>(def)) {
    f.weight = weightName(n.getWeight());
    if (n.getBias()) {
      f.bias = weightName(n.getBias());
      if (!soleUse(ctx, f.bias))
        return std::nullopt;
    }
  } else {
    return std::nullopt;
  }
  if (!soleUse(ctx, f.weight))
    return std::nullopt;
  return f;
}

class AwqBlock {
public:
  AwqBlock(QuantizeContext &ctx, int64_t block) : ctx(ctx), block(block) {}

  void run(std::vector<std::unique_ptr<CalibrationSite>> &sites) {
    ctx.module().walk([&](llm::LayerOp l) {
      if (int64_t(l.getIndex()) != block)
        return;
      l.walk([&](llm::AttentionOp a) { attentions.push_back(a); });
      l.walk([&](llm::MLPOp m) { mlps.push_back(m); });
    });
    // Scale searches in program order: q/k/v, o, gate/up, down (down's
    // fold changes up, which is quantized only afterwards).
    for (auto &s : sites)
      if (s->expert < 0 && s->sample && s->sample->sampled() > 0)
        scaleSite(*s);
    for (auto &s : sites)
      if (s->expert < 0 && s->sample && s->sample->sampled() > 0)
        quantizeSite(*s);
    for (auto &[name, v] : vectors)
      ctx.writeF32(name, {int64_t(v.size())}, v,
                   {{"method", "awq_scale"}, {"folded_into", true}});
  }

private:
  FloatWeight &matrix(const std::string &name) {
    auto it = work.find(name);
    if (it == work.end())
      it = work.emplace(name, ctx.load(name)).first;
    return it->second;
  }
  std::vector<float> &vec(const std::string &name) {
    auto it = vectors.find(name);
    if (it == vectors.end())
      it = vectors.emplace(name, ctx.load(name).data).first;
    return it->second;
  }
  bool allPending(const std::vector<std::string> &ws) {
    for (const std::string &w : ws)
      if (!ctx.pending(w) || ctx.opsOf(w).size() != 1 || matrix(w).shape.size() != 2)
        return false;
    return true;
  }

  /// Where this site's scales fold, or empty when they cannot.
  std::function<void(const std::vector<float> &)> folder(const CalibrationSite &s) {
    const std::string &w0 = s.weights.front();
    const std::string role = s.roles.front();
    if (!allPending(s.weights))
      return nullptr;
    for (llm::AttentionOp a : attentions) {
      if (role == "q" && weightName(a.getWq()) == w0) {
        auto nf = foldableNorm(ctx, a.getX());
        if (!nf)
          return nullptr;
        return [this, nf = *nf](const std::vector<float> &sc) { foldNorm(nf, sc); };
      }
      if (role == "o" && weightName(a.getWo()) == w0) {
        std::string v = weightName(a.getWv()), vb = weightName(a.getBv());
        if (a.getNumHeads() != a.getNumKvHeads() || !soleUse(ctx, v) || !ctx.pending(v) ||
            (a.getBv() && !soleUse(ctx, vb)))
          return nullptr;
        return [this, v, vb](const std::vector<float> &sc) {
          FloatWeight &m = matrix(v);
          divideRows(m.data.data(), m.rows, m.cols, sc.data());
          if (!vb.empty())
            divideVector(vec(vb).data(), int64_t(sc.size()), sc.data());
        };
      }
    }
    for (llm::MLPOp m : mlps) {
      if (role == "gate" && weightName(m.getGate()) == w0) {
        auto nf = foldableNorm(ctx, m.getX());
        if (!nf)
          return nullptr;
        return [this, nf = *nf](const std::vector<float> &sc) { foldNorm(nf, sc); };
      }
      if (role == "down" && weightName(m.getDown()) == w0) {
        std::string up = weightName(m.getUp());
        if (!soleUse(ctx, up) || !ctx.pending(up))
          return nullptr;
        return [this, up](const std::vector<float> &sc) {
          FloatWeight &u = matrix(up);
          divideRows(u.data.data(), u.rows, u.cols, sc.data());
        };
      }
    }
    return nullptr;
  }

  void foldNorm(const NormFold &nf, const std::vector<float> &sc) {
    divideVector(vec(nf.weight).data(), int64_t(sc.size()), sc.data());
    if (!nf.bias.empty())
      divideVector(vec(nf.bias).data(), int64_t(sc.size()), sc.data());
  }

  void scaleSite(CalibrationSite &s) {
    auto fold = folder(s);
    if (!fold)
      return;
    auto t0 = std::chrono::steady_clock::now();
    std::vector<MatrixView> views;
    for (const std::string &w : s.weights)
      views.push_back({matrix(w).data.data(), matrix(w).rows});
    AwqScaleResult r = awqSearchScales(views, s.cols, s.sample->sample(), s.sample->sampled(),
                                       s.sample->meanAbs(), ctx.spec());
    fold(r.scales);
    for (const std::string &w : s.weights) {
      FloatWeight &m = matrix(w);
      scaleColumns(m.data.data(), m.rows, m.cols, r.scales.data());
    }
    siteScales[&s] = r.scales;
    alphas[&s] = r.alpha;
    std::string roles;
    for (const std::string &x : s.roles)
      roles += (roles.empty() ? "" : ",") + x;
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ProgressLog(ctx.module()) << llvm::format("[llmc] awq block %lld %-10s alpha %.2f  out.mse %.3g -> %.3g "
                                 "(rtn -> scaled)  %.2fs\n",
                                 (long long)block, roles.c_str(), r.alpha, r.lossRtn, r.lossBest,
                                 secs);
  }

  void quantizeSite(CalibrationSite &s) {
    // The input the (scaled) weights now see: x / s.
    std::vector<float> x(s.sample->sample(), s.sample->sample() + s.sample->sampled() * s.cols);
    auto sc = siteScales.find(&s);
    if (sc != siteScales.end())
      for (int64_t t = 0; t < s.sample->sampled(); ++t)
        for (int64_t c = 0; c < s.cols; ++c)
          x[size_t(t * s.cols + c)] /= sc->second[size_t(c)];
    const int64_t n = s.sample->sampled();
    for (size_t i = 0; i < s.weights.size(); ++i) {
      const std::string &name = s.weights[i];
      if (!ctx.pending(name) || ctx.store().find(name)->shape.size() != 2)
        continue;
      auto t0 = std::chrono::steady_clock::now();
      FloatWeight &w = matrix(name);
      const bool clip = s.roles[i] != "q" && s.roles[i] != "k";
      std::vector<float> ratios;
      if (clip)
        ratios = awqSearchClip(w.data.data(), w.rows, w.cols, x.data(), n, ctx.spec());
      QuantizedMatrix q =
          rtnQuantize(w.data.data(), w.rows, w.cols, ctx.spec(), clip ? ratios.data() : nullptr);
      std::vector<float> back = q.dequantized();
      std::vector<float> zeros(back.size(), 0.0f);
      double err = outputMse(w.data.data(), back.data(), w.rows, w.cols, x.data(), n);
      double ref = outputMse(w.data.data(), zeros.data(), w.rows, w.cols, x.data(), n);
      nlohmann::json extra = {{"awq_scaled", sc != siteScales.end()}, {"clip_search", clip}};
      if (sc != siteScales.end())
        extra["alpha"] = alphas[&s];
      if (ref > 0)
        extra["out_rel_err"] = std::sqrt(err / ref);
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      ctx.writeQuantized(name, w, back, q.pack(), "awq", secs, extra);
      work.erase(name);
    }
  }

  QuantizeContext &ctx;
  int64_t block;
  std::vector<llm::AttentionOp> attentions;
  std::vector<llm::MLPOp> mlps;
  std::map<std::string, FloatWeight> work;           // matrices being transformed
  std::map<std::string, std::vector<float>> vectors; // norm gains / biases being transformed
  std::map<const CalibrationSite *, std::vector<float>> siteScales;
  std::map<const CalibrationSite *, double> alphas;
};

} // namespace

void awqBlock(QuantizeContext &ctx, std::vector<std::unique_ptr<CalibrationSite>> &sites,
              int64_t block) {
  AwqBlock(ctx, block).run(sites);
}

} // namespace llmc::quant
