//===- OpenAiRequest.cpp - Check and parse OpenAI-style request bodies ----===//
#include "OpenAiRequest.h"

#include <cmath>
#include <nlohmann/json.hpp>

namespace llmc::serve {
namespace {
using nlohmann::json;

RequestError bad(const std::string &param, const std::string &msg,
                 const std::string &code = "invalid_value") {
  return {msg, param, code};
}

/// A number field in [lo, hi] (absent: leaves `out`).
std::optional<RequestError> numberField(const json &j, const char *key, double lo, double hi,
                                        double &out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null())
    return std::nullopt;
  if (!it->is_number())
    return bad(key, std::string("'") + key + "' must be a number");
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi)
    return bad(key, std::string("'") + key + "' must be in [" + std::to_string(lo) + ", " +
                        std::to_string(hi) + "]");
  out = v;
  return std::nullopt;
}

/// An integer field in [lo, hi] (absent: false).
std::optional<RequestError> intField(const json &j, const char *key, int64_t lo, int64_t hi,
                                     int64_t &out, bool &given) {
  given = false;
  auto it = j.find(key);
  if (it == j.end() || it->is_null())
    return std::nullopt;
  if (!it->is_number_integer())
    return bad(key, std::string("'") + key + "' must be an integer");
  // Unsigned values past INT64_MAX saturate (and are then out of range).
  const int64_t v = !it->is_number_unsigned() ? it->get<int64_t>()
                    : it->get<uint64_t>() > uint64_t(INT64_MAX) ? INT64_MAX
                                                                : int64_t(it->get<uint64_t>());
  if (v < lo || v > hi)
    return bad(key, std::string("'") + key + "' must be an integer in [" + std::to_string(lo) +
                        ", " + std::to_string(hi) + "]");
  out = v;
  given = true;
  return std::nullopt;
}

std::optional<RequestError> refuseUnsupported(const json &j) {
  for (const char *k : {"echo", "logprobs", "top_logprobs", "best_of", "suffix", "tools",
                        "functions", "tool_choice", "response_format", "logit_bias"}) {
    auto it = j.find(k);
    if (it == j.end() || it->is_null() || (it->is_boolean() && !it->get<bool>()))
      continue;
    return bad(k, std::string("'") + k + "' is not supported by llmc serve", "unsupported");
  }
  if (auto it = j.find("n"); it != j.end() && !it->is_null() &&
                             !(it->is_number_integer() && it->get<int64_t>() == 1))
    return bad("n", "only n = 1 is supported", "unsupported");
  return std::nullopt;
}

std::optional<RequestError> stopField(const json &j, std::vector<std::string> &out) {
  auto it = j.find("stop");
  if (it == j.end() || it->is_null())
    return std::nullopt;
  std::vector<json> items;
  if (it->is_string())
    items.push_back(*it);
  else if (it->is_array())
    items.assign(it->begin(), it->end());
  else
    return bad("stop", "'stop' must be a string or an array of strings");
  if (items.size() > 4)
    return bad("stop", "'stop' takes at most 4 strings");
  for (const json &s : items) {
    if (!s.is_string() || s.get<std::string>().empty())
      return bad("stop", "every 'stop' entry must be a non-empty string");
    out.push_back(s.get<std::string>());
  }
  return std::nullopt;
}

/// The prompt of a completion: a string, or an array of token ids.
std::optional<RequestError> completionPrompt(const json &j, const Tokenizer *tok,
                                             const RequestLimits &lim,
                                             std::vector<int32_t> &out) {
  auto it = j.find("prompt");
  if (it == j.end())
    return bad("prompt", "'prompt' is required", "missing");
  const json &p = (it->is_array() && it->size() == 1 && (*it)[0].is_string()) ? (*it)[0] : *it;
  if (p.is_string()) {
    if (!tok)
      return bad("prompt", "the model has no tokenizer: give 'prompt' as token ids");
    out = tok->encode(p.get<std::string>(), true, false);
  } else if (p.is_array() && !p.empty()) {
    for (const json &t : p) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= lim.vocab)
        return bad("prompt", "token ids in 'prompt' must be integers in [0, " +
                                 std::to_string(lim.vocab) + ")");
      out.push_back(int32_t(t.get<int64_t>()));
    }
  } else {
    return bad("prompt", "'prompt' must be a string, one string in an array, or a non-empty "
                         "array of token ids (batches of prompts: one request each)");
  }
  return std::nullopt;
}

