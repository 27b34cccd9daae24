//===- Gptq.h - GPTQ: Hessian-aware rounding of one linear -----*- C++ -*-===//
// GPTQ (Frantar et al.) for y = W x with W [rows, cols]: the inputs' second
// moment H = 2/N * sum x x^T is accumulated over calibration tokens (double);
// columns are then rounded one by one, each rounding error spread over the
// not-yet-rounded columns through the upper Cholesky factor of H^-1 (blocks
// of 128 columns, later columns updated lazily once per block). Group grids
// are computed from the current, error-updated weights when a group's first
// column comes up, or (staticGroups) from the original weights before any
// rounding. Output: codes + fp16 grids in the gq storage format.
//===----------------------------------------------------------------------===//
#pragma once
#include "compiler/quant/GroupGrid.h"
#include <Eigen/Dense>

namespace llmc::quant {

/// H = 2/N * X^T X over all rows added so far.
class HessianAccumulator {
public:
  explicit HessianAccumulator(int64_t cols);
  /// x: row-major [rows, cols] inputs (one row per token).
  void add(const float *x, int64_t rows);
  int64_t cols() const { return cols_; }
  int64_t tokens() const { return tokens_; }
  /// The finished H (symmetric, full); zero when no tokens were added.
  Eigen::MatrixXd hessian() const;

private:
  int64_t cols_;
  int64_t tokens_ = 0;
  Eigen::MatrixXd sum_; // lower triangle of sum x x^T
};

struct GptqOptions {
  GridSpec grid;
  bool actOrder = false;   // process columns by decreasing H_ii
  /// Group grids from the original weights, all before the first column is
  /// rounded (llm-compressor's actorder=static); otherwise each group's grid
  /// comes from its error-updated weights when its first column comes up.
  bool staticGroups = false;
  int64_t blockSize = 128; // columns per lazy-update block
  double damp = 0.01;      // H += damp * mean(diag H) * I
};

/// Quantize row-major W [rows, cols] against H [cols, cols]. Throws
/// std::runtime_error if cols is not a multiple of the group or H does not
/// match; retries with 10x more dampening if H^-1 is not positive definite.
QuantizedMatrix gptqQuantize(const float *w, int64_t rows, int64_t cols, const Eigen::MatrixXd &h,
                             const GptqOptions &opts);

/// The proxy loss GPTQ minimises: trace((W - Q) H (W - Q)^T) / rows, with W
/// and Q row-major [rows, cols] (the mean output error per row, times 2/N).
double outputError(const float *w, const float *q, int64_t rows, int64_t cols,
                   const Eigen::MatrixXd &h);

/// outputError of Q and of all-zero weights (trace(W H W^T) / rows), both
/// over at most `maxRows` rows spread evenly over W: the out_rel_err
/// diagnostic sqrt(err / ref) that the calibrated passes record, at a cost
/// that no longer grows with the rows (the full products were 18% of a
/// GPTQ run on SmolLM2).
struct OutputErrorTerms {
  double err = 0; ///< outputError(W, Q) over the sampled rows
  double ref = 0; ///< outputError(W, 0) over the same rows
};
OutputErrorTerms sampledOutputError(const float *w, const float *q, int64_t rows, int64_t cols,
                                    const Eigen::MatrixXd &h, int64_t maxRows = 128);

} // namespace llmc::quant
