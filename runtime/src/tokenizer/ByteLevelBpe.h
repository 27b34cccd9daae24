//===- ByteLevelBpe.h - GPT-2 style byte-level BPE -------------*- C++ -*-===//
// Every byte is written as one printable code point (GPT-2's bytes_to_unicode
// alphabet, so a space is 'Ġ'); a pre-tokenizer piece starts as one token
// per byte and the ranked merges ("a b", lowest rank first, leftmost first
// on ties) are applied until none fits. Decoding maps the code points back
// to bytes. Bytes without a token in the vocabulary (SmolLM2 lacks e.g.
// 0xFE, 0xFF, which UTF-8 never uses) are dropped rather than sent as the
// unknown token, which for such models is often <|endoftext|>.
//===----------------------------------------------------------------------===//
#pragma once
#include "PreTokenizer.h"

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace llmc {
struct TokenizerData;
}

namespace llmc::tok {

class ByteLevelBpe {
public:
  explicit ByteLevelBpe(const TokenizerData &data);

  /// Appends the ids of `text` (plain text, no special tokens).
  void encode(const std::string &text, std::vector<int32_t> &out) const;
  /// The bytes a token stands for (control tokens: their text as is).
  const std::string &tokenBytes(int32_t id) const { return bytes[id]; }

private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  PreFlavour flavour;
  int32_t byteToken[256];                          // token of each single byte, -1 if none
  std::unordered_map<uint64_t, Merge> merges;      // (left id << 32 | right id) -> merge
  std::vector<std::string> bytes;                  // id -> decoded bytes

  void encodePiece(const char *p, size_t n, std::vector<int32_t> &out) const;
};

/// GPT-2's byte -> code point alphabet (printable bytes keep their value).
uint32_t byteToCodepoint(uint8_t b);

} // namespace llmc::tok
