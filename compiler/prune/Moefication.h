//===- Moefication.h - A dense gated MLP cut into experts ------*- C++ -*-===//
// The numerics of llm-moefy (MoEfication, Zhang et al. 2022, on gated
// MLPs): the F neurons of a dense MLP down(act(gate x) * up x) are split
// into E groups of F / E, each group an expert (its gate/up rows and down
// columns); with every expert run the layer is the dense MLP exactly.
//  - Grouping, balanced spherical k-means over one feature vector per
//    neuron: `coactivation` uses |h_j| on calibration tokens (neurons that
//    fire together share an expert, so few experts carry a token), `weights`
//    the neuron's gate and up rows (data-free).
//  - The router [E, D] is fitted by ridge regression from the MLP's input x
//    to each expert's output norm ||down_e h_e(x)|| on calibration tokens;
//    at run time the top k experts by predicted norm run, each with weight 1
//    (unit gating).
//===----------------------------------------------------------------------===//
#pragma once
#include "compiler/prune/ExpertScores.h"
#include <cstdint>
#include <vector>

namespace llmc::prune {

/// Balanced spherical k-means: `rows` [F, m] into `groups` groups of
/// exactly F / groups rows (F must divide), `iters` rounds from a seeded
/// start. Returns each row's group.
std::vector<int64_t> balancedClusters(const RowMatrix &rows, int64_t groups, int64_t iters,
                                      uint64_t seed);

/// Ridge regression y ~ x R^T: R [targets, D] with ridge weight `ridge` x
/// the mean diagonal of x^T x.
RowMatrix fitRouter(const RowMatrix &x, const RowMatrix &y, double ridge);

/// Share of tokens' true top-k experts (by `truth` [N, E]) that the top k
/// by `predicted` [N, E] also picks.
double topKRecall(const RowMatrix &predicted, const RowMatrix &truth, int64_t k);

/// The dense MLP (gate/up [F, D], down [Dout, F]) as E experts of the
/// neurons `group` assigns them (expert e's neurons in ascending order).
MoeLayer splitMlp(const RowMatrix &gate, const RowMatrix &up, const RowMatrix &down,
                  const std::vector<int64_t> &group, int64_t experts, Activation act);

} // namespace llmc::prune