std::optional<RequestError> chatPrompt(const json &j, const Tokenizer *tok,
                                       std::vector<int32_t> &out) {
  auto it = j.find("messages");
  if (it == j.end() || !it->is_array() || it->empty())
    return bad("messages", "'messages' must be a non-empty array", "missing");
  if (!tok)
    return bad("messages", "the model has no tokenizer (and no chat template)");
  std::vector<ChatMessage> msgs;
  for (const json &m : *it) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      return bad("messages", "every message needs a string 'role'");
    const std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant")
      return bad("messages", "message role '" + role +
                                 "' is not one of system, user, assistant");
    auto c = m.find("content");
    if (c == m.end() || !c->is_string())
      return bad("messages", "every message needs a string 'content'");
    msgs.push_back({role, c->get<std::string>()});
  }
  out = tok->encodeChat(tok->applyChatTemplate(msgs, true));
  if (out.empty())
    return bad("messages", "the messages encode to no tokens");
  return std::nullopt;
}

std::optional<RequestError> samplingFields(const json &j, ParsedRequest &out) {
  double temp = 1.0, topP = 1.0;
  if (auto e = numberField(j, "temperature", 0.0, 2.0, temp))
    return e;
  if (auto e = numberField(j, "top_p", 0.0, 1.0, topP))
    return e;
  if (topP <= 0.0)
    return bad("top_p", "'top_p' must be greater than 0");
  int64_t topK = 0, seed = 0;
  bool given = false;
  if (auto e = intField(j, "top_k", 0, 1 << 20, topK, given))
    return e;
  if (auto e = intField(j, "seed", INT64_MIN, INT64_MAX, seed, given))
    return e;
  out.sampling = {float(temp), int(topK), float(topP), uint64_t(seed)};
  out.has_seed = given;
  return std::nullopt;
}

} // namespace

std::optional<RequestError> parseRequest(Endpoint endpoint, const std::string &body,
                                         const Tokenizer *tok, const RequestLimits &lim,
                                         ParsedRequest &out) {
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    return bad("", "the request body is not valid JSON", "invalid_json");
  if (!j.is_object())
    return bad("", "the request body must be a JSON object", "invalid_json");
  try {
    if (auto e = refuseUnsupported(j))
      return e;
    if (auto it = j.find("model"); it != j.end() && !it->is_null()) {
      if (!it->is_string())
        return bad("model", "'model' must be a string");
      out.model = it->get<std::string>();
    }
    if (auto it = j.find("stream"); it != j.end() && !it->is_null()) {
      if (!it->is_boolean())
        return bad("stream", "'stream' must be a boolean");
      out.stream = it->get<bool>();
    }
    if (auto it = j.find("stream_options"); it != j.end() && it->is_object())
      out.include_usage = it->value("include_usage", false);
    if (auto it = j.find("ignore_eos"); it != j.end() && !it->is_null()) {
      if (!it->is_boolean())
        return bad("ignore_eos", "'ignore_eos' must be a boolean");
      out.ignore_eos = it->get<bool>();
    }
    if (auto e = samplingFields(j, out))
      return e;
    if (auto e = stopField(j, out.stop))
      return e;
    auto e = endpoint == Endpoint::Completions ? completionPrompt(j, tok, lim, out.prompt)
                                               : chatPrompt(j, tok, out.prompt);
    if (e)
      return e;
  } catch (const std::exception &ex) { // a type the checks above did not foresee
    return bad("", std::string("invalid request: ") + ex.what());
  }
  if (out.prompt.empty())
    return bad("prompt", "the prompt encodes to no tokens");
  const int64_t n = int64_t(out.prompt.size());
  if (n >= lim.context)
    return bad("prompt", "the prompt has " + std::to_string(n) +
                             " tokens; the context is " + std::to_string(lim.context),
               "context_length_exceeded");
  int64_t maxTokens = std::min(lim.default_max_tokens, lim.context - n);
  bool given = false;
  const char *key = j.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (auto e2 = intField(j, key, 1, INT64_MAX, maxTokens, given))
    return e2;
  if (maxTokens > lim.context - n) // not n + maxTokens: that may overflow
    return bad(key, "prompt (" + std::to_string(n) + " tokens) + " + key + " (" +
                        std::to_string(maxTokens) + ") exceed the context of " +
                        std::to_string(lim.context) + " tokens",
               "context_length_exceeded");
  if (lim.kv_pool_bytes > 0 && (n + maxTokens) * lim.kv_bytes_per_position > lim.kv_pool_bytes)
    return bad(key, "prompt + " + std::string(key) + " need " +
                        std::to_string((n + maxTokens) * lim.kv_bytes_per_position >> 20) +
                        " MiB of KV cache; the pool has " +
                        std::to_string(lim.kv_pool_bytes >> 20) + " MiB",
               "kv_pool_exceeded");
  out.max_tokens = maxTokens;
  return std::nullopt;
}

} // namespace llmc::serve
