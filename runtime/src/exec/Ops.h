//===- Ops.h - Element-wise and row-wise kernels of the executor -*- C++ -*-===//
// Normalizations, activations, rotary embedding and the causal attention
// core over a KV cache. Each works on f32 rows; threading is done by the
// caller where it pays (attention over heads x tokens).
//===----------------------------------------------------------------------===//
#pragma once
#include "ThreadPool.h"
#include "llmc/model.h"

#include <cstdint>
#include <vector>

namespace llmc::ops {

/// y = x * rsqrt(mean(x^2) + eps) * w, for `rows` rows of n.
void rmsNorm(const float *x, const float *w, float *y, int64_t rows, int64_t n, float eps);
/// y = (x - mean) * rsqrt(var + eps) * w + b (b may be null).
void layerNorm(const float *x, const float *w, const float *b, float *y, int64_t rows, int64_t n,
               float eps);

/// g[i] = act(g[i]) * u[i]. SiLU is x*sigmoid(x); GELU is the exact erf form
/// 0.5*x*(1+erf(x/sqrt(2))), not the tanh approximation.
void gatedActivation(Activation act, float *g, const float *u, int64_t n);

/// inv_freq[i] = theta^(-2i/head_dim), i < head_dim/2.
std::vector<double> ropeFrequencies(double theta, int64_t head_dim);
/// Rotate `heads` heads of head_dim in one row at absolute position pos.
/// Interleaved rotates pairs (2i, 2i+1); Half rotates (i, i + head_dim/2).
void applyRope(float *row, int64_t heads, int64_t head_dim, int64_t pos,
               const std::vector<double> &inv_freq, RopeStyle style, float *cos_sin_scratch);

struct AttentionShape {
  int64_t heads, kv_heads, head_dim;
  bool causal = true;
  int64_t window = 0; // 0: attend to every earlier position
};

/// out[t, h*hd..] = softmax(q_t,h . K^T / sqrt(hd)) V for T query rows at
/// absolute positions pos..pos+T-1 against caches k/v ([ctx, kv_heads*hd]),
/// which already hold positions 0..pos+T-1.
void attend(ThreadPool &pool, const AttentionShape &s, const float *q, int64_t T, int64_t pos,
            const float *kcache, const float *vcache, float *out, int64_t max_ctx);

} // namespace llmc::ops
