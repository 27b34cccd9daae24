//===- GgufReaderTest.cpp - GGUF reader: real model, synthetic, malformed --===//
// The SmolLM2 GGUF (when present) must give the known config, tensors and
// tokenizer. Small GGUF files written here exercise v2/v3, qwen2 biases,
// MoE tensors, alignment, and every error path: truncation, bad magic,
// unknown architecture, unsupported tensor types, out-of-bounds data.
//===----------------------------------------------------------------------===//
#include "MissingInput.h"
#include "ReaderTestUtil.h"
#include "compiler/import/SourceModel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <sys/stat.h>

using namespace llmc;
using namespace llmc::readertest;

namespace {

// ggml type ids used below.
constexpr uint32_t kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ8_0 = 8, kIQ2_XXS = 16;

// Builds GGUF files byte by byte (independent of the reader under test).
class GgufWriter {
public:
  void u32(const std::string &key, uint32_t v) { kv(key, 4, &v, 4); }
  void i32(const std::string &key, int32_t v) { kv(key, 5, &v, 4); }
  void f32(const std::string &key, float v) { kv(key, 6, &v, 4); }
  void boolean(const std::string &key, bool v) { uint8_t b = v; kv(key, 7, &b, 1); }
  void str(const std::string &key, const std::string &v) {
    key_(key);
    put32(8);
    putStr(v);
  }
  void strArray(const std::string &key, const std::vector<std::string> &v) {
    key_(key);
    put32(9);
    put32(8);
    put64(v.size());
    for (const auto &s : v)
      putStr(s);
  }
  void f32Array(const std::string &key, const std::vector<float> &v) {
    key_(key);
    put32(9);
    put32(6);
    put64(v.size());
    put(v.data(), v.size() * 4);
  }
  void i32Array(const std::string &key, const std::vector<int32_t> &v) {
    key_(key);
    put32(9);
    put32(5);
    put64(v.size());
    put(v.data(), v.size() * 4);
  }
  /// ne innermost first, as GGUF stores it.
  void tensor(const std::string &name, std::vector<uint64_t> ne, uint32_t type,
              std::vector<uint8_t> bytes) {
    tensors_.push_back({name, std::move(ne), type, std::move(bytes)});
  }
  void setVersion(uint32_t v) { version_ = v; }

  std::vector<uint8_t> build(uint64_t align = 32) const {
    std::vector<uint8_t> out;
    auto app = [&](const void *p, size_t n) {
      out.insert(out.end(), static_cast<const uint8_t *>(p), static_cast<const uint8_t *>(p) + n);
    };
    app("GGUF", 4);
    app(&version_, 4);
    uint64_t nt = tensors_.size();
    app(&nt, 8);
    app(&nkv_, 8);
    out.insert(out.end(), kvs_.begin(), kvs_.end());
    std::vector<uint64_t> offsets;
    uint64_t off = 0;
    for (const auto &t : tensors_) {
      uint64_t len = t.name.size();
      app(&len, 8);
      app(t.name.data(), len);
      uint32_t nd = uint32_t(t.ne.size());
      app(&nd, 4);
      for (uint64_t d : t.ne)
        app(&d, 8);
      app(&t.type, 4);
      app(&off, 8);
      offsets.push_back(off);
      off += (t.bytes.size() + align - 1) / align * align;
    }
    out.resize((out.size() + align - 1) / align * align, 0);
    const size_t data = out.size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      out.resize(data + offsets[i], 0);
      app(tensors_[i].bytes.data(), tensors_[i].bytes.size());
    }
    return out;
  }

private:
  struct T {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type;
    std::vector<uint8_t> bytes;
  };
  void put(const void *p, size_t n) {
    kvs_.insert(kvs_.end(), static_cast<const uint8_t *>(p), static_cast<const uint8_t *>(p) + n);
  }
  void put32(uint32_t v) { put(&v, 4); }
  void put64(uint64_t v) { put(&v, 8); }
  void putStr(const std::string &s) {
    put64(s.size());
    put(s.data(), s.size());
  }
  void key_(const std::string &k) {
    putStr(k);
    ++nkv_;
  }
  void kv(const std::string &key, uint32_t type, const void *v, size_t n) {
    key_(key);
    put32(type);
    put(v, n);
  }
  uint32_t version_ = 3;
  uint64_t nkv_ = 0;
  std::vector<uint8_t> kvs_;
  std::vector<T> tensors_;
};

