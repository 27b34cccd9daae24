//===- TinyModel.h - A tiny random decoder written as an artifact -*- C++ -*-===//
// 2 layers, hidden 16, 4 heads, 2 KV heads, head_dim 8, ffn 32, vocab 50;
// variants: RoPE style, attention biases, a 4-expert top-2 MoE with tied
// embeddings, F16 weights. Built in memory (ArtifactWriter) for the
// executor's unit tests (ExecutorTest, BatcherTest). Internal linkage: each
// test file gets its own copy.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/artifact.h"

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

using namespace llmc;
using nlohmann::json;

constexpr int64_t kLayers = 2, kD = 16, kH = 4, kKV = 2, kHd = 8, kF = 32, kV = 50, kE = 4,
                  kTopK = 2;
constexpr double kTheta = 10000.0, kEps = 1e-5;

struct Variant {
  RopeStyle rope = RopeStyle::Half;
  bool moe = false;
  bool f16 = false;
  bool bias = false;
  bool tied = false;
};

// ---- Local half conversion (round to nearest even), independent of the runtime.
uint16_t toHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  int32_t exp = int32_t((x >> 23) & 0xFF) - 127 + 15;
  uint32_t mant = x & 0x7FFFFF;
  if (exp >= 31)
    return uint16_t(sign | 0x7C00);
  if (exp <= 0) { // subnormal half
    if (exp < -10)
      return uint16_t(sign);
    mant |= 0x800000;
    uint32_t shift = uint32_t(14 - exp);
    uint32_t h = mant >> shift, rem = mant & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (h & 1)))
      ++h;
    return uint16_t(sign | h);
  }
  uint32_t h = uint32_t(exp) << 10 | mant >> 13;
  uint32_t rem = mant & 0x1FFF;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
    ++h;
  return uint16_t(sign | h);
}

float fromHalf(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
  float v;
  if (exp == 0)
    v = std::ldexp(float(mant), -24);
  else if (exp == 31)
    v = mant ? NAN : INFINITY;
  else
    v = std::ldexp(float(mant | 0x400), int(exp) - 25);
  return sign ? -v : v;
}

/// A deterministic generator (no dependence on <random> distributions).
struct Lcg {
  uint64_t s;
  float next() { // uniform in [-1, 1)
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return float(double(s >> 40) / double(1ull << 24) * 2.0 - 1.0);
  }
};

struct TinyModel {
  Variant var;
  std::map<std::string, std::vector<int64_t>> shapes;
  std::map<std::string, std::vector<float>> w; // f32 values (already F16-rounded if f16)
  std::map<std::string, std::vector<uint16_t>> halves;
  std::vector<std::string> order;

  void add(const std::string &name, std::vector<int64_t> shape, float scale, float offset,
           Lcg &rng) {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (float &x : v) {
      x = offset + scale * rng.next();
      if (var.f16)
        x = fromHalf(toHalf(x));
    }
    shapes[name] = shape;
    w[name] = v;
    order.push_back(name);
  }

  explicit TinyModel(Variant v, uint64_t seed = 42) : var(v) {
    Lcg rng{seed};
    add("token_embd.weight", {kV, kD}, 1.0f, 0.0f, rng);
    for (int64_t l = 0; l < kLayers; ++l) {
      std::string p = "blk." + std::to_string(l) + ".";
      add(p + "attn_norm.weight", {kD}, 0.2f, 1.0f, rng);
      add(p + "attn_q.weight", {kH * kHd, kD}, 0.4f, 0.0f, rng);
      add(p + "attn_k.weight", {kKV * kHd, kD}, 0.4f, 0.0f, rng);
      add(p + "attn_v.weight", {kKV * kHd, kD}, 0.4f, 0.0f, rng);
      add(p + "attn_output.weight", {kD, kH * kHd}, 0.3f, 0.0f, rng);
      if (var.bias) {
        add(p + "attn_q.bias", {kH * kHd}, 0.3f, 0.0f, rng);
        add(p + "attn_k.bias", {kKV * kHd}, 0.3f, 0.0f, rng);
        add(p + "attn_v.bias", {kKV * kHd}, 0.3f, 0.0f, rng);
      }
      add(p + "ffn_norm.weight", {kD}, 0.2f, 1.0f, rng);
      if (var.moe) {
        add(p + "ffn_gate_inp.weight", {kE, kD}, 0.5f, 0.0f, rng);
        add(p + "ffn_gate_exps.weight", {kE, kF, kD}, 0.4f, 0.0f, rng);
        add(p + "ffn_up_exps.weight", {kE, kF, kD}, 0.4f, 0.0f, rng);
        add(p + "ffn_down_exps.weight", {kE, kD, kF}, 0.3f, 0.0f, rng);
      } else {
        add(p + "ffn_gate.weight", {kF, kD}, 0.4f, 0.0f, rng);
        add(p + "ffn_up.weight", {kF, kD}, 0.4f, 0.0f, rng);
        add(p + "ffn_down.weight", {kD, kF}, 0.3f, 0.0f, rng);
      }
    }
    add("output_norm.weight", {kD}, 0.2f, 1.0f, rng);
    if (!var.tied)
      add("output.weight", {kV, kD}, 0.5f, 0.0f, rng);
    for (auto &[name, vals] : w) {
      std::vector<uint16_t> h(vals.size());
      for (size_t i = 0; i < vals.size(); ++i)
        h[i] = toHalf(vals[i]);
      halves[name] = h;
    }
  }

