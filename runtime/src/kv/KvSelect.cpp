//===- KvSelect.cpp - Token scoring and selection for KV-cache policies ---===//
#include "KvSelect.h"
#include "../exec/Matmul.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace llmc::kv {

std::vector<int64_t> selectTop(const float *score, int64_t n, int64_t keep, int64_t sinks,
                               int64_t recent) {
  keep = std::min(keep, n);
  std::vector<char> kept(static_cast<size_t>(n), 0);
  int64_t count = 0;
  auto take = [&](int64_t j) {
    if (!kept[size_t(j)] && count < keep) {
      kept[size_t(j)] = 1;
      ++count;
    }
  };
  for (int64_t j = n - 1; j >= std::max<int64_t>(0, n - recent); --j)
    take(j);
  for (int64_t j = 0; j < std::min(sinks, n); ++j)
    take(j);
  std::vector<int64_t> order;
  for (int64_t j = 0; j < n; ++j)
    if (!kept[size_t(j)])
      order.push_back(j);
  int64_t rest = std::min<int64_t>(keep - count, int64_t(order.size()));
  if (rest > 0 && score) {
    std::partial_sort(order.begin(), order.begin() + rest, order.end(), [&](int64_t a, int64_t b) {
      return score[a] > score[b] || (score[a] == score[b] && a < b);
    });
    for (int64_t i = 0; i < rest; ++i)
      take(order[size_t(i)]);
  }
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t j = 0; j < n; ++j)
    if (kept[size_t(j)])
      out.push_back(j);
  return out;
}

void avgPool(float *score, int64_t n, int64_t kernel) {
  if (kernel <= 1 || n == 0)
    return;
  const int64_t r = kernel / 2;
  std::vector<double> prefix(static_cast<size_t>(n + 1), 0.0);
  for (int64_t j = 0; j < n; ++j)
    prefix[size_t(j + 1)] = prefix[size_t(j)] + score[j];
  for (int64_t j = 0; j < n; ++j) {
    int64_t lo = std::max<int64_t>(0, j - r), hi = std::min(n, j + r + 1);
    score[j] = float((prefix[size_t(hi)] - prefix[size_t(lo)]) / double(hi - lo));
  }
}

void windowAttention(const float *q, int64_t Wq, int64_t qstride, const int32_t *qpos,
                     const float *k, const int32_t *kpos, int64_t n, int64_t hd, float *A) {
  const float scale = float(1.0 / std::sqrt(double(hd)));
  for (int64_t i = 0; i < Wq; ++i) {
    const float *qi = q + i * qstride;
    float *row = A + i * n;
    float mx = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
      if (kpos[j] > qpos[i]) {
        row[j] = -INFINITY;
        continue;
      }
      row[j] = dot(qi, k + j * hd, hd) * scale; // vectorized (a scalar sum does not vectorize)
      mx = std::max(mx, row[j]);
    }
    double sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      float e = row[j] == -INFINITY ? 0.0f : std::exp(row[j] - mx);
      row[j] = e;
      sum += e;
    }
    float inv = sum > 0 ? float(1.0 / sum) : 0.0f;
    for (int64_t j = 0; j < n; ++j)
      row[j] *= inv;
  }
}

void snapScore(const float *A, int64_t Wq, int64_t n, float *score) {
  std::fill(score, score + n, 0.0f);
  for (int64_t i = 0; i < Wq; ++i)
    for (int64_t j = 0; j < n; ++j)
      score[j] += A[i * n + j];
}

namespace {
/// sqrt(x^T G x) for a symmetric hd x hd G (each row's product vectorized,
/// the outer sum in double).
float gNorm(const float *G, const float *x, int64_t hd) {
  double s = 0;
  for (int64_t a = 0; a < hd; ++a)
    s += double(dot(G + a * hd, x, hd)) * x[a];
  return float(std::sqrt(std::max(0.0, s)));
}
} // namespace

void restScore(const float *A, int64_t Wq, int64_t n, int64_t candidates, const float *v,
               int64_t hd, const float *G, float *score) {
  constexpr double alpha = 0.3;
  std::vector<double> a(static_cast<size_t>(n), 0.0);
  for (int64_t i = 0; i < Wq; ++i)
    for (int64_t j = 0; j < candidates; ++j)
      a[size_t(j)] = i == 0 ? A[j] : alpha * A[i * n + j] + (1 - alpha) * a[size_t(j)];
  std::vector<float> o(static_cast<size_t>(hd), 0.0f), diff(static_cast<size_t>(hd));
  for (int64_t j = 0; j < candidates; ++j)
    for (int64_t d = 0; d < hd; ++d)
      o[size_t(d)] += float(a[size_t(j)]) * v[j * hd + d];
  std::fill(score, score + n, 0.0f);
  for (int64_t j = 0; j < candidates; ++j) {
    for (int64_t d = 0; d < hd; ++d)
      diff[size_t(d)] = o[size_t(d)] - v[j * hd + d];
    double odds = a[size_t(j)] / std::max(1e-6, 1.0 - a[size_t(j)]);
    score[j] = float(odds * gNorm(G, diff.data(), hd));
  }
}

