//===- SpeculativeTest.cpp - Prompt-lookup drafts --------------------------===//
// ngramDraft: the longest recurring suffix wins, its latest earlier
// occurrence is used, drafts stop at the context's end and at max_draft,
// nothing when no suffix of min_n tokens recurs.
//===----------------------------------------------------------------------===//
#include "llmc/speculative.h"

#include <gtest/gtest.h>

using llmc::spec::ngramDraft;
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
