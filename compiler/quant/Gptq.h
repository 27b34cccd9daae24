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
#include <optional>

namespace llmc::quant {

/// H = 2/N * X^T X over all rows added so far.
class HessianAccumulator {
public:
  /// threads: for add()'s column panels (<= 0: the machine's cores, at most
  /// 8). The sums do not depend on it: every panel is one fixed-size product.
  explicit HessianAccumulator(int64_t cols, int threads = 0);
  /// x: row-major [rows, cols] inputs (one row per token).
  void add(const float *x, int64_t rows);
  int64_t cols() const { return cols_; }
  int64_t tokens() const { return tokens_; }
  /// The finished H (symmetric, full); zero when no tokens were added.
  Eigen::MatrixXd hessian() const;

private:
  int64_t cols_;
  int threads_;
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

/// What GPTQ takes from H, the same for every matrix that reads one input
/// (q/k/v, gate/up): the column order, the dead inputs (H_ii = 0) and the
/// upper Cholesky factor U of the dampened H^-1 in that order (H^-1 = U^T U).
struct GptqFactor {
  std::vector<int64_t> perm; ///< processing position -> column
  std::vector<char> dead;    ///< per column: no input ever reached it
  Eigen::MatrixXf U;
  double damp = 0;           ///< the dampening that made H positive definite
};
/// The upper Cholesky factor U of (H + damp * mean(diag H) * I)^-1
/// (H^-1 = U^T U), from one factorisation and a triangular solve in column
/// panels (threads: <= 0 the machine's cores; the same bits on any number);
/// nullopt if the dampened H is not positive definite or U not finite.
std::optional<Eigen::MatrixXd> inverseCholeskyUpper(const Eigen::MatrixXd &h, double damp,
                                                    int threads = 0);

/// Throws std::runtime_error if H is not square or stays indefinite after
/// 10x, 100x, ... more dampening (up to 1e3). threads: for the triangular
/// inverse's panels (<= 0: the machine's cores); the same factor on any.
GptqFactor gptqFactor(const Eigen::MatrixXd &h, const GptqOptions &opts, int threads = 0);

/// Quantize row-major W [rows, cols] with a factor of its input's H. Throws
/// std::runtime_error if cols is not a multiple of the group or the factor
/// does not match.
QuantizedMatrix gptqQuantize(const float *w, int64_t rows, int64_t cols, const GptqFactor &f,
                             const GptqOptions &opts);
/// The same with H [cols, cols] (gptqFactor, then the above).
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
