//===- PreTokenizer.cpp - Regex-free splitters for byte-level BPE ---------===//
// Each matcher returns the end of the regex match starting at a code point
// index, reproducing the alternation order and backtracking of the regex it
// stands for (see PreTokenizer.h). A piece never crosses a fragment end, as
// the regex never sees past the string it is given.
//===----------------------------------------------------------------------===//
#include "PreTokenizer.h"

#include "Utf8.h"

namespace llmc::tok {
namespace {

class Matcher {
public:
  Matcher(const std::vector<CodepointSpan> &codepoints, size_t fragmentEnd)
      : cps(codepoints), end(fragmentEnd) {}

  /// End of the GPT-2 regex match at i (always > i when i < end).
  size_t gpt2(size_t i) const {
    if (size_t m = contraction(i, /*ignoreCase=*/false))
      return m;
    if (isL(i))
      return runL(i);
    if (is(i, ' ') && isL(i + 1))
      return runL(i + 1);
    if (isN(i))
      return runN(i);
    if (is(i, ' ') && isN(i + 1))
      return runN(i + 1);
    if (isOther(i))
      return runOther(i);
    if (is(i, ' ') && isOther(i + 1))
      return runOther(i + 1);
    return whitespace(i);
  }

  /// End of the Llama-3 (maxDigits 3) or Qwen2 (maxDigits 1) regex match at i.
  size_t llama3(size_t i, size_t maxDigits) const {
    if (size_t m = contraction(i, /*ignoreCase=*/true))
      return m;
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (isL(i))
      return runL(i);
    if (!is(i, '\r') && !is(i, '\n') && !isN(i) && isL(i + 1))
      return runL(i + 1);
    // \p{N}{1,maxDigits}
    if (isN(i)) {
      size_t j = i;
      while (j < end && j - i < maxDigits && isN(j))
        ++j;
      return j;
    }
    // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
    if (isOther(i) || (is(i, ' ') && isOther(i + 1))) {
      size_t j = runOther(isOther(i) ? i : i + 1);
      while (is(j, '\r') || is(j, '\n'))
        ++j;
      return j;
    }
    // \s*[\r\n]+ : ends after the last CR/LF of the whitespace run.
    size_t runEnd = runS(i);
    for (size_t k = runEnd; k > i; --k)
      if (is(k - 1, '\r') || is(k - 1, '\n'))
        return k;
    return whitespace(i);
  }

private:
  const std::vector<CodepointSpan> &cps;
  size_t end;

  bool inside(size_t i) const { return i < end; }
  bool is(size_t i, uint32_t c) const { return inside(i) && cps[i].cp == c; }
  bool isL(size_t i) const { return inside(i) && isLetter(cps[i].cp); }
  bool isN(size_t i) const { return inside(i) && isNumber(cps[i].cp); }
  bool isS(size_t i) const { return inside(i) && isWhitespace(cps[i].cp); }
  bool isOther(size_t i) const { return inside(i) && !isL(i) && !isN(i) && !isS(i); }

  size_t runL(size_t i) const {
    while (isL(i))
      ++i;
    return i;
  }
  size_t runN(size_t i) const {
    while (isN(i))
      ++i;
    return i;
  }
  size_t runS(size_t i) const {
    while (isS(i))
      ++i;
    return i;
  }
  size_t runOther(size_t i) const {
    while (isOther(i))
      ++i;
    return i;
  }

  // 's|'t|'re|'ve|'m|'ll|'d ; returns 0 when there is no match.
  size_t contraction(size_t i, bool ignoreCase) const {
    if (!is(i, '\''))
      return 0;
    auto lower = [&](size_t k) -> uint32_t {
      if (!inside(k))
        return 0;
      uint32_t c = cps[k].cp;
      return ignoreCase && c >= 'A' && c <= 'Z' ? c + 32 : c;
    };
    uint32_t a = lower(i + 1), b = lower(i + 2);
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
      return i + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
      return i + 3;
    return 0;
  }

