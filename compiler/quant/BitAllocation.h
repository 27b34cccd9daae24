//===- BitAllocation.h - Per-tensor widths under a size budget --*- C++ -*-===//
// The numerics of `llmc compile --target-bpw`: every allocation unit (a
// weight, or weights that must share one width) has a few candidate widths,
// each with its exact byte cost and its predicted KL divergence; choose one
// candidate per unit so the bytes fit the budget and the summed predicted
// KLD is least. This is a multiple-choice knapsack, solved exactly by
// dynamic programming over byte costs counted in units of their greatest
// common divisor (for transformer shapes a few thousand cells per bit);
// when that would need too many cells, costs are rounded UP to a coarser
// unit, so the budget still holds and the answer is within one unit of
// optimal. The unit depends on the candidates only, never on the budget, so
// a larger budget never gives a larger predicted KLD. Ties go to the
// cheaper candidate listed first, so the result is deterministic.
// Plus the sensitivity model: the KLD at a width predicted from one probe
// and the RTN weight error energy at each width.
//===----------------------------------------------------------------------===//
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace llmc::quant {

struct AllocationUnit {
  std::string name;           // for messages
  std::vector<int64_t> bytes; // per candidate, >= 0
  std::vector<double> kld;    // per candidate, predicted (finite, >= 0)
};

struct Allocation {
  std::vector<int> choice; // per unit: index of the chosen candidate
  int64_t bytes = 0;       // sum of the chosen candidates' bytes
  double kld = 0;          // sum of their predicted KLD
};

/// The least-KLD choice with total bytes <= budgetBytes. Throws
/// std::invalid_argument on malformed units (no candidates, size mismatch,
/// negative bytes, non-finite or negative KLD) and std::runtime_error when
/// even the cheapest candidates exceed the budget (the message gives the
/// smallest reachable size). `maxCells` bounds the DP table per unit.
Allocation allocateBits(const std::vector<AllocationUnit> &units, int64_t budgetBytes,
                        int64_t maxCells = int64_t(1) << 17);

/// Sums of squared round-to-nearest errors of w [rows, cols] on the grouped
/// integer grid of each width in `bits` (llm-quantize's RTN: GroupGrid's
/// fp16 scale and minimum): one pass, each group's range found once.
/// Throws std::invalid_argument when `group` does not divide cols.
std::vector<double> rtnErrorEnergies(const float *w, int64_t rows, int64_t cols,
                                     const std::vector<int> &bits, bool sym, int64_t group);

/// Predicted KLD at another width from a measured probe: the KLD grows like
/// the weight error energy, kld(b) = probeKld * err(b) / err(probe) (0 when
/// err(probe) is 0).
double predictKld(double probeKld, double probeErr, double err);

} // namespace llmc::quant