// Deterministic test weights: rows x cols floats, then quantized.
std::vector<float> pattern(int64_t n, float scale, int seed) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[size_t(i)] = scale * std::sin(0.37f * float(i) + float(seed));
  return v;
}
std::vector<uint8_t> quantized(DType t, const std::vector<float> &x) {
  std::vector<uint8_t> b(size_t(rowBytes(t, int64_t(x.size()))));
  quantizeRowRef(t, x.data(), b.data(), int64_t(x.size()));
  return b;
}

struct TinyOptions {
  std::string arch = "llama";
  bool tied = false;
  bool biases = false;
  int experts = 0;
  bool with_tokenizer = true;
  std::string drop_tensor;
  uint32_t q_type = kQ4_1;
};

constexpr int64_t D = 32, H = 4, KV = 2, HD = 8, F = 64, L = 2, V = 16;

GgufWriter tinyModel(const TinyOptions &o = {}) {
  GgufWriter w;
  const std::string a = o.arch;
  w.str("general.architecture", a);
  w.str("general.name", "tiny-test");
  w.u32(a + ".block_count", L);
  w.u32(a + ".context_length", 256);
  w.u32(a + ".embedding_length", D);
  w.u32(a + ".feed_forward_length", F);
  w.u32(a + ".attention.head_count", H);
  w.u32(a + ".attention.head_count_kv", KV);
  w.f32(a + ".rope.freq_base", 500000.0f);
  w.f32(a + ".attention.layer_norm_rms_epsilon", 1e-6f);
  if (o.experts) {
    w.u32(a + ".expert_count", uint32_t(o.experts));
    w.u32(a + ".expert_used_count", 2);
  }
  if (o.with_tokenizer) {
    w.str("tokenizer.ggml.model", "llama");
    std::vector<std::string> toks = {"<unk>", "<s>", "</s>", "<0x0A>", "\xe2\x96\x81", "a", "b",
                                     "\xe2\x96\x81" "a", "ab", "c", "d", "e", "f", "g", "h", "i"};
    w.strArray("tokenizer.ggml.tokens", toks);
    std::vector<float> scores(toks.size());
    for (size_t i = 0; i < scores.size(); ++i)
      scores[i] = -float(i);
    w.f32Array("tokenizer.ggml.scores", scores);
    std::vector<int32_t> types(toks.size(), 1);
    types[0] = 2, types[1] = 3, types[2] = 3, types[3] = 6;
    w.i32Array("tokenizer.ggml.token_type", types);
    w.u32("tokenizer.ggml.bos_token_id", 1);
    w.u32("tokenizer.ggml.eos_token_id", 2);
    w.u32("tokenizer.ggml.unknown_token_id", 0);
    w.str("tokenizer.chat_template", "{{ messages }}");
  }
  auto add = [&](const std::string &name, std::vector<uint64_t> ne, uint32_t type, int seed) {
    if (name == o.drop_tensor)
      return;
    int64_t n = 1;
    for (uint64_t d : ne)
      n *= int64_t(d);
    std::vector<float> x = pattern(n, 0.5f, seed);
    DType t = type == kF32 ? DType::F32 : type == kF16 ? DType::F16 : type == kQ8_0 ? DType::Q8_0
              : type == kQ4_0 ? DType::Q4_0 : DType::Q4_1;
    w.tensor(name, std::move(ne), type, quantized(t, x));
  };
  int seed = 0;
  add("token_embd.weight", {D, V}, kQ8_0, seed++);
  add("output_norm.weight", {D}, kF32, seed++);
  if (!o.tied)
    add("output.weight", {D, V}, kQ8_0, seed++);
  for (int l = 0; l < L; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", {D}, kF32, seed++);
    add(p + "attn_q.weight", {D, H * HD}, o.q_type, seed++);
    add(p + "attn_k.weight", {D, KV * HD}, kQ4_1, seed++);
    add(p + "attn_v.weight", {D, KV * HD}, kQ4_0, seed++);
    add(p + "attn_output.weight", {H * HD, D}, kF16, seed++);
    if (o.biases) {
      add(p + "attn_q.bias", {H * HD}, kF32, seed++);
      add(p + "attn_k.bias", {KV * HD}, kF32, seed++);
      add(p + "attn_v.bias", {KV * HD}, kF32, seed++);
    }
    add(p + "ffn_norm.weight", {D}, kF32, seed++);
    if (o.experts) {
      const uint64_t E = uint64_t(o.experts);
      add(p + "ffn_gate_inp.weight", {D, E}, kF32, seed++);
      add(p + "ffn_gate_exps.weight", {D, F, E}, kQ8_0, seed++);
      add(p + "ffn_up_exps.weight", {D, F, E}, kQ8_0, seed++);
      add(p + "ffn_down_exps.weight", {F, D, E}, kQ8_0, seed++);
    } else {
      add(p + "ffn_gate.weight", {D, F}, kQ4_0, seed++);
      add(p + "ffn_up.weight", {D, F}, kQ4_1, seed++);
      add(p + "ffn_down.weight", {F, D}, kQ8_0, seed++);
    }
  }
  return w;
}

