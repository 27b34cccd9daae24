//===- Qtea.h - QTEA: ternary + salient FP8 residual quantization -*- C++ -*-===//
// QTEA (Quantized Ternary Error Adaptation) for y = W x, W [rows, cols]:
//  1. per row and group of G columns, a ternary fit w ~ beta + alpha * t
//     (dead zone, then one least-squares round for alpha and a shift);
//  2. column order: the S most salient columns (max_i W_ij^2 * H_jj^2)
//     first, the rest in the pivot order of a Bunch-Kaufman (LAPACK sytrf,
//     lower) LDL^T of their damped sub-Hessian;
//  3. a GPTQ-style sweep over the permuted columns with the upper Cholesky
//     factor U of H^-1: each column gets a rescale v (two rounds of
//     v = mean|w - beta| over its non-zero codes / mean(alpha), re-assigning
//     codes to the nearest of {-alpha v, 0, alpha v}); salient columns add a
//     1:4 FP8 E4M3 residual (largest |residual| of every 4 rows, one scale
//     per column); the rounding error is fed to the rest of the block decayed
//     by exp(-lambda * clamp(U_pp / mean diag U_block, 0.3, 3) * p / block)
//     and to later blocks undecayed (lazy, as GPTQ).
// The result is llmc's QTEA storage format (llmc/format/qtea.h): alpha and
// beta are rounded to fp16 before the sweep so its error feedback sees the
// values the runtime computes with. No MLIR; the llm-quantize pass drives it.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/format/qtea.h"
#include <Eigen/Dense>
#include <cstdint>
#include <string>
#include <vector>

namespace llmc::quant {

struct QteaOptions {
  int64_t group = 128;     // columns per (alpha, beta)
  int salientPct = 5;      // salient columns: ceil(cols * pct / 100)
  double deadzone = 0.96;  // initial dead zone, fraction of mean|w - beta|
  int fitIters = 1;        // least-squares rounds of the group fit
  int rescaleIters = 2;    // column rescale rounds (0: v = 1)
  double decay = 1.0;      // lambda of the in-block error decay (0: plain GPTQ feedback)
  double damp = 0.007;     // H += damp * mean(diag H) * I
  int64_t blockSize = 128; // columns per lazy-update block
  bool ldlOrder = true;    // Bunch-Kaufman order of the non-salient columns (else saliency)
};

struct QteaResult {
  qtea::Matrix matrix;            // the stored form
  std::vector<float> dequantized; // row-major, what the runtime computes
  double proxyLoss = 0;           // sum over columns of |(w - q) / U_pp|^2 / 2
  bool bunchKaufman = false;      // the pivot order was used (false: saliency order)
  int dampRetries = 0;            // extra dampening rounds H^-1's Cholesky needed
  bool diagonalFallback = false;  // U = diag(H)^-1/2 (no retry succeeded)
};

/// Quantize row-major W [rows, cols] against H [cols, cols] (pass the
/// identity for weights without calibration data). Throws std::runtime_error
/// if cols is not a multiple of the group, rows not a multiple of 4, or H
/// has the wrong size.
QteaResult qteaQuantize(const float *w, int64_t rows, int64_t cols, const Eigen::MatrixXd &h,
                        const QteaOptions &opts);

/// Plain ternary round-to-nearest (the group fit of step 1 with v = 1, no
/// Hessian, no residual), row-major dequantized values: the baseline QTEA
/// improves on.
std::vector<float> ternaryRtn(const float *w, int64_t rows, int64_t cols, const QteaOptions &opts);

/// Pivot order of a Bunch-Kaufman LDL^T (LAPACK sytrf, lower, alpha =
/// (1 + sqrt 17) / 8) of symmetric A, computed in single precision like the
/// reference implementation's ssytrf: position k of the factorisation holds
/// row/column order[k] of A. Throws std::runtime_error if A has a non-finite
/// entry.
std::vector<int64_t> bunchKaufmanOrder(const Eigen::MatrixXd &a);

} // namespace llmc::quant
