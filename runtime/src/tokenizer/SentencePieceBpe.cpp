//===- SentencePieceBpe.cpp - SentencePiece-style BPE (llama) -------------===//
// Symbols are byte spans of the escaped text kept in a linked list; a
// max-heap on (score, -position) yields the next merge, and candidates made
// stale by an earlier merge are recognised by their changed span lengths.
//===----------------------------------------------------------------------===//
#include "SentencePieceBpe.h"

#include "Utf8.h"
#include "llmc/tokenizer.h"

#include <queue>

namespace llmc::tok {
namespace {
const char kSpaceMark[] = "\xE2\x96\x81"; // U+2581

int hexDigit(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  return -1;
}
} // namespace

int parseByteToken(const std::string &t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>')
    return -1;
  int hi = hexDigit(t[3]), lo = hexDigit(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

SentencePieceBpe::SentencePieceBpe(const TokenizerData &data)
    : scores(data.scores), unkId(data.unk_id) {
  bool hasTypes = data.token_types.size() == data.tokens.size();
  for (int &b : byteToken)
    b = -1;
  ids.reserve(data.tokens.size() * 2);
  bytes.resize(data.tokens.size());
  for (size_t i = 0; i < data.tokens.size(); ++i) {
    const std::string &t = data.tokens[i];
    int32_t id = static_cast<int32_t>(i);
    int32_t type = hasTypes ? data.token_types[i] : 1;
    int byte = parseByteToken(t);
    if (byte >= 0 && (type == 6 || !hasTypes)) {
      if (byteToken[byte] < 0)
        byteToken[byte] = id;
      bytes[i] = std::string(1, static_cast<char>(byte));
      continue;
    }
    // Byte, control, unknown and unused tokens never come out of merges.
    bool special = hasTypes ? (type == 2 || type == 3 || type == 5)
                            : (id == data.bos_id || id == data.eos_id || id == data.unk_id);
    if (!special)
      ids.emplace(t, id);
    if (type == 3 || (!hasTypes && special)) {
      bytes[i] = t;
      continue;
    }
    std::string out;
    for (size_t pos = 0; pos < t.size();) {
      if (t.compare(pos, 3, kSpaceMark) == 0) {
        out += ' ';
        pos += 3;
      } else {
        out += t[pos++];
      }
    }
    bytes[i] = std::move(out);
  }
}

void SentencePieceBpe::encode(const std::string &text, bool spacePrefix,
                              std::vector<int32_t> &out) const {
  std::string s;
  s.reserve(text.size() * 2 + 3);
  if (spacePrefix)
    s += kSpaceMark;
  for (char c : text) {
    if (c == ' ')
      s += kSpaceMark;
    else
      s += c;
  }
  if (s.empty())
    return;

  struct Symbol {
    size_t offset, length; // length 0: merged away
    int32_t prev, next;
  };
  std::vector<Symbol> syms;
  for (size_t pos = 0; pos < s.size();) {
    size_t len = utf8CharLength(s, pos);
    int32_t idx = static_cast<int32_t>(syms.size());
    syms.push_back({pos, len, idx - 1, -1});
    if (idx > 0)
      syms[idx - 1].next = idx;
    pos += len;
  }

  struct Candidate {
    float score;
    int32_t left, right;
    size_t length; // combined length when queued
    int32_t id;
    bool operator<(const Candidate &o) const { // max-heap: best score, then leftmost
      return score != o.score ? score < o.score : left > o.left;
    }
  };
  std::priority_queue<Candidate> heap;
  auto consider = [&](int32_t left) {
    if (left < 0 || syms[left].next < 0)
      return;
    int32_t right = syms[left].next;
    size_t len = syms[left].length + syms[right].length;
    auto it = ids.find(s.substr(syms[left].offset, len));
    if (it != ids.end())
      heap.push({score(it->second), left, right, len, it->second});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i)
    consider(i);

  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    Symbol &l = syms[c.left], &r = syms[c.right];
    if (l.length == 0 || r.length == 0 || l.next != c.right || l.length + r.length != c.length)
      continue;
    l.length += r.length;
    r.length = 0;
    l.next = r.next;
    if (r.next >= 0)
      syms[r.next].prev = c.left;
    consider(l.prev);
    consider(c.left);
  }

  for (int32_t i = 0; i >= 0; i = syms[i].next) {
    std::string piece = s.substr(syms[i].offset, syms[i].length);
    auto it = ids.find(piece);
    if (it != ids.end()) {
      out.push_back(it->second);
      continue;
    }
    bool allBytes = true; // byte fallback, else one unknown token
    for (unsigned char b : piece)
      allBytes = allBytes && byteToken[b] >= 0;
    if (allBytes) {
      for (unsigned char b : piece)
        out.push_back(byteToken[b]);
    } else if (unkId >= 0) {
      out.push_back(unkId);
    }
  }
}

} // namespace llmc::tok
