// The numerics of llm-prune-experts and llm-moefy (compiler/prune/
// ExpertScores.h, Moefication.h) on constructed layers whose right answer
// is known.
#include "compiler/prune/ExpertScores.h"
#include "compiler/prune/Moefication.h"
#include "runtime/src/exec/MoeRouting.h"

#include <gtest/gtest.h>
#include <random>

using namespace llmc;
using namespace llmc::prune;

namespace {

RowMatrix randomMatrix(int64_t r, int64_t c, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, scale);
  RowMatrix m(r, c);
  for (int64_t i = 0; i < m.size(); ++i)
    m.data()[i] = n(rng);
  return m;
}

/// E experts of F neurons on D dims; expert e's output is scaled by
/// scale[e], so a tiny scale makes an expert that barely contributes.
MoeLayer layer(const std::vector<float> &scale, int64_t topK, MoEGating gating) {
  const int64_t D = 12, F = 8, E = int64_t(scale.size());
  MoeLayer m;
  m.router = randomMatrix(E, D, 7);
  for (int64_t e = 0; e < E; ++e) {
    m.gate.push_back(randomMatrix(F, D, 100 + uint32_t(e)));
    m.up.push_back(randomMatrix(F, D, 200 + uint32_t(e)));
    m.down.push_back(randomMatrix(D, F, 300 + uint32_t(e), scale[size_t(e)]));
  }
  m.topK = topK;
  m.gating = gating;
  m.renormalize = true;
  return m;
}

TEST(ExpertScores, OmpDropsTheExpertsThatContributeNothing) {
  const MoeLayer m = layer({1.0f, 1e-4f, 1.0f, 1e-4f, 1.0f, 1.0f}, 2, MoEGating::Softmax);
  const RowMatrix x = randomMatrix(400, 12, 11);
  const Routes routes = route(m, x);
  const RoutedStats s = routedStats(m, x, routes);
  const Ranking r = ompRanking(s);
  ASSERT_EQ(r.order.size(), 6u);
  // The two near-silent experts come last, and the error curve falls to 0.
  EXPECT_TRUE((r.order[4] == 1 && r.order[5] == 3) || (r.order[4] == 3 && r.order[5] == 1));
  EXPECT_NEAR(r.err[6], 0.0, 1e-6); // f32 atoms, double sums
  EXPECT_LT(r.err[4], 1e-6);
  for (size_t k = 1; k < r.err.size(); ++k)
    EXPECT_LE(r.err[k], r.err[k - 1] + 1e-12);
  // With every atom kept the least-squares weights are 1 (y = sum of atoms);
  // the near-silent atoms' weights are ill-conditioned, the others exact.
  const std::vector<double> beta = ompWeights(s, {0, 1, 2, 3, 4, 5});
  for (int e : {0, 2, 4, 5})
    EXPECT_NEAR(beta[size_t(e)], 1.0, 1e-4);
}

TEST(ExpertScores, NormAndFrequencyRankTheirStatistic) {
  const MoeLayer m = layer({1.0f, 0.01f, 3.0f, 1.0f}, 1, MoEGating::Softmax);
  const RowMatrix x = randomMatrix(300, 12, 5);
  const RoutedStats s = routedStats(m, x, route(m, x));
  int64_t routed = 0;
  for (int64_t c : s.count)
    routed += c;
  EXPECT_EQ(routed, 300); // top 1: one route per token
  const Ranking byNorm = rankByScore(s.meanNorm);
  EXPECT_EQ(byNorm.order.back(), 1);
  const Ranking byCount = rankByScore(std::vector<double>(s.count.begin(), s.count.end()));
  for (size_t i = 1; i < byCount.order.size(); ++i)
    EXPECT_GE(s.count[size_t(byCount.order[i - 1])], s.count[size_t(byCount.order[i])]);
}

