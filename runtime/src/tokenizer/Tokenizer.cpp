//===- Tokenizer.cpp - llmc::Tokenizer: dispatch to the BPE kinds ---------===//
// Checks the TokenizerData once (it may come from an untrusted file), then
// routes encode/decode to ByteLevelBpe ("gpt2") or SentencePieceBpe
// ("llama"); special tokens in text and chat templates are shared.
//===----------------------------------------------------------------------===//
#include "llmc/tokenizer.h"

#include "ByteLevelBpe.h"
#include "ChatTemplate.h"
#include "SentencePieceBpe.h"
#include "SpecialTokens.h"

#include <memory>
#include <stdexcept>

namespace llmc {

struct Tokenizer::Impl {
  TokenizerData data;
  std::unique_ptr<tok::ByteLevelBpe> bpe;     // kind "gpt2"
  std::unique_ptr<tok::SentencePieceBpe> spm; // kind "llama"
  std::unique_ptr<tok::SpecialTokenMatcher> specials;
  tok::ChatFormat chat;
  std::vector<int32_t> stops;

  explicit Impl(TokenizerData d) : data(std::move(d)) {
    validate();
    if (data.kind.empty())
      return; // a model without a tokenizer: encode/decode refuse
    specials = std::make_unique<tok::SpecialTokenMatcher>(data);
    if (data.kind == "gpt2")
      bpe = std::make_unique<tok::ByteLevelBpe>(data);
    else
      spm = std::make_unique<tok::SentencePieceBpe>(data);
    chat = tok::detectChatFormat(data.chat_template, tokenOrEmpty(data.bos_id),
                                 tokenOrEmpty(data.eos_id));
    findStopTokens();
  }

  // EOS, and the end-of-turn markers of the chat formats llmc knows.
  void findStopTokens() {
    auto add = [&](int32_t id) {
      for (int32_t s : stops)
        if (s == id)
          return;
      stops.push_back(id);
    };
    if (data.eos_id >= 0)
      add(data.eos_id);
    const char *markers[] = {"<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end|>"};
    for (const char *name : markers)
      for (size_t i = 0; i < data.tokens.size(); ++i)
        if (data.tokens[i] == name &&
            (data.token_types.empty() || specials->isSpecial(static_cast<int32_t>(i)))) {
          add(static_cast<int32_t>(i));
          break;
        }
  }

  void validate() const {
    const std::string where = "tokenizer (kind '" + data.kind + "'): ";
    if (!data.kind.empty() && data.kind != "gpt2" && data.kind != "llama")
      throw std::runtime_error(where + "unsupported kind; expected 'gpt2' or 'llama'");
    if (data.kind.empty() && !data.tokens.empty())
      throw std::runtime_error(where + "tokens given but no kind");
    if (!data.kind.empty() && data.tokens.empty())
      throw std::runtime_error(where + "empty vocabulary");
    size_t n = data.tokens.size();
    if (!data.token_types.empty() && data.token_types.size() != n)
      throw std::runtime_error(where + std::to_string(data.token_types.size()) +
                               " token types for " + std::to_string(n) + " tokens");
    if (!data.scores.empty() && data.scores.size() != n)
      throw std::runtime_error(where + std::to_string(data.scores.size()) + " scores for " +
                               std::to_string(n) + " tokens");
    auto checkId = [&](int32_t id, const char *what) {
      if (id < -1 || (id >= 0 && static_cast<size_t>(id) >= n))
        throw std::runtime_error(where + what + " id " + std::to_string(id) +
                                 " is outside the vocabulary of " + std::to_string(n));
    };
    checkId(data.bos_id, "BOS");
    checkId(data.eos_id, "EOS");
    checkId(data.unk_id, "unknown-token");
    checkId(data.pad_id, "padding");
  }

  std::string tokenOrEmpty(int32_t id) const { return id >= 0 ? data.tokens[id] : std::string(); }

  void requireTokenizer() const {
    if (data.kind.empty())
      throw std::runtime_error("tokenizer: this model has no tokenizer");
  }

  void checkId(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= data.tokens.size())
      throw std::runtime_error("tokenizer: token id " + std::to_string(id) +
                               " is outside the vocabulary of " +
                               std::to_string(data.tokens.size()));
  }

  const std::string &pieceBytes(int32_t id) const {
    return bpe ? bpe->tokenBytes(id) : spm->tokenBytes(id);
  }
};

Tokenizer::Tokenizer(TokenizerData data) : impl(std::make_unique<Impl>(std::move(data))) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer &&) noexcept = default;
Tokenizer &Tokenizer::operator=(Tokenizer &&) noexcept = default;

std::vector<int32_t> Tokenizer::encodeChat(const std::string &rendered) const {
  std::vector<int32_t> ids = encode(rendered, /*add_bos=*/false, /*parse_special=*/true);
  const TokenizerData &d = impl->data;
  if (d.add_bos && d.bos_id >= 0 && (ids.empty() || ids.front() != d.bos_id))
    ids.insert(ids.begin(), d.bos_id);
  return ids;
}

std::vector<int32_t> Tokenizer::encode(const std::string &text, bool add_bos,
                                       bool parse_special) const {
  impl->requireTokenizer();
  const TokenizerData &d = impl->data;
  std::vector<int32_t> out;
  if (add_bos && d.add_bos && d.bos_id >= 0)
    out.push_back(d.bos_id);
  // SentencePiece puts the space prefix at the start of the text and after
  // each special token (as llama.cpp does). Byte-level BPE ignores
  // add_space_prefix, as llama.cpp does for "gpt2" vocabularies.
  bool afterSpecial = true;
  for (const tok::Fragment &f : impl->specials->split(text, parse_special)) {
    if (f.token >= 0) {
      out.push_back(f.token);
      afterSpecial = true;
      continue;
    }
    std::string piece = text.substr(f.begin, f.end - f.begin);
    if (impl->bpe)
      impl->bpe->encode(piece, out);
    else
      impl->spm->encode(piece, d.add_space_prefix && afterSpecial, out);
    afterSpecial = false;
  }
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t> &ids, bool keep_special) const {
  impl->requireTokenizer();
  std::string out;
  // SentencePiece: drop the space prefix encode added at the start and
  // after special tokens.
  bool stripSpace = impl->spm && impl->data.add_space_prefix;
  bool afterSpecial = true;
  for (int32_t id : ids) {
    impl->checkId(id);
    if (impl->specials->isControl(id)) {
      if (keep_special)
        out += impl->pieceBytes(id);
      afterSpecial = true;
      continue;
    }
    if (impl->specials->isSpecial(id)) { // user-defined: always shown
      out += impl->pieceBytes(id);
      afterSpecial = true;
      continue;
    }
    const std::string &piece = impl->pieceBytes(id);
    if (stripSpace && afterSpecial && !piece.empty() && piece[0] == ' ')
      out.append(piece, 1, std::string::npos);
    else
      out += piece;
    afterSpecial = false;
  }
  return out;
}

std::string Tokenizer::tokenText(int32_t id) const {
  impl->requireTokenizer();
  impl->checkId(id);
  return impl->pieceBytes(id);
}

std::string Tokenizer::applyChatTemplate(const std::vector<ChatMessage> &msgs,
                                         bool add_generation_prompt) const {
  return tok::renderChat(impl->chat, msgs, add_generation_prompt);
}

std::vector<int32_t> Tokenizer::stopTokens() const { return impl->stops; }

const TokenizerData &Tokenizer::data() const { return impl->data; }
int32_t Tokenizer::vocabSize() const { return static_cast<int32_t>(impl->data.tokens.size()); }

} // namespace llmc
