//===- Qtea.cpp - QTEA: ternary + salient FP8 residual quantization -------===//
#include "compiler/quant/Qtea.h"
#include "compiler/quant/Gptq.h"
#include "llmc/dtype.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>

namespace llmc::quant {

using RowMajorF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

namespace {

[[noreturn]] void fail(const std::string &msg) { throw std::runtime_error("qtea: " + msg); }

void checkShape(int64_t rows, int64_t cols, const QteaOptions &o) {
  if (o.group <= 0 || cols % o.group != 0)
    fail(std::to_string(cols) + " columns is not a multiple of the group size " +
         std::to_string(o.group));
  if (rows <= 0 || rows % qtea::kQuadRows != 0)
    fail(std::to_string(rows) + " rows is not a multiple of 4 (the 1:4 salient residual pattern)");
  if (o.salientPct < 0 || o.salientPct > 50)
    fail("salient share " + std::to_string(o.salientPct) + "% is not in 0..50");
  if (!(o.deadzone > 0) || !(o.decay >= 0) || !(o.damp > 0) || o.blockSize <= 0 ||
      o.fitIters < 0 || o.rescaleIters < 0)
    fail("bad options (deadzone and damp must be positive, decay, fit and rescale rounds "
         "non-negative, block size positive)");
}

/// alpha, beta (fp16 values) and the dead zone of one row of one group.
struct GroupFit {
  float alpha = 0, beta = 0, delta = 0;
};

inline int tritOf(double x, double delta) { return x > delta ? 1 : (x < -delta ? -1 : 0); }

/// Step 1: w ~ beta + alpha * t over G weights (dead zone, then least squares).
GroupFit fitGroup(const float *w, int64_t G, const QteaOptions &o) {
  double beta = 0;
  for (int64_t k = 0; k < G; ++k)
    beta += w[k];
  beta /= double(G);
  std::vector<double> r(static_cast<size_t>(G));
  double magSum = 0;
  for (int64_t k = 0; k < G; ++k) {
    r[size_t(k)] = w[k] - beta;
    magSum += std::fabs(r[size_t(k)]);
  }
  double delta = o.deadzone * magSum / double(G);
  double above = 0;
  int64_t nAbove = 0;
  for (double x : r)
    if (std::fabs(x) > delta) {
      above += std::fabs(x);
      ++nAbove;
    }
  double alpha = nAbove ? above / double(nAbove) : magSum / double(G);
  std::vector<int> codes(static_cast<size_t>(G)), next(static_cast<size_t>(G));
  for (int64_t k = 0; k < G; ++k)
    codes[size_t(k)] = tritOf(r[size_t(k)], delta);
  double shift = 0;
  for (int it = 0; it < o.fitIters; ++it) {
    // min over (a, s) of || r - s - a t ||^2: 2x2 normal equations
    double cc = 0, c1 = 0, rc = 0, r1 = 0;
    for (int64_t k = 0; k < G; ++k) {
      const double c = codes[size_t(k)];
      cc += c * c;
      c1 += c;
      rc += r[size_t(k)] * c;
      r1 += r[size_t(k)];
    }
    const double n = double(G), det = cc * n - c1 * c1;
    double a = alpha, s = 0;
    if (std::fabs(det) > 1e-8) {
      a = (n * rc - c1 * r1) / det;
      s = (cc * r1 - c1 * rc) / det;
    }
    alpha = std::max(std::fabs(a), 1e-8);
    shift = s;
    delta = 0.5 * alpha;
    for (int64_t k = 0; k < G; ++k)
      next[size_t(k)] = tritOf(r[size_t(k)] - shift, delta);
    if (next == codes)
      break;
    codes.swap(next);
  }
  if (o.fitIters > 0)
    beta += shift;
  GroupFit f;
  f.alpha = roundToHalf(float(alpha));
  f.beta = roundToHalf(float(beta));
  f.delta = float(delta);
  return f;
}

/// All group fits of row-major W: [rows * groups], row-major.
std::vector<GroupFit> fitAll(const float *w, int64_t rows, int64_t cols, const QteaOptions &o) {
  const int64_t G = o.group, ng = cols / G;
  std::vector<GroupFit> fits(size_t(rows * ng));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < ng; ++g)
      fits[size_t(r * ng + g)] = fitGroup(w + r * cols + g * G, G, o);
  return fits;
}

/// Upper Cholesky factor of H^-1 after H += damp * mean(diag H) * I, adding
/// 0.01 * mean(diag H) up to five times if that fails; diag(H)^-1/2 last.
/// One slab is one thread's work (the caller runs slabs in parallel).
Eigen::MatrixXd qteaInverseFactor(Eigen::MatrixXd h, double damp, QteaResult &res) {
  const int64_t n = h.rows();
  const double mean = h.diagonal().mean();
  h.diagonal().array() += damp * (mean > 0 ? mean : 1.0);
  for (int attempt = 0; attempt < 5; ++attempt) {
    if (std::optional<Eigen::MatrixXd> u = inverseCholeskyUpper(h, 0.0, /*threads=*/1))
      return std::move(*u);
    ++res.dampRetries;
    const double m = h.diagonal().mean();
    h.diagonal().array() += 0.01 * (m > 0 ? m : 1.0);
  }
  res.diagonalFallback = true;
  Eigen::MatrixXd u = Eigen::MatrixXd::Zero(n, n);
  for (int64_t i = 0; i < n; ++i)
    u(i, i) = h(i, i) > 0 ? 1.0 / std::sqrt(h(i, i)) : 1.0;
  return u;
}

} // namespace

