//===- Calibration.cpp - Layer-sequential calibration inputs -------------===//
#include "passes/quant/Calibration.h"
#include "compiler/weights/InMemoryModel.h"
#include "dialects/llm/IR/LlmOps.h"
#include "llmc/tokenizer.h"
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

#ifndef LLMC_DATA_DIR
#define LLMC_DATA_DIR ""
#endif

namespace llmc::quant {

std::string defaultCalibrationPath() {
  std::string dir = LLMC_DATA_DIR;
  if (const char *env = std::getenv("LLMC_DATA_DIR"); env && *env)
    dir = env;
  if (dir.empty())
    return "";
  return dir + "/calib/default.txt";
}

CalibrationData loadCalibration(const WeightStore &store, const std::string &pathIn,
                                int64_t tokens, int64_t seqLen) {
  CalibrationData out;
  out.path = pathIn.empty() ? defaultCalibrationPath() : pathIn;
  if (out.path.empty())
    throw std::runtime_error("no default calibration text known (set LLMC_DATA_DIR or pass "
                             "calib=FILE)");
  std::ifstream in(out.path, std::ios::binary);
  if (!in)
    throw std::runtime_error(out.path + ": cannot read the calibration text");
  std::stringstream ss;
  ss << in.rdbuf();
  const TokenizerData &td = store.source().tokenizer;
  if (td.empty())
    throw std::runtime_error(store.source().path +
                             ": the model has no tokenizer to encode the calibration text");
  Tokenizer tok(td);
  std::vector<int32_t> ids = tok.encode(ss.str(), /*add_bos=*/true, /*parse_special=*/false);
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

void captureBlock(mlir::ModuleOp module, const WeightStore &store, const CalibrationData &data,
                  int64_t block, const LinearInputHook &onInput) {
  std::unique_ptr<Artifact> art = buildInMemoryArtifact(module, store);
  ExecutorOptions o;
  int64_t longest = 1;
  for (const auto &s : data.sequences)
    longest = std::max<int64_t>(longest, int64_t(s.size()));
  o.max_context = longest;
  o.linear_input_hook = onInput;
  o.hook_block = block;
  o.stop_after_block = block;
  Executor ex(*art, o);
  for (const auto &seq : data.sequences) {
    ex.reset();
    ex.forward(seq);
  }
}

} // namespace llmc::quant
