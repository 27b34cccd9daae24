//===- CalibrationText.h - The text calibrated passes run on ----*- C++ -*-===//
// Shared by the calibrated quantization methods (passes/quant/Calibration.h)
// and the calibrated KV-policy allocations (passes/kv/KvCalibrationRun.h):
// where the default calibration text is, and the token ids of a calibration
// file, encoded with the model's own tokenizer or given as a `.ids` file.
//===----------------------------------------------------------------------===//
#pragma once
#include "compiler/weights/WeightStore.h"

#include <cstdint>
#include <string>
#include <vector>

namespace llmc {

/// The calibration text used when a pass's calibration option is empty:
/// data/calib/default.txt of the llmc tree this build came from; empty when
/// that is not known. (llmc compile --calib sets the option itself; no pass
/// reads a global or the environment, so llmc-opt runs a pass exactly as
/// llmc compile does.)
std::string defaultCalibrationPath();

/// A calibration or evaluation file holding token ids instead of text: its
/// name ends in ".ids" (whitespace-separated decimal ids; '#' starts a
/// comment line). Models without a tokenizer (llama2.c files given alone)
/// can only be calibrated from such files.
bool isTokenIdFile(const std::string &path);

/// Every token id of the calibration file `path`: the ids a `.ids` file
/// lists (each below the model's vocabulary size), or its text encoded with
/// the model's tokenizer, BOS first. Throws std::runtime_error naming the
/// file when it cannot be read, or "<model>: the model has no tokenizer to
/// encode the calibration text" followed by `noTokenizerHint` when the model
/// has no tokenizer for a text file. With `maxTokens` >= 0 at most that many
/// ids are returned, and a text file is encoded only as far as needed (the
/// default corpus is ~120k tokens; a pass taking 512 encodes a few KB of it).
std::vector<int32_t> readCalibrationTokens(const WeightStore &store, const std::string &path,
                                           const std::string &noTokenizerHint,
                                           int64_t maxTokens = -1);

} // namespace llmc
