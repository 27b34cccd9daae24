//===- StopText.h - Text of a generation, cut at stop strings -*- C++ -*-===//
// The server appends each token's text as it comes (work per token is the
// token's own length plus the longest stop string, not the text so far).
// Stop strings end the text where the first of them begins; what may still be the start of a
// stop string, or of a UTF-8 character split across tokens, is held back
// from a stream until the next token decides it.
//===----------------------------------------------------------------------===//
#pragma once
#include <string>
#include <vector>

namespace llmc::serve {

class StopText {
public:
  explicit StopText(std::vector<std::string> stops);
  /// Appends the next piece of the decoded text; returns true when the text
  /// contains a stop string (text() is then cut before the first and final;
  /// later pieces are ignored).
  bool append(const std::string &piece);
  /// The text, cut at a stop string once one was seen.
  const std::string &text() const { return text_; }
  bool stopped() const { return stopped_; }
  /// How much of text() a stream may send now: all of it once final (or
  /// stopped); else short of a trailing partial UTF-8 character and of a
  /// tail that begins some stop string.
  size_t safeLength(bool final) const;

private:
  std::vector<std::string> stops_;
  size_t longest_ = 0; // the longest stop string's length
  std::string text_;
  bool stopped_ = false;
};

} // namespace llmc::serve
