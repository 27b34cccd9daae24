//===- Aaac.h - AAAC: activation-aware adaptive codebooks ------*- C++ -*-===//
// AAAC for one matrix W [rows, cols] (our interpretation of the paper; the
// methods notes, quantization.md section 2): two scalar codebooks A and B
// of 2^bits entries are learned per matrix; every group of `group` weights
// of a row picks the codebook and a positive scale s that minimise the
// activation-weighted error sum_j h_j (w_j - s c[q_j])^2 (h_j: energy of
// input channel j, e.g. diag of the GPTQ Hessian). Alternating rounds:
//   assignment: per group and codebook, scale candidates s0 * clip for a
//     small grid of clip factors (s0 the smallest scale whose grid covers
//     the group), the least-squares refit of the best, and the previous
//     round's scale; codes by nearest entry; keep the best (book, s, codes);
//   update: weighted k-means, c_k = sum h s w / sum h s^2 over the weights
//     assigned to entry k, then each book is renormalised to max|c| = 1.
// A starts as the uniform grid on [-1, 1], B as normal quantiles (NF-like).
// Scales and entries are evaluated as the fp16 values that get stored, so
// the result is exactly what the runtime computes (llmc/format/aaac.h).
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/dtype.h"
#include <cstdint>
#include <vector>

namespace llmc::quant {

struct AaacOptions {
  int bits = 4;        // 2..4
  int64_t group = 64;  // weights per scale
  int iters = 15;      // update + assignment rounds after the first assignment (0: fixed grids)
  double damp = 0.01;  // h_j += damp * mean(h): dead channels still count a little
  /// Scale candidates s0 * clip (s0: the group's range just covered).
  std::vector<float> clips = {1.0f, 0.95f, 0.9f, 0.85f, 0.8f, 0.75f, 0.7f};
  int threads = 0;     // 0: the machine's cores (at most 8)
};

/// One quantized matrix in the terms of llmc/format/aaac.h.
struct AaacMatrix {
  int bits = 4;
  int64_t group = 64, rows = 0, cols = 0;
  std::vector<float> book[2];   // A, B: 2^bits fp16-exact entries, ascending
  std::vector<uint8_t> codes;   // rows * cols
  std::vector<float> scales;    // rows * groups: fp16-exact magnitude, negative = codebook B
  // What the run measured (errors: sum h (w - q)^2 / sum h w^2, h damped).
  int iters = 0;                // rounds run (stops early once the error stalls)
  double initialError = 0;      // after the first assignment (the initial grids)
  double finalError = 0;
  double shareB = 0;            // share of groups on codebook B
  double entriesUsed = 0;       // share of the 2 * 2^bits entries some weight uses

  DType dtype() const { return aaacDType(bits, group); }
  int64_t groups() const { return cols / group; }
  /// The weights the runtime will see, row-major [rows, cols].
  std::vector<float> dequantized() const;
  /// Packed rows: rows * rowBytes(dtype(), cols) bytes.
  std::vector<uint8_t> pack() const;
  /// The matrix's side data: aaacCodebookBytes(bits) bytes.
  std::vector<uint8_t> packCodebooks() const;
};

/// The initial codebooks: uniform (A) or normal quantiles (B), max|c| = 1,
/// fp16-exact, ascending.
std::vector<float> aaacInitialBook(int bits, bool normal);

/// Quantize row-major W [rows, cols]; h: cols channel energies (null: all
/// 1). Throws std::runtime_error on a bad shape or option, a non-finite
/// weight or energy, or a weight too large for an fp16 scale.
AaacMatrix aaacQuantize(const float *w, int64_t rows, int64_t cols, const double *h,
                        const AaacOptions &o);

/// sum_j h_j sum_i (w_ij - q_ij)^2 (h null: all 1).
double aaacWeightedError(const float *w, const float *q, int64_t rows, int64_t cols,
                         const double *h);

} // namespace llmc::quant
