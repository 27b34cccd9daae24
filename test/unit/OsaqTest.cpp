//===- OsaqTest.cpp - OSAQ on synthetic low-rank / full-rank inputs --------===//
// Properties of OSAQ (compiler/quant/Osaq.h), not numbers from one run:
//  - inputs X = Z A of rank k < n give a null space (r > 0, orthonormal
//    basis) and ΔW X ~ 0 (relative < 1e-3), while the weight ranges shrink;
//  - OSAQ + GPTQ has an output error <= GPTQ's at 2 and 3 bits there;
//  - full-rank inputs give r = 0 and exactly GPTQ's codes and grids;
//  - a threshold loose enough to take curved directions is held to the
//    split-B output-change bound;
//  - the per-threshold counts (candidates on split A, stable on split B)
//    that the pass prints to help choose osaq-eps.
//===----------------------------------------------------------------------===//
#include "compiler/quant/Osaq.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <random>

using namespace llmc;
using namespace llmc::quant;

namespace {

using RowMajorF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

std::vector<float> randomMatrix(int64_t rows, int64_t cols, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(size_t(rows * cols));
  for (float &x : v)
    x = nd(rng);
  return v;
}

/// Inputs [n, cols] of rank `rank` (rank >= cols: full rank, plain noise).
std::vector<float> inputs(int64_t n, int64_t cols, int64_t rank, uint32_t seed) {
  if (rank >= cols)
    return randomMatrix(n, cols, seed);
  auto z = randomMatrix(n, rank, seed);
  auto a = randomMatrix(rank, cols, seed + 1);
  Eigen::Map<RowMajorF> Z(z.data(), n, rank), A(a.data(), rank, cols);
  RowMajorF X = Z * A;
  return std::vector<float>(X.data(), X.data() + n * cols);
}

/// Gaussian weights with ~2% planted outliers (x8).
std::vector<float> weightsWithOutliers(int64_t rows, int64_t cols, uint32_t seed) {
  auto w = randomMatrix(rows, cols, seed, 0.05f);
  std::mt19937 rng(seed + 7);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (float &x : w)
    if (u(rng) < 0.02f)
      x *= 8.0f;
  return w;
}

struct Problem {
  int64_t n = 512, rows = 32, cols = 128;
  std::vector<float> x, w;
  Eigen::MatrixXd h, hA, hB;
};

/// Hessians of all tokens, of the even 32-token spans (A) and the odd ones (B).
Problem makeProblem(int64_t rank, uint32_t seed) {
  Problem p;
  p.x = inputs(p.n, p.cols, rank, seed);
  p.w = weightsWithOutliers(p.rows, p.cols, seed + 100);
  HessianAccumulator all(p.cols), a(p.cols), b(p.cols);
  all.add(p.x.data(), p.n);
  for (int64_t t = 0; t < p.n; t += 32)
    ((t / 32) % 2 == 0 ? a : b).add(p.x.data() + t * p.cols, 32);
  p.h = all.hessian();
  p.hA = a.hessian();
  p.hB = b.hessian();
  return p;
}

double relOutputChange(const Problem &p, const std::vector<float> &w2) {
  Eigen::Map<const RowMajorF> X(p.x.data(), p.n, p.cols), W(p.w.data(), p.rows, p.cols),
      W2(w2.data(), p.rows, p.cols);
  Eigen::MatrixXd Y = X.cast<double>() * W.cast<double>().transpose();
  Eigen::MatrixXd dY = X.cast<double>() * (W2.cast<double>() - W.cast<double>()).transpose();
  return dY.norm() / Y.norm();
}

} // namespace

TEST(Osaq, LowRankInputsGiveANullSpaceThatKeepsOutputs) {
  Problem p = makeProblem(/*rank=*/48, 1);
  OsaqOptions o;
  OsaqNullSpace ns = osaqNullSpace(p.hA, p.hB, o);
  EXPECT_EQ(ns.candidates, p.cols - 48);
  EXPECT_EQ(ns.rank(), std::min<int64_t>(p.cols - 48, o.maxRank));
  Eigen::MatrixXd gram = ns.basis.transpose() * ns.basis;
  EXPECT_LT((gram - Eigen::MatrixXd::Identity(ns.rank(), ns.rank())).norm(), 1e-9);
  EXPECT_LT(ns.relMin, 1e-10);

  for (bool sym : {false, true}) {
    GridSpec grid{3, sym, 32};
    OsaqAbsorbed abs = osaqAbsorb(p.w.data(), p.rows, p.cols, ns, p.hB, grid, o);
    EXPECT_LT(relOutputChange(p, abs.weights), 1e-3) << "sym=" << sym;
    EXPECT_LE(abs.relChangeB, 1e-3);
    EXPECT_LT(abs.rangeAfter, 0.9 * abs.rangeBefore) << "sym=" << sym;
    // No (row, group) range grows much, and the largest magnitude shrinks.
    double maxBefore = 0, maxAfter = 0;
    for (size_t i = 0; i < p.w.size(); ++i) {
      maxBefore = std::max(maxBefore, double(std::fabs(p.w[i])));
      maxAfter = std::max(maxAfter, double(std::fabs(abs.weights[i])));
    }
    EXPECT_LT(maxAfter, maxBefore);
  }
}

