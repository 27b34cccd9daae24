//===- Ops.cpp - Element-wise and row-wise kernels of the executor ---------===//
#include "Ops.h"
#include "Matmul.h"
#include "../kernels/attention_f32.h"

#include <algorithm>
#include <cmath>

namespace llmc::ops {

void rmsNorm(const float *x, const float *w, float *y, int64_t rows, int64_t n, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x + r * n;
    float *yr = y + r * n;
    double ss = 0;
    for (int64_t i = 0; i < n; ++i)
      ss += double(xr[i]) * xr[i];
    float scale = float(1.0 / std::sqrt(ss / double(n) + double(eps)));
    for (int64_t i = 0; i < n; ++i)
      yr[i] = xr[i] * scale * w[i];
  }
}

void layerNorm(const float *x, const float *w, const float *b, float *y, int64_t rows, int64_t n,
               float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x + r * n;
    float *yr = y + r * n;
    double mean = 0;
    for (int64_t i = 0; i < n; ++i)
      mean += xr[i];
    mean /= double(n);
    double var = 0;
    for (int64_t i = 0; i < n; ++i)
      var += (xr[i] - mean) * (xr[i] - mean);
    var /= double(n);
    float scale = float(1.0 / std::sqrt(var + double(eps)));
    float m = float(mean);
    for (int64_t i = 0; i < n; ++i)
      yr[i] = (xr[i] - m) * scale * w[i] + (b ? b[i] : 0.0f);
  }
}

void gatedActivation(Activation act, float *g, const float *u, int64_t n) {
  if (act == Activation::SiLU) {
    kernels::siluGate(g, u, n);
  } else {
    constexpr float kInvSqrt2 = 0.70710678118654752f;
    for (int64_t i = 0; i < n; ++i)
      g[i] = 0.5f * g[i] * (1.0f + std::erf(g[i] * kInvSqrt2)) * u[i];
  }
}

std::vector<double> ropeFrequencies(double theta, int64_t head_dim) {
  std::vector<double> f(size_t(head_dim / 2));
  for (int64_t i = 0; i < head_dim / 2; ++i)
    f[size_t(i)] = std::pow(theta, -2.0 * double(i) / double(head_dim));
  return f;
}

void applyRope(float *row, int64_t heads, int64_t head_dim, int64_t pos,
               const std::vector<double> &inv_freq, RopeStyle style, float *cs) {
  const int64_t half = head_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    double a = double(pos) * inv_freq[size_t(i)];
    cs[2 * i] = float(std::cos(a));
    cs[2 * i + 1] = float(std::sin(a));
  }
  for (int64_t h = 0; h < heads; ++h) {
    float *v = row + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      float c = cs[2 * i], s = cs[2 * i + 1];
      int64_t a = style == RopeStyle::Interleaved ? 2 * i : i;
      int64_t b = style == RopeStyle::Interleaved ? 2 * i + 1 : i + half;
      float x0 = v[a], x1 = v[b];
      v[a] = x0 * c - x1 * s;
      v[b] = x0 * s + x1 * c;
    }
  }
}

void attend(ThreadPool &pool, const AttentionShape &s, const float *q, int64_t T, int64_t pos,
            const float *kcache, const float *vcache, float *out, int64_t max_ctx) {
  const int64_t H = s.heads, hd = s.head_dim, group = s.heads / s.kv_heads;
  const int64_t qdim = H * hd, kvdim = s.kv_heads * hd;
  const float scale = float(1.0 / std::sqrt(double(hd)));
  pool.parallelFor(0, H * T, 0, [&](int64_t lo, int64_t hi) {
    thread_local std::vector<float> scores;
    if (scores.size() < size_t(max_ctx))
      scores.resize(size_t(max_ctx));
    for (int64_t item = lo; item < hi; ++item) {
      const int64_t t = item % T, h = item / T;
      const int64_t p = pos + t, kvh = h / group;
      const int64_t last = s.causal ? p : pos + T - 1;
      const int64_t first = s.window > 0 ? std::max<int64_t>(0, p - s.window + 1) : 0;
      const float *qh = q + t * qdim + h * hd;
      float mx = -INFINITY;
      for (int64_t j = first; j <= last; ++j) {
        float v = dot(qh, kcache + j * kvdim + kvh * hd, hd) * scale;
        scores[size_t(j)] = v;
        mx = std::max(mx, v);
      }
      double sum = 0;
      for (int64_t j = first; j <= last; ++j) {
        float e = std::exp(scores[size_t(j)] - mx);
        scores[size_t(j)] = e;
        sum += e;
      }
      float inv = float(1.0 / sum);
      float *o = out + t * qdim + h * hd;
      std::fill(o, o + hd, 0.0f);
      for (int64_t j = first; j <= last; ++j) {
        const float w = scores[size_t(j)] * inv;
        const float *vr = vcache + j * kvdim + kvh * hd;
        for (int64_t d = 0; d < hd; ++d)
          o[d] += w * vr[d];
      }
    }
  });
}

} // namespace llmc::ops
