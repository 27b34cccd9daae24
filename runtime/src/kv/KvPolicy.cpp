//===- KvPolicy.cpp - Parse and check a node's kv_policy ------------------===//
#include "KvPolicy.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>

namespace llmc::kv {

namespace {


const nlohmann::json &field(const nlohmann::json &j, const char *key, const std::string &ctx) {
  auto it = j.find(key);
  if (it == j.end())
    throw std::runtime_error(ctx + ": kv_policy has no '" + key + "'");
  return *it;
}

int64_t intField(const nlohmann::json &j, const char *key, const std::string &ctx) {
  const nlohmann::json &v = field(j, key, ctx);
  if (!v.is_number_integer())
    throw std::runtime_error(ctx + ": kv_policy '" + key + "' must be an integer");
  return v.get<int64_t>();
}

double numField(const nlohmann::json &j, const char *key, const std::string &ctx) {
  const nlohmann::json &v = field(j, key, ctx);
  if (!v.is_number())
    throw std::runtime_error(ctx + ": kv_policy '" + key + "' must be a number");
  return v.get<double>();
}

std::string strField(const nlohmann::json &j, const char *key, const std::string &ctx) {
  const nlohmann::json &v = field(j, key, ctx);
  if (!v.is_string())
    throw std::runtime_error(ctx + ": kv_policy '" + key + "' must be a string");
  return v.get<std::string>();
}

} // namespace

Policy parsePolicy(const nlohmann::json &j, const std::string &ctx, int64_t kv_heads) {
  if (!j.is_object())
    throw std::runtime_error(ctx + ": kv_policy must be an object");
  Policy p;
  p.name = strField(j, "method", ctx);
  std::optional<Method> method = parseKvMethod(p.name);
  if (!method)
    throw std::runtime_error(ctx + ": unknown kv_policy method '" + p.name + "' (expected " +
                             std::string(spellingsKvMethod()) + ")");
  p.method = *method;
  if (p.full())
    return p;
  p.budget = numField(j, "budget", ctx);
  p.budget_tokens = intField(j, "budget_tokens", ctx);
  if ((p.budget > 0) == (p.budget_tokens > 0) || p.budget < 0 || p.budget > 1 ||
      p.budget_tokens < 0)
    throw std::runtime_error(ctx + ": kv_policy needs exactly one of budget in (0, 1] or "
                                   "budget_tokens >= 1");
  p.window = intField(j, "window", ctx);
  p.sink = intField(j, "sink", ctx);
  p.refresh = intField(j, "refresh", ctx);
  p.pool = intField(j, "pool", ctx);
  if (j.contains("score_every"))
    p.score_every = intField(j, "score_every", ctx);
  p.layer_scale = numField(j, "layer_scale", ctx);
  p.seed = uint64_t(intField(j, "seed", ctx));
  if (p.score_every < 1 || p.score_every > p.window ||
      (p.score_every != 1 && p.method != Method::InertiaKV))
    throw std::runtime_error(ctx + ": kv_policy score_every must be in [1, window] and is for "
                                   "inertiakv only");
  if (p.window < 1 || p.sink < 0 || p.refresh < 1 || p.pool < 1 || p.pool % 2 == 0 ||
      !(p.layer_scale > 0) || !std::isfinite(p.layer_scale))
    throw std::runtime_error(ctx + ": kv_policy window/refresh must be >= 1, sink >= 0, pool "
                                   "odd, layer_scale > 0");
  std::string mode = strField(j, "mode", ctx);
  std::optional<Hook> hook = parseKvMode(mode);
  if (!hook)
    throw std::runtime_error(ctx + ": kv_policy mode '" + mode + "' (expected " +
                             std::string(spellingsKvMode()) + ")");
  p.mode = *hook;
  if (p.method == Method::InertiaKV && p.mode == Hook::Prefill)
    throw std::runtime_error(ctx + ": kv_policy " + p.name + " evicts while decoding; mode must be "
                                   "decode or both");
  std::string quant = strField(j, "kv_quant", ctx);
  std::optional<KvQuant> q = parseKvQuant(quant);
  if (!q)
    throw std::runtime_error(ctx + ": kv_policy kv_quant '" + quant + "' (expected " +
                             std::string(spellingsKvQuant()) + ")");
  p.quant = *q;
  if (p.method == Method::RdKV) {
    // RDKV assigns widths once, after a prompt, over all of a layer's heads;
    // generated tokens stay at fp16. Its widths are its own quantization.
    if (p.mode != Hook::Prefill)
      throw std::runtime_error(ctx + ": kv_policy rdkv assigns bit widths once after the prompt; "
                                     "mode must be prefill, not " + mode);
    if (p.quant != KvQuant::None)
      throw std::runtime_error(ctx + ": kv_policy rdkv chooses its own bit widths; kv_quant must "
                                     "be none, not " + quant);
    if (j.contains("head_scale"))
      throw std::runtime_error(ctx + ": kv_policy rdkv allocates bits across the layer's heads; "
                                     "head_scale does not apply");
  }
  if (auto it = j.find("head_scale"); it != j.end()) {
    if (!it->is_array() || int64_t(it->size()) != kv_heads)
      throw std::runtime_error(ctx + ": kv_policy head_scale needs one number per KV head (" +
                               std::to_string(kv_heads) + ")");
    for (const nlohmann::json &v : *it) {
      if (!v.is_number() || !(v.get<double>() > 0))
        throw std::runtime_error(ctx + ": kv_policy head_scale entries must be > 0");
      p.head_scale.push_back(v.get<double>());
    }
  }
  return p;
}

int64_t headBudget(const Policy &p, int64_t prompt_len, int64_t len, int64_t kv_head) {
  double c = p.budget_tokens > 0 ? double(p.budget_tokens) : std::ceil(p.budget * double(prompt_len));
  double scale = p.layer_scale * (p.head_scale.empty() ? 1.0 : p.head_scale[size_t(kv_head)]);
  double keep = double(p.window) + std::max(0.0, c - double(p.window)) * scale;
  int64_t k = int64_t(std::llround(keep));
  return std::min(len, std::max(k, p.window + 1));
}

} // namespace llmc::kv