TEST(Osaq, BeatsOrMatchesGptqAtLowBitsOnLowRankInputs) {
  for (uint32_t seed : {3u, 4u}) {
    Problem p = makeProblem(/*rank=*/40, seed);
    for (int bits : {2, 3}) {
      GptqOptions g;
      g.grid = GridSpec{bits, false, 32};
      QuantizedMatrix base = gptqQuantize(p.w.data(), p.rows, p.cols, p.h, g);
      OsaqResult res = osaqQuantize(p.w.data(), p.rows, p.cols, p.h, p.hA, p.hB, OsaqOptions{}, g);
      ASSERT_GT(res.rank, 0);
      std::vector<float> qb = base.dequantized(), qo = res.quantized.dequantized();
      double eBase = outputError(p.w.data(), qb.data(), p.rows, p.cols, p.h);
      double eOsaq = outputError(p.w.data(), qo.data(), p.rows, p.cols, p.h);
      EXPECT_LE(eOsaq, eBase) << "bits=" << bits << " seed=" << seed;
    }
  }
}

TEST(Osaq, FullRankInputsAreExactlyGptq) {
  Problem p = makeProblem(/*rank=*/1 << 20, 5);
  OsaqOptions o;
  OsaqNullSpace ns = osaqNullSpace(p.hA, p.hB, o);
  EXPECT_EQ(ns.candidates, 0);
  EXPECT_EQ(ns.rank(), 0);
  EXPECT_GT(ns.relMin, 1e-4);
  for (int bits : {2, 3}) {
    GptqOptions g;
    g.grid = GridSpec{bits, false, 32};
    QuantizedMatrix base = gptqQuantize(p.w.data(), p.rows, p.cols, p.h, g);
    OsaqResult res = osaqQuantize(p.w.data(), p.rows, p.cols, p.h, p.hA, p.hB, o, g);
    EXPECT_EQ(res.rank, 0);
    EXPECT_EQ(res.absorbed.weights, p.w);
    EXPECT_EQ(res.quantized.codes, base.codes);
    ASSERT_EQ(res.quantized.grids.size(), base.grids.size());
    for (size_t i = 0; i < base.grids.size(); ++i) {
      EXPECT_EQ(res.quantized.grids[i].scale, base.grids[i].scale);
      EXPECT_EQ(res.quantized.grids[i].min, base.grids[i].min);
    }
  }
}

TEST(Osaq, LooseThresholdIsHeldToTheSplitBBound) {
  Problem p = makeProblem(/*rank=*/48, 6);
  OsaqOptions o;
  o.eps = 10.0; // takes directions with real curvature
  OsaqNullSpace ns = osaqNullSpace(p.hA, p.hB, o);
  ASSERT_GT(ns.rank(), 0);
  OsaqAbsorbed abs = osaqAbsorb(p.w.data(), p.rows, p.cols, ns, p.hB, GridSpec{3, false, 32}, o);
  EXPECT_LE(abs.relChangeB, o.maxRelChange * (1 + 1e-9));
  EXPECT_LE(abs.rangeAfter, abs.rangeBefore);
}

TEST(Osaq, DecadeCountsSeparateCandidatesFromStableDirections) {
  // H_A: two exact zeros and one eigenvalue at ~1.6e-5 x mean(diag); H_B is
  // curved along e1, so only e0 (and e2 once eps admits it) are stable.
  Eigen::VectorXd a(8), b(8);
  a << 0, 0, 1e-5, 1, 1, 1, 1, 1;
  b << 0, 1, 0, 1, 1, 1, 1, 1;
  OsaqOptions o; // eps 1e-4
  OsaqNullSpace ns =
      osaqNullSpace(a.asDiagonal().toDenseMatrix(), b.asDiagonal().toDenseMatrix(), o);
  const std::array<int64_t, 4> cand = {2, 2, 3, 3}, stable = {1, 1, 2, 2};
  EXPECT_EQ(ns.candidatesAt, cand);
  EXPECT_EQ(ns.stableAt, stable);
  EXPECT_EQ(ns.candidates, 3);
  ASSERT_EQ(ns.rank(), 2);
  EXPECT_NEAR(std::fabs(ns.basis(1, 0)) + std::fabs(ns.basis(1, 1)), 0.0, 1e-12);

  // Inputs of rank 48: every threshold finds the same exact null space.
  Problem p = makeProblem(/*rank=*/48, 2);
  ns = osaqNullSpace(p.hA, p.hB, o);
  for (size_t d = 0; d < ns.kDecadeEps.size(); ++d) {
    EXPECT_EQ(ns.candidatesAt[d], p.cols - 48) << ns.kDecadeEps[d];
    EXPECT_EQ(ns.stableAt[d], p.cols - 48) << ns.kDecadeEps[d];
  }
}

TEST(Osaq, RejectsMismatchedHessians) {
  Eigen::MatrixXd a = Eigen::MatrixXd::Identity(8, 8), b = Eigen::MatrixXd::Identity(6, 6);
  EXPECT_THROW(osaqNullSpace(a, b, OsaqOptions{}), std::runtime_error);
}
