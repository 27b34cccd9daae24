//===- Utf8.h - UTF-8 decoding and Unicode character classes ---*- C++ -*-===//
// The tokenizers work on code points but must give back the exact input
// bytes, so decoding keeps each code point's byte span; an invalid byte
// becomes its own "code point" (U+FFFD, valid=false) rather than an error.
// Letter / number / whitespace classes follow \p{L}, \p{N} and \s as the
// Hugging Face and llama.cpp pre-tokenizer regexes use them.
//===----------------------------------------------------------------------===//
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace llmc::tok {

struct CodepointSpan {
  uint32_t cp;     // the code point, U+FFFD for an invalid byte
  uint32_t offset; // byte offset in the decoded string
  uint32_t length; // bytes (1..4)
};

/// Decodes `s` leniently: every byte belongs to exactly one span.
std::vector<CodepointSpan> decodeUtf8(const std::string &s);
/// Length of the UTF-8 sequence starting at s[pos] if it is well formed
/// (1..4), else 1 (a stray byte counts alone).
uint32_t utf8CharLength(const std::string &s, size_t pos);
void appendUtf8(std::string &out, uint32_t cp);

bool isLetter(uint32_t cp);     // general category L*
bool isNumber(uint32_t cp);     // general category N*
bool isWhitespace(uint32_t cp); // Unicode White_Space

} // namespace llmc::tok