std::string smolPath() {
  return std::string(LLMC_SOURCE_DIR) + "/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

bool exists(const std::string &p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

} // namespace

TEST(GgufReader, SmolLM2Config) {
  if (!exists(smolPath()))
    LLMC_MISSING_INPUT(smolPath() << " (run scripts/setup.sh)");
  SourceModel m = readGguf(smolPath());
  const ModelConfig &c = m.config;
  EXPECT_EQ(m.format, "gguf");
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.num_layers, 30);
  EXPECT_EQ(c.hidden_size, 576);
  EXPECT_EQ(c.num_heads, 9);
  EXPECT_EQ(c.num_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.intermediate_size, 1536);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.context_length, 8192);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.num_experts, 0);
  EXPECT_DOUBLE_EQ(c.rope_theta, 100000.0);
  EXPECT_NEAR(c.norm_eps, 1e-5, 1e-9);
  EXPECT_EQ(c.rope_style, RopeStyle::Interleaved);
  EXPECT_EQ(m.tensors.size(), 272u);
}

TEST(GgufReader, SmolLM2TensorsAndTokenizer) {
  if (!exists(smolPath()))
    LLMC_MISSING_INPUT(smolPath() << " (run scripts/setup.sh)");
  SourceModel m = readGguf(smolPath());
  const SourceTensor *emb = m.find("token_embd.weight");
  ASSERT_TRUE(emb);
  EXPECT_EQ(emb->dtype, DType::Q8_0);
  EXPECT_EQ(emb->shape, (std::vector<int64_t>{49152, 576}));
  EXPECT_EQ(emb->nbytes, 49152 * rowBytes(DType::Q8_0, 576));
  const SourceTensor *down = m.find("blk.29.ffn_down.weight");
  ASSERT_TRUE(down);
  EXPECT_EQ(down->dtype, DType::Q4_1);
  EXPECT_EQ(down->shape, (std::vector<int64_t>{576, 1536}));
  EXPECT_EQ(m.find("blk.0.attn_k.weight")->shape, (std::vector<int64_t>{192, 576}));
  EXPECT_EQ(m.find("output.weight"), nullptr);
  // Weights decode to sane values.
  std::vector<float> row(576);
  dequantizeRow(emb->dtype, emb->data, row.data(), 576);
  float maxabs = 0;
  for (float v : row) {
    ASSERT_TRUE(std::isfinite(v));
    maxabs = std::max(maxabs, std::fabs(v));
  }
  EXPECT_GT(maxabs, 0.0f);
  EXPECT_LT(maxabs, 10.0f);

  const TokenizerData &t = m.tokenizer;
  EXPECT_EQ(t.kind, "gpt2");
  EXPECT_EQ(t.pre, "smollm");
  EXPECT_EQ(t.tokens.size(), 49152u);
  EXPECT_EQ(t.token_types.size(), 49152u);
  EXPECT_EQ(t.merges.size(), 48900u);
  EXPECT_EQ(t.bos_id, 1);
  EXPECT_EQ(t.eos_id, 2);
  EXPECT_EQ(t.unk_id, 0);
  EXPECT_EQ(t.pad_id, 2);
  EXPECT_FALSE(t.add_bos);
  EXPECT_FALSE(t.add_space_prefix);
  EXPECT_EQ(t.tokens[1], "<|im_start|>");
  EXPECT_NE(t.chat_template.find("<|im_start|>"), std::string::npos);
}

