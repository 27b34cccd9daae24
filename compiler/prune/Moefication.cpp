//===- Moefication.cpp - A dense gated MLP cut into experts --------------===//
#include "compiler/prune/Moefication.h"

#include <algorithm>
#include <random>
#include <stdexcept>
#include <tuple>

namespace llmc::prune {

std::vector<int64_t> balancedClusters(const RowMatrix &rowsIn, int64_t groups, int64_t iters,
                                      uint64_t seed) {
  const int64_t F = rowsIn.rows();
  if (groups < 1 || F % groups != 0)
    throw std::invalid_argument(std::to_string(F) + " rows do not split into " +
                                std::to_string(groups) + " equal groups");
  const int64_t cap = F / groups;
  RowMatrix rows = rowsIn;
  for (int64_t i = 0; i < F; ++i) {
    const float n = rows.row(i).norm();
    if (n > 0)
      rows.row(i) /= n;
  }
  std::mt19937_64 rng(seed);
  std::vector<int64_t> perm(static_cast<size_t>(F));
  for (int64_t i = 0; i < F; ++i)
    perm[size_t(i)] = i;
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int64_t> group(static_cast<size_t>(F));
  for (int64_t i = 0; i < F; ++i) // a balanced random start
    group[size_t(perm[size_t(i)])] = i % groups;
  RowMatrix centre(groups, rows.cols());
  std::vector<std::tuple<float, int64_t, int64_t>> pairs;
  for (int64_t it = 0; it < iters; ++it) {
    centre.setZero();
    for (int64_t i = 0; i < F; ++i)
      centre.row(group[size_t(i)]) += rows.row(i);
    for (int64_t g = 0; g < groups; ++g) {
      const float n = centre.row(g).norm();
      if (n > 0)
        centre.row(g) /= n;
    }
    // Balanced assignment: every (row, group) pair by similarity, best
    // first; a row takes the best group that still has room.
    const RowMatrix sim = rows * centre.transpose();
    pairs.clear();
    for (int64_t i = 0; i < F; ++i)
      for (int64_t g = 0; g < groups; ++g)
        pairs.emplace_back(-sim(i, g), i, g);
    std::sort(pairs.begin(), pairs.end());
    std::vector<int64_t> size(static_cast<size_t>(groups), 0), next(static_cast<size_t>(F), -1);
    int64_t placed = 0;
    for (const auto &[negSim, i, g] : pairs) {
      if (next[size_t(i)] >= 0 || size[size_t(g)] >= cap)
        continue;
      next[size_t(i)] = g;
      ++size[size_t(g)];
      if (++placed == F)
        break;
    }
    if (next == group)
      break;
    group = std::move(next);
  }
  return group;
}

RowMatrix fitRouter(const RowMatrix &x, const RowMatrix &y, double ridge) {
  const Eigen::MatrixXd xd = x.cast<double>();
  Eigen::MatrixXd h = xd.transpose() * xd;
  const double mean = h.diagonal().mean();
  h.diagonal().array() += ridge * std::max(mean, 1e-12);
  const Eigen::MatrixXd rt = h.ldlt().solve(xd.transpose() * y.cast<double>()); // [D, E]
  return rt.transpose().cast<float>();
}

double topKRecall(const RowMatrix &predicted, const RowMatrix &truth, int64_t k) {
  const int64_t N = truth.rows(), E = truth.cols();
  std::vector<int64_t> a(static_cast<size_t>(E)), b(static_cast<size_t>(E));
  int64_t hit = 0;
  for (int64_t t = 0; t < N; ++t) {
    for (int64_t e = 0; e < E; ++e)
      a[size_t(e)] = b[size_t(e)] = e;
    auto top = [&](std::vector<int64_t> &ids, const RowMatrix &m) {
      std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int64_t i, int64_t j) {
        return m(t, i) > m(t, j) || (m(t, i) == m(t, j) && i < j);
      });
    };
    top(a, predicted);
    top(b, truth);
    for (int64_t i = 0; i < k; ++i)
      hit += std::count(b.begin(), b.begin() + k, a[size_t(i)]);
  }
  return N ? double(hit) / double(N * k) : 0.0;
}

MoeLayer splitMlp(const RowMatrix &gate, const RowMatrix &up, const RowMatrix &down,
                  const std::vector<int64_t> &group, int64_t experts, Activation act) {
  const int64_t F = gate.rows(), per = F / experts;
  MoeLayer m;
  m.act = act;
  m.gating = MoEGating::Unit;
  m.renormalize = false;
  m.router = RowMatrix::Zero(experts, gate.cols());
  for (int64_t e = 0; e < experts; ++e) {
    std::vector<int64_t> ids;
    for (int64_t j = 0; j < F; ++j)
      if (group[size_t(j)] == e)
        ids.push_back(j);
    if (int64_t(ids.size()) != per)
      throw std::invalid_argument("expert " + std::to_string(e) + " has " +
                                  std::to_string(ids.size()) + " neurons, expected " +
                                  std::to_string(per));
    RowMatrix g(per, gate.cols()), u(per, up.cols()), d(down.rows(), per);
    for (int64_t i = 0; i < per; ++i) {
      g.row(i) = gate.row(ids[size_t(i)]);
      u.row(i) = up.row(ids[size_t(i)]);
      d.col(i) = down.col(ids[size_t(i)]);
    }
    m.gate.push_back(std::move(g));
    m.up.push_back(std::move(u));
    m.down.push_back(std::move(d));
  }
  return m;
}

} // namespace llmc::prune
