//===- StopText.cpp - Stop strings and safe stream lengths ----------------===//
#include "StopText.h"

#include <algorithm>

namespace llmc::serve {

StopText::StopText(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (const std::string &s : stops_)
    longest_ = std::max(longest_, s.size());
}

bool StopText::append(const std::string &piece) {
  if (stopped_)
    return true;
  // No stop string was in the text before this piece, so one now ends in
  // the piece: it starts at most longest_ - 1 bytes before it.
  const size_t from = longest_ > 0 && text_.size() >= longest_ - 1 ? text_.size() - (longest_ - 1) : 0;
  text_ += piece;
  size_t cut = std::string::npos;
  for (const std::string &s : stops_)
    cut = std::min(cut, text_.find(s, from));
  if (cut == std::string::npos)
    return false;
  text_.resize(cut);
  stopped_ = true;
  return true;
}

size_t StopText::safeLength(bool final) const {
  if (final || stopped_)
    return text_.size();
  size_t n = text_.size();
  // A trailing partial UTF-8 character: its lead byte says how long it is.
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const unsigned char c = static_cast<unsigned char>(text_[n - back]);
    if ((c & 0xC0) == 0x80)
      continue; // a continuation byte: look further back
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : 4;
    if (len > back)
      n -= back;
    break;
  }
  // A tail that is the start of a stop string.
  size_t hold = 0;
  for (const std::string &s : stops_)
    for (size_t k = std::min(s.size() - 1, n); k > hold; --k)
      if (text_.compare(n - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
  return n - hold;
}

} // namespace llmc::serve
