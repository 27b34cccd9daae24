//===- GptqTest.cpp - GPTQ on small random problems -------------------------===//
// Properties that hold for any correct GPTQ, not numbers from one run:
//  - the accumulated Hessian is 2/N X^T X;
//  - with a diagonal H no error is propagated, so GPTQ's codes equal RTN's
//    (with and without act-order);
//  - on correlated inputs GPTQ's output error trace(D H D^T) is below RTN's
//    (4-bit and 3-bit, asymmetric and symmetric, with act-order);
//  - static groups: every grid is RTN's grid of the original weights (the
//    default, dynamic grids come from error-updated weights and differ),
//    and the output error still beats RTN's;
//  - dead inputs (a zero column of X) are handled: the result is finite;
//  - packed gq rows dequantize (runtime) to exactly dequantized().
//===----------------------------------------------------------------------===//
#include "compiler/quant/Gptq.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

using namespace llmc;
using namespace llmc::quant;

namespace {

std::vector<float> randomMatrix(int64_t rows, int64_t cols, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(size_t(rows * cols));
  for (float &x : v)
    x = nd(rng);
  return v;
}

/// Correlated inputs [n, cols]: a random mix of a few latent factors plus
/// noise, with per-channel magnitudes that vary over 10x.
std::vector<float> correlatedInputs(int64_t n, int64_t cols, uint32_t seed) {
  const int64_t k = 8;
  auto z = randomMatrix(n, k, seed);
  auto mix = randomMatrix(k, cols, seed + 1);
  auto noise = randomMatrix(n, cols, seed + 2, 0.3f);
  std::vector<float> x(size_t(n * cols));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < cols; ++c) {
      float v = noise[size_t(t * cols + c)];
      for (int64_t j = 0; j < k; ++j)
        v += z[size_t(t * k + j)] * mix[size_t(j * cols + c)];
      x[size_t(t * cols + c)] = v * (1.0f + 9.0f * float(c % 7) / 6.0f);
    }
  return x;
}

TEST(Gptq, HessianIsTwoOverNXtX) {
  const int64_t n = 10, cols = 6;
  auto x = randomMatrix(n, cols, 1);
  HessianAccumulator acc(cols);
  acc.add(x.data(), 4);
  acc.add(x.data() + 4 * cols, n - 4);
  Eigen::MatrixXd h = acc.hessian();
  EXPECT_EQ(acc.tokens(), n);
  for (int64_t i = 0; i < cols; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      double s = 0;
      for (int64_t t = 0; t < n; ++t)
        s += double(x[size_t(t * cols + i)]) * x[size_t(t * cols + j)];
      EXPECT_NEAR(h(i, j), 2.0 * s / n, 1e-9);
    }
}

/// The Hessian's column panels (64 wide) give the same sums on 1 or 3
/// threads, and the sums are 2/N X^T X over a width that is not a multiple
/// of the panel.
TEST(Gptq, HessianPanelsAreTheSameOnAnyThreads) {
  const int64_t n = 40, cols = 150;
  auto x = correlatedInputs(n, cols, 5);
  HessianAccumulator one(cols, 1), three(cols, 3);
  for (HessianAccumulator *acc : {&one, &three}) {
    acc->add(x.data(), 16);
    acc->add(x.data() + 16 * cols, n - 16);
  }
  const Eigen::MatrixXd h1 = one.hessian(), h3 = three.hessian();
  EXPECT_TRUE(h1 == h3) << "largest difference " << (h1 - h3).cwiseAbs().maxCoeff();
  for (int64_t i = 0; i < cols; i += 7)
    for (int64_t j = 0; j < cols; j += 5) {
      double sum = 0;
      for (int64_t t = 0; t < n; ++t)
        sum += double(x[size_t(t * cols + i)]) * x[size_t(t * cols + j)];
      EXPECT_NEAR(h1(i, j), 2.0 * sum / n, 1e-9 * (1 + std::fabs(sum)));
    }
}

