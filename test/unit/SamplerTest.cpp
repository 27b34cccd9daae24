//===- SamplerTest.cpp - Greedy, seeded, top-k, top-p sampling --------------===//
#include "llmc/executor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

using namespace llmc;

namespace {
std::vector<float> sampleLogits() {
  return {0.5f, 2.0f, -1.0f, 1.5f, 2.0f, 0.0f, -3.0f, 1.0f};
}
SamplerOptions opts(float temp, int top_k, float top_p, uint64_t seed) {
  SamplerOptions o;
  o.temperature = temp;
  o.top_k = top_k;
  o.top_p = top_p;
  o.seed = seed;
  return o;
}
} // namespace

TEST(Sampler, GreedyIsArgmaxLowestIdOnTies) {
  std::vector<float> l = sampleLogits();
  Sampler s(opts(0.0f, 0, 1.0f, 1));
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(s.sample(l.data(), int64_t(l.size())), 1); // ids 1 and 4 tie at 2.0
  l[6] = 9.0f;
  EXPECT_EQ(s.sample(l.data(), int64_t(l.size())), 6);
  l[0] = NAN;
  EXPECT_EQ(s.sample(l.data(), int64_t(l.size())), 6);
  EXPECT_THROW(s.sample(l.data(), 0), std::runtime_error);
}

// Greedy over vocabularies of real size (lanes and a tail): the lowest id of
// the largest logit, NaN as -inf, 0 when nothing is finite, as one loop with
// a branch per logit picks it.
TEST(Sampler, GreedyOverALargeVocabularyWithNaNTiesAndTail) {
  auto reference = [](const std::vector<float> &l) {
    int64_t best = 0;
    float bv = std::isnan(l[0]) ? -INFINITY : l[0];
    for (size_t i = 1; i < l.size(); ++i)
      if (!std::isnan(l[i]) && l[i] > bv) {
        bv = l[i];
        best = int64_t(i);
      }
    return int32_t(best);
  };
  Sampler s(opts(0.0f, 0, 1.0f, 1));
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> small(-4, 4);
  for (int64_t vocab : {1, 7, 16, 17, 49152, 49157}) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> l(static_cast<size_t>(vocab));
      for (float &v : l) // few distinct values: many ties
        v = float(small(rng));
      const int kind = trial % 5;
      if (kind == 1) // NaN where the largest would be
        for (float &v : l)
          v = v == 4.0f ? NAN : v;
      if (kind == 2) // the largest only in the tail
        l.back() = 100.0f;
      if (kind == 3) // nothing finite
        for (size_t i = 0; i < l.size(); ++i)
          l[i] = i % 2 ? NAN : -INFINITY;
      if (kind == 4) // +inf ties
        l[l.size() / 3] = l[l.size() / 2] = INFINITY;
      EXPECT_EQ(s.sample(l.data(), vocab), reference(l)) << "vocab " << vocab << " trial " << trial;
    }
  }
}

TEST(Sampler, SameSeedSameSequence) {
  std::vector<float> l = sampleLogits();
  Sampler a(opts(1.0f, 0, 1.0f, 1234)), b(opts(1.0f, 0, 1.0f, 1234)), c(opts(1.0f, 0, 1.0f, 99));
  std::vector<int32_t> sa, sb, sc;
  for (int i = 0; i < 200; ++i) {
    sa.push_back(a.sample(l.data(), int64_t(l.size())));
    sb.push_back(b.sample(l.data(), int64_t(l.size())));
    sc.push_back(c.sample(l.data(), int64_t(l.size())));
  }
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
}

TEST(Sampler, TopK1AndTinyTopPAreGreedy) {
  std::vector<float> l = sampleLogits();
  l[3] = 2.5f; // unique max at id 3
  Sampler k1(opts(1.5f, 1, 1.0f, 7)), p0(opts(1.5f, 0, 1e-6f, 7)), both(opts(0.8f, 3, 0.01f, 3));
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(k1.sample(l.data(), int64_t(l.size())), 3);
    EXPECT_EQ(p0.sample(l.data(), int64_t(l.size())), 3);
    EXPECT_EQ(both.sample(l.data(), int64_t(l.size())), 3);
  }
  // Ties: the lowest id wins, as in greedy.
  std::vector<float> tie = sampleLogits();
  Sampler t1(opts(1.0f, 1, 1.0f, 5));
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(t1.sample(tie.data(), int64_t(tie.size())), 1);
}

TEST(Sampler, TopKAndTopPRestrictTheSupport) {
  std::vector<float> l = sampleLogits(); // order: 1,4 (2.0), 3 (1.5), 7 (1.0), 0 (0.5), ...
  Sampler k3(opts(2.0f, 3, 1.0f, 11));
  for (int i = 0; i < 500; ++i) {
    int32_t id = k3.sample(l.data(), int64_t(l.size()));
    EXPECT_TRUE(id == 1 || id == 4 || id == 3) << id;
  }
  // Probabilities at T=1: ids 1 and 4 hold about 0.56 together; top_p 0.5 keeps just them.
  Sampler p(opts(1.0f, 0, 0.5f, 12));
  for (int i = 0; i < 500; ++i) {
    int32_t id = p.sample(l.data(), int64_t(l.size()));
    EXPECT_TRUE(id == 1 || id == 4) << id;
  }
}

TEST(Sampler, FollowsSoftmaxDistribution) {
  std::vector<float> l = {1.0f, 0.0f, 2.0f, -1.0f, 0.5f};
  const float temp = 0.7f;
  std::vector<double> p(l.size());
  double sum = 0;
  for (size_t i = 0; i < l.size(); ++i)
    sum += p[i] = std::exp(double(l[i]) / temp);
  for (double &v : p)
    v /= sum;
  Sampler s(opts(temp, 0, 1.0f, 2024));
  const int draws = 40000;
  std::vector<int> counts(l.size(), 0);
  for (int i = 0; i < draws; ++i)
    ++counts[size_t(s.sample(l.data(), int64_t(l.size())))];
  for (size_t i = 0; i < l.size(); ++i)
    EXPECT_NEAR(double(counts[i]) / draws, p[i], 0.015) << "id " << i;
}
