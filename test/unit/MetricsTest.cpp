//===- MetricsTest.cpp - log-softmax, NLL, KL, percentiles, accumulator --===//
// Checks the quality-metric math of llmc/metrics.h against values worked
// out by hand, and its numerical behaviour at extreme logit scales.
//===----------------------------------------------------------------------===//
#include "llmc/metrics.h"
#include <cmath>
#include <gtest/gtest.h>
#include <limits>
#include <stdexcept>

using namespace llmc::metrics;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
}

TEST(Metrics, LogSoftmaxUniform) {
  float x[4] = {3.0f, 3.0f, 3.0f, 3.0f};
  auto lp = logSoftmax(x, 4);
  for (double v : lp)
    EXPECT_NEAR(v, -std::log(4.0), 1e-15);
}

TEST(Metrics, LogSoftmaxKnownValues) {
  // logits {0, ln 3}: probabilities {1/4, 3/4}.
  float x[2] = {0.0f, (float)std::log(3.0)};
  auto lp = logSoftmax(x, 2);
  EXPECT_NEAR(std::exp(lp[0]), 0.25, 1e-7);
  EXPECT_NEAR(std::exp(lp[1]), 0.75, 1e-7);
}

TEST(Metrics, LogSoftmaxStableWithHugeLogits) {
  // exp(1e30) overflows any float type; a shift-free softmax gives inf/NaN.
  float x[3] = {1e30f, 1e30f, 1e30f - 1e24f};
  auto lp = logSoftmax(x, 3);
  EXPECT_NEAR(lp[0], -std::log(2.0), 1e-12);
  EXPECT_NEAR(lp[1], -std::log(2.0), 1e-12);
  EXPECT_TRUE(std::isinf(lp[2]) || lp[2] < -1e20);
  float y[2] = {-1e30f, -1e30f};
  for (double v : logSoftmax(y, 2))
    EXPECT_NEAR(v, -std::log(2.0), 1e-12);
  // Large but representable differences: {1000, 0} -> log p = {~0, -1000}.
  float z[2] = {1000.0f, 0.0f};
  auto lz = logSoftmax(z, 2);
  EXPECT_NEAR(lz[0], 0.0, 1e-12);
  EXPECT_NEAR(lz[1], -1000.0, 1e-9);
}

TEST(Metrics, LogSoftmaxNegativeInfinityAndNaN) {
  float x[3] = {0.0f, -std::numeric_limits<float>::infinity(), 0.0f};
  auto lp = logSoftmax(x, 3);
  EXPECT_NEAR(lp[0], -std::log(2.0), 1e-15);
  EXPECT_EQ(lp[1], -kInf);
  float n[2] = {0.0f, std::numeric_limits<float>::quiet_NaN()};
  for (double v : logSoftmax(n, 2))
    EXPECT_TRUE(std::isnan(v));
}

TEST(Metrics, Nll) {
  float x[2] = {0.0f, (float)std::log(3.0)};
  EXPECT_NEAR(nll(x, 2, 0), std::log(4.0), 1e-7);
  EXPECT_NEAR(nll(x, 2, 1), std::log(4.0 / 3.0), 1e-7);
  EXPECT_THROW(nll(x, 2, 2), std::out_of_range);
  EXPECT_THROW(nll(x, 2, -1), std::out_of_range);
}

TEST(Metrics, KlOfIdenticalDistributionsIsZero) {
  float x[5] = {1.5f, -2.0f, 0.25f, 7.0f, 7.0f};
  EXPECT_EQ(klDivergenceFromLogits(x, x, 5), 0.0);
  float big[3] = {1e30f, -1e30f, 0.0f};
  EXPECT_EQ(klDivergenceFromLogits(big, big, 3), 0.0);
}

TEST(Metrics, KlKnownCases) {
  // P = {1/2, 1/2}, Q = {1/4, 3/4}:
  // KL = 1/2 ln(2) + 1/2 ln(2/3) = 1/2 ln(4/3).
  float p[2] = {0.0f, 0.0f};
  float q[2] = {0.0f, (float)std::log(3.0)};
  EXPECT_NEAR(klDivergenceFromLogits(p, q, 2), 0.5 * std::log(4.0 / 3.0), 1e-7);
  // Reverse: 1/4 ln(1/2) + 3/4 ln(3/2).
  EXPECT_NEAR(klDivergenceFromLogits(q, p, 2), 0.25 * std::log(0.5) + 0.75 * std::log(1.5),
              1e-7);
  // From log-probabilities directly: P = {0.9, 0.1}, Q = {0.5, 0.5}.
  double lp[2] = {std::log(0.9), std::log(0.1)};
  double lq[2] = {std::log(0.5), std::log(0.5)};
  EXPECT_NEAR(klDivergence(lp, lq, 2), 0.9 * std::log(1.8) + 0.1 * std::log(0.2), 1e-15);
}

