//===- tokenizer.h - BPE tokenizers (byte-level and SentencePiece) -*- C++ -*-===//
// TokenizerData is what an importer extracts (from GGUF metadata, a
// tokenizer.json, or a llama2.c tokenizer.bin) and what the artifact stores;
// Tokenizer encodes and decodes with it.
//  - kind "gpt2":  byte-level BPE (GPT-2/SmolLM2/Qwen2 style): pre-tokenizer
//                  regex, bytes mapped to printable unicode, ranked merges.
//  - kind "llama": SentencePiece-style BPE: spaces become U+2581, pieces are
//                  merged by score, unknown bytes fall back to <0xXX> tokens.
//===----------------------------------------------------------------------===//
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace llmc {

struct TokenizerData {
  std::string kind;                 // "gpt2" | "llama" | "" (none)
  std::string pre;                  // pre-tokenizer flavour (GGUF tokenizer.ggml.pre), e.g. "smollm", "qwen2", "llama-bpe"
  std::vector<std::string> tokens;  // id -> token text as stored (gpt2: byte-mapped unicode; llama: with U+2581)
  std::vector<float> scores;        // llama kind: merge priority per token (may be empty for gpt2)
  std::vector<int32_t> token_types; // 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte (GGUF convention); may be empty
  std::vector<std::string> merges;  // gpt2 kind: "a b" in rank order
  int32_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1;
  bool add_bos = false;             // prepend BOS when encoding a prompt
  bool add_space_prefix = false;    // llama kind: prepend a space (U+2581) to the text
  std::string chat_template;        // jinja source as found in the model, may be empty

  bool empty() const { return tokens.empty(); }
};

struct ChatMessage {
  std::string role; // "system" | "user" | "assistant"
  std::string content;
};

class Tokenizer {
public:
  explicit Tokenizer(TokenizerData data);
  ~Tokenizer();
  Tokenizer(Tokenizer &&) noexcept;
  Tokenizer &operator=(Tokenizer &&) noexcept;

  /// Encode text; special tokens written literally in the text (e.g.
  /// "<|im_start|>") are recognised when parse_special is true.
  /// add_bos: prepend BOS if the tokenizer asks for it (data.add_bos).
  std::vector<int32_t> encode(const std::string &text, bool add_bos = true,
                              bool parse_special = true) const;
  /// Encode a rendered chat template (special tokens parsed). BOS is
  /// prepended when the tokenizer asks for it, unless the template already
  /// put it first (Llama 3's `{{ bos_token }}`, or ChatML models whose BOS
  /// is <|im_start|>): one BOS, as transformers' apply_chat_template gives.
  std::vector<int32_t> encodeChat(const std::string &rendered) const;
  /// Decode ids to text. Control tokens (BOS/EOS...) are skipped unless
  /// keep_special is true.
  std::string decode(const std::vector<int32_t> &ids, bool keep_special = false) const;
  /// Text of one token, for streaming output; bytes of a partial UTF-8
  /// sequence are returned as they are.
  std::string tokenText(int32_t id) const;

  /// Render a conversation with the model's chat template (ChatML is
  /// recognised; a model without a template gets ChatML). Ends with the
  /// assistant prefix when add_generation_prompt.
  std::string applyChatTemplate(const std::vector<ChatMessage> &msgs,
                                bool add_generation_prompt = true) const;
  /// Token ids that end a generation (EOS, and for ChatML <|im_end|>).
  std::vector<int32_t> stopTokens() const;

  const TokenizerData &data() const;
  int32_t vocabSize() const;

private:
  struct Impl;
  std::unique_ptr<Impl> impl;
};

/// Token ids written as text (a ".ids" file: whitespace-separated decimal
/// ids, lines starting with '#' are comments), for models without a
/// tokenizer. Throws std::runtime_error naming `source` and the offending
/// token when an entry is not a number or not below vocab_size (when > 0).
std::vector<int32_t> readTokenIds(const std::string &text, const std::string &source,
                                  int64_t vocab_size);
/// The same, one vector per line that holds ids (sequences written one per
/// line, e.g. a prompt and the model's answer).
std::vector<std::vector<int32_t>> readTokenIdLines(const std::string &text,
                                                   const std::string &source, int64_t vocab_size);

} // namespace llmc
