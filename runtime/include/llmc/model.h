//===- model.h - What the runtime needs to know about a model --*- C++ -*-===//
// ModelConfig is the architecture summary recorded in every artifact.
// TensorView is a typed view of one stored weight (mmap'd or in memory).
// Shapes are row-major, outermost first: a projection from `in` to `out`
// features is [out, in] and its rows are contiguous (GGUF's ne[1], ne[0]).
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/dtype.h"
#include "llmc/ir_enums.h"
#include <cstdint>
#include <string>
#include <vector>

namespace llmc {

// RopeStyle (Interleaved: pairs (2i, 2i+1), GGUF llama and llama2.c; Half:
// (i, i + d/2), HF rotate_half and GGUF qwen2), Activation and NormKind come
// from their one definition in dialects/llm/IR/LlmEnums.td (ir_enums.h).

struct ModelConfig {
  std::string architecture; // "llama", "mistral", "qwen2", "mixtral"
  std::string name;         // human name, e.g. "SmolLM2-135M-Instruct"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t context_length = 0;
  double rope_theta = 10000.0;
  RopeStyle rope_style = RopeStyle::Half;
  double norm_eps = 1e-5;
  NormKind norm = NormKind::RMSNorm;
  Activation activation = Activation::SiLU;
  bool tied_embeddings = false;
  bool attention_bias = false; // q/k/v biases (Qwen2)
  int64_t num_experts = 0;     // 0: dense MLP
  int64_t num_experts_per_token = 0;
  int64_t sliding_window = 0; // 0: none (recorded, not yet used)
};

struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape; // outermost first
  const void *data = nullptr;
  int64_t nbytes = 0;

  int64_t numElements() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
  int64_t rows() const { return shape.empty() ? 1 : numElements() / shape.back(); }
  int64_t cols() const { return shape.empty() ? 1 : shape.back(); }
};

const char *ropeStyleName(RopeStyle s);   // "interleaved" | "half"
const char *activationName(Activation a); // "silu" | "gelu"
const char *normKindName(NormKind n);     // "rms_norm" | "layer_norm"

} // namespace llmc
