//===- Gptq.cpp - GPTQ: Hessian-aware rounding of one linear ---------------===//
#include "compiler/quant/Gptq.h"
#include "compiler/quant/ParallelFor.h"
#include <algorithm>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>

namespace llmc::quant {

using RowMajorF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// Column panel width of the Hessian sums and of the triangular inverse.
constexpr int64_t kPanel = 64;

HessianAccumulator::HessianAccumulator(int64_t cols, int threads)
    : cols_(cols), threads_(threads), sum_(Eigen::MatrixXd::Zero(cols, cols)) {}

void HessianAccumulator::add(const float *x, int64_t rows) {
  if (rows <= 0)
    return;
  Eigen::Map<const RowMajorF> xm(x, rows, cols_);
  const Eigen::MatrixXd xd = xm.cast<double>().transpose(); // [cols, rows]
  // The lower triangle in panels of kPanel columns, each one product of
  // fixed shape: the sums are the same on any number of threads.
  parallelPanels(cols_, kPanel, threads_, [&](int64_t j0, int64_t w) {
    sum_.block(j0, j0, cols_ - j0, w).noalias() +=
        xd.middleRows(j0, cols_ - j0) * xd.middleRows(j0, w).transpose();
  });
  tokens_ += rows;
}

Eigen::MatrixXd HessianAccumulator::hessian() const {
  Eigen::MatrixXd h = sum_.selfadjointView<Eigen::Lower>();
  if (tokens_ > 0)
    h *= 2.0 / double(tokens_);
  return h;
}

// With J the order reversal and J (H + dI) J = L L^T, the inverse is
// J L^-T L^-1 J = U^T U for the upper triangular U = J L^-1 J: one
// factorisation and one triangular solve, no inverse to factor again.
std::optional<Eigen::MatrixXd> inverseCholeskyUpper(const Eigen::MatrixXd &h, double damp,
                                                    int threads) {
  const int64_t n = h.rows();
  const double mean = h.diagonal().mean();
  Eigen::MatrixXd reversed = h.reverse();
  reversed.diagonal().array() += damp * (mean > 0 ? mean : 1.0);
  Eigen::LLT<Eigen::MatrixXd> llt(reversed);
  if (llt.info() != Eigen::Success)
    return std::nullopt;
  // L^-1 by column panels: panel [j0, j0 + w) of the identity is zero
  // above row j0, so only L's trailing block [j0:, j0:] enters its solve
  // (n^3/6 multiply-adds in all, not n^3/2), and the panels are
  // independent. Fixed panels: the same sums on any number of threads.
  const Eigen::MatrixXd &L = llt.matrixLLT(); // lower triangle is L
  Eigen::MatrixXd lInv = Eigen::MatrixXd::Zero(n, n);
  parallelPanels(n, kPanel, threads, [&](int64_t j0, int64_t w) {
    auto panel = lInv.block(j0, j0, n - j0, w);
    panel.topRows(w).setIdentity();
    L.block(j0, j0, n - j0, n - j0).triangularView<Eigen::Lower>().solveInPlace(panel);
  });
  if (!lInv.allFinite())
    return std::nullopt;
  return Eigen::MatrixXd(lInv.reverse());
}

GptqFactor gptqFactor(const Eigen::MatrixXd &hIn, const GptqOptions &opts, int threads) {
  if (hIn.rows() != hIn.cols())
    throw std::runtime_error("gptq: Hessian is " + std::to_string(hIn.rows()) + "x" +
                             std::to_string(hIn.cols()) + ", not square");
  const int64_t n = hIn.rows();
  GptqFactor f;
  f.dead.assign(size_t(n), 0);
  Eigen::MatrixXd H = hIn;
  for (int64_t i = 0; i < n; ++i)
    if (H(i, i) == 0) { // dead input: its weights never matter
      H(i, i) = 1;
      f.dead[size_t(i)] = 1;
    }
  f.perm.resize(size_t(n));
  std::iota(f.perm.begin(), f.perm.end(), 0);
  if (opts.actOrder)
    std::stable_sort(f.perm.begin(), f.perm.end(),
                     [&](int64_t a, int64_t b) { return H(a, a) > H(b, b); });
  Eigen::MatrixXd Hp(n, n);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < n; ++i)
      Hp(i, j) = H(f.perm[size_t(i)], f.perm[size_t(j)]);
  std::optional<Eigen::MatrixXd> U;
  for (double damp = opts.damp; !U && damp <= 1e3; damp *= 10) {
    U = inverseCholeskyUpper(Hp, damp, threads);
    f.damp = damp;
  }
  if (!U)
    throw std::runtime_error("gptq: the dampened Hessian is not positive definite");
  f.U = U->cast<float>();
  return f;
}

QuantizedMatrix gptqQuantize(const float *w, int64_t rows, int64_t cols, const Eigen::MatrixXd &h,
                             const GptqOptions &opts) {
  if (h.rows() != cols || h.cols() != cols)
    throw std::runtime_error("gptq: Hessian is " + std::to_string(h.rows()) + "x" +
                             std::to_string(h.cols()) + ", expected " + std::to_string(cols) +
                             "x" + std::to_string(cols));
  return gptqQuantize(w, rows, cols, gptqFactor(h, opts), opts);
}

