//===- KvRdkvTest.cpp - RDKV: water-filling, row storage, mixed-width cache ===//
// The allocation on hand-made distortion curves (the 1/2 log2 rule of
// reverse water-filling, the budget, eviction of what matters least), the
// costs and the row codec against their definitions, and a layer cache
// under rdkv: kept rows are their originals, attention over the mixed-width
// entries equals attention over their dequantized rows, the bytes follow
// the budget, and a second prompt never widens a row.
//===----------------------------------------------------------------------===//
#include "../../runtime/src/exec/ThreadPool.h"
#include "../../runtime/src/kv/KvCache.h"
#include "../../runtime/src/kv/KvRdkv.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <map>
#include <random>
#include <vector>

using namespace llmc::kv;

namespace {

std::vector<float> randomVec(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float &x : v)
    x = d(rng);
  return v;
}

double allocBits(const rdkv::Allocation &a, int64_t hd) {
  double b = 0;
  for (size_t j = 0; j < a.key.size(); ++j)
    b += rdkv::rowBits(a.key[j], hd) + rdkv::rowBits(a.value[j], hd);
  return b;
}

} // namespace

namespace {
/// Costs of the Gaussian model: D = imp 2^(-2 w), eviction = imp_k + imp_v.
rdkv::EntryCost gaussian(double impKey, double impValue) {
  rdkv::EntryCost c;
  for (int code = 1; code < 5; ++code) {
    c.key[code] = impKey * std::exp2(-2.0 * rdkv::kWidths[code]);
    c.value[code] = impValue * std::exp2(-2.0 * rdkv::kWidths[code]);
  }
  c.evict = impKey + impValue;
  return c;
}
double distortion(const std::vector<rdkv::EntryCost> &c, const rdkv::Allocation &a) {
  double d = 0;
  for (size_t j = 0; j < c.size(); ++j)
    d += a.key[j] == 0 ? c[j].evict
                       : c[j].key[rdkv::widthCode(a.key[j])] + c[j].value[rdkv::widthCode(a.value[j])];
  return d;
}
} // namespace

TEST(Rdkv, WaterFillingGivesHalfLog2OfTheImportanceRatio) {
  // Two entries whose importances are 16x apart: 1/2 log2 16 = 2 bits apart
  // (4/4 and 2/2) when the budget is those bits.
  const int64_t hd = 64;
  const double meta = 32; // fp16 scale + min per integer row
  const double budget = 2 * (4 * hd + meta) + 2 * (2 * hd + meta);
  std::vector<rdkv::EntryCost> c = {gaussian(16, 16), gaussian(1, 1)};
  rdkv::Allocation a = rdkv::allocate(c, {16, 16}, {16, 16}, hd, budget);
  EXPECT_EQ(a.key, (std::vector<uint8_t>{4, 2}));
  EXPECT_EQ(a.value, (std::vector<uint8_t>{4, 2}));
  EXPECT_DOUBLE_EQ(a.bits, budget);
  // 16x apart again one level up: 8 and 4 bits.
  const double budget2 = 2 * (8 * hd + meta) + 2 * (4 * hd + meta);
  c = {gaussian(65536, 65536), gaussian(4096, 4096)};
  a = rdkv::allocate(c, {16, 16}, {16, 16}, hd, budget2);
  EXPECT_EQ(a.key, (std::vector<uint8_t>{8, 4}));
  EXPECT_EQ(a.value, (std::vector<uint8_t>{8, 4}));
  // Keys and values of one entry are separate units.
  c = {gaussian(16, 1)};
  a = rdkv::allocate(c, {16}, {16}, hd, (4 * hd + meta) + (2 * hd + meta));
  EXPECT_EQ(a.key[0], 4);
  EXPECT_EQ(a.value[0], 2);
}

