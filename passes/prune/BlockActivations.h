//===- BlockActivations.h - Residual streams on calibration text -*- C++ -*-===//
// The activation-based depth scores (Block Influence, angular distance) need
// the residual stream entering and leaving every block: the model as it
// stands in the pipeline runs (an in-memory artifact, the runtime's
// reference engine, block by block) on calibration sequences, and each
// sequence's L + 1 streams feed prune::ResidualCosines.
//===----------------------------------------------------------------------===//
#pragma once
#include "compiler/prune/DepthScores.h"
#include "compiler/weights/WeightStore.h"
#include "mlir/IR/BuiltinOps.h"
#include <cstdint>
#include <string>
#include <vector>

namespace llmc::prune {

/// The attribute llm-prune-depth{dry-run=true} leaves on the llm.model: the
/// blocks it chose (llm-spec-attach{method=self} skips them).
constexpr const char *kDepthChoiceAttr = "llm.depth_choice";

struct CalibrationUse {
  std::string path;        // the file read
  int64_t tokens = 0;      // tokens run
  int64_t sequences = 0;
};

/// The first `tokens` token ids of calibration file `path` (empty: the
/// default text), recorded in `use.path`. Throws std::runtime_error (no
/// default text, the file, a model without a tokenizer for text, < 2 ids).
std::vector<int32_t> calibrationIds(const WeightStore &store, const std::string &path,
                                    int64_t tokens, CalibrationUse &use);

/// Cosines of the residual streams of `blocks` blocks (run span `span`) over
/// the first `tokens` tokens of `path` (empty: the default calibration
/// text) in sequences of at most `seqLen`. Throws std::runtime_error (the
/// file, a model without a tokenizer for a text file, too few tokens, a
/// model the runtime cannot run).
ResidualCosines measureResidualCosines(mlir::ModuleOp module, const WeightStore &store,
                                       int64_t blocks, int64_t span, const std::string &path,
                                       int64_t tokens, int64_t seqLen, CalibrationUse &use);

} // namespace llmc::prune
