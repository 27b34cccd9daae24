//===- KvPolicyTest.cpp - KV-cache policies: selection, storage, compaction ===//
// Each policy's choice on hand-made score matrices, the PolyKV storage
// against its definition, and the layer cache's compaction and attention
// against a direct computation over the kept entries.
//===----------------------------------------------------------------------===//
#include "../../runtime/src/exec/ThreadPool.h"
#include "../../runtime/src/kv/KvCache.h"
#include "../../runtime/src/kv/KvSelect.h"
#include "../../runtime/src/kernels/attention_f32.h"

#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <random>
#include <set>
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

Policy makePolicy(Method m, const std::string &name, int64_t budgetTokens, int64_t window) {
  Policy p;
  p.method = m;
  p.name = name;
  p.budget_tokens = budgetTokens;
  p.window = window;
  p.sink = 2;
  p.pool = 1;
  p.mode = Hook::Prefill;
  return p;
}

/// Softmax attention of one query over the given keys/values (reference).
std::vector<float> attendRef(const float *q, const std::vector<const float *> &ks,
                             const std::vector<const float *> &vs, int64_t hd) {
  std::vector<double> s(ks.size());
  double mx = -1e30;
  for (size_t j = 0; j < ks.size(); ++j) {
    double d = 0;
    for (int64_t i = 0; i < hd; ++i)
      d += double(q[i]) * ks[j][i];
    s[j] = d / std::sqrt(double(hd));
    mx = std::max(mx, s[j]);
  }
  double sum = 0;
  for (double &x : s)
    sum += x = std::exp(x - mx);
  std::vector<float> o(size_t(hd), 0.0f);
  for (size_t j = 0; j < ks.size(); ++j)
    for (int64_t i = 0; i < hd; ++i)
      o[size_t(i)] += float(s[j] / sum) * vs[j][i];
  return o;
}

} // namespace

TEST(KvSelect, KeepsSinksRecentAndTopScores) {
  const float score[10] = {0.1f, 0.9f, 0.2f, 0.8f, 0.05f, 0.7f, 0.3f, 0.0f, 0.0f, 0.0f};
  // 6 kept: recent 3 (7, 8, 9), sink 1 (0), then the best of 1..6: 1, 3.
  EXPECT_EQ(selectTop(score, 10, 6, 1, 3), (std::vector<int64_t>{0, 1, 3, 7, 8, 9}));
  // No sinks, window 2: 8, 9 plus 1, 3, 5, 6.
  EXPECT_EQ(selectTop(score, 10, 6, 0, 2), (std::vector<int64_t>{1, 3, 5, 6, 8, 9}));
  // Ties go to the older entry; keep >= n keeps everything.
  const float flat[5] = {1, 1, 1, 1, 1};
  EXPECT_EQ(selectTop(flat, 5, 3, 0, 1), (std::vector<int64_t>{0, 1, 4}));
  EXPECT_EQ(selectTop(flat, 5, 9, 0, 1).size(), 5u);
  // Streaming: no scores at all, sinks + recent only.
  EXPECT_EQ(selectTop(nullptr, 8, 4, 2, 2), (std::vector<int64_t>{0, 1, 6, 7}));
}

TEST(KvSelect, AvgPoolMeansInsideTheRange) {
  float s[5] = {0, 0, 6, 0, 0};
  avgPool(s, 5, 3);
  EXPECT_FLOAT_EQ(s[0], 0.0f);
  EXPECT_FLOAT_EQ(s[1], 2.0f);
  EXPECT_FLOAT_EQ(s[2], 2.0f);
  EXPECT_FLOAT_EQ(s[3], 2.0f);
  EXPECT_FLOAT_EQ(s[4], 0.0f);
  float e[2] = {4, 0};
  avgPool(e, 2, 5);
  EXPECT_FLOAT_EQ(e[0], 2.0f);
}

TEST(KvSelect, WindowAttentionIsCausalAndNormalized) {
  const int64_t hd = 4, n = 6, W = 2;
  std::vector<float> k = randomVec(size_t(n * hd), 1), q = randomVec(size_t(W * hd), 2);
  const int32_t kpos[n] = {0, 1, 2, 3, 4, 5}, qpos[W] = {4, 5};
  std::vector<float> A(size_t(W * n));
  windowAttention(q.data(), W, hd, qpos, k.data(), kpos, n, hd, A.data());
  EXPECT_EQ(A[5], 0.0f); // query at 4 cannot see key 5
  for (int64_t i = 0; i < W; ++i) {
    double s = 0;
    for (int64_t j = 0; j < n; ++j)
      s += A[size_t(i * n + j)];
    EXPECT_NEAR(s, 1.0, 1e-6);
  }
}

