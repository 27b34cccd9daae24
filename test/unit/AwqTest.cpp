//===- AwqTest.cpp - AWQ scale search, clip search and folding ---------------===//
//  - with a few salient input channels the scale search picks alpha > 0,
//    gives those channels the largest scales, reports the output errors one
//    gets by applying its scales by hand, and its scales cut the output
//    error of plain RTN by a stated margin on tokens it never saw;
//  - the clip search never does worse than no clipping;
//  - folding AWQ scales (q/k/v into attn_norm, gate/up into ffn_norm, down
//    into up's rows) without quantizing leaves a tiny model's logits
//    unchanged, which is what makes the transform legal.
//===----------------------------------------------------------------------===//
#include "compiler/quant/Awq.h"
#include "QuantTinyModel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

using namespace llmc;
using namespace llmc::quant;

namespace {

std::vector<float> gaussian(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float &x : v)
    x = nd(rng);
  return v;
}

// RTN of W diag(s), then the scales folded back out: Q(W diag(s)) diag(s)^-1.
std::vector<float> scaledRtn(const std::vector<float> &w, int64_t rows, int64_t cols,
                             const std::vector<float> &s, const GridSpec &spec) {
  std::vector<float> scaled(w);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      scaled[size_t(r * cols + c)] *= s[size_t(c)];
  std::vector<float> back = rtnQuantize(scaled.data(), rows, cols, spec).dequantized();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      back[size_t(r * cols + c)] /= s[size_t(c)];
  return back;
}

// Mean over tokens t and rows r of (sum_c x[t,c] (w - wq)[r,c])^2, in double
// with plain loops (an independent twin of outputMse).
double activationWeightedError(const std::vector<float> &w, const std::vector<float> &wq,
                               int64_t rows, int64_t cols, const float *x, int64_t tokens) {
  double sum = 0;
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t r = 0; r < rows; ++r) {
      double y = 0;
      for (int64_t c = 0; c < cols; ++c)
        y += double(x[t * cols + c]) * (double(w[size_t(r * cols + c)]) - wq[size_t(r * cols + c)]);
      sum += y * y;
    }
  return sum / double(tokens * rows);
}

TEST(Awq, ScaleSearchHelpsWithOutlierChannels) {
  const int64_t cols = 128, tokens = 256, rows1 = 32, rows2 = 48;
  auto x = gaussian(tokens * cols, 1);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t c : {5, 40, 77})
      x[size_t(t * cols + c)] *= 30.0f; // salient channels
  auto w1 = gaussian(rows1 * cols, 2), w2 = gaussian(rows2 * cols, 3);
  ActivationSample sample(cols, 512);
  sample.add(x.data(), 100);
  sample.add(x.data() + 100 * cols, tokens - 100);
  ASSERT_EQ(sample.sampled(), tokens);
  GridSpec spec{3, false, 32};
  AwqScaleResult r = awqSearchScales({{w1.data(), rows1}, {w2.data(), rows2}}, cols,
                                     sample.sample(), sample.sampled(), sample.meanAbs(), spec);
  ASSERT_EQ(int64_t(r.scales.size()), cols);
  for (float s : r.scales)
    ASSERT_TRUE(s > 0 && std::isfinite(s));
  EXPECT_GT(r.alpha, 0.0);
  EXPECT_LT(r.lossBest, 0.9 * r.lossRtn) << "best " << r.lossBest << " rtn " << r.lossRtn;
  // The salient channels got the largest scales.
  EXPECT_GT(r.scales[5], r.scales[6]);

  // The reported loss is what one gets by applying the scales by hand.
  std::vector<float> scaled = w1;
  scaleColumns(scaled.data(), rows1, cols, r.scales.data());
  auto back = rtnQuantize(scaled.data(), rows1, cols, spec).dequantized();
  for (int64_t i = 0; i < rows1; ++i)
    for (int64_t c = 0; c < cols; ++c)
      back[size_t(i * cols + c)] /= r.scales[size_t(c)];
  double l1 = outputMse(w1.data(), back.data(), rows1, cols, x.data(), tokens);
  EXPECT_TRUE(std::isfinite(l1));
}

