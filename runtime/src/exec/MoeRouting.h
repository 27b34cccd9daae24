//===- MoeRouting.h - Top-k routing of an MoE layer's rows ------*- C++ -*-===//
// Shared by the reference executor (program node "moe") and the kernel
// engine (kernel_plan step "norm_moe"), so both route every row alike.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/model.h"

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace llmc::ops {

/// How an MoE layer routes its rows (llm.moe's attributes).
struct MoeRouting {
  int64_t experts = 0, topK = 0;
  MoEGating gating = MoEGating::Softmax; // how routed experts are weighted
  bool renormalize = true;
  std::vector<float> expertEnergy; // adaptive activation: nu per expert
  double energyThreshold = 0;      // adaptive activation: tau (0: off)
};

/// Reused buffers of routeToken.
struct RouteScratch {
  std::vector<double> prob;
  std::vector<int64_t> order;
};

/// The experts a row with router logits `l` [experts] runs and their
/// weights: softmax over all experts, the top k (lowest id on ties); with
/// adaptive activation only the prefix of them, by predicted energy (g_e *
/// nu_e with softmax gating; with unit gating max(l_e, 0), the router's
/// prediction of the expert's output norm), that reaches energyThreshold
/// of the top k's energy. Softmax
/// gating weights each by its probability (renormalized over the experts
/// that run when `renormalize`), unit gating by 1.
void routeToken(const MoeRouting &r, const float *l, RouteScratch &scratch,
                std::vector<std::pair<int64_t, float>> &chosen);

/// The routing attributes of an MoE node or step (`attrs`: top_k,
/// renormalize, gating, energy_threshold, expert_energy) for `experts`
/// experts, checked; throws std::runtime_error naming `ctx`.
MoeRouting readMoeRouting(const nlohmann::json &attrs, int64_t experts, const std::string &ctx);

} // namespace llmc::ops
