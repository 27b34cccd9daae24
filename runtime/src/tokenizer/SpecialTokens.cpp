//===- SpecialTokens.cpp - Find special tokens written in text ------------===//
// Without token types (e.g. llama2.c vocabularies) BOS and EOS are the
// control tokens.
//===----------------------------------------------------------------------===//
#include "SpecialTokens.h"

#include "llmc/tokenizer.h"

#include <algorithm>

namespace llmc::tok {

SpecialTokenMatcher::SpecialTokenMatcher(const TokenizerData &data)
    : control(data.tokens.size(), false), special(data.tokens.size(), false) {
  bool hasTypes = data.token_types.size() == data.tokens.size();
  for (size_t i = 0; i < data.tokens.size(); ++i) {
    int32_t id = static_cast<int32_t>(i);
    bool isCtl = hasTypes ? data.token_types[i] == 3 : (id == data.bos_id || id == data.eos_id);
    bool isUser = hasTypes && data.token_types[i] == 4;
    control[i] = isCtl;
    special[i] = isCtl || isUser;
    const std::string &t = data.tokens[i];
    if ((isCtl || isUser) && !t.empty())
      byFirstByte[static_cast<uint8_t>(t[0])].push_back({t, id, isCtl});
  }
  for (auto &bucket : byFirstByte)
    std::stable_sort(bucket.begin(), bucket.end(), [](const Entry &a, const Entry &b) {
      return a.text.size() > b.text.size();
    });
}

bool SpecialTokenMatcher::isControl(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < control.size() && control[id];
}

bool SpecialTokenMatcher::isSpecial(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < special.size() && special[id];
}

std::vector<Fragment> SpecialTokenMatcher::split(const std::string &text,
                                                 bool parseControl) const {
  std::vector<Fragment> out;
  size_t textStart = 0;
  for (size_t pos = 0; pos < text.size();) {
    const Entry *hit = nullptr;
    for (const Entry &e : byFirstByte[static_cast<uint8_t>(text[pos])]) {
      if ((parseControl || !e.control) && text.compare(pos, e.text.size(), e.text) == 0) {
        hit = &e;
        break;
      }
    }
    if (!hit) {
      ++pos;
      continue;
    }
    if (pos > textStart)
      out.push_back({-1, textStart, pos});
    out.push_back({hit->id, pos, pos + hit->text.size()});
    pos += hit->text.size();
    textStart = pos;
  }
  if (textStart < text.size())
    out.push_back({-1, textStart, text.size()});
  return out;
}

} // namespace llmc::tok