TEST(GgufReader, TinyLlamaV3) {
  ScratchDir dir("gguf");
  GgufWriter w = tinyModel();
  writeBytes(dir.file("tiny.gguf"), w.build());
  SourceModel m = readGguf(dir.file("tiny.gguf"));
  const ModelConfig &c = m.config;
  EXPECT_EQ(c.name, "tiny-test");
  EXPECT_EQ(c.num_layers, L);
  EXPECT_EQ(c.hidden_size, D);
  EXPECT_EQ(c.num_heads, H);
  EXPECT_EQ(c.num_kv_heads, KV);
  EXPECT_EQ(c.head_dim, HD);
  EXPECT_EQ(c.intermediate_size, F);
  EXPECT_EQ(c.vocab_size, V);
  EXPECT_EQ(c.context_length, 256);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_NEAR(c.norm_eps, 1e-6, 1e-12);

  // Shapes are reversed to outermost first; bytes are the ones written.
  const SourceTensor *q = m.find("blk.1.attn_q.weight");
  ASSERT_TRUE(q);
  EXPECT_EQ(q->dtype, DType::Q4_1);
  EXPECT_EQ(q->shape, (std::vector<int64_t>{H * HD, D}));
  const SourceTensor *down = m.find("blk.0.ffn_down.weight");
  ASSERT_TRUE(down);
  EXPECT_EQ(down->shape, (std::vector<int64_t>{D, F}));
  EXPECT_EQ(m.find("blk.0.attn_output.weight")->dtype, DType::F16);
  EXPECT_EQ(m.find("blk.0.ffn_gate.weight")->dtype, DType::Q4_0);
  // token_embd is the first tensor written (seed 0).
  const SourceTensor *emb = m.find("token_embd.weight");
  std::vector<uint8_t> want = quantized(DType::Q8_0, pattern(V * D, 0.5f, 0));
  ASSERT_EQ(emb->nbytes, int64_t(want.size()));
  EXPECT_EQ(std::memcmp(emb->data, want.data(), want.size()), 0);
  // Data is aligned to 32 bytes in the file.
  for (const SourceTensor &t : m.tensors)
    EXPECT_EQ((reinterpret_cast<uintptr_t>(t.data) - reinterpret_cast<uintptr_t>(m.tensors[0].data)) % 32, 0u);

  const TokenizerData &t = m.tokenizer;
  EXPECT_EQ(t.kind, "llama");
  EXPECT_EQ(t.tokens.size(), 16u);
  EXPECT_EQ(t.tokens[7], "\xe2\x96\x81" "a");
  EXPECT_FLOAT_EQ(t.scores[5], -5.0f);
  EXPECT_EQ(t.token_types[3], 6);
  EXPECT_EQ(t.bos_id, 1);
  EXPECT_EQ(t.eos_id, 2);
  EXPECT_TRUE(t.add_bos);          // llama default when the key is absent
  EXPECT_TRUE(t.add_space_prefix); // same
  EXPECT_EQ(t.chat_template, "{{ messages }}");
}