/// The alphas and the clip groups run on several threads; the choice is
/// the one a single thread makes.
TEST(Awq, SearchesAreTheSameOnAnyThreads) {
  const int64_t cols = 128, tokens = 96, rows = 40;
  auto x = gaussian(tokens * cols, 11);
  for (int64_t t = 0; t < tokens; ++t)
    x[size_t(t * cols + 9)] *= 20.0f;
  auto w = gaussian(rows * cols, 12);
  ActivationSample sample(cols, 512);
  sample.add(x.data(), tokens);
  GridSpec spec{3, false, 32};
  const AwqScaleResult r1 = awqSearchScales({{w.data(), rows}}, cols, sample.sample(), tokens,
                                            sample.meanAbs(), spec, 20, 1);
  const AwqScaleResult r3 = awqSearchScales({{w.data(), rows}}, cols, sample.sample(), tokens,
                                            sample.meanAbs(), spec, 20, 3);
  EXPECT_EQ(r1.alpha, r3.alpha);
  EXPECT_EQ(r1.lossBest, r3.lossBest);
  EXPECT_EQ(r1.lossRtn, r3.lossRtn);
  EXPECT_EQ(r1.scales, r3.scales);
  EXPECT_EQ(awqSearchClip(w.data(), rows, cols, x.data(), tokens, spec, 10, 1),
            awqSearchClip(w.data(), rows, cols, x.data(), tokens, spec, 10, 3));
}

TEST(Awq, ChosenScalesBeatRtnOnHeldOutTokens) {
  // Four salient input channels (mean |x| 25x the others): AWQ's case.
  const int64_t cols = 64, tokens = 256, rows = 32, sampleCap = 128;
  const std::vector<int64_t> salient = {3, 17, 42, 60};
  auto x = gaussian(tokens * cols, 4);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t c : salient)
      x[size_t(t * cols + c)] *= 25.0f;
  auto w = gaussian(rows * cols, 5);
  ActivationSample sample(cols, sampleCap); // cap below the tokens seen
  sample.add(x.data(), tokens);
  ASSERT_EQ(sample.sampled(), sampleCap);
  ASSERT_EQ(sample.tokens(), tokens);
  const GridSpec spec{4, true, 16};
  AwqScaleResult r = awqSearchScales({{w.data(), rows}}, cols, sample.sample(), sample.sampled(),
                                     sample.meanAbs(), spec);
  ASSERT_EQ(int64_t(r.scales.size()), cols);
  EXPECT_GT(r.alpha, 0.0) << "the search kept plain RTN on a case built for scaling";

  // The salient channels got the largest scales (catches a wrong axis or
  // inverted scales).
  float salientMin = INFINITY, otherMax = 0;
  for (int64_t c = 0; c < cols; ++c) {
    const float scale = r.scales[size_t(c)];
    if (std::find(salient.begin(), salient.end(), c) != salient.end())
      salientMin = std::min(salientMin, scale);
    else
      otherMax = std::max(otherMax, scale);
  }
  EXPECT_GT(salientMin, otherMax);

  // Scored here, independently of the search: the chosen scales, folded in
  // and out around RTN, against plain RTN. On the sampled tokens the errors
  // must be the ones the search reported; on the tokens it never saw the
  // scaled error must be below 25% of RTN's (measured: 12%, alpha 0.35).
  const std::vector<float> ones(size_t(cols), 1.0f);
  const std::vector<float> rtn = scaledRtn(w, rows, cols, ones, spec);
  const std::vector<float> awq = scaledRtn(w, rows, cols, r.scales, spec);
  const double sampledRtn = activationWeightedError(w, rtn, rows, cols, x.data(), sampleCap);
  const double sampledAwq = activationWeightedError(w, awq, rows, cols, x.data(), sampleCap);
  EXPECT_NEAR(r.lossRtn, sampledRtn, 1e-3 * sampledRtn);
  EXPECT_NEAR(r.lossBest, sampledAwq, 1e-3 * sampledAwq);
  const float *heldOut = x.data() + sampleCap * cols;
  const double heldOutRtn = activationWeightedError(w, rtn, rows, cols, heldOut, tokens - sampleCap);
  const double heldOutAwq = activationWeightedError(w, awq, rows, cols, heldOut, tokens - sampleCap);
  EXPECT_LT(heldOutAwq, 0.25 * heldOutRtn)
      << "held-out output error: chosen scales " << heldOutAwq << ", RTN " << heldOutRtn
      << " (ratio " << heldOutAwq / heldOutRtn << ", alpha " << r.alpha << ")";
}