  // \s+(?!\S)|\s+ at a whitespace code point.
  size_t whitespace(size_t i) const {
    size_t j = runS(i);
    if (j == i) // not reached for whitespace; keeps progress guaranteed
      return i + 1;
    if (j == end)
      return j;
    // Followed by non-space: leave the last space to the next piece, unless
    // the run is a single space (then \s+ takes it).
    return j - 1 > i ? j - 1 : j;
  }
};

void splitRange(PreFlavour flavour, const std::vector<CodepointSpan> &cps, size_t begin,
                size_t end, std::vector<std::pair<size_t, size_t>> &out) {
  Matcher m(cps, end);
  for (size_t i = begin; i < end;) {
    size_t j = flavour == PreFlavour::Llama3 ? m.llama3(i, 3)
               : flavour == PreFlavour::Qwen2 ? m.llama3(i, 1)
                                              : m.gpt2(i);
    out.emplace_back(i, j);
    i = j;
  }
}

} // namespace

PreFlavour preFlavourFromName(const std::string &pre, bool *known) {
  static const struct {
    const char *name;
    PreFlavour flavour;
  } kNames[] = {
      {"gpt2", PreFlavour::Gpt2},          {"default", PreFlavour::Gpt2},
      {"gpt-2", PreFlavour::Gpt2},         {"mpt", PreFlavour::Gpt2},
      {"olmo", PreFlavour::Gpt2},          {"jais", PreFlavour::Gpt2},
      {"smollm", PreFlavour::Gpt2Digits},  {"starcoder", PreFlavour::Gpt2Digits},
      {"refact", PreFlavour::Gpt2Digits},  {"command-r", PreFlavour::Gpt2Digits},
      {"codeshell", PreFlavour::Gpt2Digits}, {"exaone", PreFlavour::Gpt2Digits},
      {"minerva-7b", PreFlavour::Gpt2Digits},
      {"llama-bpe", PreFlavour::Llama3},   {"llama3", PreFlavour::Llama3},
      {"llama-v3", PreFlavour::Llama3},    {"smaug-bpe", PreFlavour::Llama3},
      {"falcon3", PreFlavour::Llama3},
      {"qwen2", PreFlavour::Qwen2},        {"stablelm2", PreFlavour::Qwen2},
      {"deepseek-r1-qwen", PreFlavour::Qwen2},
  };
  for (const auto &n : kNames) {
    if (pre == n.name) {
      if (known)
        *known = true;
      return n.flavour;
    }
  }
  if (known)
    *known = pre.empty();
  return PreFlavour::Gpt2;
}

std::vector<std::pair<size_t, size_t>> preTokenizeRanges(PreFlavour flavour,
                                                         const std::string &text) {
  std::vector<CodepointSpan> cps = decodeUtf8(text);
  std::vector<std::pair<size_t, size_t>> pieces; // code point ranges first
  if (flavour == PreFlavour::Gpt2Digits) {
    size_t start = 0;
    for (size_t i = 0; i < cps.size(); ++i) {
      if (isNumber(cps[i].cp)) {
        splitRange(PreFlavour::Gpt2, cps, start, i, pieces);
        pieces.emplace_back(i, i + 1);
        start = i + 1;
      }
    }
    splitRange(PreFlavour::Gpt2, cps, start, cps.size(), pieces);
  } else {
    splitRange(flavour, cps, 0, cps.size(), pieces);
  }
  for (auto &p : pieces) { // to byte ranges
    size_t b = cps[p.first].offset;
    size_t e = cps[p.second - 1].offset + cps[p.second - 1].length;
    p = {b, e};
  }
  return pieces;
}

std::vector<std::string> preTokenize(PreFlavour flavour, const std::string &text) {
  std::vector<std::string> out;
  for (auto [b, e] : preTokenizeRanges(flavour, text))
    out.push_back(text.substr(b, e - b));
  return out;
}

} // namespace llmc::tok
