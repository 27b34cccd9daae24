//===- ManifestJson.cpp - ModelConfig and TokenizerData <-> JSON -----------===//
// The manifest's "config" and "tokenizer" objects. Every field is written;
// on reading, absent fields keep their defaults (so older manifests load) but
// present fields must have the right type, and enum names must be known.
// Token texts that are not valid UTF-8 are stored as {"hex": "..."}; scores
// that are not finite are stored as the strings "inf", "-inf", "nan".
//===----------------------------------------------------------------------===//
#include "JsonFields.h"
#include "llmc/artifact.h"

#include <cmath>
#include <limits>

namespace llmc {
namespace {

using nlohmann::json;
using namespace jsonf;


int64_t nonNegative(const json &j, const char *key, const std::string &ctx, int64_t def) {
  int64_t v = getInt(j, key, ctx, def);
  if (v < 0)
    fail(ctx, std::string("field '") + key + "' must not be negative (got " + std::to_string(v) + ")");
  return v;
}

json floatToJson(float f) {
  if (std::isfinite(f))
    return double(f);
  if (std::isnan(f))
    return "nan";
  return f > 0 ? "inf" : "-inf";
}

float floatFromJson(const json &v, const std::string &ctx) {
  if (v.is_number())
    return float(v.get<double>());
  if (v.is_string()) {
    const std::string &s = v.get_ref<const std::string &>();
    if (s == "inf")
      return std::numeric_limits<float>::infinity();
    if (s == "-inf")
      return -std::numeric_limits<float>::infinity();
    if (s == "nan")
      return std::numeric_limits<float>::quiet_NaN();
  }
  fail(ctx, "score must be a number, \"inf\", \"-inf\" or \"nan\"");
}

const json &arrayField(const json &j, const char *key, const std::string &ctx) {
  static const json empty = json::array();
  const json *v = find(j, key);
  if (!v)
    return empty;
  if (!v->is_array())
    fail(ctx, std::string("field '") + key + "' must be an array");
  return *v;
}

} // namespace

json configToJson(const ModelConfig &c) {
  return json{{"architecture", c.architecture},
              {"name", c.name},
              {"vocab_size", c.vocab_size},
              {"hidden_size", c.hidden_size},
              {"intermediate_size", c.intermediate_size},
              {"num_layers", c.num_layers},
              {"num_heads", c.num_heads},
              {"num_kv_heads", c.num_kv_heads},
              {"head_dim", c.head_dim},
              {"context_length", c.context_length},
              {"rope_theta", c.rope_theta},
              {"rope_style", std::string(spelling(c.rope_style))},
              {"norm_eps", c.norm_eps},
              {"norm", std::string(spelling(c.norm))},
              {"activation", std::string(spelling(c.activation))},
              {"tied_embeddings", c.tied_embeddings},
              {"attention_bias", c.attention_bias},
              {"num_experts", c.num_experts},
              {"num_experts_per_token", c.num_experts_per_token},
              {"sliding_window", c.sliding_window}};
}

ModelConfig configFromJson(const json &j) {
  const std::string ctx = "config";
  if (!j.is_object())
    fail(ctx, "expected a JSON object");
  ModelConfig c;
  c.architecture = getString(j, "architecture", ctx, "");
  c.name = getString(j, "name", ctx, "");
  c.vocab_size = nonNegative(j, "vocab_size", ctx, 0);
  c.hidden_size = nonNegative(j, "hidden_size", ctx, 0);
  c.intermediate_size = nonNegative(j, "intermediate_size", ctx, 0);
  c.num_layers = nonNegative(j, "num_layers", ctx, 0);
  c.num_heads = nonNegative(j, "num_heads", ctx, 0);
  c.num_kv_heads = nonNegative(j, "num_kv_heads", ctx, 0);
  c.head_dim = nonNegative(j, "head_dim", ctx, 0);
  c.context_length = nonNegative(j, "context_length", ctx, 0);
  c.rope_theta = getDouble(j, "rope_theta", ctx, c.rope_theta);
  c.norm_eps = getDouble(j, "norm_eps", ctx, c.norm_eps);

  c.rope_style = getEnum<RopeStyle>(j, "rope_style", ctx, c.rope_style, parseRopeStyle,
                                    spellingsRopeStyle());
  c.norm = getEnum<NormKind>(j, "norm", ctx, c.norm, parseNormKind, spellingsNormKind());
  c.activation = getEnum<Activation>(j, "activation", ctx, c.activation, parseActivation,
                                     spellingsActivation());

  c.tied_embeddings = getBool(j, "tied_embeddings", ctx, false);
  c.attention_bias = getBool(j, "attention_bias", ctx, false);
  c.num_experts = nonNegative(j, "num_experts", ctx, 0);
  c.num_experts_per_token = nonNegative(j, "num_experts_per_token", ctx, 0);
  c.sliding_window = nonNegative(j, "sliding_window", ctx, 0);
  return c;
}

json tokenizerToJson(const TokenizerData &t) {
  json tokens = json::array(), scores = json::array(), merges = json::array();
  for (const std::string &s : t.tokens)
    tokens.push_back(bytesToJson(s));
  for (float f : t.scores)
    scores.push_back(floatToJson(f));
  for (const std::string &m : t.merges)
    merges.push_back(bytesToJson(m));
  return json{{"kind", t.kind},
              {"pre", bytesToJson(t.pre)},
              {"tokens", std::move(tokens)},
              {"scores", std::move(scores)},
              {"token_types", t.token_types},
              {"merges", std::move(merges)},
              {"bos_id", t.bos_id},
              {"eos_id", t.eos_id},
              {"unk_id", t.unk_id},
              {"pad_id", t.pad_id},
              {"add_bos", t.add_bos},
              {"add_space_prefix", t.add_space_prefix},
              {"chat_template", bytesToJson(t.chat_template)}};
}

TokenizerData tokenizerFromJson(const json &j) {
  const std::string ctx = "tokenizer";
  TokenizerData t;
  if (j.is_null())
    return t;
  if (!j.is_object())
    fail(ctx, "expected a JSON object");
  t.kind = getString(j, "kind", ctx, "");
  if (!t.kind.empty() && t.kind != "gpt2" && t.kind != "llama")
    fail(ctx, "unknown tokenizer kind '" + t.kind + "' (expected gpt2 or llama)");
  if (const json *v = find(j, "pre"))
    t.pre = bytesFromJson(*v, ctx + ".pre");

  const json &tokens = arrayField(j, "tokens", ctx);
  t.tokens.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i)
    t.tokens.push_back(bytesFromJson(tokens[i], ctx + ".tokens[" + std::to_string(i) + "]"));

