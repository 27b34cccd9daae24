//===- ExpertScores.cpp - Which MoE experts expert pruning keeps ---------===//
#include "compiler/prune/ExpertScores.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <queue>
#include <stdexcept>

namespace llmc::prune {

namespace {

struct RoutedExpert {
  int64_t expert;
  double prob; // softmax probability among the alive experts
  float gate;  // the weight its output gets
};

/// The runtime's routing of one token (runtime/src/exec/ExecutorSteps.cpp,
/// without adaptive activation) over the alive experts.
void routeRow(const MoeLayer &m, const float *logits, const std::vector<bool> &alive,
              std::vector<RoutedExpert> &out) {
  const int64_t E = m.experts();
  std::vector<int64_t> ids;
  for (int64_t e = 0; e < E; ++e)
    if (alive.empty() || alive[size_t(e)])
      ids.push_back(e);
  float mx = -INFINITY;
  for (int64_t e : ids)
    mx = std::max(mx, logits[e]);
  std::vector<double> p(size_t(E), 0.0);
  double sum = 0;
  for (int64_t e : ids)
    sum += p[size_t(e)] = std::exp(double(logits[e]) - mx);
  for (int64_t e : ids)
    p[size_t(e)] /= sum;
  const int64_t k = std::min<int64_t>(m.topK, int64_t(ids.size()));
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int64_t a, int64_t b) {
    return p[size_t(a)] > p[size_t(b)] || (p[size_t(a)] == p[size_t(b)] && a < b);
  });
  double kept = 0;
  for (int64_t i = 0; i < k; ++i)
    kept += p[size_t(ids[size_t(i)])];
  out.clear();
  for (int64_t i = 0; i < k; ++i) {
    const int64_t e = ids[size_t(i)];
    const double g = m.gating == MoEGating::Unit ? 1.0
                     : m.renormalize             ? p[size_t(e)] / kept
                                                 : p[size_t(e)];
    out.push_back({e, p[size_t(e)], float(g)});
  }
}

void activate(Activation act, float *g, const float *u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = g[i];
    const float a = act == Activation::SiLU
                        ? x / (1.0f + std::exp(-x))
                        : 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
    g[i] = a * u[i];
  }
}

/// Rows `rows` of x.
RowMatrix gatherRows(const RowMatrix &x, const std::vector<int64_t> &rows) {
  RowMatrix out(int64_t(rows.size()), x.cols());
  for (size_t i = 0; i < rows.size(); ++i)
    out.row(int64_t(i)) = x.row(rows[i]);
  return out;
}

} // namespace

RowMatrix gatedHidden(const RowMatrix &x, const RowMatrix &gate, const RowMatrix &up,
                      Activation act) {
  RowMatrix g = x * gate.transpose();
  const RowMatrix u = x * up.transpose();
  activate(act, g.data(), u.data(), g.size());
  return g;
}

RowMatrix expertOutput(const MoeLayer &m, int64_t e, const RowMatrix &x) {
  return gatedHidden(x, m.gate[size_t(e)], m.up[size_t(e)], m.act) *
         m.down[size_t(e)].transpose();
}

Routes route(const MoeLayer &m, const RowMatrix &x, const std::vector<bool> &alive) {
  const RowMatrix logits = x * m.router.transpose();
  Routes r;
  r.tokens.resize(size_t(x.rows()));
  std::vector<RoutedExpert> row;
  for (int64_t t = 0; t < x.rows(); ++t) {
    routeRow(m, logits.data() + t * logits.cols(), alive, row);
    for (const RoutedExpert &re : row)
      r.tokens[size_t(t)].push_back({re.expert, re.gate});
  }
  return r;
}