TEST(KvSelect, SnapKVPicksTheColumnsTheWindowAttends) {
  // 3 window queries over 8 keys: columns 2 and 5 get most of the mass.
  const int64_t n = 8, W = 3;
  std::vector<float> A(size_t(W * n), 0.02f);
  for (int64_t i = 0; i < W; ++i) {
    A[size_t(i * n + 2)] = 0.4f;
    A[size_t(i * n + 5)] = 0.3f;
  }
  std::vector<float> s(static_cast<size_t>(n));
  snapScore(A.data(), W, n, s.data());
  EXPECT_NEAR(s[2], 1.2f, 1e-6);
  EXPECT_EQ(selectTop(s.data(), n, 4, 0, 2), (std::vector<int64_t>{2, 5, 6, 7}));
}

TEST(KvSelect, RestKVScoreIsTheOddsTimesTheProjectedChange) {
  // One window query, 3 candidate keys, hd 2, W_O = identity (G = I).
  const int64_t n = 3, hd = 2;
  const float A[n] = {0.5f, 0.3f, 0.2f};
  const float v[n * hd] = {1, 0, 0, 1, 1, 1};
  const float G[4] = {1, 0, 0, 1};
  float s[n];
  restScore(A, 1, n, n, v, hd, G, s);
  // o = 0.5 (1,0) + 0.3 (0,1) + 0.2 (1,1) = (0.7, 0.5).
  EXPECT_NEAR(s[0], 0.5 / 0.5 * std::hypot(0.7 - 1, 0.5 - 0), 1e-5);
  EXPECT_NEAR(s[1], 0.3 / 0.7 * std::hypot(0.7 - 0, 0.5 - 1), 1e-5);
  EXPECT_NEAR(s[2], 0.2 / 0.8 * std::hypot(0.7 - 1, 0.5 - 1), 1e-5);
  // A G that weighs only the second coordinate changes the ranking. (With
  // two candidates and G2, s0 = 10 a0 a1 / (1 - a0) and s1 = 10 a1: the
  // weights above, a0 = 0.5, would tie them exactly.)
  const float A2[n] = {0.4f, 0.3f, 0.3f};
  restScore(A2, 1, n, 2, v, hd, G, s);
  EXPECT_GT(s[0], s[1]); // 0.447 vs 0.345
  const float G2[4] = {0, 0, 0, 100};
  restScore(A2, 1, n, 2, v, hd, G2, s);
  EXPECT_NEAR(s[0], 2.0, 1e-5);
  EXPECT_NEAR(s[1], 3.0, 1e-5);
  EXPECT_EQ(s[2], 0.0f); // past the candidates
}

TEST(KvSelect, LaProxIsColumnNormTimesProjectedValueNorm) {
  const int64_t n = 2, hd = 2, W = 2;
  const float A[W * n] = {0.6f, 0.4f, 0.8f, 0.2f};
  const float v[n * hd] = {3, 4, 1, 0};
  const float G[4] = {1, 0, 0, 1};
  float s[n];
  laproxScore(A, W, n, v, hd, G, s);
  EXPECT_NEAR(s[0], std::hypot(0.6, 0.8) * 5.0, 1e-5);
  EXPECT_NEAR(s[1], std::hypot(0.4, 0.2) * 1.0, 1e-5);
}