TEST(Rdkv, AllocationMeetsTheBudgetAndEvictsWhatMattersLeast) {
  const int64_t hd = 64;
  const double meta = 32;
  // Negligible entries are evicted whole (key and value), the rest kept.
  std::vector<rdkv::EntryCost> c = {gaussian(1, 1), gaussian(1e-12, 1e-12), gaussian(1, 1),
                                    gaussian(1e-12, 1e-12)};
  rdkv::Allocation a = rdkv::allocate(c, {16, 16, 16, 16}, {16, 16, 16, 16}, hd, 4 * (8 * hd + meta));
  EXPECT_EQ(a.key, (std::vector<uint8_t>{8, 0, 8, 0}));
  EXPECT_EQ(a.value, (std::vector<uint8_t>{8, 0, 8, 0}));
  // Everything fits: everything at its cap.
  a = rdkv::allocate(c, {16, 4, 16, 16}, {16, 16, 8, 16}, hd, 1e9);
  EXPECT_EQ(a.key, (std::vector<uint8_t>{16, 4, 16, 16}));
  EXPECT_EQ(a.value, (std::vector<uint8_t>{16, 16, 8, 16}));

  // Random curves: within budget, nearly all of it used, entries whole,
  // never above the cap, and more budget never more distortion.
  std::mt19937_64 rng(3);
  std::lognormal_distribution<double> ln(0.0, 3.0);
  const int64_t n = 500;
  std::vector<rdkv::EntryCost> cost;
  std::vector<uint8_t> ck(n, 16), cv(n, 16);
  for (int64_t j = 0; j < n; ++j) {
    rdkv::EntryCost e = gaussian(ln(rng), ln(rng));
    e.key[1] *= 10; // 2-bit keys worse than the model, as measured
    e.evict *= 0.5 + double(j % 3);
    cost.push_back(e);
    if (j % 7 == 0)
      ck[size_t(j)] = 4; // an entry already stored at 4 bits cannot grow
  }
  double prev = INFINITY;
  for (double frac : {0.02, 0.1, 0.3, 0.7}) {
    const double full = double(n) * 2 * 16 * hd, b = frac * full;
    a = rdkv::allocate(cost, ck, cv, hd, b);
    EXPECT_LE(a.bits, b) << frac;
    EXPECT_GE(a.bits, b - 2 * (16 * hd)) << frac; // what is left fits no step up
    EXPECT_DOUBLE_EQ(a.bits, allocBits(a, hd));
    int kept = 0;
    for (int64_t j = 0; j < n; ++j) {
      EXPECT_EQ(a.key[size_t(j)] == 0, a.value[size_t(j)] == 0) << j;
      EXPECT_LE(a.key[size_t(j)], ck[size_t(j)]);
      kept += a.key[size_t(j)] > 0;
    }
    if (frac < 0.05) {
      EXPECT_LT(kept, n / 2) << "a 2% budget must evict";
    }
    const double d = distortion(cost, a);
    EXPECT_LT(d, prev) << frac;
    prev = d;
  }
  EXPECT_THROW(rdkv::allocate({gaussian(1, 1)}, {0}, {16}, hd, 100), std::runtime_error);
  EXPECT_THROW(rdkv::allocate({gaussian(1, 1)}, {16, 16}, {16}, hd, 100), std::runtime_error);
}

