//===- attention_f32.h - Vectorized pieces of f32 KV-cache attention -*- C++ -*-===//
// One query against n cached keys and values (rows of hd floats): scaled
// scores, softmax, and the weighted sum of value rows. Portable C++ with
// AVX2 paths; LayerCache::attend uses them for caches stored in f32.
// expf8/siluGate are also the executor's vectorized exp for activations.
//===----------------------------------------------------------------------===//
#pragma once
#include <cstdint>

namespace llmc::kernels {

/// out[j] = scale * dot(q, k + j * hd) for j < n.
void scoreKeys(const float *q, const float *k, int64_t n, int64_t hd, float scale, float *out);
/// w[j] = exp(w[j] - max w) / sum over j < n (n >= 1).
void softmaxInPlace(float *w, int64_t n);
/// o[d] = sum_j w[j] * v[j * hd + d] for d < hd.
void weightedRows(const float *w, const float *v, int64_t n, int64_t hd, float *o);
/// dst[i] = src[i] in IEEE f16, rounded to nearest even (an f16 KV row).
void halfRow(const float *src, int64_t n, uint16_t *dst);
/// dst[i] = the f16 src[i] as f32 (exact).
void floatRow(const uint16_t *src, int64_t n, float *dst);
/// y[i] = exp(x[i]) for i < n (relative error below 2e-7; x < -87 gives
/// about 0, x > 88 +inf).
void expRow(const float *x, float *y, int64_t n);
/// g[i] = silu(g[i]) * u[i] = g / (1 + exp(-g)) * u, vectorized.
void siluGate(float *g, const float *u, int64_t n);

} // namespace llmc::kernels
