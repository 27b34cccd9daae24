//===- SentencePieceBpe.h - SentencePiece-style BPE (llama) ----*- C++ -*-===//
// Spaces are written as U+2581 ('▁'), the text starts as one symbol per
// UTF-8 character, and the adjacent pair whose concatenation is the
// highest-scoring vocabulary token is merged until no pair is a token.
// Symbols left outside the vocabulary fall back to <0xXX> byte tokens
// (or the unknown token). This is llama2.c's and llama.cpp's algorithm.
//===----------------------------------------------------------------------===//
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace llmc {
struct TokenizerData;
}

namespace llmc::tok {

class SentencePieceBpe {
public:
  explicit SentencePieceBpe(const TokenizerData &data);

  /// Appends the ids of `text` (plain text, no special tokens); with
  /// spacePrefix a space is put in front first.
  void encode(const std::string &text, bool spacePrefix, std::vector<int32_t> &out) const;
  /// The text a token stands for: '▁' as a space, <0xXX> as its byte,
  /// control tokens as written.
  const std::string &tokenBytes(int32_t id) const { return bytes[id]; }

private:
  const std::vector<float> &scores; // owned by the Tokenizer's data
  int32_t unkId;
  int32_t byteToken[256];
  std::unordered_map<std::string, int32_t> ids;
  std::vector<std::string> bytes;

  float score(int32_t id) const { return id < static_cast<int32_t>(scores.size()) ? scores[id] : 0.f; }
};

/// "<0x41>" -> 0x41; -1 if `t` is not a byte token name.
int parseByteToken(const std::string &t);

} // namespace llmc::tok
