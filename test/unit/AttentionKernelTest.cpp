//===- AttentionKernelTest.cpp - Scores, softmax, value sums, exp, SiLU ----===//
// The vectorized attention pieces and the vector exp against double
// references, for head sizes with and without a multiple of 8 and key
// counts around the 4-key blocking.
//===----------------------------------------------------------------------===//
#include "../../runtime/src/kernels/attention_f32.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <random>
#include <vector>

using namespace llmc;

TEST(AttentionKernels, ScoresSoftmaxAndValueSumsMatchDoubles) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t hd : {12, 64, 96})
    for (int64_t n : {1, 3, 4, 5, 37}) {
      std::vector<float> q(static_cast<size_t>(hd)), k(static_cast<size_t>(n * hd)),
          v(static_cast<size_t>(n * hd));
      for (float &x : q)
        x = nd(rng);
      for (float &x : k)
        x = nd(rng);
      for (float &x : v)
        x = nd(rng);
      const float scale = 1.0f / std::sqrt(float(hd));
      std::vector<float> w(static_cast<size_t>(n));
      kernels::scoreKeys(q.data(), k.data(), n, hd, scale, w.data());
      std::vector<double> ref(static_cast<size_t>(n));
      double mx = -1e300;
      for (int64_t j = 0; j < n; ++j) {
        double s = 0, mag = 0;
        for (int64_t d = 0; d < hd; ++d) {
          s += double(q[size_t(d)]) * k[size_t(j * hd + d)];
          mag += std::fabs(double(q[size_t(d)]) * k[size_t(j * hd + d)]);
        }
        ref[size_t(j)] = s * scale;
        EXPECT_NEAR(w[size_t(j)], ref[size_t(j)], 1e-6 * mag * scale + 1e-7)
            << "hd " << hd << " n " << n << " key " << j;
        mx = std::max(mx, ref[size_t(j)]);
      }
      kernels::softmaxInPlace(w.data(), n);
      double sum = 0;
      for (double &r : ref)
        sum += r = std::exp(r - mx);
      for (int64_t j = 0; j < n; ++j)
        EXPECT_NEAR(w[size_t(j)], ref[size_t(j)] / sum, 2e-6) << "hd " << hd << " n " << n;
      std::vector<float> o(size_t(hd), NAN);
      kernels::weightedRows(w.data(), v.data(), n, hd, o.data());
      for (int64_t d = 0; d < hd; ++d) {
        double s = 0;
        for (int64_t j = 0; j < n; ++j)
          s += double(w[size_t(j)]) * v[size_t(j * hd + d)];
        EXPECT_NEAR(o[size_t(d)], s, 1e-5) << "hd " << hd << " n " << n << " dim " << d;
      }
    }
}

TEST(AttentionKernels, VectorExpAndSiluAreAccurate) {
  std::vector<float> x;
  for (float v = -100.0f; v <= 100.0f; v += 0.01234f)
    x.push_back(v);
  x.push_back(0.0f);
  std::vector<float> y(x.size());
  kernels::expRow(x.data(), y.data(), int64_t(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const double ref = std::exp(double(x[i]));
    if (ref > double(FLT_MAX)) {
      EXPECT_TRUE(std::isinf(y[i])) << x[i];
    } else if (x[i] < -87.0f) {
      EXPECT_LT(y[i], 2e-38f) << x[i];
      EXPECT_GE(y[i], 0.0f) << x[i];
    } else {
      EXPECT_NEAR(y[i], ref, 3e-7 * ref) << "exp(" << x[i] << ")";
    }
  }
  std::vector<float> g(x), u(x.size());
  for (size_t i = 0; i < u.size(); ++i)
    u[i] = 0.5f + float(i % 7);
  kernels::siluGate(g.data(), u.data(), int64_t(g.size()));
  for (size_t i = 0; i < g.size(); ++i) {
    const double ref = double(x[i]) / (1.0 + std::exp(-double(x[i]))) * u[i];
    EXPECT_NEAR(g[i], ref, 1e-6 * std::fabs(ref) + 1e-30) << "silu(" << x[i] << ")";
  }
}
