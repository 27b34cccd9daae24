//===- HfReaderTest.cpp - Hugging Face folder reader -----------------------===//
// Tiny Llama / Qwen2 / Mixtral folders written here (config.json, single or
// sharded safetensors, tokenizer files) must map to canonical tensor names
// with stored dtypes kept, experts stacked, and tokenizers read; broken
// JSON, truncated safetensors and missing tensors give ImportErrors that
// name the file.
//===----------------------------------------------------------------------===//
#include "ReaderTestUtil.h"
#include "compiler/import/SourceModel.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

using namespace llmc;
using namespace llmc::readertest;
using nlohmann::json;

namespace {

struct StTensor {
  std::string name;
  std::string dtype; // "F32" | "F16" | "BF16" | ...
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// Deterministic contents: element i of tensor `seed` (stored as F32/F16/BF16).
StTensor makeTensor(const std::string &name, const std::string &dtype, std::vector<int64_t> shape,
                    int seed) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  StTensor t{name, dtype, std::move(shape), {}};
  const size_t es = dtype == "F32" ? 4 : 2;
  t.bytes.resize(size_t(n) * es);
  for (int64_t i = 0; i < n; ++i) {
    float v = float(seed) + 0.001f * float(i % 997);
    if (dtype == "F32") {
      std::memcpy(t.bytes.data() + 4 * i, &v, 4);
    } else {
      uint16_t h = dtype == "F16" ? floatToHalf(v) : floatToBf16(v);
      std::memcpy(t.bytes.data() + 2 * i, &h, 2);
    }
  }
  return t;
}

void writeSafetensors(const std::string &path, const std::vector<StTensor> &ts) {
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t off = 0;
  for (const auto &t : ts) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes.size()}}};
    off += t.bytes.size();
  }
  std::string h = header.dump();
  h.resize((h.size() + 7) / 8 * 8, ' ');
  std::vector<uint8_t> out(8);
  uint64_t len = h.size();
  std::memcpy(out.data(), &len, 8);
  out.insert(out.end(), h.begin(), h.end());
  for (const auto &t : ts)
    out.insert(out.end(), t.bytes.begin(), t.bytes.end());
  writeBytes(path, out);
}

constexpr int64_t D = 16, H = 4, KV = 2, HD = 4, F = 24, L = 2, V = 20, E = 3;

json llamaConfig() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"hidden_size", D},
          {"intermediate_size", F},
          {"num_hidden_layers", L},
          {"num_attention_heads", H},
          {"num_key_value_heads", KV},
          {"vocab_size", V},
          {"max_position_embeddings", 128},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 250000.0},
          {"hidden_act", "silu"},
          {"tie_word_embeddings", false},
          {"rope_scaling", nullptr},
          {"torch_dtype", "bfloat16"}};
}

