//===- Osaq.cpp - OSAQ: outlier absorption in the Hessian null space -------===//
#include "compiler/quant/Osaq.h"
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace llmc::quant {

namespace {

using RowMajorF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowMajorD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

void checkSquare(const Eigen::MatrixXd &h, int64_t n, const char *what) {
  if (h.rows() != n || h.cols() != n)
    throw std::runtime_error(std::string("osaq: ") + what + " is " + std::to_string(h.rows()) +
                             "x" + std::to_string(h.cols()) + ", expected " + std::to_string(n) +
                             "x" + std::to_string(n));
}

/// Summed group ranges of one row (max - min, or 2 max|w| when symmetric).
double rowRange(const Eigen::VectorXd &w, const GridSpec &grid) {
  const int64_t G = grid.group, n = w.size();
  double sum = 0;
  for (int64_t g0 = 0; g0 < n; g0 += G) {
    auto seg = w.segment(g0, std::min(G, n - g0));
    sum += grid.sym ? 2.0 * seg.cwiseAbs().maxCoeff() : seg.maxCoeff() - seg.minCoeff();
  }
  return sum;
}

/// "Softmax-∞" weights of a row: per group, softmax of |w| / (T max|w|), so
/// each group's weights sum to 1 and concentrate on its largest entries.
Eigen::VectorXd softmaxWeights(const Eigen::VectorXd &w, int64_t group, double temp) {
  const int64_t n = w.size();
  Eigen::VectorXd pi(n);
  for (int64_t g0 = 0; g0 < n; g0 += group) {
    const int64_t len = std::min(group, n - g0);
    auto a = w.segment(g0, len).cwiseAbs();
    const double amax = a.maxCoeff();
    if (!(amax > 0)) {
      pi.segment(g0, len).setConstant(1.0 / double(len));
      continue;
    }
    Eigen::ArrayXd e = ((a.array() - amax) / (temp * amax)).exp();
    pi.segment(g0, len) = (e / e.sum()).matrix();
  }
  return pi;
}

/// Rescale so each group's weights sum to 1 (all-zero groups: uniform).
void normalizePerGroup(Eigen::VectorXd &pi, int64_t group) {
  const int64_t n = pi.size();
  for (int64_t g0 = 0; g0 < n; g0 += group) {
    auto seg = pi.segment(g0, std::min(group, n - g0));
    const double s = seg.sum();
    if (s > 0 && std::isfinite(s))
      seg /= s;
    else
      seg.setConstant(1.0 / double(seg.size()));
  }
}

} // namespace

OsaqNullSpace osaqNullSpace(const Eigen::MatrixXd &hA, const Eigen::MatrixXd &hB,
                            const OsaqOptions &opts) {
  const int64_t n = hA.rows();
  checkSquare(hA, n, "split-A Hessian");
  checkSquare(hB, n, "split-B Hessian");
  OsaqNullSpace ns;
  ns.basis.resize(n, 0);
  const double meanA = hA.diagonal().mean(), meanB = hB.diagonal().mean();
  if (n == 0 || !(meanA > 0))
    return ns; // no data on split A: nothing is known to be null
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(hA);
  if (es.info() != Eigen::Success)
    throw std::runtime_error("osaq: eigendecomposition of the Hessian failed");
  const Eigen::VectorXd &lam = es.eigenvalues(); // ascending
  auto rel = [&](double q) { return lam(std::min<int64_t>(n - 1, int64_t(q * double(n)))) / meanA; };
  ns.relMin = lam(0) / meanA;
  ns.relP1 = rel(0.01);
  ns.relP10 = rel(0.10);
  ns.relP50 = rel(0.50);
  const Eigen::MatrixXd &vecs = es.eigenvectors();
  auto below = [&](double thr) {
    int64_t k = 0;
    while (k < n && lam(k) <= thr)
      ++k;
    return k;
  };
  // Eigen-decomposition of split B's curvature within the first k
  // eigenvectors of H_A (the directions null on both splits come first).
  auto projectedB = [&](int64_t k, int options) {
    Eigen::MatrixXd m = vecs.leftCols(k).transpose() * hB * vecs.leftCols(k);
    m = 0.5 * (m + m.transpose());
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> esB(m, options);
    if (esB.info() != Eigen::Success)
      throw std::runtime_error("osaq: eigendecomposition of the projected Hessian failed");
    return esB;
  };
  auto stableCount = [&](const Eigen::VectorXd &mu, double thr) {
    int64_t k = 0;
    while (k < mu.size() && mu(k) <= thr)
      ++k;
    return k;
  };
  ns.candidates = below(opts.eps * meanA);
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> esB;
  if (ns.candidates > 0 && meanB > 0) {
    // Rotate within the candidate span to the split-B curvature's eigenbasis.
    esB = projectedB(ns.candidates, Eigen::ComputeEigenvectors);
    const int64_t keep = std::min(std::max<int64_t>(0, opts.maxRank),
                                  stableCount(esB.eigenvalues(), opts.eps * meanB));
    ns.basis = vecs.leftCols(ns.candidates) * esB.eigenvectors().leftCols(keep);
  }
  // The same counts at other thresholds (eigenvalues only; a span equal to
  // the one above reuses its decomposition).
  for (size_t d = 0; d < ns.kDecadeEps.size(); ++d) {
    const int64_t k = below(ns.kDecadeEps[d] * meanA);
    ns.candidatesAt[d] = k;
    if (k == 0 || !(meanB > 0))
      continue;
    const double thr = ns.kDecadeEps[d] * meanB;
    ns.stableAt[d] = k == ns.candidates
                         ? stableCount(esB.eigenvalues(), thr)
                         : stableCount(projectedB(k, Eigen::EigenvaluesOnly).eigenvalues(), thr);
  }
  return ns;
}

double meanGroupRange(const float *w, int64_t rows, int64_t cols, const GridSpec &grid) {
  if (rows == 0 || cols == 0)
    return 0;
  Eigen::Map<const RowMajorF> W(w, rows, cols);
  double sum = 0;
  for (int64_t i = 0; i < rows; ++i)
    sum += rowRange(W.row(i).transpose().cast<double>(), grid);
  const int64_t groups = (cols + grid.group - 1) / grid.group;
  return sum / double(rows * groups);
}

OsaqAbsorbed osaqAbsorb(const float *w, int64_t rows, int64_t cols, const OsaqNullSpace &ns,
                        const Eigen::MatrixXd &hB, const GridSpec &grid, const OsaqOptions &opts) {
  checkSquare(hB, cols, "split-B Hessian");
  if (ns.basis.rows() != cols)
    throw std::runtime_error("osaq: null-space basis has " + std::to_string(ns.basis.rows()) +
                             " rows, expected " + std::to_string(cols));
  if (!(opts.temp > 0))
    throw std::runtime_error("osaq: the softmax temperature must be positive");
  OsaqAbsorbed out;
  out.weights.assign(w, w + rows * cols);
  out.rangeBefore = meanGroupRange(w, rows, cols, grid);
  out.rangeAfter = out.rangeBefore;
  const int64_t r = ns.rank();
  if (r == 0 || rows == 0)
    return out;

  const Eigen::MatrixXd &U = ns.basis;
  Eigen::Map<const RowMajorF> W(w, rows, cols);
  RowMajorD D = RowMajorD::Zero(rows, cols); // ΔW
  for (int64_t i = 0; i < rows; ++i) {
    const Eigen::VectorXd wi = W.row(i).transpose().cast<double>();
    Eigen::VectorXd cur = wi, best = wi;
    double bestRange = rowRange(wi, grid);
    // Lawson-style re-weighting: each round multiplies in the softmax of the
    // current row, so the weights of entries that stay large keep growing
    // (round t acts like temperature T / t: toward the ∞-norm).
    Eigen::VectorXd pi = Eigen::VectorXd::Ones(cols);
    for (int it = 0; it < std::max(1, opts.irls); ++it) {
      pi = pi.cwiseProduct(softmaxWeights(cur, grid.group, opts.temp));
      normalizePerGroup(pi, grid.group);
      const Eigen::MatrixXd su = U.array().colwise() * pi.array().sqrt();
      Eigen::MatrixXd a = Eigen::MatrixXd::Zero(r, r);
      a.selfadjointView<Eigen::Lower>().rankUpdate(su.transpose());
      a = a.selfadjointView<Eigen::Lower>();
      // A small ridge keeps directions the weights barely see at c = 0.
      const double ridge = 1e-3 * std::max(a.diagonal().mean(), 1e-300);
      a.diagonal().array() += ridge;
      const Eigen::VectorXd b = U.transpose() * pi.cwiseProduct(wi);
      const Eigen::VectorXd c = -a.ldlt().solve(b);
      if (!c.allFinite())
        break;
      cur = wi + U * c;
      const double range = rowRange(cur, grid);
      if (range < bestRange) {
        bestRange = range;
        best = cur;
      }
    }
    D.row(i) = (best - wi).transpose();
  }

  // Output change on split B; scale ΔW down if it is not small enough.
  const RowMajorD Wd = W.cast<double>();
  const double ref = (Wd * hB).cwiseProduct(Wd).sum();
  const double chg = (D * hB).cwiseProduct(D).sum();
  out.relChangeB = ref > 0 ? std::sqrt(std::max(chg, 0.0) / ref) : 0.0;
  if (out.relChangeB > opts.maxRelChange) {
    out.step = opts.maxRelChange / out.relChangeB;
    out.relChangeB = opts.maxRelChange;
  }
  Eigen::Map<RowMajorF> Wout(out.weights.data(), rows, cols);
  Wout = (Wd + out.step * D).cast<float>();
  out.rangeAfter = meanGroupRange(out.weights.data(), rows, cols, grid);
  return out;
}

OsaqResult osaqQuantize(const float *w, int64_t rows, int64_t cols, const Eigen::MatrixXd &h,
                        const OsaqNullSpace &ns, const Eigen::MatrixXd &hB,
                        const OsaqOptions &opts, const GptqOptions &gptq) {
  OsaqResult res;
  res.rank = ns.rank();
  res.absorbed = osaqAbsorb(w, rows, cols, ns, hB, gptq.grid, opts);
  // r = 0 leaves W bit-identical, so this is exactly GPTQ.
  res.quantized = gptqQuantize(res.absorbed.weights.data(), rows, cols, h, gptq);
  return res;
}

OsaqResult osaqQuantize(const float *w, int64_t rows, int64_t cols, const Eigen::MatrixXd &h,
                        const Eigen::MatrixXd &hA, const Eigen::MatrixXd &hB,
                        const OsaqOptions &opts, const GptqOptions &gptq) {
  return osaqQuantize(w, rows, cols, h, osaqNullSpace(hA, hB, opts), hB, opts, gptq);
}

} // namespace llmc::quant