TEST(Rdkv, RowsRoundTripWithinTheirStep) {
  const int64_t hd = 64;
  for (int width : {2, 4, 8, 16}) {
    for (int trial = 0; trial < 5; ++trial) {
      std::vector<float> x = randomVec(hd, 50 + trial, 2.0f), q = randomVec(hd, 70 + trial);
      std::vector<uint8_t> row(size_t(rdkv::rowBytes(width, hd)));
      rdkv::encodeRow(x.data(), hd, width, row.data());
      std::vector<float> y(hd);
      rdkv::decodeRow(row.data(), hd, width, y.data());
      float mn = x[0], mx = x[0], qsum = 0;
      for (int64_t i = 0; i < hd; ++i) {
        mn = std::min(mn, x[size_t(i)]);
        mx = std::max(mx, x[size_t(i)]);
        qsum += q[size_t(i)];
      }
      const float step = width == 16 ? 0 : (mx - mn) / float((1 << width) - 1);
      double err2 = 0, dq = 0;
      for (int64_t i = 0; i < hd; ++i) {
        const float e = std::fabs(y[size_t(i)] - x[size_t(i)]);
        // Half a step, plus fp16 rounding of the scale, minimum and values.
        EXPECT_LE(e, 0.5f * step * 1.01f + 2e-3f * std::max(std::fabs(mn), std::fabs(mx)))
            << width << " " << i;
        err2 += double(e) * e;
        dq += double(q[size_t(i)]) * y[size_t(i)];
      }
      if (width == 2) {
        EXPECT_GT(err2, 1e-3) << "really 2 bits";
      }
      // The attention reads agree with the decoded row.
      EXPECT_NEAR(rdkv::dotRow(q.data(), qsum, row.data(), hd, width), dq, 1e-3 * (1 + std::fabs(dq)));
      std::vector<float> acc(hd, 0.25f);
      rdkv::accumulateRow(row.data(), hd, width, 0.3f, acc.data());
      for (int64_t i = 0; i < hd; ++i)
        EXPECT_NEAR(acc[size_t(i)], 0.25f + 0.3f * y[size_t(i)], 1e-5f);
    }
  }
  EXPECT_EQ(rdkv::rowBytes(2, 64), 4 + 16);
  EXPECT_EQ(rdkv::rowBytes(16, 64), 128);
  EXPECT_EQ(rdkv::rowBytes(0, 64), 0);
  // A constant row (zero range) is exact.
  std::vector<float> c(hd, 1.5f), d(hd);
  std::vector<uint8_t> row(size_t(rdkv::rowBytes(2, hd)));
  rdkv::encodeRow(c.data(), hd, 2, row.data());
  rdkv::decodeRow(row.data(), hd, 2, d.data());
  EXPECT_EQ(d, c);
  EXPECT_THROW(rdkv::widthCode(3), std::runtime_error);
}

TEST(Rdkv, CostsFollowTheDefinition) {
  // Two window rows over 2 candidates + 1 window entry, hd 8.
  const int64_t hd = 8, n = 3, rows = 2;
  const float A[rows * n] = {0.5f, 0.25f, 0.25f, 0.1f, 0.6f, 0.3f};
  const float qn2[rows] = {4.0f, 0.5f};
  std::vector<float> k = randomVec(size_t(n * hd), 31), v = randomVec(size_t(n * hd), 32);
  std::vector<rdkv::EntryCost> c = rdkv::entryCosts(A, qn2, rows, n, 2, k.data(), v.data(), hd);
  ASSERT_EQ(c.size(), 2u);
  auto mse = [&](const float *x, int w) {
    std::vector<uint8_t> row(size_t(rdkv::rowBytes(w, hd)));
    std::vector<float> y(hd);
    rdkv::encodeRow(x, hd, w, row.data());
    rdkv::decodeRow(row.data(), hd, w, y.data());
    double e = 0;
    for (int64_t i = 0; i < hd; ++i)
      e += (y[size_t(i)] - x[i]) * (y[size_t(i)] - x[i]);
    return e / hd;
  };
  for (int64_t j = 0; j < 2; ++j) {
    double ev = 0, wv = 0;
    std::vector<double> dvo(rows);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < hd; ++i) {
        double o = 0;
        for (int64_t m = 0; m < n; ++m)
          o += A[r * n + m] * v[size_t(m * hd + i)];
        dvo[size_t(r)] += (v[size_t(j * hd + i)] - o) * (v[size_t(j * hd + i)] - o);
      }
      const double a = A[r * n + j];
      ev += a * a / ((1 - a) * (1 - a)) * dvo[size_t(r)];
      wv += a * a;
    }
    EXPECT_NEAR(c[size_t(j)].evict, ev / (rows * hd), 1e-6);
    for (int code = 1; code < 5; ++code) {
      const int w = rdkv::kWidths[code];
      EXPECT_NEAR(c[size_t(j)].value[code], wv / rows * mse(v.data() + j * hd, w), 1e-9);
      double dk = 0;
      for (int64_t r = 0; r < rows; ++r) {
        const double a = A[r * n + j], s2 = qn2[r] * mse(k.data() + j * hd, w) / hd;
        dk += a * a * dvo[size_t(r)] * (std::exp(2 * s2) - 2 * std::exp(s2 / 2) + 1);
      }
      EXPECT_NEAR(c[size_t(j)].key[code], dk / (rows * hd), 1e-6 * (1 + dk)) << code;
    }
    // Coarser is costlier; to first order the key cost is w_k mse.
    EXPECT_GT(c[size_t(j)].key[1], c[size_t(j)].key[2]);
    EXPECT_GT(c[size_t(j)].value[2], c[size_t(j)].value[3]);
  }
  // Smoothing averages neighbours.
  std::vector<rdkv::EntryCost> s(3);
  s[1].evict = 3;
  s[1].key[2] = 6;
  rdkv::smoothCosts(s, 3);
  EXPECT_DOUBLE_EQ(s[0].evict, 1.5);
  EXPECT_DOUBLE_EQ(s[1].evict, 1.0);
  EXPECT_DOUBLE_EQ(s[2].key[2], 3.0);
}

