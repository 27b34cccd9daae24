//===- GgufReader.cpp - GGUF file -> SourceModel ---------------------------===//
// readGguf(): parses the container (GgufFileReader.cpp), fills ModelConfig
// from `<arch>.*` metadata, lists tensors (shapes reversed to outermost
// first, data pointing into the mapping) and reads the tokenizer.
// Architectures: llama (dense or MoE with ffn_*_exps; interleaved RoPE) and
// qwen2 (q/k/v biases; NEOX, i.e. half, RoPE).
//===----------------------------------------------------------------------===//
#include "compiler/import/ReaderUtil.h"
#include "compiler/import/gguf/GgufFile.h"
#include "compiler/import/gguf/GgufTokenizer.h"

namespace llmc {

namespace {

struct ArchInfo {
  const char *name;
  RopeStyle rope;
};
const ArchInfo kArchs[] = {{"llama", RopeStyle::Interleaved}, {"qwen2", RopeStyle::Half}};

class GgufModelBuilder {
public:
  GgufModelBuilder(const gguf::File &f, SourceModel &m) : f_(f), m_(m) {}

  void build() {
    const ArchInfo &arch = architecture();
    readConfig(arch);
    addTensors();
    deriveFromTensors();
    m_.tokenizer = gguf::readGgufTokenizer(f_, m_.metadata);
    validateSourceModel(m_);
  }

private:
  [[noreturn]] void fail(const std::string &problem) { importFail(f_.path(), problem); }

  const ArchInfo &architecture() {
    auto arch = f_.getString("general.architecture");
    if (!arch)
      fail("missing general.architecture");
    for (const ArchInfo &a : kArchs)
      if (*arch == a.name)
        return a;
    fail("unsupported architecture '" + *arch + "' (supported: llama, qwen2)");
  }

  int64_t requireInt(const std::string &key) {
    auto v = f_.getInt(key);
    if (!v)
      fail("missing metadata " + key);
    return *v;
  }

  void readConfig(const ArchInfo &arch) {
    ModelConfig &c = m_.config;
    const std::string p = std::string(arch.name) + ".";
    c.architecture = arch.name;
    c.name = f_.getString("general.name").value_or("");
    c.rope_style = arch.rope;
    c.num_layers = requireInt(p + "block_count");
    c.hidden_size = requireInt(p + "embedding_length");
    c.intermediate_size = requireInt(p + "feed_forward_length");
    c.num_heads = requireInt(p + "attention.head_count");
    c.num_kv_heads = f_.getInt(p + "attention.head_count_kv").value_or(c.num_heads);
    if (c.num_heads <= 0 || c.hidden_size <= 0)
      fail("attention.head_count and embedding_length must be positive");
    c.head_dim = f_.getInt(p + "attention.key_length").value_or(c.hidden_size / c.num_heads);
    if (auto vdim = f_.getInt(p + "attention.value_length"); vdim && *vdim != c.head_dim)
      fail("attention.value_length " + std::to_string(*vdim) + " differs from key_length " +
           std::to_string(c.head_dim) + " (not supported)");
    c.context_length = f_.getInt(p + "context_length").value_or(0);
    c.rope_theta = f_.getFloat(p + "rope.freq_base").value_or(10000.0);
    c.norm_eps = f_.getFloat(p + "attention.layer_norm_rms_epsilon").value_or(1e-5);
    c.num_experts = f_.getInt(p + "expert_count").value_or(0);
    c.num_experts_per_token = f_.getInt(p + "expert_used_count").value_or(0);
    if (auto rot = f_.getInt(p + "rope.dimension_count"); rot && *rot != c.head_dim)
      fail("partial rotary embedding (rope.dimension_count " + std::to_string(*rot) +
           " of head dim " + std::to_string(c.head_dim) + ") is not supported");
    if (auto scaling = f_.getString(p + "rope.scaling.type"); scaling && *scaling != "none")
      fail("RoPE scaling '" + *scaling + "' is not supported");
    if (auto factor = f_.getFloat(p + "rope.scale_linear"); factor && *factor != 1.0)
      fail("linear RoPE scaling is not supported");

    m_.metadata.emplace_back("gguf.version", std::to_string(f_.version()));
    for (const char *key : {"general.name", "general.architecture", "general.basename",
                            "general.size_label", "general.license", "general.organization"})
      if (auto v = f_.find(key); v && v->type == gguf::ValueType::String)
        m_.metadata.emplace_back(key, std::string(v->s));
    if (auto ft = f_.find("general.file_type"); ft && ft->isInteger())
      m_.metadata.emplace_back("general.file_type", std::to_string(ft->i));
  }

  void addTensors() {
    for (const gguf::TensorInfo &ti : f_.tensors()) {
      if (ti.name == "rope_freqs.weight")
        fail("tensor rope_freqs.weight (RoPE frequency scaling) is not supported");
      SourceTensor t;
      t.name = ti.name;
      t.dtype = ti.dtype;
      t.shape.assign(ti.ne.rbegin(), ti.ne.rend());
      t.data = f_.tensorData(ti);
      t.nbytes = ti.nbytes;
      m_.tensors.push_back(std::move(t));
    }
  }

  void deriveFromTensors() {
    ModelConfig &c = m_.config;
    const SourceTensor *embd = m_.find("token_embd.weight");
    if (!embd)
      fail("missing tensor token_embd.weight");
    if (embd->shape.size() != 2)
      fail("token_embd.weight must be 2-D, has shape " + shapeString(embd->shape));
    // The embedding's row count is the model's vocabulary (the tokenizer may
    // list the same number or, rarely, fewer tokens).
    c.vocab_size = embd->shape[0];
    c.tied_embeddings = m_.find("output.weight") == nullptr;
    c.attention_bias = m_.find("blk.0.attn_q.bias") != nullptr;
    // A MoE GGUF may omit feed_forward_length's per-expert meaning; trust the tensor.
    if (c.num_experts > 0)
      if (const SourceTensor *g = m_.find("blk.0.ffn_gate_exps.weight"); g && g->shape.size() == 3)
        c.intermediate_size = g->shape[1];
  }

  const gguf::File &f_;
  SourceModel &m_;
};

} // namespace

SourceModel readGguf(const std::string &path) {
  gguf::File f = gguf::File::open(path);
  SourceModel m;
  m.format = "gguf";
  m.path = path;
  m.buffers.push_back(f.mapping());
  GgufModelBuilder(f, m).build();
  return m;
}

} // namespace llmc