TEST(KvSelect, LeverageMatchesTheDirectFormula) {
  const int64_t hd = 3, n = 5, rows = 6;
  std::vector<float> Q = randomVec(size_t(rows * hd), 3), k = randomVec(size_t(n * hd), 4);
  std::vector<float> s(static_cast<size_t>(n));
  leverageScore(Q.data(), rows, hd, k.data(), n, hd, s.data());
  // Direct: S = Q^T Q / rows, M = K S K^T (n x n Gram of whitened keys),
  // l = diag(M (M + s2 I)^-1) with s2 = 1e-2 tr(M) / hd.
  std::vector<double> S(9, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int a = 0; a < 3; ++a)
      for (int b = 0; b < 3; ++b)
        S[size_t(a * 3 + b)] += double(Q[size_t(r * 3 + a)]) * Q[size_t(r * 3 + b)] / rows;
  std::vector<double> M(size_t(n * n), 0.0);
  double tr = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double x = 0;
      for (int a = 0; a < 3; ++a)
        for (int b = 0; b < 3; ++b)
          x += double(k[size_t(i * 3 + a)]) * S[size_t(a * 3 + b)] * k[size_t(j * 3 + b)];
      M[size_t(i * n + j)] = x;
      if (i == j)
        tr += x;
    }
  const double s2 = 1e-2 * tr / hd;
  // Solve (M + s2 I) X = M by Gauss-Jordan; l_j = X[j, j].
  std::vector<double> Aug(size_t(n * 2 * n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      Aug[size_t(i * 2 * n + j)] = M[size_t(i * n + j)] + (i == j ? s2 : 0);
      Aug[size_t(i * 2 * n + n + j)] = M[size_t(i * n + j)];
    }
  for (int64_t c = 0; c < n; ++c) {
    double piv = Aug[size_t(c * 2 * n + c)];
    for (int64_t j = 0; j < 2 * n; ++j)
      Aug[size_t(c * 2 * n + j)] /= piv;
    for (int64_t r = 0; r < n; ++r)
      if (r != c) {
        double f = Aug[size_t(r * 2 * n + c)];
        for (int64_t j = 0; j < 2 * n; ++j)
          Aug[size_t(r * 2 * n + j)] -= f * Aug[size_t(c * 2 * n + j)];
      }
  }
  for (int64_t j = 0; j < n; ++j)
    EXPECT_NEAR(s[size_t(j)], Aug[size_t(j * 2 * n + n + j)], 1e-3);
}

TEST(PolyKV, KeysAreQ8AndValuesAreRotated3Bit) {
  const int64_t hd = 64;
  PolyKV p(hd, 7);
  std::vector<float> k = randomVec(hd, 5, 2.0f), q = randomVec(hd, 6), v = randomVec(hd, 8);
  std::vector<uint8_t> kb(size_t(p.keyBytes())), vb(size_t(p.valueBytes()));
  EXPECT_EQ(p.keyBytes(), 68);
  EXPECT_EQ(p.valueBytes(), 26);
  p.encodeKey(k.data(), kb.data());
  std::vector<float> kd(hd), vd(hd);
  p.decodeKey(kb.data(), kd.data());
  double dq = 0, dd = 0;
  for (int64_t i = 0; i < hd; ++i) {
    float amax = 0;
    for (int64_t j = (i / 32) * 32; j < (i / 32 + 1) * 32; ++j)
      amax = std::max(amax, std::fabs(k[size_t(j)]));
    EXPECT_LE(std::fabs(kd[size_t(i)] - k[size_t(i)]), amax / 127.0f * 0.51f + 1e-3f);
    dq += q[size_t(i)] * kd[size_t(i)];
  }
  dd = p.dotKey(q.data(), kb.data());
  EXPECT_NEAR(dd, dq, 1e-3);
  // Values: relative MSE of 3-bit Lloyd-Max on N(0,1) is ~0.035.
  double err = 0, norm = 0;
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> x = randomVec(hd, 100 + trial, 3.0f);
    p.encodeValue(x.data(), vb.data());
    p.decodeValue(vb.data(), vd.data());
    for (int64_t i = 0; i < hd; ++i) {
      err += (vd[size_t(i)] - x[size_t(i)]) * (vd[size_t(i)] - x[size_t(i)]);
      norm += x[size_t(i)] * x[size_t(i)];
    }
  }
  EXPECT_LT(err / norm, 0.06);
  EXPECT_GT(err / norm, 0.01); // really 3 bits, not a copy
  // FWHT applied twice is n x identity.
  std::vector<float> y = v;
  fwht(y.data(), hd);
  fwht(y.data(), hd);
  for (int64_t i = 0; i < hd; ++i)
    EXPECT_NEAR(y[size_t(i)], hd * v[size_t(i)], 1e-3);
  EXPECT_THROW(PolyKV(48, 0), std::runtime_error);
}

