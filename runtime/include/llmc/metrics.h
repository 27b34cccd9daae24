//===- metrics.h - Quality metrics over next-token logits -------*- C++ -*-===//
// The math behind `llmc eval` (perplexity, KL divergence to a reference,
// top-1 agreement), kept in the runtime so calibration and quality gates
// (e.g. a --max-kld check after a quantization pass) reuse the same code.
// Everything is computed in double from float32 logits; log-softmax
// subtracts the row maximum first, so huge logits do not overflow.
//===----------------------------------------------------------------------===//
#pragma once
#include <cstdint>
#include <vector>

namespace llmc::metrics {

/// out[i] = logits[i] - logsumexp(logits), in double. A row whose maximum
/// is not finite (NaN, +inf, or all -inf) yields NaN everywhere; -inf
/// entries in an otherwise finite row yield -inf.
void logSoftmax(const float *logits, int64_t n, double *out);
std::vector<double> logSoftmax(const float *logits, int64_t n);

/// Negative log-likelihood of `target` under softmax(logits).
/// Throws std::out_of_range if target is not in [0, n).
double nll(const float *logits, int64_t n, int32_t target);

/// KL(P || Q) = sum_i p_i (log p_i - log q_i) from log-probabilities.
/// Terms with p_i == 0 contribute 0; p_i > 0 with q_i == 0 gives +inf.
/// Tiny negative results from rounding are clamped to 0.
double klDivergence(const double *logp, const double *logq, int64_t n);
/// Same, from raw logits (log-softmax of each row first).
double klDivergenceFromLogits(const float *p_logits, const float *q_logits, int64_t n);

/// Index of the largest element (first one on ties; NaNs are skipped).
/// Returns -1 for an empty or all-NaN row.
int64_t argmax(const float *x, int64_t n);

/// Nearest-rank percentile: the smallest value such that at least p% of the
/// values are <= it, i.e. sorted[ceil(p/100 * N) - 1] (rank at least 1).
/// p in [0, 100]. Throws std::invalid_argument on an empty input or p out
/// of range.
double percentileNearestRank(std::vector<double> values, double p);

/// exp(mean NLL); NaN when no positions were scored.
double perplexityFromMeanNll(double mean_nll);

/// Summary of an evaluation, as printed by `llmc eval`.
struct EvalSummary {
  int64_t positions = 0;   // scored next-token positions
  double nll_mean = 0;     // mean NLL of the model
  double ppl = 0;          // exp(nll_mean)
  bool has_reference = false;
  double ref_nll_mean = 0; // reference model's mean NLL
  double ref_ppl = 0;
  double kld_mean = 0;     // mean KL(P_ref || P_model) per position
  double kld_p99 = 0;      // 99th percentile (nearest rank)
  double kld_max = 0;
  double top1 = 0;         // % of positions where both argmaxes agree
};

/// Accumulates per-position metrics over any number of windows.
class EvalAccumulator {
public:
  explicit EvalAccumulator(int64_t vocab);

  /// Score one position: `model` (and optionally `reference`, nullptr when
  /// none) are the logits [vocab] that predict `target`.
  void add(const float *model, const float *reference, int32_t target);
  /// Score rows [0, rows) of row-major logits [rows, vocab]; row i predicts
  /// targets[i]. `reference` may be nullptr.
  void addRows(const float *model, const float *reference, const int32_t *targets,
               int64_t rows);

  int64_t positions() const { return count_; }
  /// Per-position KL values so far (empty without a reference).
  const std::vector<double> &klValues() const { return kl_; }
  EvalSummary summary() const;

private:
  int64_t vocab_;
  int64_t count_ = 0;
  int64_t refCount_ = 0;
  int64_t agree_ = 0;
  double nllSum_ = 0, refNllSum_ = 0;
  std::vector<double> kl_;
  std::vector<double> lp_, lq_; // scratch rows
};

} // namespace llmc::metrics