void laproxScore(const float *A, int64_t Wq, int64_t n, const float *v, int64_t hd,
                 const float *G, float *score) {
  for (int64_t j = 0; j < n; ++j) {
    double col = 0;
    for (int64_t i = 0; i < Wq; ++i)
      col += double(A[i * n + j]) * A[i * n + j];
    score[j] = float(std::sqrt(col)) * gNorm(G, v + j * hd, hd);
  }
}

namespace {
/// In-place lower Cholesky of an SPD hd x hd matrix (row-major); adds a
/// growing ridge until it succeeds.
void cholesky(std::vector<double> &M, int64_t n) {
  double trace = 0;
  for (int64_t i = 0; i < n; ++i)
    trace += M[size_t(i * n + i)];
  const std::vector<double> orig = M;
  for (double ridge = 1e-9 * std::max(trace / double(n), 1e-30);; ridge *= 10) {
    bool ok = true;
    for (int64_t i = 0; i < n && ok; ++i)
      for (int64_t j = 0; j <= i; ++j) {
        double s = M[size_t(i * n + j)];
        for (int64_t k = 0; k < j; ++k)
          s -= M[size_t(i * n + k)] * M[size_t(j * n + k)];
        if (i == j) {
          if (!(s > 0)) {
            ok = false;
            break;
          }
          M[size_t(i * n + i)] = std::sqrt(s);
        } else {
          M[size_t(i * n + j)] = s / M[size_t(j * n + j)];
        }
      }
    if (ok)
      return;
    M = orig;
    for (int64_t i = 0; i < n; ++i)
      M[size_t(i * n + i)] += ridge;
  }
}
} // namespace

void leverageScore(const float *Q, int64_t rows, int64_t qstride, const float *k, int64_t n,
                   int64_t hd, float *score) {
  // S = Q^T Q / rows = L L^T; whitened keys k~ = L^T k share k~.k~' = k S k'.
  std::vector<double> S(static_cast<size_t>(hd * hd), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t a = 0; a < hd; ++a)
      for (int64_t b = 0; b <= a; ++b)
        S[size_t(a * hd + b)] += double(Q[r * qstride + a]) * Q[r * qstride + b] / double(rows);
  for (int64_t a = 0; a < hd; ++a)
    for (int64_t b = 0; b < a; ++b)
      S[size_t(b * hd + a)] = S[size_t(a * hd + b)];
  cholesky(S, hd);
  std::vector<double> kt(static_cast<size_t>(n * hd), 0.0); // k~_j = L^T k_j
  for (int64_t j = 0; j < n; ++j)
    for (int64_t a = 0; a < hd; ++a) {
      double s = 0;
      for (int64_t b = a; b < hd; ++b)
        s += S[size_t(b * hd + a)] * k[j * hd + b];
      kt[size_t(j * hd + a)] = s;
    }
  std::vector<double> M(static_cast<size_t>(hd * hd), 0.0);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t a = 0; a < hd; ++a)
      for (int64_t b = 0; b <= a; ++b)
        M[size_t(a * hd + b)] += kt[size_t(j * hd + a)] * kt[size_t(j * hd + b)];
  double tr = 0;
  for (int64_t a = 0; a < hd; ++a)
    tr += M[size_t(a * hd + a)];
  for (int64_t a = 0; a < hd; ++a) {
    for (int64_t b = 0; b < a; ++b)
      M[size_t(b * hd + a)] = M[size_t(a * hd + b)];
    M[size_t(a * hd + a)] += 1e-2 * tr / double(hd) + 1e-30;
  }
  cholesky(M, hd);
  std::vector<double> y(static_cast<size_t>(hd));
  for (int64_t j = 0; j < n; ++j) { // l_j = ||R^-1 k~_j||^2, M = R R^T
    double l = 0;
    for (int64_t a = 0; a < hd; ++a) {
      double s = kt[size_t(j * hd + a)];
      for (int64_t b = 0; b < a; ++b)
        s -= M[size_t(a * hd + b)] * y[size_t(b)];
      y[size_t(a)] = s / M[size_t(a * hd + a)];
      l += y[size_t(a)] * y[size_t(a)];
    }
    score[j] = float(l);
  }
}

void gramOfColumns(const std::vector<float> &W, int64_t D, int64_t cols, int64_t c0, int64_t hd,
                   float *G) {
  std::vector<double> g(static_cast<size_t>(hd * hd), 0.0);
  for (int64_t r = 0; r < D; ++r) {
    const float *w = W.data() + r * cols + c0;
    for (int64_t a = 0; a < hd; ++a)
      for (int64_t b = 0; b <= a; ++b)
        g[size_t(a * hd + b)] += double(w[a]) * w[b];
  }
  for (int64_t a = 0; a < hd; ++a)
    for (int64_t b = 0; b <= a; ++b)
      G[a * hd + b] = G[b * hd + a] = float(g[size_t(a * hd + b)]);
}

} // namespace llmc::kv
