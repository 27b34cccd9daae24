//===- ExecutorTest.cpp - CPU executor vs a naive reference forward ---------===//
// A tiny random decoder (2 layers, hidden 16, 4 heads, 2 KV heads, head_dim
// 8, ffn 32, vocab 50) is written as an artifact in memory; its logits from
// the Executor are compared with a straightforward scalar forward written
// here (full recompute per step, no KV cache). Variants: both RoPE styles,
// attention biases, a 4-expert top-2 MoE with tied embeddings, F16 weights.
// Incremental decode must match one-shot prefill.
//===----------------------------------------------------------------------===//
#include "llmc/artifact.h"
#include "llmc/executor.h"
#include "TinyModel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

using namespace llmc;
using nlohmann::json;

namespace {

// ---- Naive reference forward: recompute every position from scratch.
using Mat = std::vector<std::vector<double>>;

std::vector<double> matvec(const std::vector<float> &W, int64_t rows, int64_t cols,
                           const std::vector<double> &x, int64_t rowOffset = 0) {
  std::vector<double> y(size_t(rows), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      y[size_t(r)] += double(W[size_t((rowOffset + r) * cols + c)]) * x[size_t(c)];
  return y;
}

std::vector<double> rmsnorm(const std::vector<double> &x, const std::vector<float> &w) {
  double ss = 0;
  for (double v : x)
    ss += v * v;
  double s = 1.0 / std::sqrt(ss / double(x.size()) + kEps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    y[i] = x[i] * s * w[i];
  return y;
}

void rope(std::vector<double> &v, int64_t heads, int64_t pos, RopeStyle style) {
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < kHd / 2; ++i) {
      double ang = double(pos) * std::pow(kTheta, -2.0 * double(i) / double(kHd));
      size_t a = size_t(h * kHd + (style == RopeStyle::Interleaved ? 2 * i : i));
      size_t b = size_t(h * kHd + (style == RopeStyle::Interleaved ? 2 * i + 1 : i + kHd / 2));
      double x0 = v[a], x1 = v[b];
      v[a] = x0 * std::cos(ang) - x1 * std::sin(ang);
      v[b] = x0 * std::sin(ang) + x1 * std::cos(ang);
    }
}

double silu(double x) { return x / (1.0 + std::exp(-x)); }

std::vector<double> mlp(const TinyModel &m, const std::string &pre, const std::vector<double> &x,
                        const std::string &g, const std::string &u, const std::string &d,
                        int64_t expert) {
  std::vector<double> gv = matvec(m.W(pre + g), kF, kD, x, expert * kF);
  std::vector<double> uv = matvec(m.W(pre + u), kF, kD, x, expert * kF);
  for (int64_t i = 0; i < kF; ++i)
    gv[size_t(i)] = silu(gv[size_t(i)]) * uv[size_t(i)];
  return matvec(m.W(pre + d), kD, kF, gv, expert * kD);
}

/// Logits [n][vocab] for the tokens.
Mat referenceForward(const TinyModel &m, const std::vector<int32_t> &toks) {
  const int64_t n = int64_t(toks.size());
  Mat x(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t)
    x[size_t(t)].assign(m.W("token_embd.weight").begin() + toks[size_t(t)] * kD,
                        m.W("token_embd.weight").begin() + (toks[size_t(t)] + 1) * kD);
  for (int64_t l = 0; l < kLayers; ++l) {
    std::string pre = "blk." + std::to_string(l) + ".";
    Mat q(static_cast<size_t>(n)), k(static_cast<size_t>(n)), v(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) {
      std::vector<double> h = rmsnorm(x[size_t(t)], m.W(pre + "attn_norm.weight"));
      q[size_t(t)] = matvec(m.W(pre + "attn_q.weight"), kH * kHd, kD, h);
      k[size_t(t)] = matvec(m.W(pre + "attn_k.weight"), kKV * kHd, kD, h);
      v[size_t(t)] = matvec(m.W(pre + "attn_v.weight"), kKV * kHd, kD, h);
      if (m.var.bias) {
        for (int64_t i = 0; i < kH * kHd; ++i)
          q[size_t(t)][size_t(i)] += m.W(pre + "attn_q.bias")[size_t(i)];
        for (int64_t i = 0; i < kKV * kHd; ++i) {
          k[size_t(t)][size_t(i)] += m.W(pre + "attn_k.bias")[size_t(i)];
          v[size_t(t)][size_t(i)] += m.W(pre + "attn_v.bias")[size_t(i)];
        }
      }
      rope(q[size_t(t)], kH, t, m.var.rope);
      rope(k[size_t(t)], kKV, t, m.var.rope);
    }
    for (int64_t t = 0; t < n; ++t) {
      std::vector<double> att(size_t(kH * kHd), 0.0);
      for (int64_t h = 0; h < kH; ++h) {
        int64_t kvh = h / (kH / kKV);
        std::vector<double> s(size_t(t + 1));
        double mx = -1e300;
        for (int64_t j = 0; j <= t; ++j) {
          double d = 0;
          for (int64_t i = 0; i < kHd; ++i)
            d += q[size_t(t)][size_t(h * kHd + i)] * k[size_t(j)][size_t(kvh * kHd + i)];
          s[size_t(j)] = d / std::sqrt(double(kHd));
          mx = std::max(mx, s[size_t(j)]);
        }
        double sum = 0;
        for (double &e : s)
          sum += e = std::exp(e - mx);
        for (int64_t j = 0; j <= t; ++j)
          for (int64_t i = 0; i < kHd; ++i)
            att[size_t(h * kHd + i)] += s[size_t(j)] / sum * v[size_t(j)][size_t(kvh * kHd + i)];
      }
      std::vector<double> o = matvec(m.W(pre + "attn_output.weight"), kD, kH * kHd, att);
      for (int64_t i = 0; i < kD; ++i)
        x[size_t(t)][size_t(i)] += o[size_t(i)];
    }
    for (int64_t t = 0; t < n; ++t) {
      std::vector<double> h = rmsnorm(x[size_t(t)], m.W(pre + "ffn_norm.weight"));
      std::vector<double> y(size_t(kD), 0.0);
      if (m.var.moe) {
        std::vector<double> logit = matvec(m.W(pre + "ffn_gate_inp.weight"), kE, kD, h);
        double mx = *std::max_element(logit.begin(), logit.end()), sum = 0;
        std::vector<double> p(static_cast<size_t>(kE));
        for (int64_t e = 0; e < kE; ++e)
          sum += p[size_t(e)] = std::exp(logit[size_t(e)] - mx);
        std::vector<int64_t> ids(static_cast<size_t>(kE));
        for (int64_t e = 0; e < kE; ++e)
          ids[size_t(e)] = e;
        std::stable_sort(ids.begin(), ids.end(),
                         [&](int64_t a, int64_t b) { return p[size_t(a)] > p[size_t(b)]; });
        double kept = 0;
        for (int64_t i = 0; i < kTopK; ++i)
          kept += p[size_t(ids[size_t(i)])];
        for (int64_t i = 0; i < kTopK; ++i) {
          int64_t e = ids[size_t(i)];
          std::vector<double> ye =
              mlp(m, pre, h, "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight", e);
          for (int64_t d = 0; d < kD; ++d)
            y[size_t(d)] += p[size_t(e)] / kept * ye[size_t(d)];
        }
      } else {
        y = mlp(m, pre, h, "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight", 0);
      }
      for (int64_t i = 0; i < kD; ++i)
        x[size_t(t)][size_t(i)] += y[size_t(i)];
    }
  }
  Mat logits(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    std::vector<double> h = rmsnorm(x[size_t(t)], m.W("output_norm.weight"));
    logits[size_t(t)] =
        matvec(m.W(m.var.tied ? "token_embd.weight" : "output.weight"), kV, kD, h);
  }
  return logits;
}

const std::vector<int32_t> kPrompt = {3, 17, 42, 0, 49, 8, 8, 21, 33, 5, 12};

void expectClose(const float *got, const std::vector<double> &want, double tol,
                 const std::string &what) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
  EXPECT_LT(worst, tol) << what;
}

void checkVariant(const Variant &v) {
  TinyModel m(v);
  std::unique_ptr<Artifact> art = m.artifact();
  Mat ref = referenceForward(m, kPrompt);
  const int64_t n = int64_t(kPrompt.size());
  const double tol = 2e-4;

  Executor ex(*art, {2, 0});
  EXPECT_EQ(ex.vocabSize(), kV);
  EXPECT_EQ(ex.maxContext(), 64);

  // One-shot prefill, all logits.
  std::vector<float> all = ex.forward(kPrompt, true);
  ASSERT_EQ(all.size(), size_t(n * kV));
  EXPECT_EQ(ex.pos(), n);
  for (int64_t t = 0; t < n; ++t)
    expectClose(all.data() + t * kV, ref[size_t(t)], tol, "prefill row " + std::to_string(t));

  // Token-by-token decode matches prefill.
  ex.reset();
  EXPECT_EQ(ex.pos(), 0);
  for (int64_t t = 0; t < n; ++t) {
    std::vector<float> last = ex.forward({kPrompt[size_t(t)]});
    ASSERT_EQ(last.size(), size_t(kV));
    for (int64_t i = 0; i < kV; ++i)
      ASSERT_NEAR(last[size_t(i)], all[size_t(t * kV + i)], 1e-4) << "decode step " << t;
  }

  // Prefill a prefix (last row only) then decode the rest.
  ex.reset();
  std::vector<float> last =
      ex.forward(std::vector<int32_t>(kPrompt.begin(), kPrompt.begin() + 4), false);
  ASSERT_EQ(last.size(), size_t(kV));
  expectClose(last.data(), ref[3], tol, "prefix last row");
  for (int64_t t = 4; t < n; ++t)
    last = ex.forward({kPrompt[size_t(t)]});
  expectClose(last.data(), ref[size_t(n - 1)], tol, "after mixed prefill/decode");

  // A single thread gives the same answer.
  Executor one(*art, {1, 0});
  std::vector<float> single = one.forward(kPrompt, true);
  for (size_t i = 0; i < single.size(); ++i)
    ASSERT_NEAR(single[i], all[i], 1e-5);
}

} // namespace

