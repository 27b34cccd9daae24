//===- GgufTokenizerReader.cpp - TokenizerData from GGUF metadata ----------===//
// Reads tokenizer.ggml.* and tokenizer.chat_template. Model "gpt2" is a
// byte-level BPE (kind gpt2), "llama" a SentencePiece-style BPE (kind
// llama); other tokenizer models leave the tokenizer empty (noted in the
// model's metadata) since the model itself still imports.
//===----------------------------------------------------------------------===//
#include "compiler/import/gguf/GgufTokenizer.h"

namespace llmc::gguf {

TokenizerData readGgufTokenizer(const File &f,
                                std::vector<std::pair<std::string, std::string>> &notes) {
  TokenizerData tok;
  auto model = f.getString("tokenizer.ggml.model");
  if (!model || *model == "none" || model->empty())
    return tok;
  if (*model != "gpt2" && *model != "llama") {
    notes.emplace_back("tokenizer.unsupported", "tokenizer.ggml.model '" + *model +
                                                    "' is not supported; tokenizer left empty");
    return tok;
  }
  tok.kind = *model;
  tok.pre = f.getString("tokenizer.ggml.pre").value_or("default");

  auto tokens = f.getStringArray("tokenizer.ggml.tokens");
  if (!tokens || tokens->empty())
    importFail(f.path(), "tokenizer.ggml.tokens is missing or empty");
  tok.tokens = std::move(*tokens);
  const size_t n = tok.tokens.size();
  if (n > size_t(INT32_MAX))
    importFail(f.path(), "tokenizer has too many tokens");

  if (auto scores = f.getFloatArray("tokenizer.ggml.scores")) {
    if (scores->size() != n)
      importFail(f.path(), "tokenizer.ggml.scores has " + std::to_string(scores->size()) +
                               " entries for " + std::to_string(n) + " tokens");
    tok.scores = std::move(*scores);
  }
  if (auto types = f.getIntArray("tokenizer.ggml.token_type")) {
    if (types->size() != n)
      importFail(f.path(), "tokenizer.ggml.token_type has " + std::to_string(types->size()) +
                               " entries for " + std::to_string(n) + " tokens");
    tok.token_types = std::move(*types);
  }
  if (auto merges = f.getStringArray("tokenizer.ggml.merges"))
    tok.merges = std::move(*merges);
  if (tok.kind == "gpt2" && tok.merges.empty())
    importFail(f.path(), "gpt2 tokenizer without tokenizer.ggml.merges");
  if (tok.kind == "llama" && tok.scores.empty())
    importFail(f.path(), "llama tokenizer without tokenizer.ggml.scores");

  auto specialId = [&](const char *key, int32_t &out) {
    auto id = f.getInt(std::string("tokenizer.ggml.") + key);
    if (!id)
      return;
    if (*id < 0 || *id >= int64_t(n)) {
      notes.emplace_back(std::string("tokenizer.ignored.") + key,
                         std::to_string(*id) + " is not a token id");
      return;
    }
    out = int32_t(*id);
  };
  specialId("bos_token_id", tok.bos_id);
  specialId("eos_token_id", tok.eos_id);
  specialId("unknown_token_id", tok.unk_id);
  specialId("padding_token_id", tok.pad_id);

  // llama.cpp's defaults when the keys are absent: SentencePiece models add
  // BOS and a leading space, byte-level BPE models do neither.
  const bool spm = tok.kind == "llama";
  tok.add_bos = f.getBool("tokenizer.ggml.add_bos_token").value_or(spm);
  tok.add_space_prefix = f.getBool("tokenizer.ggml.add_space_prefix").value_or(spm);
  tok.chat_template = f.getString("tokenizer.chat_template").value_or("");
  return tok;
}

} // namespace llmc::gguf