RoutedStats routedStats(const MoeLayer &m, const RowMatrix &x, const Routes &routes) {
  const int64_t E = m.experts(), N = x.rows(), Dout = m.down[0].rows();
  RoutedStats s;
  s.count.assign(size_t(E), 0);
  s.meanNorm.assign(size_t(E), 0.0);
  s.maxAbs.assign(size_t(E), 0.0);
  // Atoms as [N, Dout] per expert, zero where not routed; y their sum.
  std::vector<RowMatrix> atom(size_t(E), RowMatrix::Zero(N, Dout));
  for (int64_t e = 0; e < E; ++e) {
    std::vector<int64_t> rows;
    std::vector<float> gates;
    for (int64_t t = 0; t < N; ++t)
      for (const auto &[id, g] : routes.tokens[size_t(t)])
        if (id == e) {
          rows.push_back(t);
          gates.push_back(g);
        }
    s.count[size_t(e)] = int64_t(rows.size());
    if (rows.empty())
      continue;
    const RowMatrix out = expertOutput(m, e, gatherRows(x, rows));
    double norms = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      norms += double(out.row(int64_t(i)).norm());
      s.maxAbs[size_t(e)] = std::max(s.maxAbs[size_t(e)], double(out.row(int64_t(i)).cwiseAbs().maxCoeff()));
      atom[size_t(e)].row(rows[i]) = gates[i] * out.row(int64_t(i));
    }
    s.meanNorm[size_t(e)] = norms / double(rows.size());
  }
  RowMatrix y = RowMatrix::Zero(N, Dout);
  for (const RowMatrix &a : atom)
    y += a;
  s.gram.resize(E, E);
  s.corr.resize(E);
  for (int64_t a = 0; a < E; ++a) {
    s.corr(a) = double(atom[size_t(a)].cwiseProduct(y).sum());
    for (int64_t b = a; b < E; ++b)
      s.gram(a, b) = s.gram(b, a) = double(atom[size_t(a)].cwiseProduct(atom[size_t(b)]).sum());
  }
  s.targetEnergy = double(y.squaredNorm());
  return s;
}

Ranking rankByScore(const std::vector<double> &score) {
  Ranking r;
  r.order.resize(score.size());
  std::iota(r.order.begin(), r.order.end(), 0);
  std::stable_sort(r.order.begin(), r.order.end(),
                   [&](int64_t a, int64_t b) { return score[size_t(a)] > score[size_t(b)]; });
  return r;
}

std::vector<double> ompWeights(const RoutedStats &s, const std::vector<int64_t> &kept) {
  const int64_t E = int64_t(s.corr.size()), k = int64_t(kept.size());
  std::vector<double> beta(size_t(E), 0.0);
  if (k == 0)
    return beta;
  Eigen::MatrixXd g(k, k);
  Eigen::VectorXd c(k);
  for (int64_t i = 0; i < k; ++i) {
    c(i) = s.corr(kept[size_t(i)]);
    for (int64_t j = 0; j < k; ++j)
      g(i, j) = s.gram(kept[size_t(i)], kept[size_t(j)]);
  }
  // A tiny ridge keeps an expert that saw no token (a zero atom) solvable.
  g.diagonal().array() += 1e-12 * std::max(1.0, g.diagonal().maxCoeff());
  const Eigen::VectorXd b = g.ldlt().solve(c);
  for (int64_t i = 0; i < k; ++i)
    beta[size_t(kept[size_t(i)])] = b(i);
  return beta;
}

Ranking ompRanking(const RoutedStats &s) {
  const int64_t E = int64_t(s.corr.size());
  const double total = std::max(s.targetEnergy, 1e-300);
  Ranking r;
  r.err.assign(size_t(E + 1), 1.0);
  std::vector<bool> chosen(size_t(E), false);
  std::vector<double> beta(size_t(E), 0.0);
  for (int64_t step = 0; step < E; ++step) {
    // Correlation of each atom with the residual: A^T (y - A beta).
    int64_t best = -1;
    double bestScore = -1;
    for (int64_t e = 0; e < E; ++e) {
      if (chosen[size_t(e)])
        continue;
      double c = s.corr(e);
      for (int64_t j = 0; j < E; ++j)
        c -= s.gram(e, j) * beta[size_t(j)];
      const double score = std::abs(c) / std::sqrt(std::max(s.gram(e, e), 1e-300));
      if (score > bestScore) {
        bestScore = score;
        best = e;
      }
    }
    chosen[size_t(best)] = true;
    r.order.push_back(best);
    beta = ompWeights(s, r.order);
    // ||y - A beta||^2 = ||y||^2 - 2 beta^T A^T y + beta^T G beta.
    Eigen::VectorXd bv = Eigen::Map<const Eigen::VectorXd>(beta.data(), E);
    const double resid = s.targetEnergy - 2.0 * bv.dot(s.corr) + bv.dot(s.gram * bv);
    r.err[size_t(step + 1)] = std::max(0.0, resid) / total;
  }
  return r;
}