std::vector<int64_t> bunchKaufmanOrder(const Eigen::MatrixXd &a0) {
  const int64_t n = a0.rows();
  if (a0.cols() != n)
    fail("Bunch-Kaufman order of a non-square matrix");
  // Single precision, lower triangle only (like LAPACK ssytrf on the float
  // matrix the reference implementation factors); columns < k are never
  // read again, only the trailing block is kept current.
  Eigen::MatrixXf A = a0.cast<float>();
  if (!A.allFinite())
    fail("Bunch-Kaufman order: the matrix has a non-finite entry");
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  const float kAlpha = float((1.0 + std::sqrt(17.0)) / 8.0);
  int64_t k = 0;
  while (k < n) {
    int kstep = 1;
    int64_t kp = k;
    const float absakk = std::fabs(A(k, k));
    int64_t imax = k;
    float colmax = 0;
    for (int64_t i = k + 1; i < n; ++i)
      if (std::fabs(A(i, k)) > colmax) {
        colmax = std::fabs(A(i, k));
        imax = i;
      }
    const bool zero = std::max(absakk, colmax) == 0;
    if (!zero && absakk < kAlpha * colmax) {
      float rowmax = 0; // largest off-diagonal of row/column imax in the trailing block
      for (int64_t j = k; j < imax; ++j)
        rowmax = std::max(rowmax, std::fabs(A(imax, j)));
      for (int64_t j = imax + 1; j < n; ++j)
        rowmax = std::max(rowmax, std::fabs(A(j, imax)));
      if (absakk >= kAlpha * colmax * (colmax / rowmax))
        kp = k;
      else if (std::fabs(A(imax, imax)) >= kAlpha * rowmax)
        kp = imax;
      else {
        kp = imax;
        kstep = 2;
      }
    }
    const int64_t kk = k + kstep - 1;
    if (kp != kk) { // symmetric interchange of kk < kp in lower storage
      if (kp + 1 < n)
        A.col(kk).tail(n - kp - 1).swap(A.col(kp).tail(n - kp - 1));
      for (int64_t j = kk + 1; j < kp; ++j)
        std::swap(A(j, kk), A(kp, j));
      std::swap(A(kk, kk), A(kp, kp));
      if (kstep == 2)
        std::swap(A(k + 1, k), A(kp, k));
      std::swap(order[size_t(kk)], order[size_t(kp)]);
    }
    const int64_t m = n - k - kstep;
    if (!zero && m > 0) {
      auto trail = A.bottomRightCorner(m, m).selfadjointView<Eigen::Lower>();
      if (kstep == 1) {
        const Eigen::VectorXf x = A.col(k).tail(m);
        trail.rankUpdate(x, -1.0f / A(k, k));
      } else {
        // X D^-1 X^T with D^-1 = [[p, q], [q, r]]
        const double d11 = A(k, k), d21 = A(k + 1, k), d22 = A(k + 1, k + 1);
        const double det = d11 * d22 - d21 * d21;
        const Eigen::VectorXf x1 = A.col(k).tail(m), x2 = A.col(k + 1).tail(m);
        trail.rankUpdate(x1, float(-d22 / det));
        trail.rankUpdate(x2, float(-d11 / det));
        trail.rankUpdate(x1, x2, float(d21 / det));
      }
    }
    k += kstep;
  }
  return order;
}