TEST(Executor, MatchesReferenceHalfRope) { checkVariant({RopeStyle::Half}); }

TEST(Executor, MatchesReferenceInterleavedRope) { checkVariant({RopeStyle::Interleaved}); }

TEST(Executor, MatchesReferenceWithAttentionBias) {
  Variant v;
  v.bias = true;
  checkVariant(v);
}

TEST(Executor, MatchesReferenceMoE) {
  Variant v;
  v.moe = true;
  v.tied = true;
  checkVariant(v);
}

TEST(Executor, MatchesReferenceF16Weights) {
  Variant v;
  v.f16 = true;
  v.rope = RopeStyle::Interleaved;
  checkVariant(v);
  v.moe = true;
  checkVariant(v);
}

TEST(Executor, RopeStyleMatters) {
  Variant a, b;
  b.rope = RopeStyle::Interleaved;
  TinyModel ma(a), mb(b);
  std::unique_ptr<Artifact> aa = ma.artifact(), ab = mb.artifact();
  Executor ea(*aa, {1, 0}), eb(*ab, {1, 0});
  std::vector<float> la = ea.forward(kPrompt), lb = eb.forward(kPrompt);
  double diff = 0;
  for (size_t i = 0; i < la.size(); ++i)
    diff = std::max(diff, double(std::fabs(la[i] - lb[i])));
  EXPECT_GT(diff, 1e-3);
}