// HF tensors of a tiny model. kind: "llama" | "qwen2" | "mixtral".
std::vector<StTensor> hfTensors(const std::string &kind, bool lm_head, const std::string &dtype = "BF16") {
  std::vector<StTensor> ts;
  int seed = 1;
  ts.push_back(makeTensor("model.embed_tokens.weight", dtype, {V, D}, seed++));
  ts.push_back(makeTensor("model.norm.weight", "F32", {D}, seed++));
  if (lm_head)
    ts.push_back(makeTensor("lm_head.weight", dtype, {V, D}, seed++));
  for (int l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    ts.push_back(makeTensor(p + "input_layernorm.weight", "F32", {D}, seed++));
    ts.push_back(makeTensor(p + "post_attention_layernorm.weight", "F32", {D}, seed++));
    ts.push_back(makeTensor(p + "self_attn.q_proj.weight", dtype, {H * HD, D}, seed++));
    ts.push_back(makeTensor(p + "self_attn.k_proj.weight", dtype, {KV * HD, D}, seed++));
    ts.push_back(makeTensor(p + "self_attn.v_proj.weight", "F16", {KV * HD, D}, seed++));
    ts.push_back(makeTensor(p + "self_attn.o_proj.weight", dtype, {D, H * HD}, seed++));
    if (kind == "qwen2") {
      ts.push_back(makeTensor(p + "self_attn.q_proj.bias", dtype, {H * HD}, seed++));
      ts.push_back(makeTensor(p + "self_attn.k_proj.bias", dtype, {KV * HD}, seed++));
      ts.push_back(makeTensor(p + "self_attn.v_proj.bias", dtype, {KV * HD}, seed++));
    }
    if (kind == "mixtral") {
      ts.push_back(makeTensor(p + "block_sparse_moe.gate.weight", dtype, {E, D}, seed++));
      for (int x = 0; x < E; ++x) {
        const std::string q = p + "block_sparse_moe.experts." + std::to_string(x) + ".";
        ts.push_back(makeTensor(q + "w1.weight", dtype, {F, D}, 100 + 10 * l + x));
        ts.push_back(makeTensor(q + "w2.weight", dtype, {D, F}, 200 + 10 * l + x));
        ts.push_back(makeTensor(q + "w3.weight", dtype, {F, D}, 300 + 10 * l + x));
      }
    } else {
      ts.push_back(makeTensor(p + "mlp.gate_proj.weight", dtype, {F, D}, seed++));
      ts.push_back(makeTensor(p + "mlp.up_proj.weight", dtype, {F, D}, seed++));
      ts.push_back(makeTensor(p + "mlp.down_proj.weight", dtype, {D, F}, seed++));
    }
  }
  return ts;
}

const StTensor &byName(const std::vector<StTensor> &ts, const std::string &name) {
  for (const auto &t : ts)
    if (t.name == name)
      return t;
  throw std::runtime_error("no test tensor " + name);
}

bool sameBytes(const SourceTensor *t, const StTensor &want) {
  return t && t->nbytes == int64_t(want.bytes.size()) &&
         std::memcmp(t->data, want.bytes.data(), want.bytes.size()) == 0;
}

