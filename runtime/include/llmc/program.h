//===- program.h - The execution plan stored in an artifact ----*- C++ -*-===//
// The compiler lowers the `llm` dialect to this flat list of nodes; the
// runtime executes it without knowing MLIR. Every value is an f32 activation
// matrix [tokens, width] identified by an integer id; `embed` reads the
// step's token ids. Weights are referenced by name (see TensorView).
//
// JSON form (manifest key "program"):
//   {"nodes":[{"op":"embed","in":[],"out":0,"weights":{"table":"token_embd.weight"}},
//             {"op":"rms_norm","in":[0],"out":1,"weights":{"weight":"blk.0.attn_norm.weight"},
//              "attrs":{"eps":1e-5}}, ...],
//    "output": 42}
//
// Ops, their weights and attrs:
//   embed      weights: table [vocab, hidden]                    -> [T, hidden]
//   rms_norm   in: x; weights: weight [n]; attrs: eps
//   layer_norm in: x; weights: weight [n], bias [n] (optional); attrs: eps
//   add        in: a, b
//   attention  in: x; weights: q [H*hd, D], k [KV*hd, D], v [KV*hd, D], o [D, H*hd],
//              optional q_bias, k_bias, v_bias;
//              attrs: layer (int, KV cache slot), num_heads, num_kv_heads, head_dim,
//              rope_theta, rope_style ("interleaved"|"half"), causal (bool),
//              kv_policy (object, optional; absent = full cache)
//   mlp        in: x; weights: gate [F, D], up [F, D], down [D, F]; attrs: activation ("silu"|"gelu")
//   moe        in: x; weights: router [E, D], gate [E, F, D], up [E, F, D], down [E, D, F];
//              attrs: num_experts, top_k, activation, renormalize (bool; Mixtral: softmax
//              over all experts, keep top-k, divide by their sum)
//   lm_head    in: x; weights: weight [vocab, D]                  -> [T, vocab]
//===----------------------------------------------------------------------===//
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace llmc {

struct ProgramNode {
  std::string op;
  std::vector<int> in;
  int out = -1;
  std::map<std::string, std::string> weights;
  nlohmann::json attrs = nlohmann::json::object();
};

struct Program {
  std::vector<ProgramNode> nodes;
  int output = -1;

  nlohmann::json toJson() const;
  /// Throws std::runtime_error with a message naming the problem.
  static Program fromJson(const nlohmann::json &j);
};

} // namespace llmc
