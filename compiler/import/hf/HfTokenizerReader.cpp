//===- HfTokenizerReader.cpp - TokenizerData from tokenizer.json -----------===//
// Reads a Hugging Face `tokenizers` BPE model: vocab, merges ("a b" strings
// or ["a", "b"] pairs), added tokens. Byte-level pre-tokenizers/decoders make
// it kind "gpt2"; Metaspace / byte_fallback make it kind "llama" (then each
// merge result gets score -rank so score order equals merge order, and
// <0xXX> tokens are byte tokens). Special tokens, add_bos and the chat
// template come from tokenizer_config.json (or chat_template.jinja), with
// config.json's bos/eos ids as a fallback.
//===----------------------------------------------------------------------===//
#include "compiler/import/hf/HfJson.h"
#include "compiler/import/hf/HfTokenizer.h"

#include <unordered_map>

namespace llmc::hf {

namespace {

using nlohmann::json;

constexpr int32_t kTypeNormal = 1, kTypeUnknown = 2, kTypeControl = 3, kTypeUserDefined = 4,
                  kTypeUnused = 5, kTypeByte = 6;
constexpr int64_t kMaxVocab = int64_t(1) << 24;

// True if any object in the tree has "type": `type`.
bool hasType(const json &j, const char *type) {
  if (j.is_object()) {
    auto t = j.find("type");
    if (t != j.end() && t->is_string() && *t == type)
      return true;
    for (const auto &v : j)
      if (hasType(v, type))
        return true;
  } else if (j.is_array()) {
    for (const auto &v : j)
      if (hasType(v, type))
        return true;
  }
  return false;
}

bool isByteToken(const std::string &s) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f'); };
  return s.size() == 6 && s.compare(0, 3, "<0x") == 0 && hex(s[3]) && hex(s[4]) && s[5] == '>';
}

// One UTF-8 encoded character (the pieces BPE starts from).
bool isSingleCodepoint(const std::string &s) {
  if (s.empty())
    return false;
  const auto lead = uint8_t(s[0]);
  const size_t len = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 0;
  return len == s.size();
}

// Text of a special token in tokenizer_config.json: "<s>" or {"content": "<s>", ...}.
std::optional<std::string> specialText(const json &cfg, const char *key) {
  auto it = cfg.find(key);
  if (it == cfg.end())
    return std::nullopt;
  if (it->is_string())
    return it->get<std::string>();
  if (it->is_object()) {
    auto c = it->find("content");
    if (c != it->end() && c->is_string())
      return c->get<std::string>();
  }
  return std::nullopt;
}

class TokenizerJsonReader {
public:
  TokenizerJsonReader(const std::string &dir, const json &config,
                      std::vector<std::pair<std::string, std::string>> &notes)
      : dir_(dir), path_(joinPath(dir, "tokenizer.json")), config_(config), notes_(notes) {}

  TokenizerData read() {
    if (!fileExists(path_)) {
      notes_.emplace_back("tokenizer.missing", "no tokenizer.json");
      return {};
    }
    tj_ = parseJsonFile(path_);
    const json *model = tj_.is_object() && tj_.contains("model") ? &tj_["model"] : nullptr;
    if (!model || !model->is_object())
      importFail(path_, "missing \"model\" object");
    std::string type = optString(*model, "type", path_).value_or(model->contains("merges") ? "BPE" : "");
    if (type != "BPE") {
      notes_.emplace_back("tokenizer.unsupported", "tokenizer.json model type '" + type +
                                                       "' is not supported; tokenizer left empty");
      return {};
    }
    if (!decideKind(*model))
      return {};
    readVocab(*model);
    readMerges(*model);
    if (tok_.kind == "llama")
      llamaDetails(*model);
    else
      tok_.pre = gpt2Flavour();
    readSpecials();
    return std::move(tok_);
  }

private:
  [[noreturn]] void fail(const std::string &problem) { importFail(path_, problem); }

  bool decideKind(const json &model) {
    const json &pre = tj_.value("pre_tokenizer", json());
    const json &dec = tj_.value("decoder", json());
    const json &norm = tj_.value("normalizer", json());
    if (hasType(pre, "ByteLevel") || hasType(dec, "ByteLevel")) {
      tok_.kind = "gpt2";
    } else if (hasType(pre, "Metaspace") || hasType(dec, "Metaspace") ||
               hasType(dec, "ByteFallback") || model.value("byte_fallback", false) ||
               norm.dump().find("\xe2\x96\x81") != std::string::npos) {
      tok_.kind = "llama";
    } else {
      notes_.emplace_back("tokenizer.unsupported",
                          "BPE tokenizer is neither byte-level nor SentencePiece-style; left empty");
      return false;
    }
    return true;
  }

