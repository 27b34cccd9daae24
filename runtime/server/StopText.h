//===- StopText.h - Text of a generation, cut at stop strings -*- C++ -*-===//
// The server decodes a request's tokens as they come. stop strings end the
// text where the first of them begins; what may still be the start of a
// stop string, or of a UTF-8 character split across tokens, is held back
// from a stream until the next token decides it.
//===----------------------------------------------------------------------===//
#pragma once
#include <string>
#include <vector>

namespace llmc::serve {

class StopText {
public:
  explicit StopText(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  /// The whole decoded text so far; returns true when it contains a stop
  /// string (text() is then cut before it and final).
  bool update(const std::string &decoded);
  /// The text, cut at a stop string once one was seen.
  const std::string &text() const { return text_; }
  bool stopped() const { return stopped_; }
  /// How much of text() a stream may send now: all of it once final (or
  /// stopped); else short of a trailing partial UTF-8 character and of a
  /// tail that begins some stop string.
  size_t safeLength(bool final) const;

private:
  std::vector<std::string> stops_;
  std::string text_;
  bool stopped_ = false;
};

} // namespace llmc::serve
