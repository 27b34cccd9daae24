//===- SpecialTokens.h - Find special tokens written in text ---*- C++ -*-===//
// Before BPE, text is cut at special tokens written literally in it (e.g.
// "<|im_start|>"): each becomes its token id, the text between is encoded
// normally. Control tokens are matched only when asked (parse_special);
// user-defined tokens always are. At each position the longest match wins.
//===----------------------------------------------------------------------===//
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace llmc {
struct TokenizerData;
}

namespace llmc::tok {

struct Fragment {
  int32_t token = -1; // a special token, or -1 for plain text
  size_t begin = 0, end = 0; // plain text: byte range in the input
};

class SpecialTokenMatcher {
public:
  explicit SpecialTokenMatcher(const TokenizerData &data);
  std::vector<Fragment> split(const std::string &text, bool parseControl) const;
  /// Whether the id is a control token (skipped when decoding by default).
  bool isControl(int32_t id) const;
  /// Control or user-defined: matched in text rather than BPE-encoded.
  bool isSpecial(int32_t id) const;

private:
  struct Entry {
    std::string text;
    int32_t id;
    bool control;
  };
  std::vector<Entry> byFirstByte[256]; // longest first
  std::vector<bool> control, special;
};

} // namespace llmc::tok