  const std::vector<float> &W(const std::string &n) const { return w.at(n); }

  Program program() const {
    Program p;
    int next = 0;
    auto node = [&](std::string op, std::vector<int> in, std::map<std::string, std::string> ws,
                    json attrs = json::object()) {
      ProgramNode n;
      n.op = std::move(op);
      n.in = std::move(in);
      n.out = next++;
      n.weights = std::move(ws);
      n.attrs = std::move(attrs);
      p.nodes.push_back(n);
      return n.out;
    };
    int x = node("embed", {}, {{"table", "token_embd.weight"}});
    for (int64_t l = 0; l < kLayers; ++l) {
      std::string pre = "blk." + std::to_string(l) + ".";
      int h = node("rms_norm", {x}, {{"weight", pre + "attn_norm.weight"}}, {{"eps", kEps}});
      std::map<std::string, std::string> aw = {{"q", pre + "attn_q.weight"},
                                               {"k", pre + "attn_k.weight"},
                                               {"v", pre + "attn_v.weight"},
                                               {"o", pre + "attn_output.weight"}};
      if (var.bias) {
        aw["q_bias"] = pre + "attn_q.bias";
        aw["k_bias"] = pre + "attn_k.bias";
        aw["v_bias"] = pre + "attn_v.bias";
      }
      int a = node("attention", {h}, aw,
                   {{"layer", l},
                    {"num_heads", kH},
                    {"num_kv_heads", kKV},
                    {"head_dim", kHd},
                    {"rope_theta", kTheta},
                    {"rope_style", var.rope == RopeStyle::Interleaved ? "interleaved" : "half"},
                    {"causal", true}});
      x = node("add", {x, a}, {});
      int h2 = node("rms_norm", {x}, {{"weight", pre + "ffn_norm.weight"}}, {{"eps", kEps}});
      int m;
      if (var.moe)
        m = node("moe", {h2},
                 {{"router", pre + "ffn_gate_inp.weight"},
                  {"gate", pre + "ffn_gate_exps.weight"},
                  {"up", pre + "ffn_up_exps.weight"},
                  {"down", pre + "ffn_down_exps.weight"}},
                 {{"num_experts", kE}, {"top_k", kTopK}, {"activation", "silu"}, {"renormalize", true}});
      else
        m = node("mlp", {h2},
                 {{"gate", pre + "ffn_gate.weight"},
                  {"up", pre + "ffn_up.weight"},
                  {"down", pre + "ffn_down.weight"}},
                 {{"activation", "silu"}});
      x = node("add", {x, m}, {});
    }
    int f = node("rms_norm", {x}, {{"weight", "output_norm.weight"}}, {{"eps", kEps}});
    p.output = node("lm_head", {f}, {{"weight", var.tied ? "token_embd.weight" : "output.weight"}});
    return p;
  }

  json manifest() const {
    ModelConfig c;
    c.architecture = var.moe ? "mixtral" : "llama";
    c.name = "tiny";
    c.vocab_size = kV;
    c.hidden_size = kD;
    c.intermediate_size = kF;
    c.num_layers = kLayers;
    c.num_heads = kH;
    c.num_kv_heads = kKV;
    c.head_dim = kHd;
    c.context_length = 64;
    c.rope_theta = kTheta;
    c.rope_style = var.rope;
    c.norm_eps = kEps;
    c.tied_embeddings = var.tied;
    c.attention_bias = var.bias;
    c.num_experts = var.moe ? kE : 0;
    c.num_experts_per_token = var.moe ? kTopK : 0;
    return json{{"config", configToJson(c)}, {"program", program().toJson()}};
  }

  std::vector<uint8_t> artifactBytes(const json &m) const {
    std::vector<ArtifactWriter::Tensor> ts;
    for (const std::string &name : order) {
      // Norm weights and biases stay F32 as converters usually keep them.
      bool vec = shapes.at(name).size() == 1;
      if (var.f16 && !vec)
        ts.push_back({name, DType::F16, shapes.at(name), int64_t(halves.at(name).size() * 2),
                      halves.at(name).data()});
      else
        ts.push_back({name, DType::F32, shapes.at(name), int64_t(w.at(name).size() * 4),
                      w.at(name).data()});
    }
    return ArtifactWriter(m, ts).toBuffer();
  }
  std::unique_ptr<Artifact> artifact() const {
    return Artifact::fromBuffer(artifactBytes(manifest()), "tiny.llmc");
  }
};

/// n token ids below kV from a small linear congruential generator: the
/// same seed gives the same prompt.
inline std::vector<int32_t> promptOf(int64_t n, uint32_t seed) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < n; ++i) {
    seed = seed * 1103515245u + 12345u;
    p.push_back(int32_t((seed >> 16) % kV));
  }
  return p;
}

} // namespace