namespace {
/// A layer cache fed T prompt rows; returns it with its inputs.
struct Fixture {
  int64_t H = 4, KV = 2, hd = 32, T = 40;
  std::vector<float> q, k, v, out;
  Fixture() {
    q = randomVec(size_t(T * H * hd), 11);
    k = randomVec(size_t(T * KV * hd), 12);
    v = randomVec(size_t(T * KV * hd), 13);
    out.resize(q.size());
  }
  LayerCache make(const Policy &p) {
    return LayerCache(p, 0, H, KV, hd, 0, 8, [&](int64_t r, float *dst) {
      for (int64_t c = 0; c < H * hd; ++c)
        dst[c] = (r * 31 + c) % 7 == 0 ? 1.0f : 0.0f;
    });
  }
};
} // namespace

TEST(LayerCache, FullCacheMatchesDirectAttention) {
  Fixture f;
  llmc::ThreadPool pool(2);
  Policy full;
  LayerCache c = f.make(full);
  c.append(f.k.data(), f.v.data(), f.T, f.KV * f.hd, 0);
  c.attend(pool, f.q.data(), f.T, f.out.data());
  c.afterStep(f.q.data(), f.T, 0);
  EXPECT_EQ(c.entries(), f.T * f.KV);
  for (int64_t t : {0L, 17L, 39L})
    for (int64_t h = 0; h < f.H; ++h) {
      int64_t g = h / (f.H / f.KV);
      std::vector<const float *> ks, vs;
      for (int64_t j = 0; j <= t; ++j) {
        ks.push_back(f.k.data() + j * f.KV * f.hd + g * f.hd);
        vs.push_back(f.v.data() + j * f.KV * f.hd + g * f.hd);
      }
      std::vector<float> ref = attendRef(f.q.data() + t * f.H * f.hd + h * f.hd, ks, vs, f.hd);
      for (int64_t d = 0; d < f.hd; ++d)
        EXPECT_NEAR(f.out[size_t(t * f.H * f.hd + h * f.hd + d)], ref[size_t(d)], 1e-4);
    }
}

namespace {
// A stand-in for the generated GQA-group kernel of the Fixture's shape (2
// query heads a KV head, head_dim 32), by AttendGroupFn's contract.
void libraryGroup(const float *q, const float *k, const float *v, int64_t n, float *w,
                  int64_t ldw, float *out) {
  for (int64_t h = 0; h < 2; ++h) {
    llmc::kernels::scoreKeys(q + h * 32, k, n, 32, float(1.0 / std::sqrt(32.0)), w + h * ldw);
    llmc::kernels::softmaxInPlace(w + h * ldw, n);
    llmc::kernels::weightedRows(w + h * ldw, v, n, 32, out + h * 32);
  }
}
} // namespace

