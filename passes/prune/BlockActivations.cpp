//===- BlockActivations.cpp - Residual streams on calibration text -------===//
#include "passes/prune/BlockActivations.h"
#include "compiler/weights/CalibrationText.h"
#include "compiler/weights/InMemoryModel.h"
#include "llmc/executor.h"

#include <algorithm>
#include <stdexcept>

namespace llmc::prune {

std::vector<int32_t> calibrationIds(const WeightStore &store, const std::string &pathIn,
                                    int64_t tokens, CalibrationUse &use) {
  use.path = pathIn.empty() ? defaultCalibrationPath() : pathIn;
  if (use.path.empty())
    throw std::runtime_error("no default calibration text known (pass calib=FILE)");
  std::vector<int32_t> ids =
      readCalibrationTokens(store, use.path, " (give token ids in a .ids file instead)", tokens);
  if (int64_t(ids.size()) < 2)
    throw std::runtime_error(use.path + ": only " + std::to_string(ids.size()) +
                             " calibration tokens");
  return ids;
}

ResidualCosines measureResidualCosines(mlir::ModuleOp module, const WeightStore &store,
                                       int64_t blocks, int64_t span, const std::string &pathIn,
                                       int64_t tokens, int64_t seqLen, CalibrationUse &use) {
  const std::vector<int32_t> ids = calibrationIds(store, pathIn, tokens, use);
  std::unique_ptr<Artifact> art = buildInMemoryArtifact(module, store);
  ExecutorOptions o;
  o.engine = Engine::Reference; // block-by-block runs
  o.max_context = std::min<int64_t>(seqLen, int64_t(ids.size()));
  Executor ex(*art, o);
  ResidualCosines cos(blocks, span);
  std::vector<std::vector<float>> states(size_t(blocks + 1));
  for (size_t at = 0; at < ids.size(); at += size_t(seqLen)) {
    const std::vector<int32_t> seq(ids.begin() + long(at),
                                   ids.begin() + long(std::min(ids.size(), at + size_t(seqLen))));
    if (seq.size() < 2 && use.sequences > 0)
      break; // a last single token adds nothing a cosine needs
    const int64_t T = int64_t(seq.size());
    ex.reset();
    states[0] = ex.blockInput(seq, 0);
    for (int64_t l = 0; l < blocks; ++l) {
      ex.reset(); // each block's cache starts at position 0
      states[size_t(l + 1)] = ex.forwardBlock(l, states[size_t(l)]);
    }
    cos.add(states, T, int64_t(states[0].size()) / T);
    use.tokens += T;
    ++use.sequences;
  }
  return cos;
}

} // namespace llmc::prune