namespace {
struct Layer {
  int64_t H = 4, KV = 2, hd = 32, T = 80;
  std::vector<float> q, k, v, out;
  Layer() {
    q = randomVec(size_t(T * H * hd), 11);
    k = randomVec(size_t(T * KV * hd), 12);
    v = randomVec(size_t(T * KV * hd), 13);
    out.resize(q.size());
  }
  LayerCache make(const Policy &p) {
    return LayerCache(p, 0, H, KV, hd, 0, 8, [](int64_t, float *) {});
  }
  /// Prompt of T tokens, then compress.
  void prompt(LayerCache &c, llmc::ThreadPool &pool) {
    c.append(k.data(), v.data(), T, KV * hd, 0);
    c.attend(pool, q.data(), T, out.data());
    c.afterStep(q.data(), T, 0);
  }
};

Policy rdkvPolicy(double budget, int64_t window) {
  Policy p;
  p.method = Method::RdKV;
  p.name = "rdkv";
  p.budget = budget;
  p.window = window;
  p.pool = 1;
  p.mode = Hook::Prefill;
  return p;
}
} // namespace

TEST(Rdkv, MixedWidthAttentionEqualsAttentionOverTheDequantizedRows) {
  Layer f;
  llmc::ThreadPool pool(2);
  LayerCache c = f.make(rdkvPolicy(0.25, 8));
  f.prompt(c, pool);
  const int64_t kept = c.entries();
  EXPECT_LT(kept, 2 * f.T);   // some entries evicted
  EXPECT_GE(kept, 2 * 8 + 2); // the window and more
  // Decode one token (appended at fp16), then compare with a direct softmax
  // over every stored row, dequantized by the codec.
  std::vector<float> k1 = randomVec(size_t(f.KV * f.hd), 20), v1 = randomVec(size_t(f.KV * f.hd), 21);
  std::vector<float> q1 = randomVec(size_t(f.H * f.hd), 22), o1(size_t(f.H * f.hd));
  c.append(k1.data(), v1.data(), 1, f.KV * f.hd, f.T);
  c.attend(pool, q1.data(), 1, o1.data());
  for (int64_t g = 0; g < f.KV; ++g) {
    const HeadCache &h = c.head(g);
    ASSERT_EQ(int64_t(h.widths.size()), h.n);
    std::vector<int64_t> off = rdkv::entryOffsets(h.widths, f.hd);
    std::vector<std::vector<float>> ks, vs;
    int mixed[17] = {0};
    for (int64_t j = 0; j < h.n; ++j) {
      const uint8_t p = h.widths[size_t(j)];
      std::vector<float> kr(f.hd), vr(f.hd);
      rdkv::decodeRow(h.rd.data() + off[size_t(j)], f.hd, rdkv::keyWidth(p), kr.data());
      rdkv::decodeRow(h.rd.data() + off[size_t(j)] + rdkv::rowBytes(rdkv::keyWidth(p), f.hd), f.hd,
                      rdkv::valueWidth(p), vr.data());
      ks.push_back(kr);
      vs.push_back(vr);
      ++mixed[rdkv::keyWidth(p)];
      ++mixed[rdkv::valueWidth(p)];
    }
    EXPECT_EQ(h.pos.back(), f.T); // the new token, at fp16
    EXPECT_EQ(rdkv::keyWidth(h.widths.back()), 16);
    int distinct = 0;
    for (int w : {2, 4, 8, 16})
      distinct += mixed[w] > 0;
    EXPECT_GE(distinct, 2) << "head " << g << " is not mixed-width";
    for (int64_t hh = g * 2; hh < g * 2 + 2; ++hh) {
      const float *qh = q1.data() + hh * f.hd;
      std::vector<double> s(ks.size());
      double mx = -1e30, sum = 0;
      for (size_t j = 0; j < ks.size(); ++j) {
        double d = 0;
        for (int64_t i = 0; i < f.hd; ++i)
          d += double(qh[i]) * ks[j][size_t(i)];
        s[j] = d / std::sqrt(double(f.hd));
        mx = std::max(mx, s[j]);
      }
      for (double &x : s)
        sum += x = std::exp(x - mx);
      for (int64_t i = 0; i < f.hd; ++i) {
        double o = 0;
        for (size_t j = 0; j < ks.size(); ++j)
          o += s[j] / sum * vs[j][size_t(i)];
        EXPECT_NEAR(o1[size_t(hh * f.hd + i)], o, 1e-4) << g << " " << i;
      }
    }
  }
}

