//===- KvSelect.h - Token scoring and selection for KV-cache policies -*- C++ -*-===//
// Pure functions over plain arrays (one KV head's entries, oldest first), so
// each policy's choice can be tested on hand-made score matrices. The cache
// (KvCache.h) gathers its inputs and applies the result.
//===----------------------------------------------------------------------===//
#pragma once
#include <cstdint>
#include <vector>

namespace llmc::kv {

/// Entries to keep, ascending: the first `sinks`, the last `recent`, and the
/// highest-scoring others (ties: the older entry) until `keep` in all.
std::vector<int64_t> selectTop(const float *score, int64_t n, int64_t keep, int64_t sinks,
                               int64_t recent);

/// Moving average over `kernel` neighbours (odd; the mean of those inside
/// [0, n)), in place.
void avgPool(float *score, int64_t n, int64_t kernel);

/// Attention of Wq queries over n keys of one head: A[i, j] = softmax_j(q_i .
/// k_j / sqrt(hd)) over keys with kpos[j] <= qpos[i] (0 elsewhere). q rows
/// are qstride apart, k rows hd apart. A is [Wq, n].
void windowAttention(const float *q, int64_t Wq, int64_t qstride, const int32_t *qpos,
                     const float *k, const int32_t *kpos, int64_t n, int64_t hd, float *A);

/// SnapKV: score_j = sum_i A[i, j] (one query head; callers average a GQA
/// group's heads).
void snapScore(const float *A, int64_t Wq, int64_t n, float *score);

/// ReST-KV for one query head: a = EMA over the window queries in time order
/// (alpha = 0.3) of A restricted to the first `candidates` entries, o = sum_j
/// a_j v_j, score_j = a_j / (1 - a_j) * ||W_O^h (o - v_j)||, where G = W_O^h^T
/// W_O^h (hd x hd) gives the norm. Entries past `candidates` score 0.
void restScore(const float *A, int64_t Wq, int64_t n, int64_t candidates, const float *v,
               int64_t hd, const float *G, float *score);

/// LaProx for one query head: score_j = ||A[:, j]||_2 * ||W_O^h v_j||.
void laproxScore(const float *A, int64_t Wq, int64_t n, const float *v, int64_t hd,
                 const float *G, float *score);

/// CapKV for one KV head: ridge leverage of the keys whitened by the window
/// queries' second moment S = Q^T Q / rows (rows = the group's window
/// queries): l_j = k_j^T (K^T K + s2 S^-1)^-1 k_j with s2 = 1e-2 tr(K^T K S) /
/// hd, computed as l_j = k~_j^T (K~^T K~ + s2 I)^-1 k~_j, k~ = S^1/2 k. Writes
/// l_j (not yet multiplied by relevance).
void leverageScore(const float *Q, int64_t rows, int64_t qstride, const float *k, int64_t n,
                   int64_t hd, float *score);

/// Gram matrix G = W^T W of columns [c0, c0 + hd) of a row-major [D, cols]
/// matrix given row by row (row(r) -> pointer to cols floats).
void gramOfColumns(const std::vector<float> &W, int64_t D, int64_t cols, int64_t c0, int64_t hd,
                   float *G);

} // namespace llmc::kv
