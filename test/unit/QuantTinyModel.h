//===- QuantTinyModel.h - A tiny random llama for quantization tests -*- C++ -*-===//
// Two layers, hidden 32, 4 heads (2 KV heads), head_dim 8, ffn 64, vocab 40,
// f32 weights in a name -> values map, written as an in-memory artifact whose
// program nodes carry attrs.block like the compiler's export. Tests change
// the weights (fold AWQ scales, quantize) and run it with the Executor.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/artifact.h"
#include "llmc/executor.h"

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace llmc::quanttest {

struct TinyQuantModel {
  static constexpr int64_t L = 2, D = 32, H = 4, KV = 2, HD = 8, F = 64, V = 40;
  std::map<std::string, std::vector<float>> w;
  std::map<std::string, std::vector<int64_t>> shapes;
  uint64_t state;

  explicit TinyQuantModel(uint64_t seed = 7) : state(seed) {
    add("token_embd.weight", {V, D}, 1.0f);
    for (int64_t l = 0; l < L; ++l) {
      std::string p = "blk." + std::to_string(l) + ".";
      addNorm(p + "attn_norm.weight");
      add(p + "attn_q.weight", {H * HD, D}, 0.3f);
      add(p + "attn_k.weight", {KV * HD, D}, 0.3f);
      add(p + "attn_v.weight", {KV * HD, D}, 0.3f);
      add(p + "attn_output.weight", {D, H * HD}, 0.3f);
      addNorm(p + "ffn_norm.weight");
      add(p + "ffn_gate.weight", {F, D}, 0.3f);
      add(p + "ffn_up.weight", {F, D}, 0.3f);
      add(p + "ffn_down.weight", {D, F}, 0.2f);
    }
    addNorm("output_norm.weight");
    add("output.weight", {V, D}, 0.3f);
  }

  float next() { // uniform in [-1, 1)
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return float(double(state >> 40) / double(1ull << 24) * 2.0 - 1.0);
  }
  void add(const std::string &name, std::vector<int64_t> shape, float scale) {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (float &x : v)
      x = scale * next();
    w[name] = std::move(v);
    shapes[name] = std::move(shape);
  }
  void addNorm(const std::string &name) {
    std::vector<float> v(static_cast<size_t>(D));
    for (float &x : v)
      x = 1.0f + 0.5f * next();
    w[name] = std::move(v);
    shapes[name] = {D};
  }

  Program program() const {
    Program p;
    int next = 0;
    auto node = [&](std::string op, std::vector<int> in, std::map<std::string, std::string> ws,
                    nlohmann::json attrs) {
      ProgramNode n;
      n.op = std::move(op);
      n.in = std::move(in);
      n.out = next++;
      n.weights = std::move(ws);
      n.attrs = std::move(attrs);
      p.nodes.push_back(n);
      return n.out;
    };
    int x = node("embed", {}, {{"table", "token_embd.weight"}}, nlohmann::json::object());
    for (int64_t l = 0; l < L; ++l) {
      std::string pre = "blk." + std::to_string(l) + ".";
      int h = node("rms_norm", {x}, {{"weight", pre + "attn_norm.weight"}},
                   {{"eps", 1e-5}, {"block", l}});
      int a = node("attention", {h},
                   {{"q", pre + "attn_q.weight"},
                    {"k", pre + "attn_k.weight"},
                    {"v", pre + "attn_v.weight"},
                    {"o", pre + "attn_output.weight"}},
                   {{"layer", l},
                    {"block", l},
                    {"num_heads", H},
                    {"num_kv_heads", KV},
                    {"head_dim", HD},
                    {"rope_theta", 10000.0},
                    {"rope_style", "half"},
                    {"causal", true}});
      x = node("add", {x, a}, {}, {{"block", l}});
      int h2 = node("rms_norm", {x}, {{"weight", pre + "ffn_norm.weight"}},
                    {{"eps", 1e-5}, {"block", l}});
      int m = node("mlp", {h2},
                   {{"gate", pre + "ffn_gate.weight"},
                    {"up", pre + "ffn_up.weight"},
                    {"down", pre + "ffn_down.weight"}},
                   {{"activation", "silu"}, {"block", l}});
      x = node("add", {x, m}, {}, {{"block", l}});
    }
    int f = node("rms_norm", {x}, {{"weight", "output_norm.weight"}}, {{"eps", 1e-5}});
    p.output = node("lm_head", {f}, {{"weight", "output.weight"}}, nlohmann::json::object());
    return p;
  }

  std::unique_ptr<Artifact> artifact() const {
    ModelConfig c;
    c.architecture = "llama";
    c.name = "tiny-quant";
    c.vocab_size = V;
    c.hidden_size = D;
    c.intermediate_size = F;
    c.num_layers = L;
    c.num_heads = H;
    c.num_kv_heads = KV;
    c.head_dim = HD;
    c.context_length = 64;
    nlohmann::json m{{"config", configToJson(c)}, {"program", program().toJson()}};
    std::vector<ArtifactWriter::Tensor> ts;
    for (const auto &[name, v] : w)
      ts.push_back({name, DType::F32, shapes.at(name), int64_t(v.size() * 4), v.data()});
    return Artifact::fromBuffer(ArtifactWriter(m, ts).toBuffer(), "tiny-quant.llmc");
  }

  std::vector<float> logits(const std::vector<int32_t> &tokens, ExecutorOptions o = {}) const {
    auto art = artifact();
    o.threads = 1;
    Executor ex(*art, o);
    return ex.forward(tokens, /*all_logits=*/true);
  }
};

} // namespace llmc::quanttest
