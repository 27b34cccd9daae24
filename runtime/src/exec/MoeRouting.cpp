//===- MoeRouting.cpp - Top-k routing of an MoE layer's rows --------------===//
#include "MoeRouting.h"
#include "../artifact/JsonFields.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace llmc::ops {

void routeToken(const MoeRouting &r, const float *l, RouteScratch &scratch,
                std::vector<std::pair<int64_t, float>> &chosen) {
  const int64_t E = r.experts;
  std::vector<double> &prob = scratch.prob;
  std::vector<int64_t> &order = scratch.order;
  prob.resize(size_t(E));
  order.resize(size_t(E));
  const float mx = *std::max_element(l, l + E);
  double sum = 0;
  for (int64_t e = 0; e < E; ++e)
    sum += prob[size_t(e)] = std::exp(double(l[e]) - mx);
  for (int64_t e = 0; e < E; ++e) {
    prob[size_t(e)] /= sum;
    order[size_t(e)] = e;
  }
  std::partial_sort(order.begin(), order.begin() + r.topK, order.end(), [&](int64_t a, int64_t b) {
    return prob[size_t(a)] > prob[size_t(b)] || (prob[size_t(a)] == prob[size_t(b)] && a < b);
  });
  const bool unit = r.gating == MoEGating::Unit;
  int64_t run = r.topK;
  if (r.energyThreshold > 0.0) {
    // Softmax gating: the gate times the expert's mean output norm. Unit
    // gating: the router's own output, which llm-moefy fits to this
    // token's output norm of the expert (a static ν would rank every
    // token's experts alike, so nearly all top k would always run).
    auto energy = [&](int64_t e) {
      return unit ? std::max(0.0, double(l[e]))
                  : prob[size_t(e)] * double(r.expertEnergy[size_t(e)]);
    };
    std::stable_sort(order.begin(), order.begin() + r.topK,
                     [&](int64_t a, int64_t b) { return energy(a) > energy(b); });
    double total = 0, acc = 0;
    for (int64_t i = 0; i < r.topK; ++i)
      total += energy(order[size_t(i)]);
    for (run = 0; run < r.topK;) {
      acc += energy(order[size_t(run)]);
      ++run;
      if (acc >= r.energyThreshold * total)
        break;
    }
  }
  double kept = 0;
  for (int64_t i = 0; i < run; ++i)
    kept += prob[size_t(order[size_t(i)])];
  chosen.clear();
  for (int64_t i = 0; i < run; ++i) {
    const int64_t e = order[size_t(i)];
    const double w = unit ? 1.0 : r.renormalize ? prob[size_t(e)] / kept : prob[size_t(e)];
    chosen.push_back({e, float(w)});
  }
}

MoeRouting readMoeRouting(const nlohmann::json &at, int64_t E, const std::string &ctx) {
  MoeRouting r;
  r.experts = E;
  const int64_t ne = jsonf::getInt(at, "num_experts", ctx, E);
  if (ne != E)
    throw std::runtime_error(ctx + ": num_experts " + std::to_string(ne) +
                             " does not match the router's " + std::to_string(E) + " rows");
  r.topK = jsonf::getInt(at, "top_k", ctx);
  if (r.topK < 1 || r.topK > E)
    throw std::runtime_error(ctx + ": top_k " + std::to_string(r.topK) + " must be in [1, " +
                             std::to_string(E) + "]");
  r.renormalize = jsonf::getBool(at, "renormalize", ctx, true);
  r.gating = jsonf::getEnum<MoEGating>(at, "gating", ctx, MoEGating::Softmax, parseMoEGating,
                                       spellingsMoEGating());
  r.energyThreshold = jsonf::getDouble(at, "energy_threshold", ctx, 0.0);
  if (!(r.energyThreshold >= 0.0 && r.energyThreshold <= 1.0))
    throw std::runtime_error(ctx + ": energy_threshold must be in [0, 1]");
  if (const nlohmann::json *nu = jsonf::find(at, "expert_energy")) {
    if (!nu->is_array() || int64_t(nu->size()) != E)
      throw std::runtime_error(ctx + ": expert_energy must be an array of " + std::to_string(E) +
                               " numbers");
    for (const nlohmann::json &v : *nu) {
      const double x = jsonf::asDouble(v, "expert_energy", ctx);
      if (!(x >= 0.0 && std::isfinite(x)))
        throw std::runtime_error(ctx + ": expert_energy values must be finite and >= 0");
      r.expertEnergy.push_back(float(x));
    }
  } else if (r.energyThreshold > 0.0) {
    throw std::runtime_error(ctx + ": energy_threshold > 0 needs expert_energy");
  }
  return r;
}

} // namespace llmc::ops