namespace {

/// ||y - y_alive||^2 with the tokens re-routed among the alive experts.
double reroutedError(const MoeLayer &m, const RowMatrix &logits, const std::vector<RowMatrix> &dense,
                     const RowMatrix &y, const std::vector<bool> &alive) {
  std::vector<RoutedExpert> row;
  double err = 0;
  Eigen::RowVectorXf yt(y.cols());
  for (int64_t t = 0; t < y.rows(); ++t) {
    routeRow(m, logits.data() + t * logits.cols(), alive, row);
    yt.setZero();
    for (const RoutedExpert &re : row)
      yt += re.gate * dense[size_t(re.expert)].row(t);
    err += double((y.row(t) - yt).squaredNorm());
  }
  return err;
}

} // namespace

Ranking greedyRanking(const MoeLayer &m, const RowMatrix &x, const std::vector<RowMatrix> &dense) {
  const int64_t E = m.experts();
  const RowMatrix logits = x * m.router.transpose();
  std::vector<bool> alive(size_t(E), true);
  RowMatrix y = RowMatrix::Zero(x.rows(), dense[0].cols());
  {
    std::vector<RoutedExpert> row;
    for (int64_t t = 0; t < x.rows(); ++t) {
      routeRow(m, logits.data() + t * logits.cols(), {}, row);
      for (const RoutedExpert &re : row)
        y.row(t) += re.gate * dense[size_t(re.expert)].row(t);
    }
  }
  const double total = std::max(double(y.squaredNorm()), 1e-300);
  Ranking r;
  r.err.assign(size_t(E + 1), 1.0);
  r.err[size_t(E)] = 0.0;
  std::vector<int64_t> removed; // in elimination order
  for (int64_t left = E; left > m.topK; --left) {
    int64_t best = -1;
    double bestErr = INFINITY;
    for (int64_t e = 0; e < E; ++e) {
      if (!alive[size_t(e)])
        continue;
      alive[size_t(e)] = false;
      const double err = reroutedError(m, logits, dense, y, alive);
      alive[size_t(e)] = true;
      if (err < bestErr) {
        bestErr = err;
        best = e;
      }
    }
    alive[size_t(best)] = false;
    removed.push_back(best);
    r.err[size_t(left - 1)] = bestErr / total;
  }
  for (int64_t e = 0; e < E; ++e)
    if (alive[size_t(e)])
      r.order.push_back(e);
  // The survivors have no order among themselves: rank them by how much
  // the error grows without each (largest first), so order stays a ranking.
  std::vector<double> without(size_t(E), 0.0);
  for (int64_t e : r.order) {
    alive[size_t(e)] = false;
    without[size_t(e)] = r.order.size() > 1 ? reroutedError(m, logits, dense, y, alive) : 0.0;
    alive[size_t(e)] = true;
  }
  std::stable_sort(r.order.begin(), r.order.end(),
                   [&](int64_t a, int64_t b) { return without[size_t(a)] > without[size_t(b)]; });
  r.order.insert(r.order.end(), removed.rbegin(), removed.rend());
  return r;
}