// A byte-level BPE tokenizer.json (merges in both accepted forms).
json byteLevelTokenizer() {
  json vocab = json::object();
  const char *toks[] = {"a", "b", "c", "\xc4\xa0", "ab", "\xc4\xa0" "a", "abc", "d"};
  for (int i = 0; i < 8; ++i)
    vocab[toks[i]] = i;
  return {{"version", "1.0"},
          {"added_tokens",
           {{{"id", 8}, {"content", "<|endoftext|>"}, {"special", true}},
            {{"id", 9}, {"content", "<|im_start|>"}, {"special", true}},
            {{"id", 10}, {"content", "<|im_end|>"}, {"special", true}}}},
          {"normalizer", nullptr},
          {"pre_tokenizer",
           {{"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Digits"}, {"individual_digits", true}},
              {{"type", "ByteLevel"}, {"add_prefix_space", false}}}}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model",
           {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b", json::array({"\xc4\xa0", "a"}), "ab c"}}}}};
}

// A SentencePiece-style (Metaspace, byte fallback) tokenizer.json.
json metaspaceTokenizer() {
  json vocab = json::object();
  const char *toks[] = {"<unk>", "<s>", "</s>", "<0x0A>", "<0x41>", "\xe2\x96\x81", "h", "i",
                        "hi", "\xe2\x96\x81" "hi", "xyz"};
  for (int i = 0; i < 11; ++i)
    vocab[toks[i]] = i;
  return {{"added_tokens",
           {{{"id", 0}, {"content", "<unk>"}, {"special", true}},
            {{"id", 1}, {"content", "<s>"}, {"special", true}},
            {{"id", 2}, {"content", "</s>"}, {"special", true}}}},
          {"normalizer",
           {{"type", "Sequence"},
            {"normalizers",
             {{{"type", "Prepend"}, {"prepend", "\xe2\x96\x81"}},
              {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xe2\x96\x81"}}}}}},
          {"pre_tokenizer", nullptr},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}}},
          {"decoder", {{"type", "Sequence"}, {"decoders", {{{"type", "ByteFallback"}}}}}},
          {"model",
           {{"type", "BPE"}, {"byte_fallback", true}, {"unk_token", "<unk>"}, {"vocab", vocab},
            {"merges", {"h i", "\xe2\x96\x81 hi"}}}}};
}

void writeJson(const std::string &path, const json &j) { writeText(path, j.dump(2)); }

} // namespace

TEST(HfReader, TinyLlamaSingleFile) {
  ScratchDir dir("hf");
  auto ts = hfTensors("llama", true);
  writeSafetensors(dir.file("model.safetensors"), ts);
  writeJson(dir.file("config.json"), llamaConfig());
  SourceModel m = readHuggingFace(dir.path());
  const ModelConfig &c = m.config;
  EXPECT_EQ(m.format, "hf");
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.num_layers, L);
  EXPECT_EQ(c.hidden_size, D);
  EXPECT_EQ(c.intermediate_size, F);
  EXPECT_EQ(c.num_heads, H);
  EXPECT_EQ(c.num_kv_heads, KV);
  EXPECT_EQ(c.head_dim, HD);
  EXPECT_EQ(c.vocab_size, V);
  EXPECT_EQ(c.context_length, 128);
  EXPECT_DOUBLE_EQ(c.rope_theta, 250000.0);
  EXPECT_DOUBLE_EQ(c.norm_eps, 1e-5);
  EXPECT_EQ(c.rope_style, RopeStyle::Half);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_TRUE(m.tokenizer.empty());

  const SourceTensor *q = m.find("blk.1.attn_q.weight");
  ASSERT_TRUE(q);
  EXPECT_EQ(q->dtype, DType::BF16);
  EXPECT_EQ(q->shape, (std::vector<int64_t>{H * HD, D}));
  EXPECT_TRUE(sameBytes(q, byName(ts, "model.layers.1.self_attn.q_proj.weight")));
  EXPECT_EQ(m.find("blk.0.attn_v.weight")->dtype, DType::F16);
  EXPECT_EQ(m.find("blk.0.attn_norm.weight")->dtype, DType::F32);
  EXPECT_TRUE(sameBytes(m.find("output.weight"), byName(ts, "lm_head.weight")));
  EXPECT_TRUE(sameBytes(m.find("blk.0.ffn_norm.weight"),
                        byName(ts, "model.layers.0.post_attention_layernorm.weight")));
  EXPECT_TRUE(sameBytes(m.find("blk.1.ffn_down.weight"), byName(ts, "model.layers.1.mlp.down_proj.weight")));
  EXPECT_TRUE(sameBytes(m.find("token_embd.weight"), byName(ts, "model.embed_tokens.weight")));
  EXPECT_TRUE(sameBytes(m.find("output_norm.weight"), byName(ts, "model.norm.weight")));
  // readModel picks the HF reader for a folder, and for its config.json.
  EXPECT_EQ(readModel(dir.path()).format, "hf");
  EXPECT_EQ(readModel(dir.file("config.json")).format, "hf");
}

TEST(HfReader, TiedEmbeddingsAndHeadDim) {
  ScratchDir dir("hf");
  writeSafetensors(dir.file("model.safetensors"), hfTensors("llama", true, "F32"));
  json cfg = llamaConfig();
  cfg["tie_word_embeddings"] = true;
  cfg["head_dim"] = HD; // explicit, equal to hidden / heads here
  writeJson(dir.file("config.json"), cfg);
  SourceModel m = readHuggingFace(dir.path());
  EXPECT_TRUE(m.config.tied_embeddings);
  EXPECT_EQ(m.find("output.weight"), nullptr);
  EXPECT_EQ(m.find("token_embd.weight")->dtype, DType::F32);

  // No lm_head and no tie flag: the classifier is the embedding.
  ScratchDir dir2("hf");
  writeSafetensors(dir2.file("model.safetensors"), hfTensors("llama", false));
  writeJson(dir2.file("config.json"), llamaConfig());
  EXPECT_TRUE(readHuggingFace(dir2.path()).config.tied_embeddings);
}

TEST(HfReader, ExplicitHeadDim) {
  ScratchDir dir("hf");
  // head_dim 8 with 4 heads: q is [32, 16], o is [16, 32].
  auto ts = hfTensors("llama", false);
  for (auto &t : ts) {
    if (t.name.find("q_proj") != std::string::npos)
      t = makeTensor(t.name, "BF16", {H * 8, D}, 5);
    else if (t.name.find("k_proj") != std::string::npos || t.name.find("v_proj") != std::string::npos)
      t = makeTensor(t.name, "BF16", {KV * 8, D}, 6);
    else if (t.name.find("o_proj") != std::string::npos)
      t = makeTensor(t.name, "BF16", {D, H * 8}, 7);
  }
  writeSafetensors(dir.file("model.safetensors"), ts);
  json cfg = llamaConfig();
  cfg["head_dim"] = 8;
  writeJson(dir.file("config.json"), cfg);
  SourceModel m = readHuggingFace(dir.path());
  EXPECT_EQ(m.config.head_dim, 8);
  EXPECT_EQ(m.find("blk.0.attn_output.weight")->shape, (std::vector<int64_t>{D, H * 8}));
}

TEST(HfReader, ShardedWithIndex) {
  ScratchDir dir("hf");
  auto ts = hfTensors("llama", true);
  std::vector<StTensor> a(ts.begin(), ts.begin() + ts.size() / 2), b(ts.begin() + ts.size() / 2, ts.end());
  writeSafetensors(dir.file("model-00001-of-00002.safetensors"), a);
  writeSafetensors(dir.file("model-00002-of-00002.safetensors"), b);
  json wm = json::object();
  for (const auto &t : a)
    wm[t.name] = "model-00001-of-00002.safetensors";
  for (const auto &t : b)
    wm[t.name] = "model-00002-of-00002.safetensors";
  writeJson(dir.file("model.safetensors.index.json"), {{"metadata", {{"total_size", 0}}}, {"weight_map", wm}});
  json cfg = llamaConfig();
  cfg["architectures"] = {"MistralForCausalLM"};
  cfg["model_type"] = "mistral";
  cfg["sliding_window"] = 4096;
  writeJson(dir.file("config.json"), cfg);
  SourceModel m = readHuggingFace(dir.path());
  EXPECT_EQ(m.config.architecture, "mistral");
  EXPECT_EQ(m.config.sliding_window, 4096);
  EXPECT_EQ(m.buffers.size(), 2u);
  for (const auto &t : ts) {
    if (t.name == "lm_head.weight")
      continue;
    SCOPED_TRACE(t.name);
    bool found = false;
    for (const auto &st : m.tensors)
      found |= sameBytes(&st, t);
    EXPECT_TRUE(found);
  }

  // An index naming a tensor its shard lacks: point a shard-2 tensor at shard 1.
  const std::string moved = b.front().name;
  wm[moved] = "model-00001-of-00002.safetensors";
  writeJson(dir.file("model.safetensors.index.json"), {{"weight_map", wm}});
  expectImportError([&] { readHuggingFace(dir.path()); }, {"model-00001-of-00002.safetensors", moved});
  // An index naming a shard that does not exist.
  wm[moved] = "model-00009-of-00002.safetensors";
  writeJson(dir.file("model.safetensors.index.json"), {{"weight_map", wm}});
  expectImportError([&] { readHuggingFace(dir.path()); }, {"model.safetensors.index.json", "00009"});
}

TEST(HfReader, Qwen2Biases) {
  ScratchDir dir("hf");
  auto ts = hfTensors("qwen2", false);
  writeSafetensors(dir.file("model.safetensors"), ts);
  json cfg = llamaConfig();
  cfg["architectures"] = {"Qwen2ForCausalLM"};
  cfg["model_type"] = "qwen2";
  cfg["tie_word_embeddings"] = true;
  cfg["use_sliding_window"] = false;
  cfg["sliding_window"] = 32768;
  writeJson(dir.file("config.json"), cfg);
  SourceModel m = readHuggingFace(dir.path());
  EXPECT_EQ(m.config.architecture, "qwen2");
  EXPECT_TRUE(m.config.attention_bias);
  EXPECT_EQ(m.config.sliding_window, 0);
  EXPECT_EQ(m.config.rope_style, RopeStyle::Half);
  EXPECT_TRUE(sameBytes(m.find("blk.1.attn_k.bias"), byName(ts, "model.layers.1.self_attn.k_proj.bias")));
}

TEST(HfReader, MixtralExpertsAreStacked) {
  ScratchDir dir("hf");
  auto ts = hfTensors("mixtral", true);
  writeSafetensors(dir.file("model.safetensors"), ts);
  json cfg = llamaConfig();
  cfg["architectures"] = {"MixtralForCausalLM"};
  cfg["model_type"] = "mixtral";
  cfg["num_local_experts"] = E;
  cfg["num_experts_per_tok"] = 2;
  writeJson(dir.file("config.json"), cfg);
  SourceModel m = readHuggingFace(dir.path());
  EXPECT_EQ(m.config.num_experts, E);
  EXPECT_EQ(m.config.num_experts_per_token, 2);
  EXPECT_TRUE(sameBytes(m.find("blk.1.ffn_gate_inp.weight"),
                        byName(ts, "model.layers.1.block_sparse_moe.gate.weight")));
  struct Kind { const char *ours, *hf; std::vector<int64_t> shape; };
  for (const Kind &k : {Kind{"ffn_gate_exps", "w1", {E, F, D}}, Kind{"ffn_up_exps", "w3", {E, F, D}},
                        Kind{"ffn_down_exps", "w2", {E, D, F}}}) {
    for (int l = 0; l < L; ++l) {
      const SourceTensor *t = m.find("blk." + std::to_string(l) + "." + k.ours + ".weight");
      ASSERT_TRUE(t) << k.ours;
      EXPECT_EQ(t->shape, k.shape);
      EXPECT_EQ(t->dtype, DType::BF16);
      const uint8_t *p = static_cast<const uint8_t *>(t->data);
      for (int x = 0; x < E; ++x) {
        const StTensor &src = byName(ts, "model.layers." + std::to_string(l) + ".block_sparse_moe.experts." +
                                             std::to_string(x) + "." + k.hf + ".weight");
        EXPECT_EQ(std::memcmp(p + x * src.bytes.size(), src.bytes.data(), src.bytes.size()), 0)
            << k.ours << " layer " << l << " expert " << x;
      }
    }
  }
}

TEST(HfReader, MixtralMissingExpert) {
  ScratchDir dir("hf");
  auto ts = hfTensors("mixtral", true);
  ts.erase(std::remove_if(ts.begin(), ts.end(),
                          [](const StTensor &t) { return t.name == "model.layers.1.block_sparse_moe.experts.2.w3.weight"; }),
           ts.end());
  writeSafetensors(dir.file("model.safetensors"), ts);
  json cfg = llamaConfig();
  cfg["architectures"] = {"MixtralForCausalLM"};
  cfg["num_local_experts"] = E;
  cfg["num_experts_per_tok"] = 2;
  writeJson(dir.file("config.json"), cfg);
  expectImportError([&] { readHuggingFace(dir.path()); }, {dir.path(), "expert 2", "w3"});
}

TEST(HfReader, ByteLevelTokenizer) {
  ScratchDir dir("hf");
  writeSafetensors(dir.file("model.safetensors"), hfTensors("llama", true));
  writeJson(dir.file("config.json"), llamaConfig());
  writeJson(dir.file("tokenizer.json"), byteLevelTokenizer());
  writeJson(dir.file("tokenizer_config.json"),
            {{"bos_token", "<|im_start|>"},
             {"eos_token", {{"content", "<|im_end|>"}, {"special", true}}},
             {"add_bos_token", false},
             {"chat_template", "{% for m in messages %}{{ m.content }}{% endfor %}"}});
  SourceModel m = readHuggingFace(dir.path());
  const TokenizerData &t = m.tokenizer;
  EXPECT_EQ(t.kind, "gpt2");
  EXPECT_EQ(t.pre, "smollm");
  ASSERT_EQ(t.tokens.size(), 11u);
  EXPECT_EQ(t.tokens[5], "\xc4\xa0" "a");
  EXPECT_EQ(t.tokens[9], "<|im_start|>");
  EXPECT_EQ(t.token_types[9], 3);
  EXPECT_EQ(t.token_types[2], 1);
  EXPECT_EQ(t.merges, (std::vector<std::string>{"a b", "\xc4\xa0 a", "ab c"}));
  EXPECT_EQ(t.bos_id, 9);
  EXPECT_EQ(t.eos_id, 10);
  EXPECT_FALSE(t.add_bos);
  EXPECT_EQ(t.chat_template, "{% for m in messages %}{{ m.content }}{% endfor %}");
}

TEST(HfReader, SentencePieceStyleTokenizer) {
  ScratchDir dir("hf");
  writeSafetensors(dir.file("model.safetensors"), hfTensors("llama", true));
  json cfg = llamaConfig();
  cfg["bos_token_id"] = 1;
  cfg["eos_token_id"] = {2, 1};
  writeJson(dir.file("config.json"), cfg);
  writeJson(dir.file("tokenizer.json"), metaspaceTokenizer());
  SourceModel m = readHuggingFace(dir.path());
  const TokenizerData &t = m.tokenizer;
  EXPECT_EQ(t.kind, "llama");
  ASSERT_EQ(t.tokens.size(), 11u);
  EXPECT_EQ(t.bos_id, 1); // from config.json (no tokenizer_config.json)
  EXPECT_EQ(t.eos_id, 2);
  EXPECT_EQ(t.unk_id, 0);
  EXPECT_TRUE(t.add_bos); // the post-processor prepends <s>
  EXPECT_TRUE(t.add_space_prefix);
  EXPECT_EQ(t.token_types[3], 6); // <0x0A>
  EXPECT_EQ(t.token_types[4], 6);
  EXPECT_EQ(t.token_types[1], 3);
  ASSERT_EQ(t.scores.size(), 11u);
  EXPECT_GT(t.scores[8], t.scores[9]); // "hi" merges before "▁hi"
  EXPECT_LT(t.scores[10], t.scores[9]); // "xyz" is built by no merge
}

TEST(HfReader, BadConfigJson) {
  ScratchDir dir("hf");
  writeSafetensors(dir.file("model.safetensors"), hfTensors("llama", true));
  writeText(dir.file("config.json"), "{\"hidden_size\": 16, oops");
  expectImportError([&] { readHuggingFace(dir.path()); }, {"config.json", "invalid JSON"});
  json cfg = llamaConfig();
  cfg["num_hidden_layers"] = "two";
  writeJson(dir.file("config.json"), cfg);
  expectImportError([&] { readHuggingFace(dir.path()); }, {"config.json", "num_hidden_layers"});
  cfg = llamaConfig();
  cfg.erase("hidden_size");
  writeJson(dir.file("config.json"), cfg);
  expectImportError([&] { readHuggingFace(dir.path()); }, {"config.json", "hidden_size"});
}

TEST(HfReader, UnsupportedArchitecture) {
  ScratchDir dir("hf");
  writeSafetensors(dir.file("model.safetensors"), hfTensors("llama", true));
  json cfg = llamaConfig();
  cfg["architectures"] = {"GPT2LMHeadModel"};
  cfg["model_type"] = "gpt2";
  writeJson(dir.file("config.json"), cfg);
  expectImportError([&] { readHuggingFace(dir.path()); }, {"config.json", "GPT2LMHeadModel"});
}

TEST(HfReader, MissingPieces) {
  ScratchDir dir("hf");
  expectImportError([&] { readHuggingFace(dir.path()); }, {dir.path(), "config.json"});
  writeJson(dir.file("config.json"), llamaConfig());
  expectImportError([&] { readHuggingFace(dir.path()); }, {dir.path(), "safetensors"});
  auto ts = hfTensors("llama", true);
  ts.erase(ts.begin() + 5);
  writeSafetensors(dir.file("model.safetensors"), ts);
  expectImportError([&] { readHuggingFace(dir.path()); }, {dir.path(), "missing tensor"});
}

TEST(HfReader, UnexpectedTensorsAndTypes) {
  ScratchDir dir("hf");
  writeJson(dir.file("config.json"), llamaConfig());
  auto ts = hfTensors("llama", true);
  ts.push_back(makeTensor("model.layers.0.self_attn.o_proj.bias", "F32", {D}, 9));
  writeSafetensors(dir.file("model.safetensors"), ts);
  expectImportError([&] { readHuggingFace(dir.path()); }, {"o_proj.bias"});

  ts = hfTensors("llama", true);
  StTensor ids{"model.layers.0.self_attn.q_proj.weight", "I64", {H * HD, D}, {}};
  ids.bytes.resize(size_t(H * HD * D * 8));
  for (auto &t : ts)
    if (t.name == ids.name)
      t = ids;
  writeSafetensors(dir.file("model.safetensors"), ts);
  expectImportError([&] { readHuggingFace(dir.path()); }, {"q_proj.weight", "I64"});

  ts = hfTensors("llama", true);
  ts.push_back(makeTensor("model.layers.0.self_attn.rotary_emb.inv_freq", "F32", {HD / 2}, 9));
  writeSafetensors(dir.file("model.safetensors"), ts);
  EXPECT_NO_THROW(readHuggingFace(dir.path())); // cached RoPE buffers are ignored
}

TEST(HfReader, TruncatedSafetensors) {
  ScratchDir dir("hf");
  writeJson(dir.file("config.json"), llamaConfig());
  writeSafetensors(dir.file("model.safetensors"), hfTensors("llama", true));
  std::vector<uint8_t> good = readBytes(dir.file("model.safetensors"));
  for (size_t cut : {size_t(0), size_t(5), size_t(40), good.size() - 1}) {
    SCOPED_TRACE(cut);
    writeBytes(dir.file("model.safetensors"), good.data(), cut);
    expectImportError([&] { readHuggingFace(dir.path()); }, {"model.safetensors"});
  }
}

TEST(HfReader, CorruptedSafetensorsNeverCrash) {
  ScratchDir dir("hf");
  writeJson(dir.file("config.json"), llamaConfig());
  writeSafetensors(dir.file("model.safetensors"), hfTensors("llama", true));
  std::vector<uint8_t> good = readBytes(dir.file("model.safetensors"));
  uint64_t header;
  std::memcpy(&header, good.data(), 8);
  corruptionSweep(dir.file("model.safetensors"), good, size_t(header) + 8, 300,
                  [&](const std::string &) { readHuggingFace(dir.path()); });
}

TEST(HfReader, CorruptedTokenizerNeverCrashes) {
  ScratchDir dir("hf");
  writeJson(dir.file("config.json"), llamaConfig());
  writeSafetensors(dir.file("model.safetensors"), hfTensors("llama", true));
  std::string tj = metaspaceTokenizer().dump();
  corruptionSweep(dir.file("tokenizer.json"), std::vector<uint8_t>(tj.begin(), tj.end()), tj.size(),
                  200, [&](const std::string &) { readHuggingFace(dir.path()); });
}

TEST(HfReader, PreTokenizerFlavours) {
  ScratchDir dir("hf");
  writeSafetensors(dir.file("model.safetensors"), hfTensors("llama", true));
  writeJson(dir.file("config.json"), llamaConfig());
  const std::string llama3 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  const std::string qwen2 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  struct Case { std::string pattern, want; };
  for (const Case &c : {Case{llama3, "llama-bpe"}, Case{qwen2, "qwen2"}}) {
    json tj = byteLevelTokenizer();
    tj["pre_tokenizer"] = {{"type", "Sequence"},
                           {"pretokenizers",
                            {{{"type", "Split"}, {"pattern", {{"Regex", c.pattern}}}, {"behavior", "Isolated"}},
                             {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
    writeJson(dir.file("tokenizer.json"), tj);
    EXPECT_EQ(readHuggingFace(dir.path()).tokenizer.pre, c.want);
  }
  json tj = byteLevelTokenizer();
  tj["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}};
  writeJson(dir.file("tokenizer.json"), tj);
  EXPECT_EQ(readHuggingFace(dir.path()).tokenizer.pre, "gpt2");
}