std::vector<float> ternaryRtn(const float *w, int64_t rows, int64_t cols, const QteaOptions &o) {
  checkShape(rows, cols, o);
  const int64_t G = o.group, ng = cols / G;
  const std::vector<GroupFit> fits = fitAll(w, rows, cols, o);
  std::vector<float> out(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) {
      const GroupFit &f = fits[size_t(r * ng + j / G)];
      const float x = w[r * cols + j];
      out[size_t(r * cols + j)] = f.alpha * float(tritOf(x - f.beta, f.delta)) + f.beta;
    }
  return out;
}

QteaResult qteaQuantize(const float *w, int64_t rows, int64_t cols, const Eigen::MatrixXd &hIn,
                        const QteaOptions &o) {
  checkShape(rows, cols, o);
  if (hIn.rows() != cols || hIn.cols() != cols)
    fail("Hessian is " + std::to_string(hIn.rows()) + "x" + std::to_string(hIn.cols()) +
         ", expected " + std::to_string(cols) + "x" + std::to_string(cols));
  const int64_t m = rows, n = cols, G = o.group, ng = n / G;
  const int64_t S = qtea::salientCount(n, o.salientPct);
  QteaResult res;

  // Dead inputs (H_jj = 0) never matter: zero their weights, H_jj = 1.
  RowMajorF W0 = Eigen::Map<const RowMajorF>(w, m, n);
  Eigen::MatrixXd H = hIn;
  for (int64_t j = 0; j < n; ++j)
    if (H(j, j) == 0) {
      H(j, j) = 1;
      W0.col(j).setZero();
    }

  // 1. Group ternary fit on the (original) weights.
  const std::vector<GroupFit> fits = fitAll(W0.data(), m, n, o);
  Eigen::MatrixXf alpha(m, ng), beta(m, ng), delta(m, ng);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t g = 0; g < ng; ++g) {
      const GroupFit &f = fits[size_t(r * ng + g)];
      alpha(r, g) = f.alpha;
      beta(r, g) = f.beta;
      delta(r, g) = f.delta;
    }
  const Eigen::VectorXf alphaMean = alpha.colwise().mean().transpose();

  // 2. Column order: salient first (by score), the rest in Bunch-Kaufman order.
  std::vector<double> score(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j)
    score[size_t(j)] = double(W0.col(j).cwiseAbs2().maxCoeff()) * H(j, j) * H(j, j);
  std::vector<int64_t> byScore(static_cast<size_t>(n));
  std::iota(byScore.begin(), byScore.end(), 0);
  std::stable_sort(byScore.begin(), byScore.end(),
                   [&](int64_t a, int64_t b) { return score[size_t(a)] > score[size_t(b)]; });
  std::vector<int64_t> perm(byScore.begin(), byScore.begin() + S);
  const std::vector<int64_t> rest(byScore.begin() + S, byScore.end());
  std::vector<int64_t> restOrder(rest.size());
  std::iota(restOrder.begin(), restOrder.end(), 0);
  if (o.ldlOrder && !rest.empty()) {
    const int64_t nr = int64_t(rest.size());
    Eigen::MatrixXd sub(nr, nr);
    for (int64_t a = 0; a < nr; ++a)
      for (int64_t b = 0; b < nr; ++b)
        sub(a, b) = H(rest[size_t(a)], rest[size_t(b)]);
    sub.diagonal().array() += o.damp * sub.diagonal().mean();
    try {
      restOrder = bunchKaufmanOrder(sub);
      res.bunchKaufman = true;
    } catch (const std::runtime_error &) {
      // keep the saliency order
    }
  }
  for (int64_t k : restOrder)
    perm.push_back(rest[size_t(k)]);

  // 3. Permute, dampen, U = chol(H^-1) upper.
  Eigen::MatrixXf Wp(m, n);
  Eigen::MatrixXd Hp(n, n);
  for (int64_t i = 0; i < n; ++i) {
    Wp.col(i) = W0.col(perm[size_t(i)]);
    for (int64_t j = 0; j < n; ++j)
      Hp(i, j) = H(perm[size_t(i)], perm[size_t(j)]);
  }
  const Eigen::MatrixXf U = qteaInverseFactor(std::move(Hp), o.damp, res).cast<float>();
  const bool diagonalU = U.triangularView<Eigen::StrictlyUpper>().toDenseMatrix().isZero(0);

  // 4. The sweep.
  qtea::Matrix &out = res.matrix;
  out.spec = QteaSpec{G, o.salientPct};
  out.rows = m;
  out.cols = n;
  out.trits.assign(size_t(m * n), 0);
  out.alpha.resize(size_t(m * ng));
  out.beta.resize(size_t(m * ng));
  for (int64_t r = 0; r < m; ++r)
    for (int64_t g = 0; g < ng; ++g) {
      out.alpha[size_t(r * ng + g)] = alpha(r, g);
      out.beta[size_t(r * ng + g)] = beta(r, g);
    }
  out.v.assign(size_t(n), 1.0f);
  const int64_t quads = m / qtea::kQuadRows;
  std::vector<uint8_t> sPos(size_t(quads * S)), sVal(size_t(quads * S)); // by sweep position
  std::vector<float> sScale(static_cast<size_t>(S));

  const int64_t B = o.blockSize;
  Eigen::ArrayXf centered(m), t(m), q(m), err(m);
  for (int64_t b0 = 0; b0 < n; b0 += B) {
    const int64_t b1 = std::min(n, b0 + B), nb = b1 - b0;
    Eigen::MatrixXf E(m, nb);
    const float uMean = U.diagonal().segment(b0, nb).mean();
    for (int64_t i = b0; i < b1; ++i) {
      const int64_t p = i - b0, orig = perm[size_t(i)], g = orig / G;
      const auto col = Wp.col(i).array();
      const auto a = alpha.col(g).array(), be = beta.col(g).array(), de = delta.col(g).array();
      centered = col - be;
      for (int64_t r = 0; r < m; ++r)
        t(r) = float(tritOf(centered(r), de(r)));
      float v = 1.0f;
      for (int it = 0; it < o.rescaleIters; ++it) {
        float sum = 0;
        int64_t nz = 0;
        for (int64_t r = 0; r < m; ++r)
          if (t(r) != 0.0f) {
            sum += std::fabs(centered(r));
            ++nz;
          }
        // every code zero: v = 1 refits from a live assignment
        v = nz > 0 && alphaMean(g) > 0 ? std::max(sum / float(nz) / alphaMean(g), 0.01f) : 1.0f;
        for (int64_t r = 0; r < m; ++r) {
          // nearest of {-level, 0, +level}, ties towards the outer levels
          const float level = a(r) * v, c = centered(r);
          const float toPos = std::fabs(c - level), toNeg = std::fabs(c + level),
                      toZero = std::fabs(c);
          t(r) = toPos <= toNeg && toPos <= toZero ? 1.0f
                 : toNeg < toPos && toNeg <= toZero ? -1.0f
                                                    : 0.0f;
        }
      }
      q = (a * v) * t + be; // the runtime's expression
      if (i < S) {
        // 1:4 FP8 residual: the largest |w - q| of every 4 rows, one scale.
        const Eigen::ArrayXf rho = col - q;
        float maxAbs = 0;
        std::vector<int64_t> keep(static_cast<size_t>(quads));
        for (int64_t qd = 0; qd < quads; ++qd) {
          int64_t best = qd * 4;
          for (int64_t rr = qd * 4 + 1; rr < qd * 4 + 4; ++rr)
            if (std::fabs(rho(rr)) > std::fabs(rho(best)))
              best = rr;
          keep[size_t(qd)] = best;
          maxAbs = std::max(maxAbs, std::fabs(rho(best)));
        }
        const float scale = maxAbs > 0 ? maxAbs / qtea::kFp8Max : 0.0f;
        sScale[size_t(i)] = scale;
        for (int64_t qd = 0; qd < quads; ++qd) {
          const int64_t rr = keep[size_t(qd)];
          const uint8_t code = scale > 0 ? qtea::fp8e4m3Encode(rho(rr) / scale) : 0;
          sPos[size_t(qd * S + i)] = uint8_t(rr - qd * 4);
          sVal[size_t(qd * S + i)] = code;
          q(rr) += qtea::fp8e4m3Decode(code) * scale;
        }
      }
      for (int64_t r = 0; r < m; ++r)
        out.trits[size_t(r * n + orig)] = int8_t(t(r));
      out.v[size_t(orig)] = v;

      const float d = U(i, i);
      err = (col - q) / d;
      res.proxyLoss += 0.5 * double(err.matrix().squaredNorm());
      if (!diagonalU && i + 1 < b1) {
        const float kappa = std::clamp(d / uMean, 0.3f, 3.0f);
        const float gamma =
            float(std::exp(-o.decay * double(kappa) * double(p) / double(B)));
        Wp.block(0, i + 1, m, b1 - i - 1).noalias() -=
            (gamma * err.matrix()) * U.row(i).segment(i + 1, b1 - i - 1);
      }
      E.col(p) = err.matrix();
    }
    if (!diagonalU && b1 < n)
      Wp.rightCols(n - b1).noalias() -= E * U.block(b0, b1, nb, n - b1);
  }

  // 5. Salient columns in ascending original order, as stored.
  std::vector<int64_t> sOrder(static_cast<size_t>(S));
  std::iota(sOrder.begin(), sOrder.end(), 0);
  std::sort(sOrder.begin(), sOrder.end(),
            [&](int64_t a, int64_t b) { return perm[size_t(a)] < perm[size_t(b)]; });
  out.salient.resize(size_t(S));
  out.scale.resize(size_t(S));
  out.pos.resize(size_t(quads * S));
  out.fp8.resize(size_t(quads * S));
  for (int64_t s = 0; s < S; ++s) {
    const int64_t k = sOrder[size_t(s)];
    out.salient[size_t(s)] = int32_t(perm[size_t(k)]);
    out.scale[size_t(s)] = sScale[size_t(k)];
    for (int64_t qd = 0; qd < quads; ++qd) {
      out.pos[size_t(qd * S + s)] = sPos[size_t(qd * S + k)];
      out.fp8[size_t(qd * S + s)] = sVal[size_t(qd * S + k)];
    }
  }
  res.dequantized = out.dequantize();
  return res;
}

} // namespace llmc::quant
