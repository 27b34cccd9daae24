// The numerics of llm-prune-depth (compiler/prune/DepthScores.h) on
// constructed blocks whose right answer is known.
#include "compiler/prune/DepthScores.h"

#include <gtest/gtest.h>

using namespace llmc::prune;

namespace {

/// A block whose writers fill residual dims [lo, lo + 2) of an 8-wide
/// stream with `scale` times a fixed pattern (other rows zero).
BlockWriters block(int64_t lo, float scale) {
  BlockWriters b;
  b.wo = Eigen::MatrixXf::Zero(8, 4);
  Eigen::MatrixXf d = Eigen::MatrixXf::Zero(8, 6);
  for (int64_t r = lo; r < lo + 2; ++r) {
    for (int64_t c = 0; c < 4; ++c)
      b.wo(r, c) = scale * float(1 + r + 2 * c);
    for (int64_t c = 0; c < 6; ++c)
      d(r, c) = scale * float(3 - c + r);
  }
  b.wd.push_back(d);
  return b;
}

std::vector<BlockWriters> fiveBlocks() {
  // Blocks 0..2 write disjoint dims; 3 and 4 the same dims, 4 twice as strongly.
  return {block(0, 1), block(2, 1), block(4, 1), block(6, 1), block(6, 2)};
}

} // namespace

TEST(DepthScores, WrpSimilarityIsOneForTheSameDirectionsAndZeroForDisjointOnes) {
  for (Signature sig : {Signature::Gram, Signature::RowEnergy}) {
    const WrpAnalysis a = analyzeWrp(fiveBlocks(), sig);
    EXPECT_NEAR(a.similarity(3, 4), 1.0, 1e-6);
    EXPECT_NEAR(a.similarity(0, 1), 0.0, 1e-9);
    EXPECT_NEAR(a.similarity(2, 3), 0.0, 1e-9);
    EXPECT_NEAR(a.similarity(1, 1), 1.0, 1e-12);
    double mean = 0;
    for (double s : a.scale)
      mean += s / 5;
    EXPECT_NEAR(mean, 1.0, 1e-9);
    EXPECT_NEAR(a.scale[4] / a.scale[3], 2.0, 1e-6);
  }
}

TEST(DepthScores, WrpRemovesTheWeakerOfTwoRedundantBlocks) {
  for (Signature sig : {Signature::Gram, Signature::RowEnergy}) {
    const WrpAnalysis a = analyzeWrp(fiveBlocks(), sig);
    const WrpChoice c = chooseWrp(a, 0, 5, 1, 1.0);
    EXPECT_EQ(c.removed, (std::vector<int64_t>{3}));
    EXPECT_EQ(c.groupStart, (std::vector<int64_t>{0, 1, 2, 3}));
    EXPECT_GT(c.redundancy[3], c.redundancy[4]);
    // Block 4 protected (last = 4): the pair is cut, one of 0..3 must go and
    // every group there is a singleton but one.
    const WrpChoice p = chooseWrp(a, 0, 4, 1, 1.0);
    EXPECT_EQ(p.removed.size(), 1u);
    EXPECT_LT(p.removed[0], 4);
    EXPECT_TRUE(chooseWrp(a, 0, 5, 0, 1.0).removed.empty());
    EXPECT_THROW(chooseWrp(a, 0, 5, 5, 1.0), std::invalid_argument);
  }
}

TEST(DepthScores, SegmentationFindsTwoClusters) {
  Eigen::MatrixXd S = Eigen::MatrixXd::Constant(6, 6, 0.1);
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 6; ++j)
      if ((i < 3) == (j < 3))
        S(i, j) = 0.9;
  S.diagonal().setOnes();
  EXPECT_EQ(segmentBlocks(S, 0, 6, 2), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(segmentBlocks(S, 1, 6, 2), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(segmentBlocks(S, 0, 6, 6), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_THROW(segmentBlocks(S, 0, 6, 7), std::invalid_argument);
}

TEST(DepthScores, LowestScoresKeepsTheRangeAndBreaksTiesByIndex) {
  const std::vector<double> s = {0.0, 0.5, 0.2, 0.2, 0.9, 0.1};
  EXPECT_EQ(lowestScores(s, 1, 5, 2), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(lowestScores(s, 0, 6, 3), (std::vector<int64_t>{0, 2, 5}));
  EXPECT_EQ(lowestScores(s, 1, 6, 1), (std::vector<int64_t>{5}));
  EXPECT_THROW(lowestScores(s, 1, 5, 5), std::invalid_argument);
}

TEST(DepthScores, ResidualCosinesMeasureBlockInfluenceAndRunDistance) {
  // Four blocks over 2 tokens of width 2: block 1 changes nothing
  // (x2 = x1), and x3 = x1 too, so the run of blocks 1..2 is the identity.
  const std::vector<std::vector<float>> states = {
      {1, 0, 0, 1},  // x0
      {0, 1, 1, 0},  // x1: orthogonal to x0 per token
      {0, 1, 1, 0},  // x2 = x1
      {0, 1, 1, 0},  // x3 = x1
      {-0, -1, -1, -0}, // x4 = -x3
  };
  ResidualCosines c(4, 2);
  c.add(states, 2, 2);
  EXPECT_EQ(c.tokens(), 2);
  const std::vector<double> bi = c.blockInfluence();
  ASSERT_EQ(bi.size(), 4u);
  EXPECT_NEAR(bi[0], 1.0, 1e-12);
  EXPECT_NEAR(bi[1], 0.0, 1e-12);
  EXPECT_NEAR(bi[2], 0.0, 1e-12);
  EXPECT_NEAR(bi[3], 2.0, 1e-12);
  const std::vector<double> d = c.angularDistance(); // runs of 2 at 0, 1, 2
  ASSERT_EQ(d.size(), 3u);
  EXPECT_NEAR(d[0], 0.5, 1e-9);
  EXPECT_NEAR(d[1], 0.0, 1e-6);
  EXPECT_NEAR(d[2], 1.0, 1e-6);
  EXPECT_EQ(bestRun(d, 0, 4, 2), 1);
  EXPECT_EQ(bestRun(d, 2, 4, 2), 2);
  EXPECT_EQ(bestRun(d, 3, 4, 2), -1);
  EXPECT_THROW(c.add(states, 3, 2), std::invalid_argument);
  EXPECT_THROW(ResidualCosines(4, 5), std::invalid_argument);
}