TEST(LayerCache, RunningStatisticsAreEachEntrysAttentionSummedOverTheStep) {
  // H2O's statistic after a 40-row prefill (split over the chunks attend()
  // runs in parallel): entry j's sum over query rows t >= j and the KV
  // head's query heads of their softmax weight, over the group size; the
  // same with the library's per-head kernels and with a group kernel, and
  // the same for 1 and 2 threads.
  Fixture f;
  const int64_t G = f.H / f.KV;
  std::vector<std::vector<double>> ref(size_t(f.KV), std::vector<double>(size_t(f.T), 0.0));
  for (int64_t h = 0; h < f.H; ++h)
    for (int64_t t = 0; t < f.T; ++t) {
      const int64_t g = h / G;
      std::vector<double> s(size_t(t + 1));
      double mx = -1e30, sum = 0;
      for (int64_t j = 0; j <= t; ++j) {
        double d = 0;
        for (int64_t i = 0; i < f.hd; ++i)
          d += double(f.q[size_t(t * f.H * f.hd + h * f.hd + i)]) *
               f.k[size_t(j * f.KV * f.hd + g * f.hd + i)];
        mx = std::max(mx, s[size_t(j)] = d / std::sqrt(double(f.hd)));
      }
      for (double &x : s)
        sum += x = std::exp(x - mx);
      for (int64_t j = 0; j <= t; ++j)
        ref[size_t(g)][size_t(j)] += s[size_t(j)] / sum / double(G);
    }
  std::vector<std::vector<float>> first;
  for (bool group : {false, true})
    for (int threads : {1, 2}) {
      llmc::ThreadPool pool(threads);
      llmc::codegen::AttendKernels gen;
      if (group)
        gen.group = libraryGroup;
      LayerCache c = f.make(makePolicy(Method::H2O, "h2o", 1000, 4));
      c.append(f.k.data(), f.v.data(), f.T, f.KV * f.hd, 0);
      c.attend(pool, f.q.data(), f.T, f.out.data(), gen);
      for (int64_t g = 0; g < f.KV; ++g) {
        ASSERT_EQ(c.head(g).acc.size(), size_t(f.T));
        for (int64_t j = 0; j < f.T; ++j)
          EXPECT_NEAR(c.head(g).acc[size_t(j)], ref[size_t(g)][size_t(j)], 1e-5)
              << "group kernel " << group << ", " << threads << " threads, head " << g
              << ", entry " << j;
        if (threads == 1)
          first.push_back(c.head(g).acc);
        else // the thread count does not change a bit
          EXPECT_EQ(c.head(g).acc, first[size_t((group ? f.KV : 0) + g)]);
      }
      // Row 39 of head 3 attends like the direct computation.
      std::vector<const float *> ks, vs;
      for (int64_t j = 0; j < f.T; ++j) {
        ks.push_back(f.k.data() + j * f.KV * f.hd + f.hd);
        vs.push_back(f.v.data() + j * f.KV * f.hd + f.hd);
      }
      std::vector<float> o = attendRef(f.q.data() + 39 * f.H * f.hd + 3 * f.hd, ks, vs, f.hd);
      for (int64_t d = 0; d < f.hd; ++d)
        EXPECT_NEAR(f.out[size_t(39 * f.H * f.hd + 3 * f.hd + d)], o[size_t(d)], 1e-4);
    }
}

TEST(LayerCache, AVerificationStepRewoundEqualsPlainDecodingUnderAPrefillPolicy) {
  // A 30-row prompt compressed by a prefill policy, then positions 30..35
  // decoded one at a time (cache A), or 30..37 fed as one verification step
  // and 36, 37 dropped (cache B): the same entries, and a later 3-row turn
  // (whose compression reads the window queries, and Random's draw the
  // decode step count) keeps the same positions with the same rows.
  for (Method m : {Method::SnapKV, Method::Random}) {
    Fixture f;
    llmc::ThreadPool pool(2);
    Policy p = makePolicy(m, "m", 12, 4);
    LayerCache a = f.make(p), b = f.make(p);
    const int64_t kvd = f.KV * f.hd, qd = f.H * f.hd;
    for (LayerCache *c : {&a, &b}) {
      c->append(f.k.data(), f.v.data(), 30, kvd, 0);
      c->attend(pool, f.q.data(), 30, f.out.data());
      c->afterStep(f.q.data(), 30, 0);
      ASSERT_TRUE(c->rewindable());
    }
    std::vector<float> plainOut(size_t(6 * qd)), verifyOut(size_t(8 * qd));
    for (int64_t t = 30; t < 36; ++t) {
      a.append(f.k.data() + t * kvd, f.v.data() + t * kvd, 1, kvd, t);
      a.attend(pool, f.q.data() + t * qd, 1, plainOut.data() + (t - 30) * qd);
      a.afterStep(f.q.data() + t * qd, 1, t);
    }
    b.setStepKind(StepKind::Verification);
    b.append(f.k.data() + 30 * kvd, f.v.data() + 30 * kvd, 8, kvd, 30);
    b.attend(pool, f.q.data() + 30 * qd, 8, verifyOut.data());
    b.afterStep(f.q.data() + 30 * qd, 8, 30);
    b.setStepKind(StepKind::Prompt);
    EXPECT_EQ(b.headEntries(0), 12 + 8) << "a verification step is not compressed";
    EXPECT_THROW(b.dropFrom(29), std::runtime_error) << "the compressed prompt cannot come back";
    b.dropFrom(36);
    for (int64_t i = 0; i < 6 * qd; ++i)
      ASSERT_NEAR(verifyOut[size_t(i)], plainOut[size_t(i)], 1e-5) << "output " << i;
    for (int turn = 0; turn < 2; ++turn) { // after the decode steps, then after a later turn
      for (int64_t g = 0; g < f.KV; ++g) {
        EXPECT_EQ(a.head(g).pos, b.head(g).pos) << "method " << int(m) << ", turn " << turn;
        EXPECT_EQ(a.head(g).k, b.head(g).k);
        EXPECT_EQ(a.head(g).v, b.head(g).v);
      }
      if (turn == 1)
        break;
      for (LayerCache *c : {&a, &b}) {
        c->append(f.k.data() + 36 * kvd, f.v.data() + 36 * kvd, 3, kvd, 36);
        c->attend(pool, f.q.data() + 36 * qd, 3, f.out.data());
        c->afterStep(f.q.data() + 36 * qd, 3, 36);
      }
      EXPECT_LT(a.headEntries(0), 12 + 6 + 3) << "the later turn was compressed";
    }
  }
}

