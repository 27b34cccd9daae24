//===- ByteLevelBpe.cpp - GPT-2 style byte-level BPE ----------------------===//
// Merges are keyed by the ids of the two tokens they join, so a merge step
// is one hash lookup; a min-heap on (rank, position) applies them in the
// same order as Hugging Face tokenizers and llama.cpp, in O(n log n).
//===----------------------------------------------------------------------===//
#include "ByteLevelBpe.h"

#include "Utf8.h"
#include "llmc/tokenizer.h"

#include <queue>
#include <stdexcept>

namespace llmc::tok {

uint32_t byteToCodepoint(uint8_t b) {
  // Printable ranges map to themselves; the other 68 bytes get 256, 257, ...
  // in byte order.
  auto printable = [](uint32_t c) {
    return (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
  };
  if (printable(b))
    return b;
  uint32_t n = 0;
  for (uint32_t c = 0; c < b; ++c)
    if (!printable(c))
      ++n;
  return 256 + n;
}

ByteLevelBpe::ByteLevelBpe(const TokenizerData &data)
    : flavour(preFlavourFromName(data.pre)) {
  std::unordered_map<std::string, int32_t> ids;
  ids.reserve(data.tokens.size() * 2);
  for (size_t i = 0; i < data.tokens.size(); ++i)
    ids.emplace(data.tokens[i], static_cast<int32_t>(i)); // first occurrence wins

  // Code point -> byte, for decoding.
  std::unordered_map<uint32_t, uint8_t> cpToByte;
  for (int b = 0; b < 256; ++b) {
    uint32_t cp = byteToCodepoint(static_cast<uint8_t>(b));
    cpToByte[cp] = static_cast<uint8_t>(b);
    std::string s;
    appendUtf8(s, cp);
    auto it = ids.find(s);
    byteToken[b] = it == ids.end() ? -1 : it->second;
  }

  merges.reserve(data.merges.size() * 2);
  for (size_t rank = 0; rank < data.merges.size(); ++rank) {
    const std::string &m = data.merges[rank];
    size_t sp = m.find(' ', 1); // a token may itself be " " only in odd vocabs
    if (sp == std::string::npos)
      throw std::runtime_error("tokenizer: merge " + std::to_string(rank) + " ('" + m +
                               "') is not of the form 'left right'");
    auto l = ids.find(m.substr(0, sp));
    auto r = ids.find(m.substr(sp + 1));
    auto res = ids.find(m.substr(0, sp) + m.substr(sp + 1));
    if (l == ids.end() || r == ids.end() || res == ids.end())
      continue; // refers to tokens the vocabulary lacks: can never apply
    uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(l->second)) << 32) |
                   static_cast<uint32_t>(r->second);
    merges.emplace(key, Merge{static_cast<int32_t>(rank), res->second}); // lowest rank wins
  }

  bool hasTypes = data.token_types.size() == data.tokens.size();
  bytes.resize(data.tokens.size());
  for (size_t i = 0; i < data.tokens.size(); ++i) {
    const std::string &t = data.tokens[i];
    int32_t type = hasTypes ? data.token_types[i] : 1;
    if (type == 3 || type == 4) { // control / user-defined: literal text
      bytes[i] = t;
      continue;
    }
    std::string out;
    for (const CodepointSpan &c : decodeUtf8(t)) {
      auto it = cpToByte.find(c.cp);
      if (it != cpToByte.end() && c.cp != 0xFFFD)
        out += static_cast<char>(it->second);
      else
        out.append(t, c.offset, c.length); // not byte-level: keep as written
    }
    bytes[i] = std::move(out);
  }
}

void ByteLevelBpe::encode(const std::string &text, std::vector<int32_t> &out) const {
  for (auto [b, e] : preTokenizeRanges(flavour, text))
    encodePiece(text.data() + b, e - b, out);
}

void ByteLevelBpe::encodePiece(const char *p, size_t n, std::vector<int32_t> &out) const {
  struct Symbol {
    int32_t id;
    int32_t prev, next; // -1 at the ends
  };
  std::vector<Symbol> syms;
  syms.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    int32_t id = byteToken[static_cast<uint8_t>(p[i])];
    if (id < 0)
      continue; // a byte the vocabulary lacks is dropped, as HF and llama.cpp do
    int32_t idx = static_cast<int32_t>(syms.size());
    syms.push_back({id, idx - 1, -1});
    if (idx > 0)
      syms[idx - 1].next = idx;
  }
  if (syms.empty())
    return;

  struct Candidate {
    int32_t rank, left, right, leftId, rightId, result;
    bool operator>(const Candidate &o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto consider = [&](int32_t left) {
    if (left < 0 || syms[left].next < 0)
      return;
    int32_t right = syms[left].next;
    uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(syms[left].id)) << 32) |
                   static_cast<uint32_t>(syms[right].id);
    auto it = merges.find(key);
    if (it != merges.end())
      heap.push({it->second.rank, left, right, syms[left].id, syms[right].id,
                 it->second.result});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i)
    consider(i);

  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    Symbol &l = syms[c.left];
    // Stale if either side has merged since this candidate was queued.
    if (l.id != c.leftId || l.next != c.right || syms[c.right].id != c.rightId)
      continue;
    Symbol &r = syms[c.right];
    l.id = c.result;
    l.next = r.next;
    if (r.next >= 0)
      syms[r.next].prev = c.left;
    r.id = -1;
    consider(l.prev);
    consider(c.left);
  }
  for (int32_t i = 0; i >= 0; i = syms[i].next)
    out.push_back(syms[i].id);
}

} // namespace llmc::tok
