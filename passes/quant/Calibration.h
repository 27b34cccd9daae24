//===- Calibration.h - Layer-sequential calibration inputs -----*- C++ -*-===//
// The shared calibration pipeline of GPTQ and AWQ: the calibration text is
// tokenized once and cut into sequences; for block l the model as it stands
// (blocks < l already quantized) is packed into an in-memory artifact and run
// on every sequence with the Executor's linear-input hook selecting block l
// and the forward stopping after it. Each input site (q/k/v's shared input,
// o's, gate/up's, down's, MoE router and experts) gets its own statistics.
//===----------------------------------------------------------------------===//
#pragma once
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

/// data/calib/default.txt of the source tree ($LLMC_DATA_DIR overrides).
std::string defaultCalibrationPath();

/// Tokenize `path` (or the default when empty) with the model's tokenizer,
/// keep the first `tokens` tokens, cut into sequences of at most `seqLen`.
/// Throws std::runtime_error naming the file on a missing/unreadable/too
/// short file or a model without a tokenizer.
CalibrationData loadCalibration(const WeightStore &store, const std::string &path,
                                int64_t tokens, int64_t seqLen);

/// Number of llm.layer blocks (max index + 1).
int64_t countBlocks(mlir::ModuleOp module);

/// Run every calibration sequence through the model as it stands now and
/// call `onInput` for each linear input of block `block`. Throws
/// std::runtime_error if the model cannot be exported or run.
void captureBlock(mlir::ModuleOp module, const WeightStore &store, const CalibrationData &data,
                  int64_t block, const LinearInputHook &onInput);

} // namespace llmc::quant
