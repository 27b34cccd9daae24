//===- CalibrationText.cpp - The text calibrated passes run on ------------===//
#include "compiler/weights/CalibrationText.h"
#include "llmc/tokenizer.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

#ifndef LLMC_DATA_DIR
#define LLMC_DATA_DIR ""
#endif

namespace llmc {

std::string defaultCalibrationPath() {
  const std::string dir = LLMC_DATA_DIR;
  if (dir.empty())
    return "";
  return dir + "/calib/default.txt";
}

bool isTokenIdFile(const std::string &path) {
  return path.size() > 4 && path.compare(path.size() - 4, 4, ".ids") == 0;
}

std::vector<int32_t> readCalibrationTokens(const WeightStore &store, const std::string &path,
                                           const std::string &noTokenizerHint) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::runtime_error(path + ": cannot read the calibration text");
  std::stringstream ss;
  ss << in.rdbuf();
  if (isTokenIdFile(path))
    return readTokenIds(ss.str(), path, store.vocabSize());
  const TokenizerData td = store.tokenizer();
  if (td.empty())
    throw std::runtime_error(store.sourcePath() +
                             ": the model has no tokenizer to encode the calibration text" +
                             noTokenizerHint);
  Tokenizer tok(td);
  return tok.encode(ss.str(), /*add_bos=*/true, /*parse_special=*/false);
}

} // namespace llmc