TEST(GgufReader, VersionTwoAndWideAlignment) {
  ScratchDir dir("gguf");
  TinyOptions o;
  o.tied = true;
  GgufWriter w = tinyModel(o);
  w.setVersion(2);
  w.u32("general.alignment", 64);
  writeBytes(dir.file("v2.gguf"), w.build(64));
  SourceModel m = readGguf(dir.file("v2.gguf"));
  EXPECT_TRUE(m.config.tied_embeddings);
  EXPECT_EQ(m.find("output.weight"), nullptr);
  for (const SourceTensor &t : m.tensors)
    EXPECT_EQ((reinterpret_cast<uintptr_t>(t.data) - reinterpret_cast<uintptr_t>(m.tensors[0].data)) % 64, 0u);
}

TEST(GgufReader, Qwen2HasBiasesAndHalfRope) {
  ScratchDir dir("gguf");
  TinyOptions o;
  o.arch = "qwen2";
  o.biases = true;
  writeBytes(dir.file("qwen.gguf"), tinyModel(o).build());
  SourceModel m = readGguf(dir.file("qwen.gguf"));
  EXPECT_EQ(m.config.architecture, "qwen2");
  EXPECT_TRUE(m.config.attention_bias);
  EXPECT_EQ(m.config.rope_style, RopeStyle::Half);
  EXPECT_EQ(m.find("blk.1.attn_k.bias")->shape, (std::vector<int64_t>{KV * HD}));
}

TEST(GgufReader, MixtureOfExperts) {
  ScratchDir dir("gguf");
  TinyOptions o;
  o.experts = 4;
  writeBytes(dir.file("moe.gguf"), tinyModel(o).build());
  SourceModel m = readGguf(dir.file("moe.gguf"));
  EXPECT_EQ(m.config.num_experts, 4);
  EXPECT_EQ(m.config.num_experts_per_token, 2);
  EXPECT_EQ(m.find("blk.0.ffn_up_exps.weight")->shape, (std::vector<int64_t>{4, F, D}));
  EXPECT_EQ(m.find("blk.0.ffn_down_exps.weight")->shape, (std::vector<int64_t>{4, D, F}));
  EXPECT_EQ(m.find("blk.0.ffn_gate_inp.weight")->shape, (std::vector<int64_t>{4, D}));
}

TEST(GgufReader, NoTokenizerIsFine) {
  ScratchDir dir("gguf");
  TinyOptions o;
  o.with_tokenizer = false;
  writeBytes(dir.file("notok.gguf"), tinyModel(o).build());
  EXPECT_TRUE(readGguf(dir.file("notok.gguf")).tokenizer.empty());
}

TEST(GgufReader, ReadModelDetectsGguf) {
  ScratchDir dir("gguf");
  writeBytes(dir.file("model.bin"), tinyModel().build()); // magic, not extension, decides
  EXPECT_EQ(readModel(dir.file("model.bin")).format, "gguf");
}

TEST(GgufReader, Truncated) {
  ScratchDir dir("gguf");
  const std::vector<uint8_t> good = tinyModel().build();
  const std::string path = dir.file("trunc.gguf");
  for (size_t cut : {size_t(0), size_t(3), size_t(10), size_t(30), size_t(200), good.size() / 2,
                     good.size() - 1}) {
    writeBytes(path, good.data(), cut);
    SCOPED_TRACE("cut at " + std::to_string(cut));
    expectImportError([&] { readGguf(path); }, {path});
  }
  writeBytes(path, good.data(), good.size() - 1);
  expectImportError([&] { readGguf(path); }, {path, "out of bounds"});
}

TEST(GgufReader, BadMagic) {
  ScratchDir dir("gguf");
  std::vector<uint8_t> b = tinyModel().build();
  b[0] = 'X';
  writeBytes(dir.file("bad.gguf"), b);
  expectImportError([&] { readGguf(dir.file("bad.gguf")); }, {dir.file("bad.gguf"), "magic"});
  // readModel on a .gguf name reports the GGUF problem too.
  expectImportError([&] { readModel(dir.file("bad.gguf")); }, {"bad.gguf", "magic"});
}

