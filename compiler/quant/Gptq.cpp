//===- Gptq.cpp - GPTQ: Hessian-aware rounding of one linear ---------------===//
#include "compiler/quant/Gptq.h"
#include <algorithm>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>

namespace llmc::quant {

using RowMajorF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

HessianAccumulator::HessianAccumulator(int64_t cols)
    : cols_(cols), sum_(Eigen::MatrixXd::Zero(cols, cols)) {}

void HessianAccumulator::add(const float *x, int64_t rows) {
  if (rows <= 0)
    return;
  Eigen::Map<const RowMajorF> xm(x, rows, cols_);
  Eigen::MatrixXd xd = xm.cast<double>().transpose(); // [cols, rows]
  sum_.selfadjointView<Eigen::Lower>().rankUpdate(xd);
  tokens_ += rows;
}

Eigen::MatrixXd HessianAccumulator::hessian() const {
  Eigen::MatrixXd h = sum_.selfadjointView<Eigen::Lower>();
  if (tokens_ > 0)
    h *= 2.0 / double(tokens_);
  return h;
}

namespace {

/// Upper Cholesky factor of (H + damp*mean(diag)*I)^-1; nullopt if not PD.
std::optional<Eigen::MatrixXd> inverseCholeskyUpper(const Eigen::MatrixXd &h, double damp) {
  Eigen::MatrixXd hd = h;
  const double mean = h.diagonal().mean();
  hd.diagonal().array() += damp * (mean > 0 ? mean : 1.0);
  Eigen::LLT<Eigen::MatrixXd> llt(hd);
  if (llt.info() != Eigen::Success)
    return std::nullopt;
  Eigen::MatrixXd inv = llt.solve(Eigen::MatrixXd::Identity(h.rows(), h.cols()));
  Eigen::LLT<Eigen::MatrixXd> llt2(inv);
  if (llt2.info() != Eigen::Success)
    return std::nullopt;
  return Eigen::MatrixXd(llt2.matrixU());
}

} // namespace

QuantizedMatrix gptqQuantize(const float *w, int64_t rows, int64_t cols, const Eigen::MatrixXd &hIn,
                             const GptqOptions &opts) {
  const GridSpec &s = opts.grid;
  if (cols % s.group != 0)
    throw std::runtime_error("gptq: " + std::to_string(cols) +
                             " columns is not a multiple of the group size " +
                             std::to_string(s.group));
  if (hIn.rows() != cols || hIn.cols() != cols)
    throw std::runtime_error("gptq: Hessian is " + std::to_string(hIn.rows()) + "x" +
                             std::to_string(hIn.cols()) + ", expected " + std::to_string(cols) +
                             "x" + std::to_string(cols));
  const int64_t n = cols, m = rows, G = s.group, ng = cols / G;

  // Column-major working copy: columns are what GPTQ walks.
  Eigen::MatrixXf W = Eigen::Map<const RowMajorF>(w, m, n);
  Eigen::MatrixXd H = hIn;
  for (int64_t i = 0; i < n; ++i)
    if (H(i, i) == 0) { // dead input: its weights never matter
      H(i, i) = 1;
      W.col(i).setZero();
    }

  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  if (opts.actOrder)
    std::stable_sort(perm.begin(), perm.end(),
                     [&](int64_t a, int64_t b) { return H(a, a) > H(b, b); });
  std::vector<int64_t> pos(static_cast<size_t>(n)); // original column -> processing position
  for (int64_t i = 0; i < n; ++i)
    pos[size_t(perm[size_t(i)])] = i;
  Eigen::MatrixXf Wp(m, n);
  Eigen::MatrixXd Hp(n, n);
  for (int64_t i = 0; i < n; ++i) {
    Wp.col(i) = W.col(perm[size_t(i)]);
    for (int64_t j = 0; j < n; ++j)
      Hp(i, j) = H(perm[size_t(i)], perm[size_t(j)]);
  }

  std::optional<Eigen::MatrixXd> U;
  for (double damp = opts.damp; !U && damp <= 1e3; damp *= 10)
    U = inverseCholeskyUpper(Hp, damp);
  if (!U)
    throw std::runtime_error("gptq: the dampened Hessian is not positive definite");
  const Eigen::MatrixXf Uf = U->cast<float>();

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
          range.add(W(r, c));
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
