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

namespace {

/// The first `bytes` bytes of `text` cut back to the last paragraph break
/// (or line break) inside them, so no word is split; all of it when shorter.
std::string leadingParagraphs(const std::string &text, size_t bytes) {
  if (bytes >= text.size())
    return text;
  size_t cut = text.rfind("\n\n", bytes);
  if (cut == std::string::npos || cut == 0)
    cut = text.rfind('\n', bytes);
  return text.substr(0, cut == std::string::npos || cut == 0 ? bytes : cut);
}

} // namespace

std::vector<int32_t> readCalibrationTokens(const WeightStore &store, const std::string &path,
                                           const std::string &noTokenizerHint,
                                           int64_t maxTokens) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::runtime_error(path + ": cannot read the calibration text");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  std::vector<int32_t> ids;
  if (isTokenIdFile(path)) {
    ids = readTokenIds(text, path, store.vocabSize());
  } else {
    const TokenizerData td = store.tokenizer();
    if (td.empty())
      throw std::runtime_error(store.sourcePath() +
                               ": the model has no tokenizer to encode the calibration text" +
                               noTokenizerHint);
    Tokenizer tok(td);
    // English runs at ~4 bytes a token; start at 8 and double until enough.
    size_t bytes = maxTokens < 0 ? text.size() : size_t(maxTokens) * 8 + 4096;
    for (;;) {
      ids = tok.encode(leadingParagraphs(text, bytes), /*add_bos=*/true, /*parse_special=*/false);
      if (maxTokens < 0 || int64_t(ids.size()) > maxTokens || bytes >= text.size())
        break;
      bytes *= 2;
    }
  }
  if (maxTokens >= 0 && int64_t(ids.size()) > maxTokens)
    ids.resize(size_t(maxTokens));
  return ids;
}

} // namespace llmc
