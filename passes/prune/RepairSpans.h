//===- RepairSpans.h - Least-squares repair after a depth cut --*- C++ -*-===//
// After blocks a..b are removed, block a-1's output feeds block b+1. The
// repair fits, on calibration text run through the unpruned model, a d x d
// map T on block a-1's MLP output M (its down projection) so that
// R + M T approximates the residual stream that left block b (R: block
// a-1's stream before its MLP adds M): in closed form, ridge regularised
// towards the identity,
//   T = (M^T M + mu I)^-1 (M^T (Y - R) + mu I),  mu = lambda tr(M^T M) / d,
// and folds it into the down projection, W' = T^T W (stored f32). Our
// reading of the "linear replacement" repairs in the depth-pruning
// literature; the error of the cut with and without it is reported.
//===----------------------------------------------------------------------===//
#pragma once
#include "passes/prune/BlockActivations.h"
#include "compiler/weights/WeightStore.h"
#include "mlir/IR/BuiltinOps.h"
#include <cstdint>
#include <string>
#include <vector>

namespace llmc::prune {

/// One contiguous run of removed blocks and its repair.
struct SpanRepair {
  int64_t before = -1, first = -1, last = -1; // kept block a-1; removed a..b
  std::string weight;                         // block a-1's down projection
  /// Relative squared error of the stream entering block b+1 over the
  /// calibration tokens: the cut alone, and with the repair.
  double errorCut = 0, errorRepaired = 0;
};

/// Contiguous runs of `removed` (ascending) that follow a kept block.
std::vector<SpanRepair> repairableSpans(const std::vector<int64_t> &removed);

/// Fits and folds each span's map (runs the model as it stands, before the
/// cut). Throws std::runtime_error (calibration text, an MoE block, a down
/// projection of unexpected shape, a model the runtime cannot run).
void repairSpans(mlir::ModuleOp module, WeightStore &store, int64_t blocks,
                 std::vector<SpanRepair> &spans, const std::string &calibPath, int64_t tokens,
                 int64_t seqLen, double lambda, CalibrationUse &use);

} // namespace llmc::prune