TEST(Executor, ContextLimit) {
  TinyModel m({});
  std::unique_ptr<Artifact> art = m.artifact();
  Executor ex(*art, {1, 8});
  EXPECT_EQ(ex.maxContext(), 8);
  ex.forward({1, 2, 3, 4, 5, 6});
  EXPECT_THROW(ex.forward({1, 2, 3}), std::runtime_error);
  EXPECT_EQ(ex.pos(), 6);
  ex.forward({1, 2});
  try {
    ex.forward({1});
    FAIL() << "expected an error past the context";
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find("maximum context"), std::string::npos) << e.what();
  }
  ex.reset();
  EXPECT_THROW(ex.forward({kV}), std::runtime_error);
  EXPECT_THROW(ex.forward({-1}), std::runtime_error);
  EXPECT_THROW(ex.forward({}), std::runtime_error);
  EXPECT_EQ(ex.pos(), 0);
}

namespace {
void expectBuildError(const TinyModel &m, const json &manifest,
                      const std::vector<std::string> &needles) {
  std::unique_ptr<Artifact> art = Artifact::fromBuffer(m.artifactBytes(manifest), "tiny.llmc");
  try {
    Executor ex(*art);
    ADD_FAILURE() << "expected the executor to reject the program";
  } catch (const std::runtime_error &e) {
    for (const std::string &n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}
} // namespace

TEST(Executor, RejectsMissingWeight) {
  TinyModel m({});
  json man = m.manifest();
  man["program"]["nodes"][2]["weights"]["k"] = "blk.0.attn_missing.weight";
  expectBuildError(m, man, {"program node 2 (attention)", "blk.0.attn_missing.weight"});
}

TEST(Executor, RejectsShapeMismatch) {
  TinyModel m({});
  json man = m.manifest();
  // q and k swapped: q must be [32, 16].
  man["program"]["nodes"][2]["weights"]["q"] = "blk.0.attn_k.weight";
  expectBuildError(m, man, {"program node 2 (attention)", "blk.0.attn_k.weight", "[16,16]"});
  man = m.manifest();
  man["program"]["nodes"][1]["weights"]["weight"] = "blk.0.attn_q.weight";
  expectBuildError(m, man, {"program node 1 (rms_norm)", "blk.0.attn_q.weight"});
  man = m.manifest();
  man["program"]["nodes"][2]["attrs"]["num_kv_heads"] = 3;
  expectBuildError(m, man, {"program node 2 (attention)", "num_kv_heads"});
  man = m.manifest();
  man["program"]["nodes"][2]["attrs"]["rope_style"] = "diagonal";
  expectBuildError(m, man, {"rope_style", "diagonal"});
}

namespace {
/// A streaming policy for every layer of TinyModel: 2 sinks + the most
/// recent entries, `budget` per (layer, KV head).
std::map<int64_t, json> streamingEveryLayer(int64_t budget, double ratio = 0.0) {
  json p = {{"method", "streaming"}, {"budget", ratio}, {"budget_tokens", budget},
            {"window", 2},           {"sink", 2},     {"refresh", 4},
            {"pool", 1},             {"layer_scale", 1.0}, {"seed", 0},
            {"mode", "prefill"},     {"kv_quant", "none"}};
  std::map<int64_t, json> by;
  for (int64_t l = 0; l < kLayers; ++l)
    by[l] = p;
  return by;
}
} // namespace

// A prompt fed in chunks: with the full cache it computes what one step
// does (every row of logits); under a prefill policy the cache is
// compressed after each chunk, so its peak stays near the budget while the
// kept entries are those of one step (streaming keeps the same positions
// either way); a one-token remainder joins the chunk before it, so a prompt
// never ends in a step taken for decoding.
TEST(Executor, ChunkedPrefill) {
  TinyModel m({});
  std::unique_ptr<Artifact> art = m.artifact();
  const int64_t n = int64_t(kPrompt.size()); // 11
  ExecutorOptions one{2, 0};
  Executor whole(*art, one);
  std::vector<float> ref = whole.forward(kPrompt, true);
  const int64_t fullPeak = whole.kvCachePeakBytes();
  EXPECT_EQ(fullPeak, whole.kvCacheBytes());
  EXPECT_GT(fullPeak, 0);

  ExecutorOptions chunked = one;
  chunked.prefill_chunk = 3;
  Executor parts(*art, chunked);
  EXPECT_EQ(parts.prefillChunkFor(n), 3);
  EXPECT_EQ(parts.prefillChunkFor(3), 3);
  std::vector<float> got = parts.forward(kPrompt, true);
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i)
    ASSERT_NEAR(got[i], ref[i], 1e-4) << i;
  EXPECT_EQ(parts.pos(), n);
  EXPECT_EQ(parts.kvCacheEntries(), whole.kvCacheEntries());
  std::vector<float> last = parts.forward({7});
  std::vector<float> lastRef = whole.forward({7});
  for (size_t i = 0; i < last.size(); ++i)
    ASSERT_NEAR(last[i], lastRef[i], 1e-4);

  // Streaming, 5 entries per head: one step holds all 11 at its peak.
  const int64_t budget = 5;
  whole.reset();
  whole.setKvPolicies(streamingEveryLayer(budget), false);
  whole.resetKvPeak();
  whole.forward(kPrompt);
  EXPECT_EQ(whole.kvCacheEntries(), kLayers * kKV * budget);
  const int64_t onePeak = whole.kvCachePeakBytes();
  EXPECT_GT(onePeak, whole.kvCacheBytes());

  parts.reset();
  parts.setKvPolicies(streamingEveryLayer(budget), false);
  parts.resetKvPeak();
  parts.forward(kPrompt);
  EXPECT_EQ(parts.kvCacheEntries(), kLayers * kKV * budget);
  EXPECT_LT(parts.kvCachePeakBytes(), onePeak);
  EXPECT_GE(parts.kvCachePeakBytes(), parts.kvCacheBytes());

  // A budget that is a share of the prompt: chunk by chunk it is a share of
  // the positions so far, so the prompt ends with one step's entries.
  whole.reset();
  whole.setKvPolicies(streamingEveryLayer(0, 0.5), false);
  whole.forward(kPrompt);
  parts.reset();
  parts.setKvPolicies(streamingEveryLayer(0, 0.5), false);
  parts.forward(kPrompt);
  EXPECT_LT(whole.kvCacheEntries(), kLayers * kKV * n);
  EXPECT_EQ(parts.kvCacheEntries(), whole.kvCacheEntries());

  // 11 tokens in chunks of 10: one step of 11 (not 10 + a decode step of
  // 1, after which a prefill policy would not compress).
  ExecutorOptions ten = one;
  ten.prefill_chunk = 10;
  Executor almost(*art, ten);
  EXPECT_EQ(almost.prefillChunkFor(n), 10);
  almost.setKvPolicies(streamingEveryLayer(budget), false);
  almost.forward(kPrompt);
  EXPECT_EQ(almost.kvCacheEntries(), kLayers * kKV * budget);
  EXPECT_EQ(almost.pos(), n);

  // A bad token anywhere fails before any chunk runs.
  parts.reset();
  std::vector<int32_t> bad = kPrompt;
  bad.back() = int32_t(kV);
  EXPECT_THROW(parts.forward(bad), std::runtime_error);
  EXPECT_EQ(parts.pos(), 0);
  EXPECT_EQ(parts.kvCacheEntries(), 0);
  ExecutorOptions negative = one;
  negative.prefill_chunk = -1;
  EXPECT_THROW(Executor(*art, negative), std::runtime_error);
}
