//===- SpeculativeTest.cpp - Prompt-lookup drafts --------------------------===//
// ngramDraft: the longest recurring suffix wins, its latest earlier
// occurrence is used, drafts stop at the context's end and at max_draft,
// nothing when no suffix of min_n tokens recurs. ngramTree: the same chain
// first, other occurrences' continuations as siblings, shared prefixes
// merged, at most max_nodes tokens.
//===----------------------------------------------------------------------===//
#include "llmc/speculative.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

using llmc::spec::ngramDraft;
using llmc::spec::ngramTree;
using V = std::vector<int32_t>;

TEST(NgramDraft, LatestOccurrenceOfTheLongestSuffix) {
  // Suffix "1 2 3" occurs at 0 (then 4 5 6) and at 6 (then 9 8): the latest wins.
  const V ctx = {1, 2, 3, 4, 5, 6, 1, 2, 3, 9, 8, 7, 1, 2, 3};
  EXPECT_EQ(ngramDraft(ctx, 4, 3, 1), (V{9, 8, 7, 1}));
  EXPECT_EQ(ngramDraft(ctx, 2, 3, 1), (V{9, 8}));
}

TEST(NgramDraft, LongerSuffixBeatsAShorterLaterMatch) {
  // "7 8" recurs at 0 (then 1 2); "8" alone recurs later at 5 (then 4).
  const V ctx = {7, 8, 1, 2, 9, 8, 4, 7, 8};
  EXPECT_EQ(ngramDraft(ctx, 3, 3, 1), (V{1, 2, 9}));
  // With the suffix capped at one token, the latest "8" (at 5) wins.
  EXPECT_EQ(ngramDraft(ctx, 3, 1, 1), (V{4, 7, 8}));
}

TEST(NgramDraft, StopsAtTheContextEndAndNeedsMinN) {
  const V ctx = {5, 6, 5, 6};
  // "5 6" at 0 is followed by "5 6" then the end.
  EXPECT_EQ(ngramDraft(ctx, 8, 3, 1), (V{5, 6}));
  EXPECT_TRUE(ngramDraft(V{1, 2, 3, 4}, 4, 3, 1).empty());
  EXPECT_TRUE(ngramDraft(V{1, 2, 9, 2}, 4, 3, 2).empty()); // only a 1-token suffix recurs
  EXPECT_EQ(ngramDraft(V{1, 2, 9, 2}, 4, 3, 1), (V{9, 2}));
  EXPECT_TRUE(ngramDraft(V{}, 4, 3, 1).empty());
  EXPECT_TRUE(ngramDraft(V{3}, 4, 3, 1).empty());
  EXPECT_TRUE(ngramDraft(ctx, 0, 3, 1).empty());
}

TEST(NgramTree, TheChainFirstThenOtherOccurrencesAsSiblings) {
  // "1 2 3" at 6 (then 9 8 7 1) is the chain; at 0 (then 4 5 6 1) a second
  // branch from the root.
  const V ctx = {1, 2, 3, 4, 5, 6, 1, 2, 3, 9, 8, 7, 1, 2, 3};
  const llmc::spec::DraftTree t = ngramTree(ctx, 8, 4, 3, 1);
  EXPECT_EQ(t.token, (V{9, 8, 7, 1, 4, 5, 6, 1}));
  EXPECT_EQ(t.parent, (V{-1, 0, 1, 2, -1, 4, 5, 6}));
  const llmc::spec::DraftTree few = ngramTree(ctx, 5, 4, 3, 1); // the node budget
  EXPECT_EQ(few.token, (V{9, 8, 7, 1, 4}));
  EXPECT_EQ(few.parent, (V{-1, 0, 1, 2, -1}));
}

TEST(NgramTree, SharedPrefixesMergeAndNothingWithoutARecurringSuffix) {
  // "5" at 3 continues 1 3, at 0 continues 1 2: one "1" with two children.
  const V ctx = {5, 1, 2, 5, 1, 3, 5};
  const llmc::spec::DraftTree t = ngramTree(ctx, 8, 2, 3, 1);
  EXPECT_EQ(t.token, (V{1, 3, 2}));
  EXPECT_EQ(t.parent, (V{-1, 0, 0}));
  EXPECT_EQ(ngramTree(ctx, 8, 2, 3, 2).size(), 0u); // no 2-token suffix recurs
  EXPECT_EQ(ngramTree(V{1, 2, 3}, 8, 4, 3, 1).size(), 0u);
  EXPECT_EQ(ngramTree(ctx, 0, 4, 3, 1).size(), 0u);
  EXPECT_EQ(ngramTree(ctx, 8, 0, 3, 1).size(), 0u);
}