TEST(LayerCache, PoliciesWithRunningStatisticsOrDecodeEvictionCannotVerify) {
  Fixture f;
  Policy h2o = makePolicy(Method::H2O, "h2o", 12, 4), decode = makePolicy(Method::SnapKV, "s", 12, 4);
  decode.mode = Hook::Decode;
  for (const Policy &p : {h2o, decode}) {
    LayerCache c = f.make(p);
    EXPECT_FALSE(c.rewindable());
    EXPECT_THROW(c.setStepKind(StepKind::Verification), std::runtime_error);
  }
  LayerCache full = f.make(Policy());
  EXPECT_TRUE(full.rewindable());
  EXPECT_NO_THROW(full.setStepKind(StepKind::Verification));
}

TEST(LayerCache, StreamingCompactsAndFreesMemory) {
  Fixture f;
  llmc::ThreadPool pool(2);
  Policy p = makePolicy(Method::Streaming, "streaming", 10, 4);
  LayerCache c = f.make(p);
  c.append(f.k.data(), f.v.data(), f.T, f.KV * f.hd, 0);
  c.attend(pool, f.q.data(), f.T, f.out.data());
  const int64_t before = c.bytes();
  c.afterStep(f.q.data(), f.T, 0);
  EXPECT_EQ(c.headEntries(0), 10);
  EXPECT_EQ(c.headEntries(1), 10);
  EXPECT_LT(c.bytes(), before / 3);
  // Next token (position 40) attends over sinks 0,1 and positions 32..39 + itself.
  std::vector<float> k1 = randomVec(size_t(f.KV * f.hd), 20), v1 = randomVec(size_t(f.KV * f.hd), 21);
  std::vector<float> q1 = randomVec(size_t(f.H * f.hd), 22), o1(size_t(f.H * f.hd));
  c.append(k1.data(), v1.data(), 1, f.KV * f.hd, 40);
  c.attend(pool, q1.data(), 1, o1.data());
  for (int64_t h = 0; h < f.H; ++h) {
    int64_t g = h / 2;
    std::vector<const float *> ks, vs;
    for (int64_t j : {0, 1, 32, 33, 34, 35, 36, 37, 38, 39}) {
      ks.push_back(f.k.data() + j * f.KV * f.hd + g * f.hd);
      vs.push_back(f.v.data() + j * f.KV * f.hd + g * f.hd);
    }
    ks.push_back(k1.data() + g * f.hd);
    vs.push_back(v1.data() + g * f.hd);
    std::vector<float> ref = attendRef(q1.data() + h * f.hd, ks, vs, f.hd);
    for (int64_t d = 0; d < f.hd; ++d)
      EXPECT_NEAR(o1[size_t(h * f.hd + d)], ref[size_t(d)], 1e-4);
  }
}

TEST(LayerCache, HeadBudgetsArePhysicallyDifferent) {
  Fixture f;
  llmc::ThreadPool pool(1);
  Policy p = makePolicy(Method::SnapKV, "snapkv", 16, 4);
  p.head_scale = {1.5, 0.5};
  LayerCache c = f.make(p);
  c.append(f.k.data(), f.v.data(), f.T, f.KV * f.hd, 0);
  c.attend(pool, f.q.data(), f.T, f.out.data());
  c.afterStep(f.q.data(), f.T, 0);
  EXPECT_EQ(c.headEntries(0), 4 + 18); // window + (16 - 4) * 1.5
  EXPECT_EQ(c.headEntries(1), 4 + 6);
}

