//===- Awq.h - AWQ: activation-aware scaling and clipping ------*- C++ -*-===//
// AWQ (Lin et al.) for linears that share one input x: a per-input-channel
// scale s = mean|x|^alpha (normalised by sqrt(max s * min s)) is searched on
// a grid of alpha, minimising the output MSE of Q(W diag(s)) diag(s)^-1
// against W on sampled calibration inputs; the chosen s is folded into the
// op that produces x (x / s) and into W (W diag(s)), which leaves the model's
// function unchanged before rounding. Then, per (row, group), the clip ratio
// of the grid's range is searched the same way, and RTN finishes the job.
//===----------------------------------------------------------------------===//
#pragma once
#include "compiler/quant/GroupGrid.h"
#include <vector>

namespace llmc::quant {

/// Per-channel mean |x| over every token, plus the first `cap` tokens kept
/// raw (the sample the searches evaluate losses on).
class ActivationSample {
public:
  ActivationSample(int64_t cols, int64_t cap);
  void add(const float *x, int64_t rows); // row-major [rows, cols]
  int64_t cols() const { return cols_; }
  int64_t tokens() const { return tokens_; }
  int64_t sampled() const { return int64_t(rows_.size()) / cols_; }
  const float *sample() const { return rows_.data(); } // [sampled, cols]
  std::vector<float> meanAbs() const;

private:
  int64_t cols_, cap_, tokens_ = 0;
  std::vector<double> absSum_;
  std::vector<float> rows_;
};

/// A row-major matrix [rows, cols] (cols = the shared input width).
struct MatrixView {
  const float *w;
  int64_t rows;
};

struct AwqScaleResult {
  std::vector<float> scales; // s, one per input channel (all 1 when alpha = 0 wins)
  double alpha = 0;
  double lossRtn = 0;  // output MSE of plain RTN (alpha = 0)
  double lossBest = 0; // output MSE with the chosen scales
};

/// Search alpha in {0, 1/grid, ..., (grid-1)/grid}. x: [tokens, cols] sample.
/// threads: for the alphas (<= 0: the machine's cores); the result is the
/// same on any number.
AwqScaleResult awqSearchScales(const std::vector<MatrixView> &linears, int64_t cols,
                               const float *x, int64_t tokens, const std::vector<float> &meanAbs,
                               const GridSpec &spec, int grid = 20, int threads = 0);

/// Per (row, group) clip ratio in {1, 0.95, ..., 1 - (steps-1)/20} minimising
/// the group's output MSE on x [tokens, cols]. Returns rows * groups ratios.
/// threads: for the groups (<= 0: the machine's cores), same result on any.
std::vector<float> awqSearchClip(const float *w, int64_t rows, int64_t cols, const float *x,
                                 int64_t tokens, const GridSpec &spec, int steps = 10,
                                 int threads = 0);

/// Output MSE per token and output of W' against W on x: ||x (W - W')^T||^2 / (tokens * rows).
double outputMse(const float *w, const float *wq, int64_t rows, int64_t cols, const float *x,
                 int64_t tokens);

// ---- Folding (exact in real arithmetic) ----
/// w[:, j] *= s[j] (row-major [rows, cols]).
void scaleColumns(float *w, int64_t rows, int64_t cols, const float *s);
/// w[j, :] /= s[j] (row-major [rows, cols], rows = s's length).
void divideRows(float *w, int64_t rows, int64_t cols, const float *s);
/// v[j] /= s[j].
void divideVector(float *v, int64_t n, const float *s);

} // namespace llmc::quant