/// The factor is the upper Cholesky factor of the dampened H^-1 in
/// processing order (checked against factoring the explicit inverse), and
/// the same on any number of threads.
TEST(Gptq, FactorIsTheInverseCholeskyOnAnyThreads) {
  const int64_t n = 400, cols = 150;
  auto x = correlatedInputs(n, cols, 9);
  HessianAccumulator acc(cols);
  acc.add(x.data(), n);
  const Eigen::MatrixXd h = acc.hessian();
  for (bool actOrder : {false, true}) {
    GptqOptions o;
    o.actOrder = actOrder;
    const GptqFactor f1 = gptqFactor(h, o, 1), f3 = gptqFactor(h, o, 3);
    ASSERT_TRUE(f1.U == f3.U && f1.perm == f3.perm);
    ASSERT_EQ(f1.U.rows(), cols);
    EXPECT_EQ(f1.U.triangularView<Eigen::StrictlyLower>().toDenseMatrix().cwiseAbs().maxCoeff(),
              0.0f);
    Eigen::MatrixXd hp(cols, cols);
    for (int64_t i = 0; i < cols; ++i)
      for (int64_t j = 0; j < cols; ++j)
        hp(i, j) = h(f1.perm[size_t(i)], f1.perm[size_t(j)]);
    hp.diagonal().array() += f1.damp * h.diagonal().mean();
    const Eigen::MatrixXd inv = hp.inverse();
    const Eigen::MatrixXd expected = Eigen::LLT<Eigen::MatrixXd>(inv).matrixU();
    const double rel = (f1.U.cast<double>() - expected).norm() / expected.norm();
    EXPECT_LT(rel, 1e-6) << "act order " << actOrder;
    if (actOrder) { // largest H_ii first
      EXPECT_GE(h(f1.perm[0], f1.perm[0]), h(f1.perm[1], f1.perm[1]));
    }
  }
}

TEST(Gptq, DiagonalHessianGivesRtnCodes) {
  const int64_t rows = 16, cols = 128;
  auto w = randomMatrix(rows, cols, 2);
  Eigen::MatrixXd h = Eigen::MatrixXd::Zero(cols, cols);
  for (int64_t i = 0; i < cols; ++i)
    h(i, i) = 0.5 + double(i % 5);
  for (bool actOrder : {false, true})
    for (bool sym : {false, true}) {
      GptqOptions o;
      o.grid = {4, sym, 32};
      o.actOrder = actOrder;
      QuantizedMatrix g = gptqQuantize(w.data(), rows, cols, h, o);
      QuantizedMatrix r = rtnQuantize(w.data(), rows, cols, o.grid);
      EXPECT_EQ(g.codes, r.codes) << "actOrder " << actOrder << " sym " << sym;
      for (size_t i = 0; i < g.grids.size(); ++i) {
        EXPECT_EQ(g.grids[i].scale, r.grids[i].scale);
        EXPECT_EQ(g.grids[i].min, r.grids[i].min);
      }
    }
}

TEST(Gptq, BeatsRtnOnCorrelatedInputs) {
  const int64_t rows = 48, cols = 256, n = 1024;
  auto w = randomMatrix(rows, cols, 3);
  auto x = correlatedInputs(n, cols, 4);
  HessianAccumulator acc(cols);
  acc.add(x.data(), n);
  Eigen::MatrixXd h = acc.hessian();
  for (int bits : {4, 3})
    for (bool sym : {false, true})
      for (bool actOrder : {false, true}) {
        GptqOptions o;
        o.grid = {bits, sym, 64};
        o.actOrder = actOrder;
        auto gq = gptqQuantize(w.data(), rows, cols, h, o).dequantized();
        auto rq = rtnQuantize(w.data(), rows, cols, o.grid).dequantized();
        double eg = outputError(w.data(), gq.data(), rows, cols, h);
        double er = outputError(w.data(), rq.data(), rows, cols, h);
        EXPECT_TRUE(std::isfinite(eg));
        EXPECT_LT(eg, 0.9 * er) << "bits " << bits << " sym " << sym << " actOrder " << actOrder
                                << ": gptq " << eg << " rtn " << er;
      }
}