namespace {

/// The largest absolute difference between the sampler's own distribution
/// and the frequencies of the tokens `draw` yields over `trials` draws.
double deviation(const std::vector<float> &logits, llmc::SamplerOptions o, int trials,
                 const std::function<int32_t(llmc::Sampler &, const float *, int64_t)> &draw) {
  llmc::Sampler s(o);
  const int64_t V = int64_t(logits.size());
  std::vector<int32_t> ids;
  std::vector<double> w;
  const double total = s.distribution(logits.data(), V, ids, w);
  std::vector<double> p(size_t(V), 0.0), seen(size_t(V), 0.0);
  for (size_t i = 0; i < ids.size(); ++i)
    p[size_t(ids[i])] = w[i] / total;
  for (int t = 0; t < trials; ++t)
    seen[size_t(draw(s, logits.data(), V))] += 1.0 / trials;
  double worst = 0;
  for (int64_t v = 0; v < V; ++v)
    worst = std::max(worst, std::abs(seen[size_t(v)] - p[size_t(v)]));
  return worst;
}

/// deviation() of the token verifyDraft() yields (the draft if kept, else
/// its replacement).
double verifyDeviation(const std::vector<float> &logits, int32_t draft, llmc::SamplerOptions o,
                       int trials) {
  return deviation(logits, o, trials, [&](llmc::Sampler &s, const float *row, int64_t V) {
    int32_t next = -1;
    return llmc::spec::verifyDraft(s, row, V, draft, next) ? draft : next;
  });
}

/// deviation() of verifyCandidates() over several candidates (a draft
/// tree's children of one node); a replacement is never a candidate.
double candidatesDeviation(const std::vector<float> &logits, const std::vector<int32_t> &cand,
                           llmc::SamplerOptions o, int trials) {
  return deviation(logits, o, trials, [&](llmc::Sampler &s, const float *row, int64_t V) {
    int32_t next = -1;
    const int k = llmc::spec::verifyCandidates(s, row, V, cand.data(), int(cand.size()), next);
    if (k < 0) {
      EXPECT_EQ(std::find(cand.begin(), cand.end(), next), cand.end());
    }
    return k >= 0 ? cand[size_t(k)] : next;
  });
}

} // namespace

// The rule's output is distributed as the target's p, whether the draft is
// likely, unlikely, cut by top-k or outside the vocabulary's mass; 200k
// trials put the largest deviation near 0.002. (Drawing the replacement
// from p instead of p without the draft moves the draft's probability by
// p(d)(1 - p(d)), 0.2 here; keeping every draft by 1 - p(d).)
TEST(VerifyDraft, KeptOrReplacedTokensFollowTheTargetDistribution) {
  const std::vector<float> logits = {1.0f, 0.5f, -0.2f, 2.0f, 0.0f, -1.5f};
  llmc::SamplerOptions t1;
  t1.temperature = 1.0f;
  t1.seed = 11;
  EXPECT_LT(verifyDeviation(logits, 3, t1, 200000), 0.006); // the likeliest token
  EXPECT_LT(verifyDeviation(logits, 5, t1, 200000), 0.006); // an unlikely one
  llmc::SamplerOptions k3 = t1;
  k3.top_k = 3;
  k3.temperature = 0.7f;
  EXPECT_LT(verifyDeviation(logits, 4, k3, 200000), 0.006); // cut by top-k: never kept
  EXPECT_LT(verifyDeviation(logits, 0, k3, 200000), 0.006);
  llmc::SamplerOptions nucleus = t1;
  nucleus.top_p = 0.8f;
  EXPECT_LT(verifyDeviation(logits, 1, nucleus, 200000), 0.006);
}

TEST(VerifyDraft, GreedyKeepsExactlyTheArgmax) {
  const std::vector<float> logits = {1.0f, 0.5f, 3.0f, 2.0f};
  llmc::Sampler s(llmc::SamplerOptions{});
  int32_t next = -1;
  EXPECT_TRUE(llmc::spec::verifyDraft(s, logits.data(), 4, 2, next));
  EXPECT_FALSE(llmc::spec::verifyDraft(s, logits.data(), 4, 3, next));
  EXPECT_EQ(next, 2);
}

// Several candidates for one position (a tree's children): candidate i is
// kept with its probability under p without the candidates before it, and
// a replacement is drawn without all of them; the result is distributed as
// p for likely and unlikely candidates, candidates cut by top-k, and
// candidates that hold all of the mass but one token's. (Keeping candidate
// i with its plain p(c_i) instead moves the later candidates' shares by
// 0.016 to 0.27 here; checked by mutation.)
TEST(VerifyCandidates, TheResultFollowsTheTargetDistribution) {
  const std::vector<float> logits = {1.0f, 0.5f, -0.2f, 2.0f, 0.0f, -1.5f};
  llmc::SamplerOptions t1;
  t1.temperature = 1.0f;
  t1.seed = 5;
  EXPECT_LT(candidatesDeviation(logits, {3, 0, 1}, t1, 200000), 0.006);
  EXPECT_LT(candidatesDeviation(logits, {5, 2}, t1, 200000), 0.006);
  EXPECT_LT(candidatesDeviation(logits, {0, 1, 2, 3, 4}, t1, 200000), 0.006);
  llmc::SamplerOptions k3 = t1;
  k3.top_k = 3;
  k3.temperature = 0.7f;
  EXPECT_LT(candidatesDeviation(logits, {4, 0, 5}, k3, 200000), 0.006);
  EXPECT_LT(candidatesDeviation(logits, {0, 1}, k3, 200000), 0.006);
}

TEST(VerifyCandidates, GreedyKeepsTheCandidateEqualToTheArgmax) {
  const std::vector<float> logits = {1.0f, 0.5f, 3.0f, 2.0f};
  llmc::Sampler s(llmc::SamplerOptions{});
  int32_t next = -1;
  const std::vector<int32_t> hit = {3, 2, 0}, miss = {3, 0};
  EXPECT_EQ(llmc::spec::verifyCandidates(s, logits.data(), 4, hit.data(), 3, next), 1);
  EXPECT_EQ(llmc::spec::verifyCandidates(s, logits.data(), 4, miss.data(), 2, next), -1);
  EXPECT_EQ(next, 2);
}

TEST(DraftTree, ChainFollowsEachTokenByTheNext) {
  const llmc::spec::DraftTree t = llmc::spec::DraftTree::chain({7, 8, 9});
  EXPECT_EQ(t.token, (V{7, 8, 9}));
  EXPECT_EQ(t.parent, (V{-1, 0, 1}));
}
