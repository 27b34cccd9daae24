//===- QteaTest.cpp - QTEA quantization numerics (compiler/quant/Qtea) -----===//
// On a random weight matrix with a strongly correlated Hessian: the QTEA
// sweep's output error beats plain ternary RTN; salient FP8 residuals lower
// it further; the stored form round-trips through the runtime's row
// dequantizer to exactly what the quantizer reports. Plus the Bunch-Kaufman
// pivot order on hand-checked matrices, identity-Hessian use, and errors.
//===----------------------------------------------------------------------===//
#include "compiler/quant/Gptq.h"
#include "compiler/quant/Qtea.h"
#include "llmc/dtype.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <set>
#include <stdexcept>
#include <vector>

using namespace llmc;
using namespace llmc::quant;

namespace {

struct Problem {
  int64_t rows, cols;
  std::vector<float> w;
  Eigen::MatrixXd h;
};

/// W ~ N(0, 0.02) with a few large columns; H from activations with mixed
/// channels (strong correlations) and a few high-energy channels.
Problem makeProblem(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  Problem p{rows, cols, std::vector<float>(size_t(rows * cols)), Eigen::MatrixXd()};
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      p.w[size_t(r * cols + c)] = float(0.02 * nd(rng) * (c % 37 == 0 ? 4.0 : 1.0));
  const int64_t tokens = 4 * cols;
  Eigen::MatrixXd z(tokens, cols), mix = Eigen::MatrixXd::Identity(cols, cols);
  for (int64_t i = 0; i < tokens; ++i)
    for (int64_t c = 0; c < cols; ++c)
      z(i, c) = nd(rng) * (c % 29 == 0 ? 6.0 : 1.0);
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t k = 0; k < 6; ++k)
      mix(int64_t(rng() % uint32_t(cols)), c) += 0.8 * nd(rng);
  const Eigen::MatrixXd x = z * mix;
  p.h = 2.0 / double(tokens) * x.transpose() * x;
  return p;
}

double err(const Problem &p, const std::vector<float> &q) {
  return outputError(p.w.data(), q.data(), p.rows, p.cols, p.h);
}

TEST(Qtea, SweepBeatsTernaryRtn) {
  const Problem p = makeProblem(64, 256, 1);
  QteaOptions o;
  o.group = 64;
  o.salientPct = 0;
  const double rtn = err(p, ternaryRtn(p.w.data(), p.rows, p.cols, o));
  const QteaResult r = qteaQuantize(p.w.data(), p.rows, p.cols, p.h, o);
  const double qtea = err(p, r.dequantized);
  EXPECT_TRUE(r.bunchKaufman);
  EXPECT_LT(qtea, 0.7 * rtn) << "qtea " << qtea << " rtn " << rtn;
  // the parts: without rescale / without decay it still beats RTN
  QteaOptions plain = o;
  plain.rescaleIters = 0;
  plain.decay = 0;
  plain.ldlOrder = false;
  const double gptqLike = err(p, qteaQuantize(p.w.data(), p.rows, p.cols, p.h, plain).dequantized);
  EXPECT_LT(gptqLike, rtn);
  std::printf("output error: ternary RTN %.5f, sweep without rescale/decay/LDL %.5f, QTEA %.5f\n",
              rtn, gptqLike, qtea);
}

TEST(Qtea, SalientResidualLowersError) {
  const Problem p = makeProblem(64, 256, 2);
  QteaOptions o;
  o.group = 64;
  double prev = 0;
  for (int pct : {0, 5, 20}) {
    o.salientPct = pct;
    const QteaResult r = qteaQuantize(p.w.data(), p.rows, p.cols, p.h, o);
    const double e = err(p, r.dequantized);
    std::printf("salient %2d%%: output error %.5f\n", pct, e);
    if (pct > 0) {
      EXPECT_LT(e, prev) << pct;
    }
    prev = e;
    EXPECT_EQ(int64_t(r.matrix.salient.size()), qtea::salientCount(p.cols, pct));
  }
}