  void readVocab(const json &model) {
    auto vit = model.find("vocab");
    if (vit == model.end() || !vit->is_object())
      fail("BPE model has no \"vocab\" object");
    const json added = tj_.value("added_tokens", json::array());
    if (!added.is_array())
      fail("\"added_tokens\" should be an array");

    int64_t max_id = -1;
    auto checkId = [&](const json &id, const std::string &tok) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= kMaxVocab)
        fail("token '" + tok + "' has an invalid id " + id.dump());
      max_id = std::max(max_id, id.get<int64_t>());
    };
    for (auto it = vit->begin(); it != vit->end(); ++it)
      checkId(it.value(), it.key());
    for (const json &a : added) {
      if (!a.is_object() || !a.contains("id") || !a.contains("content") || !a["content"].is_string())
        fail("added_tokens entries need \"id\" and \"content\"");
      checkId(a["id"], a["content"].get<std::string>());
    }
    if (max_id < 0)
      fail("empty vocabulary");

    tok_.tokens.assign(size_t(max_id + 1), std::string());
    tok_.token_types.assign(size_t(max_id + 1), kTypeUnused);
    for (auto it = vit->begin(); it != vit->end(); ++it) {
      const size_t id = size_t(it.value().get<int64_t>());
      tok_.tokens[id] = it.key();
      tok_.token_types[id] = kTypeNormal;
    }
    for (const json &a : added) {
      const size_t id = size_t(a["id"].get<int64_t>());
      tok_.tokens[id] = a["content"].get<std::string>();
      tok_.token_types[id] = a.value("special", false) ? kTypeControl : kTypeUserDefined;
    }
    for (size_t id = 0; id < tok_.tokens.size(); ++id) {
      if (tok_.token_types[id] == kTypeUnused)
        tok_.tokens[id] = "[UNUSED_" + std::to_string(id) + "]"; // a hole in the ids
      ids_.emplace(tok_.tokens[id], int32_t(id));
    }
  }

  void readMerges(const json &model) {
    auto mit = model.find("merges");
    if (mit == model.end())
      return;
    if (!mit->is_array())
      fail("\"merges\" should be an array");
    tok_.merges.reserve(mit->size());
    for (const json &m : *mit) {
      if (m.is_string())
        tok_.merges.push_back(m.get<std::string>());
      else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
        tok_.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
      else
        fail("merges entries should be \"a b\" or [\"a\", \"b\"], found " + m.dump().substr(0, 60));
    }
    if (tok_.kind == "gpt2" && tok_.merges.empty())
      fail("byte-level BPE without merges");
  }

  // Scores from merge order, byte/unknown token types, space prefix.
  void llamaDetails(const json &model) {
    const size_t n = tok_.tokens.size();
    tok_.scores.assign(n, 0.0f);
    std::vector<bool> scored(n, false);
    for (size_t r = 0; r < tok_.merges.size(); ++r) {
      const std::string &m = tok_.merges[r];
      size_t sp = m.find(' ');
      if (sp == std::string::npos)
        continue;
      auto it = ids_.find(m.substr(0, sp) + m.substr(sp + 1));
      if (it != ids_.end() && !scored[size_t(it->second)]) {
        tok_.scores[size_t(it->second)] = -float(r);
        scored[size_t(it->second)] = true;
      }
    }
    for (size_t id = 0; id < n; ++id) {
      if (isByteToken(tok_.tokens[id]) && tok_.token_types[id] == kTypeNormal)
        tok_.token_types[id] = kTypeByte;
      // Pieces no merge produces are never built from smaller ones.
      else if (!scored[id] && tok_.token_types[id] == kTypeNormal &&
               !isSingleCodepoint(tok_.tokens[id]))
        tok_.scores[id] = -1e9f;
    }
    if (auto unk = optString(model, "unk_token", path_))
      if (auto it = ids_.find(*unk); it != ids_.end()) {
        tok_.unk_id = it->second;
        tok_.token_types[size_t(it->second)] = kTypeUnknown;
      }
    // A leading "▁" comes from a Prepend normalizer or a Metaspace pre-tokenizer.
    const json &norm = tj_.value("normalizer", json());
    const json &pre = tj_.value("pre_tokenizer", json());
    bool prepend = norm.dump().find("\"Prepend\"") != std::string::npos;
    if (hasType(pre, "Metaspace")) {
      std::string ps = pre.dump();
      prepend = prepend || ps.find("\"prepend_scheme\":\"always\"") != std::string::npos ||
                ps.find("\"prepend_scheme\":\"first\"") != std::string::npos ||
                ps.find("\"add_prefix_space\":true") != std::string::npos;
    }
    tok_.add_space_prefix = prepend;
  }

  // Pre-tokenizer flavour, named as GGUF's tokenizer.ggml.pre.
  std::string gpt2Flavour() {
    const std::string pre = tj_.value("pre_tokenizer", json()).dump();
    if (pre.find("\\\\p{N}{1,3}") != std::string::npos)
      return "llama-bpe";
    if (pre.find("\\\\p{N}|") != std::string::npos && pre.find("\\\\p{L}+") != std::string::npos)
      return "qwen2";
    if (pre.find("\"Digits\"") != std::string::npos &&
        pre.find("\"individual_digits\":true") != std::string::npos)
      return "smollm";
    return "gpt2";
  }

  std::optional<int32_t> idOf(const std::string &text) const {
    auto it = ids_.find(text);
    if (it == ids_.end())
      return std::nullopt;
    return it->second;
  }

  // A config.json id: an integer or (for eos) a list whose first entry counts.
  std::optional<int32_t> configId(const char *key) const {
    auto it = config_.find(key);
    if (it == config_.end())
      return std::nullopt;
    const json *v = &*it;
    if (v->is_array() && !v->empty())
      v = &(*v)[0];
    if (v->is_number_integer() && v->get<int64_t>() >= 0 &&
        v->get<int64_t>() < int64_t(tok_.tokens.size()))
      return int32_t(v->get<int64_t>());
    return std::nullopt;
  }

  void readSpecials() {
    const std::string cfg_path = joinPath(dir_, "tokenizer_config.json");
    json cfg = fileExists(cfg_path) ? parseJsonFile(cfg_path) : json::object();
    if (!cfg.is_object())
      importFail(cfg_path, "expected a JSON object");

    auto pick = [&](const char *cfg_key, const char *config_key, int32_t &out) {
      if (auto text = specialText(cfg, cfg_key))
        if (auto id = idOf(*text)) {
          out = *id;
          return;
        }
      if (config_key)
        if (auto id = configId(config_key))
          out = *id;
    };
    pick("bos_token", "bos_token_id", tok_.bos_id);
    pick("eos_token", "eos_token_id", tok_.eos_id);
    pick("pad_token", "pad_token_id", tok_.pad_id);
    int32_t unk = -1;
    pick("unk_token", nullptr, unk);
    if (unk >= 0)
      tok_.unk_id = unk;

    if (auto add = optBool(cfg, "add_bos_token", cfg_path))
      tok_.add_bos = *add;
    else if (auto from_post = bosFromPostProcessor())
      tok_.add_bos = *from_post;
    else
      tok_.add_bos = tok_.kind == "llama";
    if (tok_.add_bos && tok_.bos_id < 0)
      tok_.add_bos = false;

    readChatTemplate(cfg, cfg_path);
  }

  // TemplateProcessing's "single" template tells whether BOS is prepended.
  std::optional<bool> bosFromPostProcessor() const {
    const json &pp = tj_.value("post_processor", json());
    if (!hasType(pp, "TemplateProcessing"))
      return std::nullopt;
    if (tok_.bos_id < 0)
      return false;
    const std::string bos = tok_.tokens[size_t(tok_.bos_id)];
    std::string dump = pp.dump();
    return dump.find("\"SpecialToken\":{\"id\":" + json(bos).dump()) != std::string::npos;
  }

  void readChatTemplate(const json &cfg, const std::string &cfg_path) {
    auto it = cfg.find("chat_template");
    if (it != cfg.end() && it->is_string()) {
      tok_.chat_template = it->get<std::string>();
    } else if (it != cfg.end() && it->is_array()) {
      // [{"name": "default", "template": "..."}, ...]: take "default" (or the first).
      for (const json &t : *it)
        if (t.is_object() && t.value("template", json()).is_string() &&
            (tok_.chat_template.empty() || t.value("name", "") == "default"))
          tok_.chat_template = t["template"].get<std::string>();
    } else if (it != cfg.end() && !it->is_null()) {
      importFail(cfg_path, "\"chat_template\" should be a string or a list");
    }
    if (tok_.chat_template.empty() && fileExists(joinPath(dir_, "chat_template.jinja")))
      tok_.chat_template = readTextFile(joinPath(dir_, "chat_template.jinja"));
    if (tok_.chat_template.empty() && fileExists(joinPath(dir_, "chat_template.json"))) {
      const std::string p = joinPath(dir_, "chat_template.json");
      tok_.chat_template = optString(parseJsonFile(p), "chat_template", p).value_or("");
    }
  }

  std::string dir_, path_;
  const json &config_;
  std::vector<std::pair<std::string, std::string>> &notes_;
  json tj_;
  TokenizerData tok_;
  std::unordered_map<std::string, int32_t> ids_;
};

} // namespace

TokenizerData readHfTokenizer(const std::string &dir, const nlohmann::json &config,
                              std::vector<std::pair<std::string, std::string>> &notes) {
  try {
    return TokenizerJsonReader(dir, config, notes).read();
  } catch (const nlohmann::json::exception &e) {
    // A field of an unexpected JSON type somewhere in tokenizer.json.
    importFail(joinPath(dir, "tokenizer.json"), std::string("unexpected content: ") + e.what());
  }
}

} // namespace llmc::hf