TEST(ExpertScores, GreedyRemovesTheSilentExpertFirst) {
  const MoeLayer m = layer({1.0f, 1.0f, 1e-5f, 1.0f}, 1, MoEGating::Unit);
  const RowMatrix x = randomMatrix(200, 12, 9);
  std::vector<RowMatrix> dense;
  for (int64_t e = 0; e < 4; ++e)
    dense.push_back(expertOutput(m, e, x));
  const Ranking r = greedyRanking(m, x, dense);
  ASSERT_EQ(r.order.size(), 4u);
  EXPECT_EQ(r.order.back(), 2); // the first eliminated is kept last
  EXPECT_DOUBLE_EQ(r.err[4], 0.0);
  EXPECT_GT(r.err[1], r.err[3]);
}

TEST(ExpertScores, RoutingChangeCountsTokensThatLoseAnExpert) {
  Routes routes;
  routes.tokens = {{{0, 1.0f}, {1, 1.0f}}, {{0, 1.0f}, {2, 1.0f}}, {{2, 1.0f}, {3, 1.0f}}};
  Ranking r;
  r.order = {0, 1, 2, 3};
  const std::vector<double> c = routingChange(r, routes, 4);
  ASSERT_EQ(c.size(), 5u);
  EXPECT_DOUBLE_EQ(c[4], 0.0);
  EXPECT_DOUBLE_EQ(c[3], 1.0 / 3.0); // losing expert 3 changes token 2
  EXPECT_DOUBLE_EQ(c[2], 2.0 / 3.0); // keeping {0, 1}: tokens 1 and 2 change, token 0 keeps
  EXPECT_DOUBLE_EQ(c[1], 1.0);
  EXPECT_DOUBLE_EQ(c[0], 1.0);
}

TEST(ExpertScores, WaterfillGivesExpertsWhereTheCostFallsMost) {
  // Layer 0's cost falls steeply, layer 1's barely: layer 0 gets the budget.
  const std::vector<std::vector<double>> cost = {{1.0, 0.9, 0.5, 0.2, 0.0},
                                                 {1.0, 0.9, 0.85, 0.84, 0.83}};
  const std::vector<int64_t> keep = waterfill(cost, {1, 1}, 5);
  EXPECT_EQ(keep[0], 4);
  EXPECT_EQ(keep[1], 1);
  EXPECT_THROW(waterfill(cost, {1, 1}, 1), std::invalid_argument);
  EXPECT_THROW(waterfill(cost, {1, 1}, 9), std::invalid_argument);
}

TEST(ExpertScores, ProtectedOutliersGoFirst) {
  Ranking r = rankByScore({4, 3, 2, 1});
  const std::vector<int64_t> g = protectOutliers(r, {1.0, 1.1, 0.9, 50.0}, 10.0);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0], 3);
  EXPECT_EQ(r.order, (std::vector<int64_t>{3, 0, 1, 2}));
}

TEST(Moefication, BalancedClustersAreBalancedAndFindPlantedGroups) {
  // 16 rows in 4 planted directions (4 rows each, with noise).
  const RowMatrix dirs = randomMatrix(4, 10, 3);
  RowMatrix rows(16, 10);
  const RowMatrix noise = randomMatrix(16, 10, 4, 0.05f);
  for (int64_t i = 0; i < 16; ++i)
    rows.row(i) = dirs.row((i * 7) % 4) + noise.row(i);
  const std::vector<int64_t> g = balancedClusters(rows, 4, 20, 1);
  std::vector<int64_t> size(4, 0);
  for (int64_t v : g)
    ++size[size_t(v)];
  for (int64_t s : size)
    EXPECT_EQ(s, 4);
  for (int64_t i = 0; i < 16; ++i)
    for (int64_t j = 0; j < 16; ++j)
      EXPECT_EQ((i * 7) % 4 == (j * 7) % 4, g[size_t(i)] == g[size_t(j)]) << i << " " << j;
  EXPECT_THROW(balancedClusters(rows, 3, 5, 1), std::invalid_argument);
}

TEST(Moefication, EveryExpertRunIsTheDenseMlp) {
  const RowMatrix gate = randomMatrix(16, 12, 21), up = randomMatrix(16, 12, 22),
                  down = randomMatrix(12, 16, 23);
  std::vector<int64_t> group(16);
  for (int64_t j = 0; j < 16; ++j)
    group[size_t(j)] = (j * 5) % 4;
  const MoeLayer m = splitMlp(gate, up, down, group, 4, Activation::SiLU);
  const RowMatrix x = randomMatrix(30, 12, 24);
  const RowMatrix dense = gatedHidden(x, gate, up, Activation::SiLU) * down.transpose();
  RowMatrix sum = RowMatrix::Zero(30, 12);
  for (int64_t e = 0; e < 4; ++e)
    sum += expertOutput(m, e, x);
  EXPECT_LT((sum - dense).norm(), 1e-4f * dense.norm());
}