  const json &scores = arrayField(j, "scores", ctx);
  t.scores.reserve(scores.size());
  for (size_t i = 0; i < scores.size(); ++i)
    t.scores.push_back(floatFromJson(scores[i], ctx + ".scores[" + std::to_string(i) + "]"));

  const json &types = arrayField(j, "token_types", ctx);
  t.token_types.reserve(types.size());
  for (const json &v : types)
    t.token_types.push_back(int32_t(asInt(v, "token_types", ctx)));

  const json &merges = arrayField(j, "merges", ctx);
  t.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i)
    t.merges.push_back(bytesFromJson(merges[i], ctx + ".merges[" + std::to_string(i) + "]"));

  if (!t.scores.empty() && t.scores.size() != t.tokens.size())
    fail(ctx, "has " + std::to_string(t.scores.size()) + " scores for " +
                  std::to_string(t.tokens.size()) + " tokens");
  if (!t.token_types.empty() && t.token_types.size() != t.tokens.size())
    fail(ctx, "has " + std::to_string(t.token_types.size()) + " token types for " +
                  std::to_string(t.tokens.size()) + " tokens");

  t.bos_id = int32_t(getInt(j, "bos_id", ctx, -1));
  t.eos_id = int32_t(getInt(j, "eos_id", ctx, -1));
  t.unk_id = int32_t(getInt(j, "unk_id", ctx, -1));
  t.pad_id = int32_t(getInt(j, "pad_id", ctx, -1));
  t.add_bos = getBool(j, "add_bos", ctx, false);
  t.add_space_prefix = getBool(j, "add_space_prefix", ctx, false);
  if (const json *v = find(j, "chat_template"))
    t.chat_template = bytesFromJson(*v, ctx + ".chat_template");
  return t;
}

} // namespace llmc
