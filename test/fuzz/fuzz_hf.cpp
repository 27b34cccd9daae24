//===- fuzz_hf.cpp - The Hugging Face reader on arbitrary bytes ----------===//
// The first byte chooses the file the rest of the input becomes: even, the
// model.safetensors (beside a fixed tiny config.json); odd, the
// config.json (beside the seed's safetensors, if a previous input left one).
//===----------------------------------------------------------------------===//
#include "FuzzCommon.h"
#include "compiler/import/SourceModel.h"

namespace {
const char kConfig[] = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
 "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
 "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4,
 "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "vocab_size": 16,
 "max_position_embeddings": 64, "tie_word_embeddings": true, "torch_dtype": "float32"})";
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  const std::string dir = llmc::fuzz::scratchPath("hf");
  static bool made = [&] { return std::system(("mkdir -p '" + dir + "'").c_str()) == 0; }();
  if (!made)
    std::abort();
  if (data[0] % 2 == 0) {
    llmc::fuzz::writeFile(dir + "/config.json", reinterpret_cast<const uint8_t *>(kConfig),
                          sizeof kConfig - 1);
    llmc::fuzz::writeFile(dir + "/model.safetensors", data + 1, size - 1);
  } else {
    llmc::fuzz::writeFile(dir + "/config.json", data + 1, size - 1);
  }
  try {
    llmc::readHuggingFace(dir);
  } catch (const std::exception &) {
  }
  return 0;
}