TEST(LayerCache, EveryScoringPolicyKeepsItsBudgetAndTheWindow) {
  for (Method m : {Method::H2O, Method::SnapKV, Method::RestKV, Method::LaProx, Method::CapKV}) {
    Fixture f;
    llmc::ThreadPool pool(2);
    Policy p = makePolicy(m, "m", 12, 4);
    LayerCache c = f.make(p);
    c.append(f.k.data(), f.v.data(), f.T, f.KV * f.hd, 0);
    c.attend(pool, f.q.data(), f.T, f.out.data());
    c.afterStep(f.q.data(), f.T, 0);
    EXPECT_EQ(c.entries(), 2 * 12) << int(m);
  }
}

TEST(LayerCache, DecodeEvictionRunsEveryRefreshTokens) {
  Fixture f;
  llmc::ThreadPool pool(1);
  Policy p = makePolicy(Method::InertiaKV, "inertiakv", 8, 2);
  p.mode = Hook::Decode;
  p.refresh = 4;
  LayerCache c = f.make(p);
  c.append(f.k.data(), f.v.data(), 8, f.KV * f.hd, 0); // an 8-token prompt: at budget
  c.attend(pool, f.q.data(), 8, f.out.data());
  c.afterStep(f.q.data(), 8, 0);
  EXPECT_EQ(c.headEntries(0), 8);
  for (int64_t t = 8; t < 12; ++t) {
    const float *kt = f.k.data() + t * f.KV * f.hd, *vt = f.v.data() + t * f.KV * f.hd;
    const float *qt = f.q.data() + t * f.H * f.hd;
    c.append(kt, vt, 1, f.KV * f.hd, t);
    c.attend(pool, qt, 1, f.out.data());
    c.afterStep(qt, 1, t);
  }
  EXPECT_EQ(c.headEntries(0), 8); // 12 >= 8 + 4: back to the budget
}

TEST(LayerCache, LazyInertiaKVUpdatesTheEmaOnlyEveryScoreEverySteps) {
  // Same prompt and decode steps under InertiaKV and InertiaKV-Lazy
  // (score_every 3): the lazy cache's scores change only at steps 0, 3, 6,
  // new entries wait unscored (< 0) until then, and at a scoring step an
  // entry that the eager cache scored at every step differs from the lazy one.
  Fixture f;
  llmc::ThreadPool pool(1);
  Policy eager = makePolicy(Method::InertiaKV, "inertiakv", 1000, 8);
  eager.mode = Hook::Decode;
  Policy lazy = eager;
  lazy.score_every = 3;
  LayerCache a = f.make(eager), b = f.make(lazy);
  for (LayerCache *c : {&a, &b}) {
    c->append(f.k.data(), f.v.data(), 8, f.KV * f.hd, 0);
    c->attend(pool, f.q.data(), 8, f.out.data());
    c->afterStep(f.q.data(), 8, 0);
  }
  EXPECT_EQ(a.head(0).acc, b.head(0).acc); // the prompt is scored the same way
  for (int64_t t = 8; t < 15; ++t) {
    const int64_t step = t - 8;
    const float *kt = f.k.data() + t * f.KV * f.hd, *vt = f.v.data() + t * f.KV * f.hd;
    const float *qt = f.q.data() + t * f.H * f.hd;
    const std::vector<float> before = b.head(1).acc;
    for (LayerCache *c : {&a, &b}) {
      c->append(kt, vt, 1, f.KV * f.hd, t);
      c->attend(pool, qt, 1, f.out.data());
      c->afterStep(qt, 1, t);
    }
    const std::vector<float> &now = b.head(1).acc;
    ASSERT_EQ(now.size(), before.size() + 1);
    if (step % 3 != 0) {
      for (size_t j = 0; j < before.size(); ++j)
        EXPECT_EQ(now[j], before[j]) << "step " << step << " entry " << j;
      EXPECT_LT(now.back(), 0.0f) << "step " << step; // appended, not yet scored
    } else {
      for (float x : now)
        EXPECT_GE(x, 0.0f) << "step " << step;
      EXPECT_NE(now[0], before[0]) << "step " << step;
    }
    for (float x : a.head(1).acc)
      EXPECT_GE(x, 0.0f); // the eager cache scores every entry at every step
  }
  EXPECT_NE(a.head(1).acc[0], b.head(1).acc[0]);
}

