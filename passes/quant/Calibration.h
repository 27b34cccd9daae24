//===- Calibration.h - Layer-sequential calibration inputs -----*- C++ -*-===//
// The shared calibration pipeline of the calibrated methods: the calibration
// text is tokenized once and cut into sequences; for block l the model as it
// stands (blocks < l already quantized) is packed into an in-memory artifact
// and block l runs on every sequence's block input (kept from the previous
// step and advanced through the quantized block l-1) with the Executor's
// linear-input hook. Each input site (q/k/v's shared input,
// o's, gate/up's, down's, MoE router and experts) gets its own statistics.
//===----------------------------------------------------------------------===//
#pragma once
#include "compiler/weights/CalibrationText.h"
#include "compiler/weights/WeightStore.h"
#include "llmc/executor.h"
#include "mlir/IR/BuiltinOps.h"
#include <functional>
#include <string>
#include <vector>

namespace llmc::quant {

struct CalibrationData {
  std::string path;
  std::vector<std::vector<int32_t>> sequences;
  int64_t tokens = 0;
};

/// Tokenize `path` (or defaultCalibrationPath() when empty, see
/// compiler/weights/CalibrationText.h) with the model's tokenizer,
/// keep the first `tokens` tokens, cut into sequences of at most `seqLen`.
/// Throws std::runtime_error naming the file on a missing/unreadable/too
/// short file or a model without a tokenizer.
CalibrationData loadCalibration(const WeightStore &store, const std::string &path,
                                int64_t tokens, int64_t seqLen);

/// Number of llm.layer blocks (max index + 1).
int64_t countBlocks(mlir::ModuleOp module);

/// Layer-sequential capture with each block run once per step: the rows
/// entering the block being calibrated are kept per calibration sequence,
/// so capturing block l runs only block l-1 (as it stands now, i.e. already
/// quantized) to advance them, then block l with the hook, instead of the
/// whole model up to l (O(L) block runs in all instead of O(L^2)).
class BlockCapture {
public:
  explicit BlockCapture(const CalibrationData &data) : data_(data) {}

  /// Calls `onInput` for each linear input of block `block` on every
  /// calibration sequence. Blocks must be captured in order 0, 1, 2, ...
  /// (a block may be skipped only by capturing none after it). Throws
  /// std::runtime_error if the model cannot be exported or run.
  void capture(mlir::ModuleOp module, const WeightStore &store, int64_t block,
               const LinearInputHook &onInput);

private:
  const CalibrationData &data_;
  int64_t rowsBlock_ = -1;                // block whose input rows_ holds
  std::vector<std::vector<float>> rows_;  // per sequence: [T, width]
};

} // namespace llmc::quant