TEST(Rdkv, BytesShrinkWithTheBudgetAndFollowIt) {
  Layer f;
  llmc::ThreadPool pool(2);
  LayerCache full = f.make(Policy());
  f.prompt(full, pool);
  const int64_t fp16Bytes = 2 * f.T * f.KV * 2 * f.hd; // K and V of every entry at fp16
  int64_t prev = INT64_MAX;
  for (double b : {0.6, 0.3, 0.1}) {
    LayerCache c = f.make(rdkvPolicy(b, 4));
    f.prompt(c, pool);
    const int64_t bytes = c.bytes();
    EXPECT_LT(bytes, prev) << b;
    // Codes + row headers within the budget; positions and widths (5 bytes
    // an entry), one entry of headroom per head and the window's queries
    // (f32 rows of every query head, and their positions) on top.
    const int64_t windowBytes = c.policy().window * (f.H * f.hd * 4 + 4);
    EXPECT_LE(bytes, int64_t(b * double(fp16Bytes)) + 5 * c.entries() + f.KV * (4 * f.hd + 5) +
                         windowBytes)
        << b;
    EXPECT_LT(bytes, full.bytes());
    prev = bytes;
  }
}

TEST(Rdkv, PolicyChecks) {
  nlohmann::json j = {{"method", "rdkv"}, {"budget", 0.1}, {"budget_tokens", 0}, {"window", 32},
                      {"sink", 4}, {"layer_scale", 1.0}, {"mode", "prefill"}, {"refresh", 16},
                      {"pool", 7}, {"kv_quant", "none"}, {"seed", 0}};
  EXPECT_EQ(parsePolicy(j, "layer 0", 3).method, Method::RdKV);
  auto fails = [&](nlohmann::json bad, const char *what) {
    try {
      parsePolicy(bad, "layer 0", 3);
      ADD_FAILURE() << "accepted " << bad.dump();
    } catch (const std::runtime_error &e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  nlohmann::json d = j;
  d["mode"] = "decode";
  fails(d, "mode must be prefill");
  d = j;
  d["mode"] = "both";
  fails(d, "mode must be prefill");
  d = j;
  d["kv_quant"] = "polykv";
  fails(d, "kv_quant must be none");
  d = j;
  d["head_scale"] = {1.0, 1.0, 1.0};
  fails(d, "head_scale");
  // A compressed rdkv cache cannot turn into another policy's storage.
  Layer f;
  llmc::ThreadPool pool(1);
  LayerCache c = f.make(rdkvPolicy(0.3, 4));
  f.prompt(c, pool);
  EXPECT_THROW(c.setPolicy(Policy(), false), std::runtime_error);
}

TEST(Rdkv, KeptRowsAreTheirOriginals) {
  Layer f;
  llmc::ThreadPool pool(2);
  LayerCache c = f.make(rdkvPolicy(0.25, 8));
  f.prompt(c, pool);
  for (int64_t g = 0; g < f.KV; ++g) {
    const HeadCache &h = c.head(g);
    std::vector<int64_t> off = rdkv::entryOffsets(h.widths, f.hd);
    for (int64_t j = 0; j < h.n; ++j) {
      const uint8_t p = h.widths[size_t(j)];
      std::vector<float> kr(f.hd), vr(f.hd);
      rdkv::decodeRow(h.rd.data() + off[size_t(j)], f.hd, rdkv::keyWidth(p), kr.data());
      rdkv::decodeRow(h.rd.data() + off[size_t(j)] + rdkv::rowBytes(rdkv::keyWidth(p), f.hd), f.hd, rdkv::valueWidth(p), vr.data());
      const int64_t t = h.pos[size_t(j)];
      double e = 0, nn = 0;
      for (int64_t d = 0; d < f.hd; ++d) {
        double x = f.k[size_t(t * f.KV * f.hd + g * f.hd + d)];
        e += (kr[size_t(d)] - x) * (kr[size_t(d)] - x);
        nn += x * x;
      }
      // 2-bit per-token rows of Gaussian data: relative error ~0.1-0.2.
      EXPECT_LT(e / nn, 0.35) << g << " " << j << " pos " << t << " w " << rdkv::keyWidth(p);
      if (rdkv::keyWidth(p) == 16) {
        EXPECT_LT(e / nn, 1e-6);
      }
    }
  }
}

TEST(Rdkv, FullBudgetKeepsFp16AndASecondPromptNeverWidens) {
  Layer f;
  llmc::ThreadPool pool(2);
  LayerCache all = f.make(rdkvPolicy(1.0, 4));
  f.prompt(all, pool);
  EXPECT_EQ(all.entries(), f.KV * f.T);
  for (uint8_t p : all.head(0).widths)
    EXPECT_EQ(p, rdkv::packWidths(16, 16));

  // First prompt: 40 tokens; second: the other 40, compressed again.
  LayerCache c = f.make(rdkvPolicy(0.3, 4));
  const int64_t T1 = 40, T2 = f.T - T1;
  c.append(f.k.data(), f.v.data(), T1, f.KV * f.hd, 0);
  c.attend(pool, f.q.data(), T1, f.out.data());
  c.afterStep(f.q.data(), T1, 0);
  std::map<int32_t, uint8_t> before;
  for (int64_t g = 0; g < f.KV; ++g)
    for (int64_t j = 0; j < c.head(g).n; ++j)
      before[int32_t(g * 1000 + c.head(g).pos[size_t(j)])] = c.head(g).widths[size_t(j)];
  c.append(f.k.data() + T1 * f.KV * f.hd, f.v.data() + T1 * f.KV * f.hd, T2, f.KV * f.hd, T1);
  c.attend(pool, f.q.data() + T1 * f.H * f.hd, T2, f.out.data());
  c.afterStep(f.q.data() + T1 * f.H * f.hd, T2, T1);
  int checked = 0;
  for (int64_t g = 0; g < f.KV; ++g)
    for (int64_t j = 0; j < c.head(g).n; ++j) {
      auto it = before.find(int32_t(g * 1000 + c.head(g).pos[size_t(j)]));
      if (it == before.end())
        continue;
      const uint8_t now = c.head(g).widths[size_t(j)];
      EXPECT_LE(rdkv::keyWidth(now), rdkv::keyWidth(it->second));
      EXPECT_LE(rdkv::valueWidth(now), rdkv::valueWidth(it->second));
      ++checked;
    }
  EXPECT_GT(checked, 0);
  EXPECT_LT(c.entries(), f.KV * f.T);
}
