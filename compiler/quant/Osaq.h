//===- Osaq.h - OSAQ: outlier absorption in the Hessian null space -*- C++ -*-===//
// OSAQ ("outlier self-absorption") before GPTQ, in OUR interpretation of a
// paper without code (see /work/shared/methods/quantization.md, section 1):
// directions u with u^T H u ~ 0 carry (almost) no calibration signal, so any
// ΔW whose rows lie in their span leaves W X unchanged. Such a ΔW is chosen
// per row to shrink the row's group ranges (outliers), then GPTQ rounds
// W' = W + ΔW against the same H.
//
//  1. Null space: eigenvectors of H_A (split A) with λ <= eps * mean(diag H_A).
//  2. Stability: within that span, eigendecompose the projected split-B
//     Hessian U_A^T H_B U_A and keep directions with curvature <= eps *
//     mean(diag H_B) (the directions null on both splits; this generalises
//     "keep u_j if u_j^T H_B u_j is small" to a rotated basis), the flattest
//     `maxRank` of them: U_0 [n, r], orthonormal.
//  3. Per row, "Softmax-∞" weighted least squares: π_k = softmax over each
//     group of |w_k| / (T * max_g |w|), c = argmin Σ π_k (w + U_0 c)_k^2
//     (+ a tiny ridge). Then `irls` Lawson-style rounds: π is multiplied by
//     the softmax of the updated row (entries that stay large gain weight,
//     round t acting like temperature T/t, toward the ∞-norm) and c is
//     re-solved; the round with the smallest summed group range is kept
//     (never worse than the original row).
//  4. ΔW = C U_0^T is scaled down until ||ΔW X_B|| / ||W X_B|| <= maxRelChange
//     (the range of each row stays <= the original's: range is convex).
//  5. GPTQ on W' with H. With r = 0, W' = W and the result is GPTQ's exactly.
//===----------------------------------------------------------------------===//
#pragma once
#include "compiler/quant/Gptq.h"
#include <Eigen/Dense>
#include <array>
#include <cstdint>
#include <vector>

namespace llmc::quant {

struct OsaqOptions {
  double eps = 1e-4;          // null-space threshold, relative to mean(diag H)
  double temp = 1.0;          // softmax temperature, relative to the group's max|w|
  int irls = 6;               // re-weighting rounds of the least squares
  int64_t maxRank = 64;       // at most this many null directions (cost ~ n r^2 per row)
  double maxRelChange = 1e-3; // bound on ||ΔW X_B|| / ||W X_B||
  /// Used by the pass: a site's null space is trusted only when split A has
  /// at least this many tokens per input column (0: always).
  double minTokensPerInput = 1.0;
};

/// The stable null space of one input site (shared by all linears reading it).
struct OsaqNullSpace {
  Eigen::MatrixXd basis;        // U_0 [n, r], orthonormal columns
  int64_t candidates = 0;       // eigenvalues of H_A under the threshold
  int64_t rank() const { return basis.cols(); }
  /// Spectrum of H_A relative to mean(diag H_A): smallest, 1%, 10%, 50%
  /// quantiles (ascending eigenvalues), for reports.
  double relMin = 0, relP1 = 0, relP10 = 0, relP50 = 0;
  /// For choosing eps: at eps = kDecadeEps[k], how many eigenvalues of H_A
  /// are under the threshold and how many of those directions pass the
  /// split-B filter (not capped by maxRank).
  static constexpr std::array<double, 4> kDecadeEps = {1e-6, 1e-5, 1e-4, 1e-3};
  std::array<int64_t, 4> candidatesAt{}, stableAt{};
};

/// Steps 1-2. hA, hB: [n, n] Hessians of the two calibration splits. Throws
/// std::runtime_error on mismatched shapes.
OsaqNullSpace osaqNullSpace(const Eigen::MatrixXd &hA, const Eigen::MatrixXd &hB,
                            const OsaqOptions &opts);

/// The result of steps 3-4 on one matrix.
struct OsaqAbsorbed {
  std::vector<float> weights;  // W' row-major [rows, cols]
  double relChangeB = 0;       // ||ΔW X_B|| / ||W X_B|| after any scaling
  double step = 1;             // the scale applied to C (1: none)
  double rangeBefore = 0;      // mean per-(row, group) range of W
  double rangeAfter = 0;       // ... of W'
};

/// Steps 3-4 for row-major W [rows, cols] with the grid's groups.
OsaqAbsorbed osaqAbsorb(const float *w, int64_t rows, int64_t cols, const OsaqNullSpace &ns,
                        const Eigen::MatrixXd &hB, const GridSpec &grid, const OsaqOptions &opts);

/// Mean over (row, group) of the group's range: max - min (asymmetric) or
/// 2 max|w| (symmetric), the span a grid has to cover.
double meanGroupRange(const float *w, int64_t rows, int64_t cols, const GridSpec &grid);

struct OsaqResult {
  QuantizedMatrix quantized;
  OsaqAbsorbed absorbed;
  int64_t rank = 0;
};

/// All of it: null space from (hA, hB), absorption, then GPTQ against h.
OsaqResult osaqQuantize(const float *w, int64_t rows, int64_t cols, const Eigen::MatrixXd &h,
                        const Eigen::MatrixXd &hA, const Eigen::MatrixXd &hB,
                        const OsaqOptions &opts, const GptqOptions &gptq);
/// The same with a null space computed already (sites shared by q/k/v).
OsaqResult osaqQuantize(const float *w, int64_t rows, int64_t cols, const Eigen::MatrixXd &h,
                        const OsaqNullSpace &ns, const Eigen::MatrixXd &hB,
                        const OsaqOptions &opts, const GptqOptions &gptq);

} // namespace llmc::quant
