//===- Awq.cpp - AWQ: activation-aware scaling and clipping ----------------===//
#include "compiler/quant/Awq.h"
#include "compiler/quant/ParallelFor.h"
#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>

namespace llmc::quant {

using RowMajorF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

ActivationSample::ActivationSample(int64_t cols, int64_t cap)
    : cols_(cols), cap_(cap), absSum_(size_t(cols), 0.0) {}

void ActivationSample::add(const float *x, int64_t rows) {
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t c = 0; c < cols_; ++c)
      absSum_[size_t(c)] += std::fabs(double(x[t * cols_ + c]));
  tokens_ += rows;
  const int64_t keep = std::min(rows, cap_ - sampled());
  if (keep > 0)
    rows_.insert(rows_.end(), x, x + keep * cols_);
}

std::vector<float> ActivationSample::meanAbs() const {
  std::vector<float> m(size_t(cols_), 0.0f);
  if (tokens_ > 0)
    for (int64_t c = 0; c < cols_; ++c)
      m[size_t(c)] = float(absSum_[size_t(c)] / double(tokens_));
  return m;
}

double outputMse(const float *w, const float *wq, int64_t rows, int64_t cols, const float *x,
                 int64_t tokens) {
  if (rows == 0 || tokens == 0)
    return 0;
  Eigen::Map<const RowMajorF> W(w, rows, cols), Q(wq, rows, cols), X(x, tokens, cols);
  RowMajorF D = W - Q;
  RowMajorF Y = X * D.transpose();
  return double(Y.squaredNorm()) / double(tokens * rows);
}

AwqScaleResult awqSearchScales(const std::vector<MatrixView> &linears, int64_t cols,
                               const float *x, int64_t tokens, const std::vector<float> &meanAbs,
                               const GridSpec &spec, int grid, int threads) {
  int64_t totalRows = 0;
  for (const MatrixView &l : linears)
    totalRows += l.rows;
  auto scalesFor = [&](int k) {
    const double alpha = double(k) / grid;
    std::vector<float> s(static_cast<size_t>(cols));
    float smax = 0, smin = std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < cols; ++c) {
      float v = float(std::pow(std::max(double(meanAbs[size_t(c)]), 1e-4), alpha));
      s[size_t(c)] = v;
      smax = std::max(smax, v);
      smin = std::min(smin, v);
    }
    const float norm = std::sqrt(smax * smin);
    for (float &v : s)
      v /= norm;
    return s;
  };
  // Every alpha's loss on its own thread, then the first smallest in order.
  std::vector<double> losses(static_cast<size_t>(std::max(grid, 0)));
  parallelIndices(grid, threads, [&](int64_t k) {
    const std::vector<float> s = scalesFor(int(k));
    std::vector<float> scaled, back;
    double loss = 0;
    for (const MatrixView &l : linears) {
      scaled.assign(l.w, l.w + l.rows * cols);
      scaleColumns(scaled.data(), l.rows, cols, s.data());
      back = rtnQuantize(scaled.data(), l.rows, cols, spec).dequantized();
      for (int64_t r = 0; r < l.rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          back[size_t(r * cols + c)] /= s[size_t(c)];
      loss += outputMse(l.w, back.data(), l.rows, cols, x, tokens) * double(l.rows);
    }
    losses[size_t(k)] = loss / double(std::max<int64_t>(totalRows, 1));
  });
  AwqScaleResult best;
  best.lossBest = std::numeric_limits<double>::infinity();
  for (int k = 0; k < grid; ++k) {
    if (k == 0)
      best.lossRtn = losses[0];
    if (losses[size_t(k)] < best.lossBest) {
      best.lossBest = losses[size_t(k)];
      best.alpha = double(k) / grid;
      best.scales = scalesFor(k);
    }
  }
  if (best.scales.empty()) // every loss was NaN: no scaling
    best.scales.assign(size_t(cols), 1.0f);
  return best;
}

std::vector<float> awqSearchClip(const float *w, int64_t rows, int64_t cols, const float *x,
                                 int64_t tokens, const GridSpec &spec, int steps, int threads) {
  const int64_t G = spec.group, ng = cols / G;
  std::vector<float> clip(size_t(rows * ng), 1.0f);
  if (tokens == 0)
    return clip;
  Eigen::Map<const RowMajorF> X(x, tokens, cols);
  // Groups are independent: each on its own thread, writing its own ratios.
  parallelIndices(ng, threads, [&](int64_t g) {
    Eigen::VectorXd d(G);
    // The group's Gram block: loss of an error e on this group = e^T K e.
    Eigen::MatrixXd K = (X.middleCols(g * G, G).transpose() * X.middleCols(g * G, G)).cast<double>();
    for (int64_t r = 0; r < rows; ++r) {
      const float *wg = w + r * cols + g * G;
      GroupRange range;
      for (int64_t j = 0; j < G; ++j)
        range.add(wg[j]);
      double bestLoss = std::numeric_limits<double>::infinity();
      for (int i = 0; i < steps; ++i) {
        const float c = 1.0f - float(i) / 20.0f;
        Grid gr = makeGrid(range, spec, c);
        for (int64_t j = 0; j < G; ++j)
          d(j) = double(wg[j]) - dequantCode(quantCode(wg[j], gr, spec), gr, spec);
        const double loss = d.dot(K * d);
        if (loss < bestLoss) {
          bestLoss = loss;
          clip[size_t(r * ng + g)] = c;
        }
      }
    }
  });
  return clip;
}

void scaleColumns(float *w, int64_t rows, int64_t cols, const float *s) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      w[r * cols + c] *= s[c];
}

void divideRows(float *w, int64_t rows, int64_t cols, const float *s) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      w[r * cols + c] /= s[r];
}

void divideVector(float *v, int64_t n, const float *s) {
  for (int64_t i = 0; i < n; ++i)
    v[i] /= s[i];
}

} // namespace llmc::quant
