//===- HfReader.cpp - Hugging Face folder -> SourceModel -------------------===//
// readHuggingFace(): config.json + model.safetensors (or shards listed in
// model.safetensors.index.json) for LlamaForCausalLM, MistralForCausalLM,
// Qwen2ForCausalLM and MixtralForCausalLM. HF names are mapped to llmc's
// canonical (GGUF) names; tensors keep their stored dtype and point into the
// mapped files, except Mixtral experts, which are stacked into [E, ...]
// owned buffers. HF checkpoints use the "rotate half" RoPE layout.
//===----------------------------------------------------------------------===//
#include "compiler/import/ReaderUtil.h"
#include "compiler/import/hf/HfJson.h"
#include "compiler/import/hf/HfTokenizer.h"
#include "compiler/import/hf/Safetensors.h"

#include <algorithm>
#include <cstring>
#include <dirent.h>
#include <map>
#include <set>

namespace llmc {

namespace {

using nlohmann::json;

struct HfArch {
  const char *hf_class;   // config "architectures"[0]
  const char *model_type; // config "model_type"
  const char *name;       // ModelConfig::architecture
};
const HfArch kArchs[] = {
    {"LlamaForCausalLM", "llama", "llama"},
    {"MistralForCausalLM", "mistral", "mistral"},
    {"Qwen2ForCausalLM", "qwen2", "qwen2"},
    {"MixtralForCausalLM", "mixtral", "mixtral"},
    {"OlmoForCausalLM", "olmo", "olmo"},
    {"Phi3ForCausalLM", "phi3", "phi3"},
};

// HF per-layer names (after "model.layers.N.") -> canonical suffixes.
const std::pair<const char *, const char *> kLayerNames[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"},
};

// Mixtral expert matrices: w1 = gate, w3 = up, w2 = down.
const std::pair<const char *, const char *> kExpertNames[] = {
    {"w1", "ffn_gate_exps.weight"}, {"w3", "ffn_up_exps.weight"}, {"w2", "ffn_down_exps.weight"}};

bool startsWith(const std::string &s, const char *prefix) {
  return s.compare(0, std::strlen(prefix), prefix) == 0;
}
bool endsWith(const std::string &s, const char *suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// Parses a non-negative decimal at s[pos...] up to '.', advancing pos past the dot.
bool parseIndex(const std::string &s, size_t &pos, int64_t &out) {
  size_t start = pos;
  int64_t v = 0;
  while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9' && pos - start < 9)
    v = v * 10 + (s[pos++] - '0');
  if (pos == start || pos >= s.size() || s[pos] != '.')
    return false;
  ++pos;
  out = v;
  return true;
}

class HfModelBuilder {
public:
  HfModelBuilder(const std::string &dir, SourceModel &m)
      : dir_(dir), config_path_(joinPath(dir, "config.json")), m_(m) {}

  void build() {
    if (!isDirectory(dir_))
      importFail(dir_, "not a directory");
    if (!fileExists(config_path_))
      importFail(dir_, "no config.json in the model folder");
    cfg_ = hf::parseJsonFile(config_path_);
    if (!cfg_.is_object())
      importFail(config_path_, "expected a JSON object");
    readConfig();
    openWeights();
    mapTensors();
    if (m_.config.architecture == "olmo")
      addUnitNormScales();
    m_.tokenizer = hf::readHfTokenizer(dir_, cfg_, m_.metadata);
    validateSourceModel(m_);
  }

private:
  [[noreturn]] void failConfig(const std::string &problem) { importFail(config_path_, problem); }

  const HfArch &architecture() {
    std::string cls;
    if (auto it = cfg_.find("architectures"); it != cfg_.end() && it->is_array() && !it->empty() &&
                                              (*it)[0].is_string())
      cls = (*it)[0].get<std::string>();
    std::string type = hf::optString(cfg_, "model_type", config_path_).value_or("");
    for (const HfArch &a : kArchs)
      if (cls == a.hf_class || (cls.empty() && type == a.model_type))
        return a;
    failConfig("unsupported architecture '" + (cls.empty() ? type : cls) +
               "' (supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
               "MixtralForCausalLM, OlmoForCausalLM, Phi3ForCausalLM)");
  }

  void readConfig() {
    const HfArch &arch = architecture();
    const std::string &f = config_path_;
    ModelConfig &c = m_.config;
    c.architecture = arch.name;
    c.name = hf::optString(cfg_, "_name_or_path", f).value_or("");
    if (c.name.empty()) {
      std::string d = dir_;
      while (d.size() > 1 && d.back() == '/')
        d.pop_back();
      c.name = d.substr(d.find_last_of('/') == std::string::npos ? 0 : d.find_last_of('/') + 1);
    }
    c.rope_style = RopeStyle::Half;
    c.vocab_size = hf::requireInt(cfg_, "vocab_size", f);
    c.hidden_size = hf::requireInt(cfg_, "hidden_size", f);
    c.intermediate_size = hf::requireInt(cfg_, "intermediate_size", f);
    c.num_layers = hf::requireInt(cfg_, "num_hidden_layers", f);
    c.num_heads = hf::requireInt(cfg_, "num_attention_heads", f);
    if (c.num_heads <= 0 || c.hidden_size <= 0 || c.num_layers <= 0)
      failConfig("hidden_size, num_attention_heads and num_hidden_layers must be positive");
    c.num_kv_heads = hf::optInt(cfg_, "num_key_value_heads", f).value_or(c.num_heads);
    c.head_dim = hf::optInt(cfg_, "head_dim", f).value_or(c.hidden_size / c.num_heads);
    c.context_length = hf::optInt(cfg_, "max_position_embeddings", f).value_or(0);
    c.norm_eps = hf::optNumber(cfg_, "rms_norm_eps", f).value_or(1e-6);
    c.tied_embeddings = hf::optBool(cfg_, "tie_word_embeddings", f).value_or(false);
    readRope();

    std::string act = hf::optString(cfg_, "hidden_act", f).value_or("silu");
    if (act == "silu" || act == "swish")
      c.activation = Activation::SiLU;
    else if (act == "gelu")
      c.activation = Activation::GELU;
    else
      failConfig("unsupported hidden_act '" + act + "' (supported: silu, gelu)");

    const std::string name = arch.name;
    c.attention_bias = name == "qwen2";
    if (name != "qwen2" && hf::optBool(cfg_, "attention_bias", f).value_or(false))
      failConfig("attention_bias (biases on q/k/v/o projections) is not supported for " + name);
    if (hf::optBool(cfg_, "mlp_bias", f).value_or(false))
      failConfig("mlp_bias is not supported");

    if (name == "qwen2") {
      if (hf::optBool(cfg_, "use_sliding_window", f).value_or(false))
        c.sliding_window = hf::optInt(cfg_, "sliding_window", f).value_or(0);
    } else {
      c.sliding_window = hf::optInt(cfg_, "sliding_window", f).value_or(0);
    }
    if (name == "olmo") {
      // OLMo's norms are LayerNorms without scale or shift, eps fixed at 1e-5
      // (OlmoLayerNorm); llmc gives them a scale of ones (addUnitNormScales).
      c.norm = NormKind::LayerNorm;
      c.norm_eps = 1e-5;
      auto clip = cfg_.find("clip_qkv");
      if (clip != cfg_.end() && !clip->is_null())
        failConfig("clip_qkv (clamping q, k and v) is not supported");
    }
    if (name == "mixtral") {
      c.num_experts = hf::requireInt(cfg_, "num_local_experts", f);
      c.num_experts_per_token = hf::requireInt(cfg_, "num_experts_per_tok", f);
      if (c.num_experts <= 0 || c.num_experts > 1024)
        failConfig("num_local_experts must be between 1 and 1024");
    }
    if (auto dt = hf::optString(cfg_, "torch_dtype", f))
      m_.metadata.emplace_back("hf.torch_dtype", *dt);
    m_.metadata.emplace_back("hf.architecture", arch.hf_class);
  }

  void readRope() {
    const std::string &f = config_path_;
    ModelConfig &c = m_.config;
    c.rope_theta = hf::optNumber(cfg_, "rope_theta", f).value_or(10000.0);
    // Newer configs nest RoPE settings in "rope_parameters"; older ones use
    // "rope_scaling" (null when unscaled).
    for (const char *key : {"rope_scaling", "rope_parameters"}) {
      auto it = cfg_.find(key);
      if (it == cfg_.end() || it->is_null())
        continue;
      if (!it->is_object())
        failConfig(std::string("\"") + key + "\" should be an object");
      std::string type = hf::optString(*it, "rope_type", f)
                             .value_or(hf::optString(*it, "type", f).value_or("default"));
      if (type != "default")
        failConfig("RoPE scaling '" + type + "' is not supported");
      if (auto theta = hf::optNumber(*it, "rope_theta", f))
        c.rope_theta = *theta;
    }
    if (hf::optNumber(cfg_, "partial_rotary_factor", f).value_or(1.0) != 1.0)
      failConfig("partial_rotary_factor is not supported");
  }

  //===- weights -----------------------------------------------------------===//

  std::vector<std::string> listSafetensors() {
    std::vector<std::string> names;
    if (DIR *d = ::opendir(dir_.c_str())) {
      while (dirent *e = ::readdir(d)) {
        std::string n = e->d_name;
        if (endsWith(n, ".safetensors"))
          names.push_back(n);
      }
      ::closedir(d);
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  void addFile(const std::string &name) {
    files_.push_back(safetensors::File::open(joinPath(dir_, name)));
    m_.buffers.push_back(files_.back().mapping());
  }

  void openWeights() {
    const std::string index_path = joinPath(dir_, "model.safetensors.index.json");
    if (fileExists(index_path)) {
      json index = hf::parseJsonFile(index_path);
      auto wm = index.is_object() ? index.find("weight_map") : index.end();
      if (wm == index.end() || !wm->is_object())
        importFail(index_path, "missing \"weight_map\" object");
      std::map<std::string, size_t> file_ids;
      for (auto it = wm->begin(); it != wm->end(); ++it) {
        if (!it->is_string())
          importFail(index_path, "weight_map entry " + it.key() + " is not a file name");
        std::string shard = it->get<std::string>();
        if (shard.empty() || shard.find('/') != std::string::npos || shard == "..")
          importFail(index_path, "weight_map entry " + it.key() + " names an invalid file '" + shard + "'");
        if (!file_ids.count(shard)) {
          if (!fileExists(joinPath(dir_, shard)))
            importFail(index_path, "shard " + shard + " (for " + it.key() + ") does not exist");
          file_ids[shard] = files_.size();
          addFile(shard);
        }
        const safetensors::File &sf = files_[file_ids[shard]];
        const safetensors::Entry *e = sf.find(it.key());
        if (!e)
          importFail(sf.path(), "tensor " + it.key() + " listed in the index is not in this shard");
        entries_.push_back(e);
      }
      m_.metadata.emplace_back("hf.shards", std::to_string(files_.size()));
      return;
    }
    std::vector<std::string> names;
    if (fileExists(joinPath(dir_, "model.safetensors")))
      names.push_back("model.safetensors");
    else
      names = listSafetensors();
    if (names.empty()) {
      if (fileExists(joinPath(dir_, "pytorch_model.bin")))
        importFail(dir_, "only safetensors weights are supported (found pytorch_model.bin)");
      importFail(dir_, "no model.safetensors or model.safetensors.index.json in the model folder");
    }
    std::set<std::string> seen;
    for (const std::string &n : names) {
      addFile(n);
      for (const safetensors::Entry &e : files_.back().entries()) {
        if (!seen.insert(e.name).second)
          importFail(files_.back().path(), "tensor " + e.name + " appears in more than one file");
        entries_.push_back(&e);
      }
    }
  }

  //===- names -------------------------------------------------------------===//

  DType storedType(const safetensors::Entry &e) {
    if (!e.dtype)
      importFail(dir_, "tensor " + e.name + " has dtype " + e.dtype_name +
                           " (supported: F32, F16, BF16)");
    return *e.dtype;
  }

  void addTensor(const std::string &name, const safetensors::Entry &e) {
    if (m_.find(name))
      importFail(dir_, "tensor " + name + " is given twice (from " + e.name + ")");
    SourceTensor t;
    t.name = name;
    t.dtype = storedType(e);
    t.shape = e.shape;
    t.data = e.data;
    t.nbytes = e.nbytes;
    m_.tensors.push_back(std::move(t));
  }

  void mapTensors() {
    const ModelConfig &c = m_.config;
    const safetensors::Entry *lm_head = nullptr;
    ExpertMap experts; // [(layer, w1/w3/w2)][expert], Mixtral only

    for (const safetensors::Entry *e : entries_) {
      const std::string &n = e->name;
      if (n == "model.embed_tokens.weight") {
        addTensor("token_embd.weight", *e);
      } else if (n == "model.norm.weight") {
        addTensor("output_norm.weight", *e);
      } else if (n == "lm_head.weight") {
        lm_head = e;
      } else if (endsWith(n, "rotary_emb.inv_freq")) {
        continue; // a cached buffer of old checkpoints, recomputed from theta
      } else if (startsWith(n, "model.layers.")) {
        size_t pos = std::strlen("model.layers.");
        int64_t layer;
        if (!parseIndex(n, pos, layer) || layer >= c.num_layers)
          importFail(dir_, "tensor " + n + " names a layer outside 0.." +
                               std::to_string(c.num_layers - 1));
        const std::string rest = n.substr(pos);
        const std::string prefix = "blk." + std::to_string(layer) + ".";
        if (mapLayerTensor(rest, prefix, *e) || collectExpert(layer, rest, *e, experts))
          continue;
        importFail(dir_, "unexpected tensor " + n + " (not part of a supported " +
                             c.architecture + " model)");
      } else {
        importFail(dir_, "unexpected tensor " + n + " (not part of a supported " +
                             c.architecture + " model)");
      }
    }

    if (c.tied_embeddings) {
      if (lm_head)
        m_.metadata.emplace_back("hf.ignored", "lm_head.weight (tie_word_embeddings is true)");
    } else if (lm_head) {
      addTensor("output.weight", *lm_head);
    } else {
      m_.config.tied_embeddings = true; // no classifier stored: it is the embedding
      m_.metadata.emplace_back("hf.note", "no lm_head.weight; using tied embeddings");
    }
    stackExperts(experts);
  }

  /// The scale of ones of every parameter-free norm (OLMo).
  void addUnitNormScales() {
    const int64_t d = m_.config.hidden_size;
    std::vector<std::string> names{"output_norm.weight"};
    for (int64_t l = 0; l < m_.config.num_layers; ++l)
      for (const char *n : {"attn_norm.weight", "ffn_norm.weight"})
        names.push_back("blk." + std::to_string(l) + "." + n);
    for (const std::string &n : names) {
      if (m_.find(n))
        importFail(dir_, "an OLMo checkpoint with a norm weight (" + n + ")");
      addUnitScale(m_, n, d);
    }
  }

  /// Phi-3's fused [parts..., in] weights: each part its rows, in place.
  bool mapFusedTensor(const std::string &rest, const std::string &prefix,
                      const safetensors::Entry &e) {
    const ModelConfig &c = m_.config;
    const int64_t qd = c.num_heads * c.head_dim, kd = c.num_kv_heads * c.head_dim,
                  f = c.intermediate_size;
    std::vector<std::pair<const char *, int64_t>> parts;
    if (rest == "self_attn.qkv_proj.weight")
      parts = {{"attn_q.weight", qd}, {"attn_k.weight", kd}, {"attn_v.weight", kd}};
    else if (rest == "mlp.gate_up_proj.weight")
      parts = {{"ffn_gate.weight", f}, {"ffn_up.weight", f}};
    else
      return false;
    int64_t rows = 0;
    for (const auto &p : parts)
      rows += p.second;
    if (e.shape != std::vector<int64_t>{rows, c.hidden_size})
      importFail(dir_, "tensor " + e.name + " has shape " + shapeString(e.shape) + ", expected [" +
                           std::to_string(rows) + ", " + std::to_string(c.hidden_size) + "]");
    const int64_t rowBytes = e.nbytes / rows;
    int64_t row = 0;
    for (const auto &[name, n] : parts) {
      SourceTensor t;
      t.name = prefix + name;
      t.dtype = storedType(e);
      t.shape = {n, c.hidden_size};
      t.data = e.data + row * rowBytes;
      t.nbytes = n * rowBytes;
      if (m_.find(t.name))
        importFail(dir_, "tensor " + t.name + " is given twice (from " + e.name + ")");
      m_.tensors.push_back(std::move(t));
      row += n;
    }
    return true;
  }

  bool mapLayerTensor(const std::string &rest, const std::string &prefix,
                      const safetensors::Entry &e) {
    if (m_.config.architecture == "phi3" && mapFusedTensor(rest, prefix, e))
      return true;
    for (const auto &[hf_name, ours] : kLayerNames) {
      if (rest != hf_name)
        continue;
      if (!m_.config.attention_bias && endsWith(rest, ".bias"))
        importFail(dir_, "unexpected bias tensor " + e.name + " (the config has no attention bias)");
      addTensor(prefix + ours, e);
      return true;
    }
    return false;
  }

  using ExpertMap = std::map<std::pair<int64_t, int>, std::vector<const safetensors::Entry *>>;

  // "block_sparse_moe.experts.X.w{1,2,3}.weight" of a Mixtral layer.
  bool collectExpert(int64_t layer, const std::string &rest, const safetensors::Entry &e,
                     ExpertMap &experts) {
    const int64_t E = m_.config.num_experts;
    const char *head = "block_sparse_moe.experts.";
    size_t p = std::strlen(head);
    int64_t expert;
    if (E <= 0 || !startsWith(rest, head) || !parseIndex(rest, p, expert) || expert >= E)
      return false;
    const std::string w = rest.substr(p);
    for (int k = 0; k < 3; ++k) {
      if (w != std::string(kExpertNames[k].first) + ".weight")
        continue;
      auto &slot = experts[{layer, k}];
      slot.resize(size_t(E), nullptr);
      if (slot[size_t(expert)])
        importFail(dir_, "tensor " + e.name + " is given twice");
      slot[size_t(expert)] = &e;
      return true;
    }
    return false;
  }

  void stackExperts(const ExpertMap &experts) {
    for (const auto &[key, list] : experts) {
      const std::string name = "blk." + std::to_string(key.first) + "." + kExpertNames[key.second].second;
      const safetensors::Entry *first = list.empty() ? nullptr : list[0];
      for (size_t x = 0; x < list.size(); ++x) {
        if (!list[x])
          importFail(dir_, "layer " + std::to_string(key.first) + " is missing expert " +
                               std::to_string(x) + " " + kExpertNames[key.second].first + ".weight");
        if (list[x]->dtype_name != first->dtype_name || list[x]->shape != first->shape)
          importFail(dir_, "expert " + list[x]->name + " differs in dtype or shape from expert 0");
      }
      const DType t = storedType(*first);
      auto buf = std::make_shared<OwnedBuffer>();
      int64_t total;
      if (!checkedMul(first->nbytes, int64_t(list.size()), total))
        importFail(dir_, "stacked experts of " + name + " are too large");
      buf->bytes.resize(size_t(total));
      for (size_t x = 0; x < list.size(); ++x)
        std::memcpy(buf->bytes.data() + x * size_t(first->nbytes), list[x]->data,
                    size_t(first->nbytes));
      SourceTensor st;
      st.name = name;
      st.dtype = t;
      st.shape = first->shape;
      st.shape.insert(st.shape.begin(), int64_t(list.size()));
      st.data = buf->bytes.data();
      st.nbytes = total;
      m_.tensors.push_back(std::move(st));
      m_.buffers.push_back(std::move(buf));
    }
  }

  std::string dir_;
  std::string config_path_;
  SourceModel &m_;
  json cfg_;
  std::vector<safetensors::File> files_;
  std::vector<const safetensors::Entry *> entries_;
};

} // namespace

SourceModel readHuggingFace(const std::string &dir) {
  SourceModel m;
  m.format = "hf";
  m.path = dir;
  try {
    HfModelBuilder(dir, m).build();
  } catch (const nlohmann::json::exception &e) {
    importFail(dir, std::string("unexpected JSON content: ") + e.what());
  }
  return m;
}

} // namespace llmc