TEST(Moefication, RouterFitRecoversALinearMap) {
  const RowMatrix x = randomMatrix(200, 6, 31), r = randomMatrix(3, 6, 32);
  const RowMatrix y = x * r.transpose();
  const RowMatrix fit = fitRouter(x, y, 1e-9);
  EXPECT_LT((fit - r).norm(), 1e-3f);
  EXPECT_DOUBLE_EQ(topKRecall(y, y, 2), 1.0);
}

TEST(MoeRouting, UnitGatingRunsTheExpertsCarryingTauOfTheRoutersPredictedNorms) {
  // A MoEfied layer's router predicts each expert's output norm: at tau 0.9
  // a token whose top 4 predict 5, 4, 0.5, 0.25 runs the first two (5 + 4 =
  // 9 >= 0.9 x 9.75), one whose top 4 predict alike runs all four; a
  // negative prediction counts as 0.
  ops::MoeRouting r;
  r.experts = 6;
  r.topK = 4;
  r.gating = MoEGating::Unit;
  r.expertEnergy = std::vector<float>(6, 1.0f);
  r.energyThreshold = 0.9;
  ops::RouteScratch scratch;
  std::vector<std::pair<int64_t, float>> chosen;
  const float skewed[6] = {0.25f, 5.0f, -1.0f, 4.0f, 0.5f, -2.0f};
  ops::routeToken(r, skewed, scratch, chosen);
  ASSERT_EQ(chosen.size(), 2u);
  EXPECT_EQ(chosen[0].first, 1);
  EXPECT_EQ(chosen[1].first, 3);
  EXPECT_EQ(chosen[0].second, 1.0f);
  const float even[6] = {1.0f, 1.1f, 0.9f, 1.05f, -3.0f, 0.0f};
  ops::routeToken(r, even, scratch, chosen);
  EXPECT_EQ(chosen.size(), 4u);
  const float negative[6] = {-1.0f, -2.0f, -3.0f, -4.0f, -5.0f, -6.0f}; // all clamp to 0
  ops::routeToken(r, negative, scratch, chosen);
  EXPECT_EQ(chosen.size(), 1u) << "no energy: the first routed expert alone";
}

TEST(MoeRouting, CompileTimeRunShareCountsWhatTheRuntimeRuns) {
  // llm-prune-experts' estimate of experts run per token (adaptiveRunShare)
  // is the mean of routeToken's counts on the same rows, for both gatings.
  for (MoEGating gating : {MoEGating::Unit, MoEGating::Softmax}) {
    const MoeLayer m = layer({1.0f, 0.5f, 2.0f, 0.1f, 1.0f, 0.7f}, 4, gating);
    const RowMatrix x = randomMatrix(300, 12, 41);
    const std::vector<double> nu = {1.0, 0.5, 2.0, 0.1, 1.0, 0.7};
    const std::vector<bool> alive(6, true);
    ops::MoeRouting r;
    r.experts = 6;
    r.topK = 4;
    r.gating = gating;
    r.energyThreshold = 0.8;
    r.expertEnergy.assign(nu.begin(), nu.end());
    const RowMatrix logits = x * m.router.transpose();
    ops::RouteScratch scratch;
    std::vector<std::pair<int64_t, float>> chosen;
    double runs = 0;
    for (int64_t t = 0; t < x.rows(); ++t) {
      ops::routeToken(r, logits.data() + t * 6, scratch, chosen);
      runs += double(chosen.size());
    }
    const double share = adaptiveRunShare(m, x, alive, nu, 0.8);
    EXPECT_NEAR(share, runs / double(x.rows()), 1e-9) << "gating " << int(gating);
    EXPECT_LT(share, 4.0) << "some tokens run fewer than top-k";
  }
}

} // namespace
