//===- fuzz_tokenizer.cpp - Tokenizers and chat templates on arbitrary text -===//
// The first byte chooses: 0-1, a byte-level BPE (GPT-2 byte mapping, a few
// merges, ChatML specials) encodes and decodes the rest (special tokens
// parsed or not); 2-3, a SentencePiece-style BPE with byte fallback does;
// 4, the rest is the model's chat template (untrusted metadata of a model
// file), applied to a fixed conversation. Byte-level BPE is lossless: the
// decoded text of valid UTF-8 must equal the input.
//===----------------------------------------------------------------------===//
#include "llmc/tokenizer.h"

#include <string>
#include <vector>

namespace {
using llmc::TokenizerData;

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xE0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

TokenizerData byteLevel() {
  TokenizerData d;
  d.kind = "gpt2";
  d.pre = "smollm";
  uint32_t extra = 0;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    d.tokens.push_back(utf8(printable ? b : 256 + extra++));
  }
  const std::string G = utf8(256 + 32); // the byte mapping of ' '
  for (const char *m : {"t h", "th e", "e r", "i n"}) {
    std::string s(m);
    d.merges.push_back(s);
    d.tokens.push_back(s.substr(0, s.find(' ')) + s.substr(s.find(' ') + 1));
  }
  d.merges.push_back(G + " the");
  d.tokens.push_back(G + "the");
  d.token_types.assign(d.tokens.size(), 1);
  for (const char *sp : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    d.tokens.push_back(sp);
    d.token_types.push_back(3);
  }
  d.eos_id = int32_t(d.tokens.size()) - 1;
  d.bos_id = int32_t(d.tokens.size()) - 3;
  return d;
}

TokenizerData sentencePiece() {
  TokenizerData d;
  d.kind = "llama";
  d.add_bos = true;
  d.add_space_prefix = true;
  const std::string sp = "\xE2\x96\x81"; // U+2581
  auto add = [&](const std::string &t, float score, int32_t type) {
    d.tokens.push_back(t);
    d.scores.push_back(score);
    d.token_types.push_back(type);
  };
  add("<unk>", 0, 2);
  add("<s>", 0, 3);
  add("</s>", 0, 3);
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    snprintf(hex, sizeof hex, "<0x%02X>", b);
    add(hex, 0, 6);
  }
  for (const std::string &t : {sp, sp + "t", std::string("h"), std::string("e"),
                               std::string("he"), sp + "the", std::string("a"), sp + "a"})
    add(t, -float(t.size()), 1);
  d.unk_id = 0;
  d.bos_id = 1;
  d.eos_id = 2;
  return d;
}

bool validUtf8(const std::string &s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size())
      return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80)
        return false;
    i += n;
  }
  return true;
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  static const llmc::Tokenizer bpe(byteLevel()), spm(sentencePiece());
  const int mode = data[0] % 5;
  const std::string text(reinterpret_cast<const char *>(data + 1), size - 1);
  try {
    if (mode <= 3) {
      const llmc::Tokenizer &tok = mode <= 1 ? bpe : spm;
      const bool special = mode % 2 == 1;
      const std::vector<int32_t> ids = tok.encode(text, true, special);
      const std::string back = tok.decode(ids);
      for (int32_t id : ids)
        if (id < 0 || id >= tok.vocabSize())
          __builtin_trap(); // an id outside the vocabulary
        else
          (void)tok.tokenText(id);
      if (mode == 0 && validUtf8(text) && back != text)
        __builtin_trap(); // byte-level BPE lost text
      return 0;
    }
    TokenizerData d = byteLevel();
    d.chat_template = text;
    llmc::Tokenizer chat(d);
    (void)chat.applyChatTemplate({{"system", "Be brief."}, {"user", "Hi <|im_end|>"}}, true);
    (void)chat.stopTokens();
  } catch (const std::exception &) {
  }
  return 0;
}