std::vector<double> routingChange(const Ranking &r, const Routes &routes, int64_t experts) {
  std::vector<int64_t> rank(size_t(experts), experts);
  for (size_t i = 0; i < r.order.size(); ++i)
    rank[size_t(r.order[i])] = int64_t(i);
  // A token changes for every k <= the worst rank among its routed experts.
  std::vector<int64_t> changedAtMost(size_t(experts + 2), 0);
  for (const auto &tok : routes.tokens) {
    int64_t worst = -1;
    for (const auto &[e, g] : tok)
      worst = std::max(worst, rank[size_t(e)]);
    ++changedAtMost[size_t(worst + 1)]; // kept k < worst + 1 loses it
  }
  std::vector<double> change(size_t(experts + 1), 0.0);
  const double n = std::max<double>(1.0, double(routes.tokens.size()));
  int64_t above = 0; // tokens whose worst rank + 1 > k
  for (int64_t k = experts; k >= 0; --k) {
    above += changedAtMost[size_t(k + 1)];
    change[size_t(k)] = double(above) / n;
  }
  return change;
}

std::vector<int64_t> protectOutliers(Ranking &r, const std::vector<double> &maxAbs, double factor) {
  std::vector<int64_t> guarded;
  if (!(factor > 0) || maxAbs.empty())
    return guarded;
  std::vector<double> sorted = maxAbs;
  std::nth_element(sorted.begin(), sorted.begin() + long(sorted.size() / 2), sorted.end());
  const double median = sorted[sorted.size() / 2];
  for (size_t e = 0; e < maxAbs.size(); ++e)
    if (maxAbs[e] > factor * median)
      guarded.push_back(int64_t(e));
  std::stable_sort(guarded.begin(), guarded.end(),
                   [&](int64_t a, int64_t b) { return maxAbs[size_t(a)] > maxAbs[size_t(b)]; });
  std::vector<int64_t> order = guarded;
  for (int64_t e : r.order)
    if (std::find(guarded.begin(), guarded.end(), e) == guarded.end())
      order.push_back(e);
  r.order = std::move(order);
  return guarded;
}

std::vector<int64_t> waterfill(const std::vector<std::vector<double>> &cost,
                               const std::vector<int64_t> &minKeep, int64_t budget) {
  const size_t L = cost.size();
  std::vector<int64_t> keep = minKeep;
  int64_t lo = 0, hi = 0;
  for (size_t l = 0; l < L; ++l) {
    lo += minKeep[l];
    hi += int64_t(cost[l].size()) - 1;
  }
  if (budget < lo || budget > hi)
    throw std::invalid_argument("keep budget " + std::to_string(budget) + " is outside [" +
                                std::to_string(lo) + ", " + std::to_string(hi) + "]");
  for (int64_t given = lo; given < budget; ++given) {
    size_t best = L;
    double bestGain = -INFINITY;
    for (size_t l = 0; l < L; ++l) {
      const int64_t k = keep[l];
      if (k + 1 >= int64_t(cost[l].size()))
        continue;
      const double gain = cost[l][size_t(k)] - cost[l][size_t(k + 1)];
      if (gain > bestGain) {
        bestGain = gain;
        best = l;
      }
    }
    ++keep[best];
  }
  return keep;
}

double adaptiveRunShare(const MoeLayer &m, const RowMatrix &x, const std::vector<bool> &alive,
                        const std::vector<double> &nu, double tau) {
  const RowMatrix logits = x * m.router.transpose();
  std::vector<RoutedExpert> row;
  double run = 0;
  for (int64_t t = 0; t < x.rows(); ++t) {
    routeRow(m, logits.data() + t * logits.cols(), alive, row);
    std::vector<double> energy;
    for (const RoutedExpert &re : row) // as the runtime's routeToken
      energy.push_back(m.gating == MoEGating::Unit
                           ? std::max(0.0, double(logits(t, re.expert)))
                           : re.prob * nu[size_t(re.expert)]);
    std::sort(energy.begin(), energy.end(), std::greater<double>());
    const double total = std::accumulate(energy.begin(), energy.end(), 0.0);
    double acc = 0;
    size_t n = 0;
    while (n < energy.size()) {
      acc += energy[n++];
      if (acc >= tau * total)
        break;
    }
    run += double(n);
  }
  return x.rows() ? run / double(x.rows()) : 0.0;
}

} // namespace llmc::prune