TEST(LayerCache, PolyKVAttentionIsCloseToF32) {
  Fixture f;
  llmc::ThreadPool pool(2);
  Policy full, quant = makePolicy(Method::Streaming, "streaming", 1000, 4);
  quant.quant = KvQuant::PolyKV;
  LayerCache a = f.make(full), b = f.make(quant);
  std::vector<float> outB(f.out.size());
  a.append(f.k.data(), f.v.data(), f.T, f.KV * f.hd, 0);
  a.attend(pool, f.q.data(), f.T, f.out.data());
  b.append(f.k.data(), f.v.data(), f.T, f.KV * f.hd, 0);
  b.attend(pool, f.q.data(), f.T, outB.data());
  double err = 0, norm = 0;
  for (size_t i = 0; i < outB.size(); ++i) {
    err += (outB[i] - f.out[i]) * (outB[i] - f.out[i]);
    norm += f.out[i] * f.out[i];
  }
  EXPECT_LT(err / norm, 0.06);
  EXPECT_LT(b.bytes(), a.bytes() / 4);
}

TEST(PolyKV, FastPathsMatchThePortableOnes) {
  for (int64_t hd : {32, 64, 128}) {
    PolyKV p(hd, uint64_t(hd));
    for (int trial = 0; trial < 10; ++trial) {
      std::vector<float> k = randomVec(size_t(hd), 200 + trial, 1.5f);
      std::vector<float> q = randomVec(size_t(hd), 300 + trial), v = randomVec(size_t(hd), 400 + trial);
      std::vector<uint8_t> kb(size_t(p.keyBytes())), vb(size_t(p.valueBytes()));
      p.encodeKey(k.data(), kb.data());
      p.encodeValue(v.data(), vb.data());
      float a = p.dotKey(q.data(), kb.data()), b = p.dotKeyScalar(q.data(), kb.data());
      EXPECT_NEAR(a, b, 1e-4f * (1.0f + std::fabs(b))) << hd;
      std::vector<float> fa(size_t(hd), 0.5f), fb(size_t(hd), 0.5f);
      p.accumulateValue(vb.data(), 0.37f, fa.data());
      p.accumulateValueScalar(vb.data(), 0.37f, fb.data());
      for (int64_t i = 0; i < hd; ++i)
        EXPECT_NEAR(fa[size_t(i)], fb[size_t(i)], 1e-6f) << hd << " " << i;
    }
  }
}

// Random is random over every entry (the prompt too) and follows its seed:
// the same seed keeps the same positions, other seeds other ones; only the
// recent window is kept whatever the draw (as by the other scoring policies).
TEST(LayerCache, RandomKeepsASeededUniformDrawOfThePrompt) {
  auto keptAfterPrompt = [](uint64_t seed) {
    Fixture f;
    llmc::ThreadPool pool(1);
    Policy p = makePolicy(Method::Random, "random", 12, 4);
    p.seed = seed;
    LayerCache c = f.make(p);
    c.append(f.k.data(), f.v.data(), f.T, f.KV * f.hd, 0);
    c.attend(pool, f.q.data(), f.T, f.out.data());
    c.afterStep(f.q.data(), f.T, 0);
    std::vector<int64_t> pos(c.head(0).pos.begin(), c.head(0).pos.begin() + c.headEntries(0));
    std::sort(pos.begin(), pos.end());
    return pos;
  };
  const std::vector<int64_t> a = keptAfterPrompt(1);
  ASSERT_EQ(a.size(), 12u);
  EXPECT_EQ(keptAfterPrompt(1), a);
  for (int64_t must : {36, 37, 38, 39}) // the window
    EXPECT_TRUE(std::binary_search(a.begin(), a.end(), must)) << must;
  std::set<std::vector<int64_t>> sets;
  std::vector<int> keptCount(40, 0);
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const std::vector<int64_t> kept = keptAfterPrompt(seed);
    sets.insert(kept);
    for (int64_t p : kept)
      ++keptCount[size_t(p)];
  }
  EXPECT_GE(sets.size(), 15u); // C(36, 8) draws: seeds rarely collide
  // Every evictable prompt position is kept by some seed and evicted by
  // another (no position is protected or always dropped).
  for (int64_t p = 0; p < 36; ++p)
    EXPECT_LT(keptCount[size_t(p)], 20) << p;
  int everKept = 0;
  for (int64_t p = 0; p < 36; ++p)
    everKept += keptCount[size_t(p)] > 0;
  EXPECT_GE(everKept, 30);
}
