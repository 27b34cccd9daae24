//===- TokenIds.cpp - Token ids written as text (".ids" files) ------------===//
// Evaluation and calibration of models that ship without a tokenizer (a
// llama2.c checkpoint alone) read token streams as plain decimal ids.
//===----------------------------------------------------------------------===//
#include "llmc/tokenizer.h"

#include <sstream>
#include <stdexcept>

namespace llmc {

std::vector<std::vector<int32_t>> readTokenIdLines(const std::string &text,
                                                   const std::string &source,
                                                   int64_t vocab_size) {
  std::vector<std::vector<int32_t>> out;
  std::istringstream lines(text);
  std::string line;
  int64_t lineNo = 0;
  while (std::getline(lines, line)) {
    ++lineNo;
    size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#')
      continue;
    std::vector<int32_t> ids;
    std::istringstream words(line);
    std::string w;
    while (words >> w) {
      bool digits = !w.empty() && w.size() <= 9;
      for (char c : w)
        digits = digits && c >= '0' && c <= '9';
      if (!digits)
        throw std::runtime_error(source + ":" + std::to_string(lineNo) + ": '" + w +
                                 "' is not a token id");
      const int64_t id = std::stoll(w);
      if (vocab_size > 0 && id >= vocab_size)
        throw std::runtime_error(source + ":" + std::to_string(lineNo) + ": token id " + w +
                                 " is not below the vocabulary size " +
                                 std::to_string(vocab_size));
      ids.push_back(int32_t(id));
    }
    if (!ids.empty())
      out.push_back(std::move(ids));
  }
  return out;
}

std::vector<int32_t> readTokenIds(const std::string &text, const std::string &source,
                                  int64_t vocab_size) {
  std::vector<int32_t> ids;
  for (const std::vector<int32_t> &line : readTokenIdLines(text, source, vocab_size))
    ids.insert(ids.end(), line.begin(), line.end());
  return ids;
}

} // namespace llmc
