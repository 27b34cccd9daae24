//===- ExpertScores.h - Which MoE experts expert pruning keeps --*- C++ -*-===//
// The numerics of llm-prune-experts, plain C++ with Eigen (no MLIR, so unit
// tests link it alone). One MoE layer: E experts f_e, a router R [E, D],
// gates g(x) per the layer's semantics (softmax over all experts, top k,
// optionally renormalized over them; or unit gates: 1 for each routed
// expert), output y(x) = sum over routed e of g_e(x) f_e(x). Calibration
// rows X [N, D] are the inputs the layer saw.
//
// Every method gives a ranking: the experts in the order they are kept (the
// first k are the layer's k survivors), and where it has one an error curve
// err[k] = ||y - y_k||^2 / ||y||^2 for k kept:
//  - frequency: routed-token counts, most routed first;
//  - norm: mean ||f_e(x)|| over the tokens routed to e (gate-free);
//  - omp (our reading of the OMP-MoE abstract, ../shared/methods/
//    expert_pruning.md): atoms a_e = g_e f_e over the routed tokens (zero
//    where e was not routed), target b = y; orthogonal matching pursuit on
//    the Gram matrix A^T A and A^T b (exact, no sketch: E is small) picks
//    the atom most correlated with the residual, refits the least-squares
//    weights beta of the chosen set, err[k] is the least-squares residual.
//    Only routed expert outputs are computed (one routed forward);
//  - greedy (NAEE-style reconstruction search, the search-cost reference):
//    backward elimination that removes, each step, the expert whose loss
//    (tokens re-routed among the survivors) changes y least; err[k] is
//    that re-routed error. Needs every expert on every token (E / k times
//    the routed forward) and O(E^2) re-routed evaluations.
// Allocation: uniform (every layer keeps the same count) or water-filling:
// each layer's cost c_l(k) = err_l(k) + lambda * change_l(k) (change: share
// of calibration tokens whose top-k set loses an expert) and one expert at
// a time goes to the layer whose cost falls most.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/ir_enums.h"
#include <Eigen/Dense>
#include <cstdint>
#include <vector>

namespace llmc::prune {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// One MoE layer's weights in f32 and its routing semantics.
struct MoeLayer {
  RowMatrix router;                  // [E, D]
  std::vector<RowMatrix> gate, up;   // per expert [F, D]
  std::vector<RowMatrix> down;       // per expert [Dout, F]
  Activation act = Activation::SiLU;
  MoEGating gating = MoEGating::Softmax;
  bool renormalize = true;
  int64_t topK = 1;
  int64_t experts() const { return int64_t(router.rows()); }
};

/// act(x W_g^T) * (x W_u^T) of neurons `gate`/`up` rows: [N, F].
RowMatrix gatedHidden(const RowMatrix &x, const RowMatrix &gate, const RowMatrix &up,
                      Activation act);

/// Expert e's output on rows x: [N, Dout].
RowMatrix expertOutput(const MoeLayer &m, int64_t e, const RowMatrix &x);

/// Each token's routed experts and gates; only experts with alive[e] (empty:
/// all) take part (softmax over the alive ones, as a sliced router does).
struct Routes {
  std::vector<std::vector<std::pair<int64_t, float>>> tokens;
};
Routes route(const MoeLayer &m, const RowMatrix &x, const std::vector<bool> &alive = {});

/// What one routed forward over the calibration rows gives.
struct RoutedStats {
  std::vector<int64_t> count;       // tokens routed to each expert
  std::vector<double> meanNorm;     // mean ||f_e(x)|| over them (nu_e)
  std::vector<double> maxAbs;       // largest |f_e(x)| entry over them
  Eigen::MatrixXd gram;             // A^T A of the gated atoms
  Eigen::VectorXd corr;             // A^T y
  double targetEnergy = 0;          // ||y||^2
};
RoutedStats routedStats(const MoeLayer &m, const RowMatrix &x, const Routes &routes);

struct Ranking {
  std::vector<int64_t> order;  // kept first
  std::vector<double> err;     // err[k], k = 0..E (empty: the method has none)
  std::vector<double> beta;    // omp: least-squares weight of each expert at the
                               // layer's final keep count (filled by the caller)
};

Ranking rankByScore(const std::vector<double> &score); // highest first, lowest id on ties
Ranking ompRanking(const RoutedStats &s);
/// The least-squares weights of the atoms `kept` (by expert id, size E, 0
/// for the others).
std::vector<double> ompWeights(const RoutedStats &s, const std::vector<int64_t> &kept);
/// Backward elimination; never goes below the layer's top k. `dense` holds
/// every expert's output on every row.
Ranking greedyRanking(const MoeLayer &m, const RowMatrix &x, const std::vector<RowMatrix> &dense);

/// change[k]: share of tokens whose routed set holds an expert outside
/// order[0..k).
std::vector<double> routingChange(const Ranking &r, const Routes &routes, int64_t experts);

/// Protected experts (max |f_e| above `factor` x the median of the layer's
/// maxima; factor <= 0: none) move to the front of the ranking, largest
/// first. Returns their ids.
std::vector<int64_t> protectOutliers(Ranking &r, const std::vector<double> &maxAbs, double factor);

/// Keep counts per layer summing to `budget`, each in [minKeep[l], E_l]:
/// from minKeep, one more expert at a time to the layer whose cost[l][k]
/// falls most (ties: the lowest layer). Throws std::invalid_argument when
/// the budget is outside [sum minKeep, sum E_l].
std::vector<int64_t> waterfill(const std::vector<std::vector<double>> &cost,
                               const std::vector<int64_t> &minKeep, int64_t budget);

/// Mean experts run per token under adaptive activation (threshold tau,
/// energies nu per expert) among the routed sets `routes`.
double adaptiveRunShare(const MoeLayer &m, const RowMatrix &x, const std::vector<bool> &alive,
                        const std::vector<double> &nu, double tau);

} // namespace llmc::prune