TEST(GgufReader, UnsupportedVersion) {
  ScratchDir dir("gguf");
  GgufWriter w = tinyModel();
  w.setVersion(1);
  writeBytes(dir.file("v1.gguf"), w.build());
  expectImportError([&] { readGguf(dir.file("v1.gguf")); }, {"v1.gguf", "version 1"});
}

TEST(GgufReader, UnknownArchitecture) {
  ScratchDir dir("gguf");
  TinyOptions o;
  o.arch = "gpt-neox";
  writeBytes(dir.file("arch.gguf"), tinyModel(o).build());
  expectImportError([&] { readGguf(dir.file("arch.gguf")); }, {"arch.gguf", "gpt-neox"});
}

TEST(GgufReader, UnsupportedTensorType) {
  ScratchDir dir("gguf");
  GgufWriter w = tinyModel();
  w.tensor("extra.weight", {256}, kIQ2_XXS, std::vector<uint8_t>(66, 0));
  writeBytes(dir.file("iq2.gguf"), w.build());
  expectImportError([&] { readGguf(dir.file("iq2.gguf")); }, {"iq2.gguf", "extra.weight", "iq2_xxs"});
}

TEST(GgufReader, MissingTensorIsNamed) {
  ScratchDir dir("gguf");
  TinyOptions o;
  o.drop_tensor = "blk.1.attn_v.weight";
  writeBytes(dir.file("missing.gguf"), tinyModel(o).build());
  expectImportError([&] { readGguf(dir.file("missing.gguf")); }, {"missing.gguf", "blk.1.attn_v.weight"});
}

TEST(GgufReader, WrongShapeIsNamed) {
  ScratchDir dir("gguf");
  TinyOptions o;
  o.drop_tensor = "blk.0.ffn_up.weight";
  GgufWriter w = tinyModel(o);
  w.tensor("blk.0.ffn_up.weight", {D, F / 2}, kF32, std::vector<uint8_t>(size_t(D * F / 2 * 4)));
  writeBytes(dir.file("shape.gguf"), w.build());
  expectImportError([&] { readGguf(dir.file("shape.gguf")); }, {"shape.gguf", "blk.0.ffn_up.weight", "shape"});
}

TEST(GgufReader, RowsMustBeWholeBlocks) {
  ScratchDir dir("gguf");
  GgufWriter w = tinyModel();
  w.tensor("odd.weight", {48, 2}, kQ8_0, std::vector<uint8_t>(102, 0));
  writeBytes(dir.file("odd.gguf"), w.build());
  expectImportError([&] { readGguf(dir.file("odd.gguf")); }, {"odd.gguf", "odd.weight", "block size"});
}

TEST(GgufReader, DuplicateKey) {
  ScratchDir dir("gguf");
  GgufWriter w = tinyModel();
  w.u32("llama.block_count", 3);
  writeBytes(dir.file("dup.gguf"), w.build());
  expectImportError([&] { readGguf(dir.file("dup.gguf")); }, {"dup.gguf", "duplicate"});
}

TEST(GgufReader, WrongMetadataTypeIsNamed) {
  ScratchDir dir("gguf");
  GgufWriter w;
  w.str("general.architecture", "llama");
  w.str("llama.block_count", "two");
  writeBytes(dir.file("type.gguf"), w.build());
  expectImportError([&] { readGguf(dir.file("type.gguf")); }, {"type.gguf", "llama.block_count"});
}

TEST(GgufReader, MissingFile) {
  expectImportError([] { readGguf("/nonexistent/dir/model.gguf"); }, {"/nonexistent/dir/model.gguf"});
  expectImportError([] { readModel("/nonexistent/dir/model.gguf"); }, {"/nonexistent/dir/model.gguf"});
}

TEST(GgufReader, CorruptedFilesNeverCrash) {
  ScratchDir dir("gguf");
  const std::vector<uint8_t> good = tinyModel().build();
  // Most corruption lands in the header, metadata and tensor infos (~2 KB).
  const size_t header = 2400;
  corruptionSweep(dir.file("fuzz.gguf"), good, header, 400,
                  [](const std::string &p) { readGguf(p); });
}