TEST(Metrics, KlZeroProbabilities) {
  // p_i == 0 contributes nothing; q_i == 0 where p_i > 0 is infinite.
  double lp[2] = {0.0, -kInf};
  double lq[2] = {std::log(0.5), std::log(0.5)};
  EXPECT_NEAR(klDivergence(lp, lq, 2), std::log(2.0), 1e-15);
  double lq0[2] = {-kInf, 0.0};
  EXPECT_EQ(klDivergence(lp, lq0, 2), kInf);
}

TEST(Metrics, Argmax) {
  float x[5] = {1.0f, 4.0f, -2.0f, 4.0f, 3.0f};
  EXPECT_EQ(argmax(x, 5), 1); // first on ties
  float n[3] = {std::numeric_limits<float>::quiet_NaN(), -1.0f, -3.0f};
  EXPECT_EQ(argmax(n, 3), 1);
  EXPECT_EQ(argmax(x, 0), -1);
}

TEST(Metrics, PercentileNearestRank) {
  // The classic example: {15, 20, 35, 40, 50}: p30 -> 20, p40 -> 20,
  // p50 -> 35, p100 -> 50, p0 -> 15 (rank clamped to 1).
  std::vector<double> v = {50, 15, 40, 20, 35};
  EXPECT_EQ(percentileNearestRank(v, 30), 20);
  EXPECT_EQ(percentileNearestRank(v, 40), 20);
  EXPECT_EQ(percentileNearestRank(v, 50), 35);
  EXPECT_EQ(percentileNearestRank(v, 100), 50);
  EXPECT_EQ(percentileNearestRank(v, 0), 15);
  // 1..100: p99 is the 99th value, not interpolated and not the 100th.
  std::vector<double> h;
  for (int i = 1; i <= 100; ++i)
    h.push_back(i);
  EXPECT_EQ(percentileNearestRank(h, 99), 99);
  // 1..1000: p99 -> rank 990.
  std::vector<double> k;
  for (int i = 1000; i >= 1; --i)
    k.push_back(i);
  EXPECT_EQ(percentileNearestRank(k, 99), 990);
  EXPECT_EQ(percentileNearestRank({7.0}, 99), 7.0);
  EXPECT_THROW(percentileNearestRank({}, 50), std::invalid_argument);
  EXPECT_THROW(percentileNearestRank(v, 101), std::invalid_argument);
  EXPECT_THROW(percentileNearestRank(v, -1), std::invalid_argument);
}

TEST(Metrics, AccumulatorPerplexityOnly) {
  // Two positions, uniform over 4 tokens: ppl = 4 exactly.
  EvalAccumulator acc(4);
  float u[8] = {0, 0, 0, 0, 2, 2, 2, 2};
  int32_t targets[2] = {3, 0};
  acc.addRows(u, nullptr, targets, 2);
  EvalSummary s = acc.summary();
  EXPECT_EQ(s.positions, 2);
  EXPECT_NEAR(s.ppl, 4.0, 1e-12);
  EXPECT_FALSE(s.has_reference);
  EXPECT_TRUE(std::isnan(s.kld_mean));
  EXPECT_THROW(acc.add(u, nullptr, 4), std::out_of_range);
}

TEST(Metrics, AccumulatorWithReference) {
  // Position 1: model == reference -> KL 0, argmax agrees.
  // Position 2: reference {1/2, 1/2}, model {1/4, 3/4} -> KL 1/2 ln(4/3);
  //             argmax: reference 0 (first tie), model 1 -> disagree.
  EvalAccumulator acc(2);
  float model[4] = {0.0f, 1.0f, 0.0f, (float)std::log(3.0)};
  float ref[4] = {0.0f, 1.0f, 0.0f, 0.0f};
  int32_t targets[2] = {1, 1};
  acc.addRows(model, ref, targets, 2);
  EvalSummary s = acc.summary();
  ASSERT_TRUE(s.has_reference);
  double kl2 = 0.5 * std::log(4.0 / 3.0);
  EXPECT_NEAR(s.kld_mean, kl2 / 2, 1e-7);
  EXPECT_NEAR(s.kld_p99, kl2, 1e-7);
  EXPECT_NEAR(s.kld_max, kl2, 1e-7);
  EXPECT_NEAR(s.top1, 50.0, 1e-12);
  // Model NLLs: -log(e/(1+e)) and -log(3/4); reference: same, then log 2.
  double m1 = -std::log(std::exp(1.0) / (1 + std::exp(1.0)));
  EXPECT_NEAR(s.ppl, std::exp((m1 + std::log(4.0 / 3.0)) / 2), 1e-6);
  EXPECT_NEAR(s.ref_ppl, std::exp((m1 + std::log(2.0)) / 2), 1e-6);
  ASSERT_EQ(acc.klValues().size(), 2u);
  EXPECT_EQ(acc.klValues()[0], 0.0);
}

TEST(Metrics, AccumulatorRejectsEmptyVocabulary) {
  EXPECT_THROW(EvalAccumulator(0), std::invalid_argument);
}