QuantizedMatrix gptqQuantize(const float *w, int64_t rows, int64_t cols, const GptqFactor &f,
                             const GptqOptions &opts) {
  const GridSpec &s = opts.grid;
  if (cols % s.group != 0)
    throw std::runtime_error("gptq: " + std::to_string(cols) +
                             " columns is not a multiple of the group size " +
                             std::to_string(s.group));
  if (f.U.rows() != cols || f.U.cols() != cols || int64_t(f.perm.size()) != cols)
    throw std::runtime_error("gptq: the Hessian factor is for " + std::to_string(f.U.rows()) +
                             " columns, expected " + std::to_string(cols));
  const int64_t n = cols, m = rows, G = s.group, ng = cols / G;
  const std::vector<int64_t> &perm = f.perm;

  // Column-major working copy in processing order: columns are what GPTQ walks.
  Eigen::Map<const RowMajorF> W(w, m, n);
  std::vector<int64_t> pos(static_cast<size_t>(n)); // original column -> processing position
  Eigen::MatrixXf Wp(m, n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = perm[size_t(i)];
    pos[size_t(c)] = i;
    if (f.dead[size_t(c)])
      Wp.col(i).setZero();
    else
      Wp.col(i) = W.col(c);
  }
  const Eigen::MatrixXf &Uf = f.U;

  QuantizedMatrix out;
  out.spec = s;
  out.rows = m;
  out.cols = n;
  out.codes.assign(size_t(m * n), 0);
  out.grids.assign(size_t(m * ng), Grid{});
  std::vector<char> groupReady(size_t(ng), 0);
  if (opts.staticGroups) {
    for (int64_t g = 0; g < ng; ++g)
      for (int64_t r = 0; r < m; ++r) {
        GroupRange range;
        for (int64_t c = g * G; c < (g + 1) * G; ++c)
          range.add(Wp(r, pos[size_t(c)])); // the original weights (dead ones zero)
        out.grids[size_t(r * ng + g)] = makeGrid(range, s);
      }
    std::fill(groupReady.begin(), groupReady.end(), 1);
  }

  const int64_t B = std::max<int64_t>(1, opts.blockSize);
  Eigen::VectorXf q(m), err(m);
  for (int64_t b0 = 0; b0 < n; b0 += B) {
    const int64_t b1 = std::min(n, b0 + B), nb = b1 - b0;
    Eigen::MatrixXf E(m, nb);
    for (int64_t i = b0; i < b1; ++i) {
      const int64_t orig = perm[size_t(i)], g = orig / G;
      if (!groupReady[size_t(g)]) {
        // Grid from the group's current (error-updated) weights.
        for (int64_t r = 0; r < m; ++r) {
          GroupRange range;
          for (int64_t c = g * G; c < (g + 1) * G; ++c)
            range.add(Wp(r, pos[size_t(c)]));
          out.grids[size_t(r * ng + g)] = makeGrid(range, s);
        }
        groupReady[size_t(g)] = 1;
      }
      const float d = Uf(i, i);
      for (int64_t r = 0; r < m; ++r) {
        const Grid &grid = out.grids[size_t(r * ng + g)];
        const uint8_t code = quantCode(Wp(r, i), grid, s);
        out.codes[size_t(r * n + orig)] = code;
        q(r) = dequantCode(code, grid, s);
      }
      err = (Wp.col(i) - q) / d;
      if (i + 1 < b1)
        Wp.block(0, i + 1, m, b1 - i - 1).noalias() -=
            err * Uf.row(i).segment(i + 1, b1 - i - 1);
      E.col(i - b0) = err;
    }
    if (b1 < n)
      Wp.rightCols(n - b1).noalias() -= E * Uf.block(b0, b1, nb, n - b1);
  }
  return out;
}

double outputError(const float *w, const float *q, int64_t rows, int64_t cols,
                   const Eigen::MatrixXd &h) {
  Eigen::Map<const RowMajorF> W(w, rows, cols), Q(q, rows, cols);
  Eigen::MatrixXd D = (W - Q).cast<double>();
  return (D * h).cwiseProduct(D).sum() / double(rows);
}

OutputErrorTerms sampledOutputError(const float *w, const float *q, int64_t rows, int64_t cols,
                                    const Eigen::MatrixXd &h, int64_t maxRows) {
  const int64_t n = std::max<int64_t>(1, std::min(rows, maxRows));
  Eigen::MatrixXd D(n, cols), W(n, cols);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = i * rows / n; // evenly spread, the first row included
    for (int64_t j = 0; j < cols; ++j) {
      W(i, j) = w[r * cols + j];
      D(i, j) = double(w[r * cols + j]) - double(q[r * cols + j]);
    }
  }
  OutputErrorTerms t;
  t.err = (D * h).cwiseProduct(D).sum() / double(n);
  t.ref = (W * h).cwiseProduct(W).sum() / double(n);
  return t;
}

} // namespace llmc::quant
