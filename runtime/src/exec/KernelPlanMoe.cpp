//===- KernelPlanMoe.cpp - The kernel plan's norm_moe step ----------------===//
// An MoE layer in the kernel engine: the (fused) RMSNorm, the router's
// product, top-k routing (MoeRouting.h, shared with the reference
// executor), then for each expert that some row was routed to, its gated
// product and down projection over exactly those rows, through the same
// matmulMany paths (int8 activations, eight-row slabs, generated kernels)
// as a dense MLP. An expert no row chose costs nothing.
//===----------------------------------------------------------------------===//
#include "KernelPlan.h"
#include "../artifact/JsonFields.h"

#include <algorithm>
#include <stdexcept>

namespace llmc {

namespace {
void need(bool ok, const std::string &ctx, const std::string &what) {
  if (!ok)
    throw std::runtime_error(ctx + ": " + what);
}
} // namespace

void PlanEngine::checkNormMoe(PlanStep &s, const nlohmann::json &attrs) {
  const std::string &ctx = s.desc;
  const int64_t D = s.in[0].width, W = s.out.width;
  need(!s.w.empty() && (s.w.size() - 1) % 3 == 0 && s.w.size() > 1, ctx,
       "needs a router and whole experts (gate, up, down)");
  const int64_t E = int64_t(s.w.size() - 1) / 3;
  need(s.w[0].rows == E && s.w[0].cols == D, ctx,
       "the router must be [experts, input width] with one row per expert");
  const int64_t F = s.w[1].rows;
  for (int64_t e = 0; e < E; ++e) {
    const WeightMatrix *x = &s.w[size_t(1 + 3 * e)];
    need(x[0].rows == F && x[0].cols == D && x[1].rows == F && x[1].cols == D, ctx,
         "gate and up slabs must be [intermediate, input width]");
    need(x[2].rows == W && x[2].cols == F, ctx,
         "down slabs must be [output width, intermediate]");
  }
  need(s.in.size() < 2 || s.in[1].width == W, ctx, "the residual's width is not the output's");
  need(s.norm.empty() || int64_t(s.norm.size()) == D, ctx,
       "norm size differs from the input width");
  s.act = jsonf::getEnum<Activation>(attrs, "activation", ctx, std::nullopt, parseActivation,
                                     spellingsActivation());
  s.moe = ops::readMoeRouting(attrs, E, ctx);
}

MatmulPaths PlanEngine::pathsAt(const PlanStep &s, size_t first) const {
  MatmulPaths p;
  p.int8 = s.int8;
  p.generated8 = s.gen8.empty() ? nullptr : s.gen8.data() + first;
  p.generated = s.gen.empty() ? nullptr : s.gen.data() + first;
  return p;
}

void PlanEngine::runNormMoe(ThreadPool &pool, const PlanStep &s, const StepIO &io) {
  const int64_t rows = io.rows, D = s.in[0].width, W = s.out.width;
  const int64_t E = s.moe.experts, F = s.w[1].rows;
  MoeScratch &m = moe_;
  // x (normalised, or copied) first: the output may take x's slot.
  const float *x = io.in(s, 0);
  if (xn_.size() < size_t(rows * D))
    xn_.resize(size_t(rows * D));
  if (!s.norm.empty())
    rmsNorm(s, x, xn_.data(), rows);
  else
    std::copy(x, x + rows * D, xn_.begin());
  x = xn_.data();

  m.logits.resize(size_t(rows * E));
  const MatmulJob router{&s.w[0], m.logits.data(), E, nullptr};
  // The router with f32 activations: routing is a discrete choice, and int8
  // rounding of its input flips near-tied experts (llmk-select-kernels
  // stores the router row-major for this).
  MatmulPaths routerPaths = pathsAt(s, 0);
  routerPaths.int8 = false;
  routerPaths.generated8 = nullptr;
  matmulMany(pool, &router, 1, x, rows, D, nullptr, routerPaths);
  m.routed.resize(size_t(E));
  for (auto &list : m.routed)
    list.clear();
  for (int64_t t = 0; t < rows; ++t) {
    ops::routeToken(s.moe, m.logits.data() + t * E, m.route, m.chosen);
    for (const auto &[e, w] : m.chosen)
      m.routed[size_t(e)].push_back({t, w});
  }

  float *out = io.out;
  if (s.in.size() == 2) {
    const float *res = io.in(s, 1);
    if (res != out) // not planned in place: start from the residual
      std::copy(res, res + rows * W, out);
  } else {
    std::fill(out, out + rows * W, 0.0f);
  }
  for (int64_t e = 0; e < E; ++e) {
    const auto &list = m.routed[size_t(e)];
    if (list.empty())
      continue;
    const int64_t Te = int64_t(list.size());
    m.x.resize(size_t(Te * D));
    for (int64_t i = 0; i < Te; ++i)
      std::copy(x + list[size_t(i)].first * D, x + (list[size_t(i)].first + 1) * D,
                m.x.begin() + i * D);
    m.g.resize(size_t(Te * F));
    m.u.resize(size_t(Te * F));
    m.y.resize(size_t(Te * W));
    const size_t k = size_t(1 + 3 * e); // gate; up, down follow
    const MatmulJob gateUp[2] = {{&s.w[k], m.g.data(), F, nullptr},
                                 {&s.w[k + 1], m.u.data(), F, nullptr}};
    const RowEpilogue act = gateEpilogue(s, m.g.data(), m.u.data(), Te, F);
    matmulMany(pool, gateUp, 2, m.x.data(), Te, D, &act, pathsAt(s, k));
    const MatmulJob down{&s.w[k + 2], m.y.data(), W, nullptr};
    matmulMany(pool, &down, 1, m.g.data(), Te, F, nullptr, pathsAt(s, k + 2));
    for (int64_t i = 0; i < Te; ++i) {
      const float wt = list[size_t(i)].second;
      float *o = out + list[size_t(i)].first * W;
      const float *y = m.y.data() + i * W;
      for (int64_t c = 0; c < W; ++c)
        o[c] += wt * y[c];
    }
  }
}

} // namespace llmc
