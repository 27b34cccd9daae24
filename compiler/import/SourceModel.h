//===- SourceModel.h - A model as read from its source file ----*- C++ -*-===//
// What every reader produces (GGUF, Hugging Face folder, llama2.c) and the
// importer turns into `llm` IR. Readers know no MLIR.
//
// Tensor names are canonical llmc names (GGUF's naming):
//   token_embd.weight [vocab, D]        output_norm.weight [D]   output.weight [vocab, D] (absent if tied)
//   blk.N.attn_norm.weight [D]          blk.N.ffn_norm.weight [D]
//   blk.N.attn_q.weight [H*hd, D]  .attn_k.weight [KV*hd, D]  .attn_v.weight [KV*hd, D]
//   blk.N.attn_output.weight [D, H*hd]  blk.N.attn_{q,k,v}.bias (Qwen2)
//   blk.N.ffn_gate.weight [F, D]  blk.N.ffn_up.weight [F, D]  blk.N.ffn_down.weight [D, F]
//   MoE: blk.N.ffn_gate_inp.weight [E, D], blk.N.ffn_{gate,up}_exps.weight [E, F, D],
//        blk.N.ffn_down_exps.weight [E, D, F]
// Q/K rows are kept in the source's order; config.rope_style says which RoPE
// convention that order implies (GGUF llama and llama2.c: interleaved; HF: half).
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/model.h"
#include "llmc/tokenizer.h"
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace llmc {

/// Keeps source bytes alive (an mmap'd file or an owned buffer).
struct SourceBuffer {
  virtual ~SourceBuffer() = default;
};

struct SourceTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape; // outermost first
  const void *data = nullptr; // points into one of SourceModel::buffers
  int64_t nbytes = 0;
};

struct SourceModel {
  std::string format;      // "gguf" | "hf" | "llama2c"
  std::string path;        // what the user gave
  ModelConfig config;
  TokenizerData tokenizer; // may be empty (llama2.c without tokenizer.bin)
  std::vector<SourceTensor> tensors;
  std::vector<std::shared_ptr<SourceBuffer>> buffers;
  std::vector<std::pair<std::string, std::string>> metadata; // provenance notes (key, value)

  const SourceTensor *find(const std::string &name) const {
    for (auto &t : tensors)
      if (t.name == name)
        return &t;
    return nullptr;
  }
};

/// Errors from readers: the message names the file and the problem.
struct ImportError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

SourceModel readGguf(const std::string &path);
/// A folder with config.json and *.safetensors (or model.safetensors.index.json).
SourceModel readHuggingFace(const std::string &dir);
/// llama2.c checkpoint; tokenizer_path may be empty (then a tokenizer.bin or
/// tok<vocab>.bin beside the checkpoint is used if present).
SourceModel readLlama2c(const std::string &path, const std::string &tokenizer_path = "");
/// An ONNX export of a decoder (input_ids -> logits); config.json and
/// tokenizer.json beside it are read when present.
SourceModel readOnnx(const std::string &path);
/// Detects the format from the path (folder: HF; GGUF magic; *.onnx: ONNX;
/// else llama2.c).
SourceModel readModel(const std::string &path, const std::string &tokenizer_path = "");

} // namespace llmc
