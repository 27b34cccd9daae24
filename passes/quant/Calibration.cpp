//===- Calibration.cpp - Layer-sequential calibration inputs -------------===//
#include "passes/quant/Calibration.h"
#include "compiler/weights/InMemoryModel.h"
#include "dialects/llm/IR/LlmOps.h"
#include <algorithm>
#include <stdexcept>

namespace llmc::quant {

CalibrationData loadCalibration(const WeightStore &store, const std::string &pathIn,
                                int64_t tokens, int64_t seqLen) {
  CalibrationData out;
  out.path = pathIn.empty() ? defaultCalibrationPath() : pathIn;
  if (out.path.empty())
    throw std::runtime_error("no default calibration text known (set LLMC_DATA_DIR or pass "
                             "calib=FILE)");
  const std::vector<int32_t> ids =
      readCalibrationTokens(store, out.path, " (give token ids in a .ids file instead)", tokens);
  if (int64_t(ids.size()) < std::min<int64_t>(tokens, 16))
    throw std::runtime_error(out.path + ": only " + std::to_string(ids.size()) +
                             " tokens of calibration text (need " + std::to_string(tokens) + ")");
  const int64_t n = std::min<int64_t>(tokens, int64_t(ids.size()));
  for (int64_t i = 0; i < n; i += seqLen)
    out.sequences.emplace_back(ids.begin() + i, ids.begin() + std::min(n, i + seqLen));
  out.tokens = n;
  return out;
}

int64_t countBlocks(mlir::ModuleOp module) {
  int64_t n = 0;
  module.walk([&](llm::LayerOp l) { n = std::max<int64_t>(n, int64_t(l.getIndex()) + 1); });
  return n;
}

void BlockCapture::capture(mlir::ModuleOp module, const WeightStore &store, int64_t block,
                           const LinearInputHook &onInput) {
  if (block != rowsBlock_ + 1)
    throw std::runtime_error("calibration: block " + std::to_string(block) +
                             " captured out of order (after block " +
                             std::to_string(rowsBlock_) + ")");
  std::unique_ptr<Artifact> art = buildInMemoryArtifact(module, store);
  ExecutorOptions o;
  int64_t longest = 1;
  for (const auto &s : data_.sequences)
    longest = std::max<int64_t>(longest, int64_t(s.size()));
  o.max_context = longest;
  o.linear_input_hook = onInput;
  o.hook_block = block;
  Executor ex(*art, o);
  rows_.resize(data_.sequences.size());
  for (size_t i = 0; i < data_.sequences.size(); ++i) {
    ex.reset();
    if (block == 0)
      rows_[i] = ex.blockInput(data_.sequences[i], 0);
    else // block-1 has been quantized since its input was kept
      rows_[i] = ex.forwardBlock(block - 1, rows_[i]);
    ex.reset();
    (void)ex.forwardBlock(block, rows_[i]);
  }
  rowsBlock_ = block; // rows_ now hold block `block`'s input
}

} // namespace llmc::quant