TEST(Gptq, StaticGroupsKeepTheOriginalWeightsGrids) {
  const int64_t rows = 32, cols = 256, n = 1024;
  auto w = randomMatrix(rows, cols, 7);
  auto x = correlatedInputs(n, cols, 8);
  HessianAccumulator acc(cols);
  acc.add(x.data(), n);
  const Eigen::MatrixXd h = acc.hessian();
  for (bool actOrder : {false, true}) {
    GptqOptions o;
    o.grid = {3, false, 64};
    o.actOrder = actOrder;
    const QuantizedMatrix rtn = rtnQuantize(w.data(), rows, cols, o.grid);
    const QuantizedMatrix dyn = gptqQuantize(w.data(), rows, cols, h, o);
    o.staticGroups = true;
    const QuantizedMatrix fixed = gptqQuantize(w.data(), rows, cols, h, o);
    ASSERT_EQ(fixed.grids.size(), rtn.grids.size());
    size_t differ = 0;
    for (size_t i = 0; i < rtn.grids.size(); ++i) {
      EXPECT_EQ(fixed.grids[i].scale, rtn.grids[i].scale) << "grid " << i;
      EXPECT_EQ(fixed.grids[i].min, rtn.grids[i].min) << "grid " << i;
      differ += dyn.grids[i].scale != rtn.grids[i].scale;
    }
    // Groups that come up late see updated weights: many dynamic grids move.
    EXPECT_GT(differ, rtn.grids.size() / 4) << "actOrder " << actOrder;
    auto fq = fixed.dequantized();
    auto rq = rtn.dequantized();
    EXPECT_LT(outputError(w.data(), fq.data(), rows, cols, h),
              0.9 * outputError(w.data(), rq.data(), rows, cols, h))
        << "actOrder " << actOrder;
  }
}

TEST(Gptq, DeadInputsAndSmallBlocks) {
  const int64_t rows = 8, cols = 64, n = 200;
  auto w = randomMatrix(rows, cols, 5);
  auto x = correlatedInputs(n, cols, 6);
  for (int64_t t = 0; t < n; ++t)
    x[size_t(t * cols + 3)] = 0.0f; // input 3 never fires
  HessianAccumulator acc(cols);
  acc.add(x.data(), n);
  GptqOptions o;
  o.grid = {4, false, 16};
  o.blockSize = 24; // blocks that do not align with groups
  auto q = gptqQuantize(w.data(), rows, cols, acc.hessian(), o).dequantized();
  for (float v : q)
    ASSERT_TRUE(std::isfinite(v));
  auto rq = rtnQuantize(w.data(), rows, cols, o.grid).dequantized();
  EXPECT_LT(outputError(w.data(), q.data(), rows, cols, acc.hessian()),
            outputError(w.data(), rq.data(), rows, cols, acc.hessian()));
}

TEST(Gptq, RejectsBadShapes) {
  std::vector<float> w(8 * 40, 0.5f);
  GptqOptions o;
  o.grid = {4, false, 16};
  EXPECT_THROW(gptqQuantize(w.data(), 8, 40, Eigen::MatrixXd::Identity(40, 40), o),
               std::runtime_error);
  EXPECT_THROW(gptqQuantize(w.data(), 8, 32, Eigen::MatrixXd::Identity(16, 16), o),
               std::runtime_error);
}

TEST(Gptq, PackedRowsDequantizeToTheSameWeights) {
  const int64_t rows = 4, cols = 96;
  auto w = randomMatrix(rows, cols, 7);
  for (int bits : {2, 3, 4, 8})
    for (bool sym : {false, true}) {
      GridSpec s{bits, sym, 32};
      QuantizedMatrix q = rtnQuantize(w.data(), rows, cols, s);
      auto expect = q.dequantized();
      auto bytes = q.pack();
      const int64_t rb = rowBytes(s.dtype(), cols);
      ASSERT_EQ(int64_t(bytes.size()), rows * rb);
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t r = 0; r < rows; ++r) {
        dequantizeRow(s.dtype(), bytes.data() + r * rb, row.data(), cols);
        for (int64_t c = 0; c < cols; ++c)
          ASSERT_EQ(row[size_t(c)], expect[size_t(r * cols + c)]) << bits << " " << sym;
      }
      // RTN here and the runtime's reference RTN agree on the stored bytes.
      std::vector<uint8_t> ref(static_cast<size_t>(rb));
      quantizeRowRef(s.dtype(), w.data(), ref.data(), cols);
      EXPECT_EQ(0, std::memcmp(ref.data(), bytes.data(), size_t(rb))) << bits << " " << sym;
    }
}

} // namespace