TEST(Qtea, StoredFormMatchesDequantized) {
  const Problem p = makeProblem(32, 192, 3);
  QteaOptions o;
  o.group = 192;
  o.salientPct = 10;
  const QteaResult r = qteaQuantize(p.w.data(), p.rows, p.cols, p.h, o);
  const DType t = qteaDType(192, 10);
  const std::vector<uint8_t> rows = qtea::packRows(r.matrix), aux = qtea::packAux(r.matrix);
  ASSERT_EQ(int64_t(aux.size()), auxBytes(t, p.rows, p.cols));
  std::vector<float> row(size_t(p.cols));
  for (int64_t i = 0; i < p.rows; ++i) {
    dequantizeRowAux(t, rows.data() + i * rowBytes(t, p.cols), aux.data(), i, p.rows, row.data(),
                     p.cols);
    for (int64_t j = 0; j < p.cols; ++j)
      ASSERT_NEAR(row[size_t(j)], r.dequantized[size_t(i * p.cols + j)],
                  1e-6f * (1 + std::fabs(row[size_t(j)])));
  }
  // every salient column carries one residual entry per 4 rows; v is positive
  for (float v : r.matrix.v)
    EXPECT_GE(v, 0.01f);
  std::set<int32_t> uniq(r.matrix.salient.begin(), r.matrix.salient.end());
  EXPECT_EQ(uniq.size(), r.matrix.salient.size());
  // the large input channels (every 29th) are among the salient columns
  int hits = 0;
  for (int32_t c : r.matrix.salient)
    hits += c % 29 == 0;
  EXPECT_GE(hits, 4);
}

TEST(Qtea, IdentityHessianIsDeterministicAndBounded) {
  const Problem p = makeProblem(16, 128, 4);
  QteaOptions o;
  o.group = 64;
  const Eigen::MatrixXd eye = Eigen::MatrixXd::Identity(p.cols, p.cols);
  const QteaResult a = qteaQuantize(p.w.data(), p.rows, p.cols, eye, o);
  const QteaResult b = qteaQuantize(p.w.data(), p.rows, p.cols, eye, o);
  EXPECT_EQ(a.dequantized, b.dequantized);
  double num = 0, den = 0;
  for (size_t i = 0; i < p.w.size(); ++i) {
    num += std::pow(double(p.w[i]) - a.dequantized[i], 2);
    den += std::pow(double(p.w[i]), 2);
  }
  EXPECT_LT(std::sqrt(num / den), 0.7); // ternary: coarse, but far from nothing
}

TEST(Qtea, BunchKaufmanOrder) {
  // diagonal: no pivoting
  Eigen::MatrixXd d = Eigen::Vector4d(1, 5, 2, 3).asDiagonal();
  EXPECT_EQ(bunchKaufmanOrder(d), (std::vector<int64_t>{0, 1, 2, 3}));
  // |a00| < alpha * |a10| and a11 large: 1x1 pivot on row 1 first
  Eigen::Matrix2d a;
  a << 1, 10, 10, 200;
  EXPECT_EQ(bunchKaufmanOrder(a), (std::vector<int64_t>{1, 0}));
  // a dominant diagonal keeps the order
  a << 10, 1, 1, 10;
  EXPECT_EQ(bunchKaufmanOrder(a), (std::vector<int64_t>{0, 1}));
  // 2x2 pivot on (0, 2): rows 1 and 2 swap
  Eigen::Matrix3d b;
  b << 0, 1, 2, 1, 0, 0, 2, 0, 0;
  EXPECT_EQ(bunchKaufmanOrder(b), (std::vector<int64_t>{0, 2, 1}));
  // a permutation for a random SPD matrix
  const Problem p = makeProblem(4, 96, 5);
  std::vector<int64_t> o = bunchKaufmanOrder(p.h);
  std::sort(o.begin(), o.end());
  std::vector<int64_t> iota(96);
  std::iota(iota.begin(), iota.end(), 0);
  EXPECT_EQ(o, iota);
  Eigen::MatrixXd bad = p.h;
  bad(3, 3) = std::nan("");
  EXPECT_THROW(bunchKaufmanOrder(bad), std::runtime_error);
}

TEST(Qtea, DeadInputsAndErrors) {
  Problem p = makeProblem(8, 128, 6);
  // a dead input channel: its weights do not matter, the rest still quantizes
  p.h.row(5).setZero();
  p.h.col(5).setZero();
  QteaOptions o;
  o.group = 64;
  const QteaResult r = qteaQuantize(p.w.data(), p.rows, p.cols, p.h, o);
  for (float x : r.dequantized)
    ASSERT_TRUE(std::isfinite(x));

  EXPECT_THROW(qteaQuantize(p.w.data(), 6, 128, p.h, o), std::runtime_error); // rows % 4
  o.group = 48;
  EXPECT_THROW(qteaQuantize(p.w.data(), 8, 128, p.h, o), std::runtime_error); // group
  o.group = 64;
  EXPECT_THROW(qteaQuantize(p.w.data(), 8, 128, Eigen::MatrixXd::Identity(64, 64), o),
               std::runtime_error); // Hessian size
  o.salientPct = 60;
  EXPECT_THROW(qteaQuantize(p.w.data(), 8, 128, p.h, o), std::runtime_error);
}

} // namespace