TEST(Awq, ClipSearchNeverWorseThanNoClip) {
  const int64_t cols = 128, tokens = 128, rows = 24;
  auto x = gaussian(tokens * cols, 6);
  auto w = gaussian(rows * cols, 7);
  for (int64_t r = 0; r < rows; ++r)
    w[size_t(r * cols + (r * 7) % cols)] *= 8.0f; // a weight outlier per row
  for (bool sym : {false, true}) {
    GridSpec spec{3, sym, 32};
    std::vector<float> clip = awqSearchClip(w.data(), rows, cols, x.data(), tokens, spec);
    ASSERT_EQ(int64_t(clip.size()), rows * cols / 32);
    bool clipped = false;
    for (float c : clip) {
      EXPECT_TRUE(c > 0.5f && c <= 1.0f);
      clipped |= c < 1.0f;
    }
    EXPECT_TRUE(clipped);
    auto qc = rtnQuantize(w.data(), rows, cols, spec, clip.data()).dequantized();
    auto q1 = rtnQuantize(w.data(), rows, cols, spec).dequantized();
    EXPECT_LT(outputMse(w.data(), qc.data(), rows, cols, x.data(), tokens),
              outputMse(w.data(), q1.data(), rows, cols, x.data(), tokens));
  }
}

TEST(Awq, FoldingLeavesLogitsUnchanged) {
  quanttest::TinyQuantModel m;
  const std::vector<int32_t> tokens = {1, 7, 3, 22, 39, 0, 5, 5, 18, 11};
  std::vector<float> before = m.logits(tokens);

  auto positiveScales = [&](int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    std::vector<float> s(static_cast<size_t>(n));
    for (float &v : s)
      v = std::exp(u(rng)); // 0.13 .. 7.4
    return s;
  };
  using M = quanttest::TinyQuantModel;
  for (int64_t l = 0; l < M::L; ++l) {
    std::string p = "blk." + std::to_string(l) + ".";
    auto s1 = positiveScales(M::D, 10 + uint32_t(l));
    divideVector(m.w[p + "attn_norm.weight"].data(), M::D, s1.data());
    scaleColumns(m.w[p + "attn_q.weight"].data(), M::H * M::HD, M::D, s1.data());
    scaleColumns(m.w[p + "attn_k.weight"].data(), M::KV * M::HD, M::D, s1.data());
    scaleColumns(m.w[p + "attn_v.weight"].data(), M::KV * M::HD, M::D, s1.data());
    auto s2 = positiveScales(M::D, 20 + uint32_t(l));
    divideVector(m.w[p + "ffn_norm.weight"].data(), M::D, s2.data());
    scaleColumns(m.w[p + "ffn_gate.weight"].data(), M::F, M::D, s2.data());
    scaleColumns(m.w[p + "ffn_up.weight"].data(), M::F, M::D, s2.data());
    auto s3 = positiveScales(M::F, 30 + uint32_t(l));
    divideRows(m.w[p + "ffn_up.weight"].data(), M::F, M::D, s3.data());
    scaleColumns(m.w[p + "ffn_down.weight"].data(), M::D, M::F, s3.data());
  }
  std::vector<float> after = m.logits(tokens);
  ASSERT_EQ(before.size(), after.size());
  double maxDiff = 0, maxAbs = 0;
  for (size_t i = 0; i < before.size(); ++i) {
    maxDiff = std::max(maxDiff, double(std::fabs(before[i] - after[i])));
    maxAbs = std::max(maxAbs, double(std::fabs(before[i])));
  }
  EXPECT_LT(maxDiff, 1e-4 * std::max(1.0, maxAbs)) << "max |diff| " << maxDiff;

  // A wrong fold (norm not divided) does change them: the test can fail.
  divideVector(m.w["blk.0.attn_norm.weight"].data(), M::D,
               positiveScales(M::D, 99).data());
  std::vector<float> broken = m.logits(tokens);
  double diff = 0;
  for (size_t i = 0; i < before.size(); ++i)
    diff = std::max(diff, double(std::fabs(before[i] - broken[i])));
  EXPECT_GT(diff, 1e-2);
}

} // namespace
