//===- Llama2cReaderTest.cpp - llama2.c checkpoint and tokenizer reader ----===//
// stories260K (when present) must give its known config and weights at the
// right offsets; small checkpoints written here check the weight order
// (including an unshared classifier), tokenizer.bin reading and the exact
// file-size validation.
//===----------------------------------------------------------------------===//
#include "MissingInput.h"
#include "ReaderTestUtil.h"
#include "compiler/import/SourceModel.h"

#include <gtest/gtest.h>

#include <cstring>
#include <sys/stat.h>

using namespace llmc;
using namespace llmc::readertest;

namespace {

std::string storiesPath() { return std::string(LLMC_SHARED_DIR) + "/models/stories260K.bin"; }

bool exists(const std::string &p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

struct Dims {
  int32_t dim = 16, hidden = 24, layers = 2, heads = 4, kv_heads = 2, vocab = 8, seq_len = 6;
  bool shared = true;
};

// A checkpoint whose float number i (counting from the first weight) is i,
// so every tensor's first value reveals its offset.
std::vector<uint8_t> checkpoint(const Dims &d) {
  const int64_t hs = d.dim / d.heads, kvd = int64_t(d.kv_heads) * hs;
  const int64_t D = d.dim, F = d.hidden, L = d.layers, V = d.vocab;
  int64_t floats = V * D + L * (D + D * D + 2 * kvd * D + D * D + D + 3 * F * D) + D +
                   int64_t(d.seq_len) * hs + (d.shared ? 0 : V * D);
  std::vector<uint8_t> b(28 + 4 * size_t(floats));
  const int32_t header[7] = {d.dim, d.hidden, d.layers, d.heads, d.kv_heads,
                             d.shared ? d.vocab : -d.vocab, d.seq_len};
  std::memcpy(b.data(), header, 28);
  for (int64_t i = 0; i < floats; ++i) {
    float v = float(i);
    std::memcpy(b.data() + 28 + 4 * i, &v, 4);
  }
  return b;
}

float first(const SourceModel &m, const std::string &name) {
  const SourceTensor *t = m.find(name);
  if (!t)
    throw std::runtime_error("no tensor " + name);
  float v;
  std::memcpy(&v, t->data, 4);
  return v;
}

// llama2.c tokenizer.bin: max_len, then (score, len, bytes) per token.
std::vector<uint8_t> tokenizerBin(const std::vector<std::string> &toks) {
  std::vector<uint8_t> b;
  auto put = [&](const void *p, size_t n) {
    b.insert(b.end(), static_cast<const uint8_t *>(p), static_cast<const uint8_t *>(p) + n);
  };
  int32_t max_len = 0;
  for (const auto &t : toks)
    max_len = std::max(max_len, int32_t(t.size()));
  put(&max_len, 4);
  for (size_t i = 0; i < toks.size(); ++i) {
    float score = -float(i);
    int32_t len = int32_t(toks[i].size());
    put(&score, 4);
    put(&len, 4);
    put(toks[i].data(), toks[i].size());
  }
  return b;
}

} // namespace

TEST(Llama2cReader, Stories260K) {
  if (!exists(storiesPath()))
    LLMC_MISSING_INPUT(storiesPath());
  SourceModel m = readLlama2c(storiesPath());
  const ModelConfig &c = m.config;
  EXPECT_EQ(m.format, "llama2c");
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_layers, 5);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.num_heads, 8);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.intermediate_size, 172);
  EXPECT_EQ(c.context_length, 512);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.rope_style, RopeStyle::Interleaved);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_DOUBLE_EQ(c.norm_eps, 1e-5);
  EXPECT_EQ(m.tensors.size(), 2u + 9u * 5u);
  // Offsets, computed independently from run.c's layout.
  const std::vector<uint8_t> raw = readBytes(storiesPath());
  const int64_t D = 64, F = 172, L = 5, V = 512, KVD = 32;
  auto at = [&](int64_t float_index) {
    float v;
    std::memcpy(&v, raw.data() + 28 + 4 * float_index, 4);
    return v;
  };
  int64_t off = V * D;                   // after token_embedding
  off += L * D;                           // rms_att
  const int64_t wq = off;                 // wq[L, D, D]
  off += L * D * D + 2 * L * KVD * D + L * D * D + L * D; // wq wk wv wo rms_ffn
  off += L * F * D + L * D * F;           // w1 w2
  const int64_t w3 = off;
  EXPECT_EQ(first(m, "blk.0.attn_q.weight"), at(wq));
  EXPECT_EQ(first(m, "blk.3.attn_q.weight"), at(wq + 3 * D * D));
  EXPECT_EQ(first(m, "blk.4.ffn_up.weight"), at(w3 + 4 * F * D));
  EXPECT_EQ(first(m, "token_embd.weight"), at(0));
  EXPECT_EQ(m.find("blk.2.attn_k.weight")->shape, (std::vector<int64_t>{KVD, D}));
  EXPECT_EQ(m.find("blk.2.ffn_down.weight")->shape, (std::vector<int64_t>{D, F}));
}

TEST(Llama2cReader, Stories260KTruncatedOrPadded) {
  if (!exists(storiesPath()))
    LLMC_MISSING_INPUT(storiesPath());
  ScratchDir dir("l2c");
  std::vector<uint8_t> raw = readBytes(storiesPath());
  const std::string p = dir.file("stories.bin");
  writeBytes(p, raw.data(), raw.size() - 4);
  expectImportError([&] { readLlama2c(p); }, {p, "does not match", "truncated"});
  writeBytes(p, raw.data(), 100);
  expectImportError([&] { readLlama2c(p); }, {p, "does not match"});
  raw.push_back(0);
  writeBytes(p, raw);
  expectImportError([&] { readLlama2c(p); }, {p, "does not match"});
}

TEST(Llama2cReader, WeightOrderSharedClassifier) {
  ScratchDir dir("l2c");
  Dims d;
  writeBytes(dir.file("m.bin"), checkpoint(d));
  SourceModel m = readLlama2c(dir.file("m.bin"));
  const int64_t D = 16, F = 24, L = 2, V = 8, KVD = 8, S = 6, HS = 4;
  EXPECT_TRUE(m.config.tied_embeddings);
  EXPECT_EQ(m.config.head_dim, HS);
  EXPECT_EQ(first(m, "token_embd.weight"), 0.0f);
  int64_t off = V * D;
  EXPECT_EQ(first(m, "blk.0.attn_norm.weight"), float(off));
  EXPECT_EQ(first(m, "blk.1.attn_norm.weight"), float(off + D));
  off += L * D;
  EXPECT_EQ(first(m, "blk.1.attn_q.weight"), float(off + D * D));
  off += L * D * D;
  EXPECT_EQ(first(m, "blk.1.attn_k.weight"), float(off + KVD * D));
  off += L * KVD * D;
  EXPECT_EQ(first(m, "blk.0.attn_v.weight"), float(off));
  off += L * KVD * D;
  EXPECT_EQ(first(m, "blk.1.attn_output.weight"), float(off + D * D));
  off += L * D * D;
  EXPECT_EQ(first(m, "blk.1.ffn_norm.weight"), float(off + D));
  off += L * D;
  EXPECT_EQ(first(m, "blk.1.ffn_gate.weight"), float(off + F * D)); // w1
  off += L * F * D;
  EXPECT_EQ(first(m, "blk.1.ffn_down.weight"), float(off + D * F)); // w2
  off += L * D * F;
  EXPECT_EQ(first(m, "blk.1.ffn_up.weight"), float(off + F * D)); // w3
  off += L * F * D;
  EXPECT_EQ(first(m, "output_norm.weight"), float(off));
  EXPECT_EQ(m.find("output.weight"), nullptr);
  (void)S;
}

TEST(Llama2cReader, UnsharedClassifier) {
  ScratchDir dir("l2c");
  Dims d;
  d.shared = false;
  std::vector<uint8_t> b = checkpoint(d);
  writeBytes(dir.file("m.bin"), b);
  SourceModel m = readLlama2c(dir.file("m.bin"));
  EXPECT_FALSE(m.config.tied_embeddings);
  EXPECT_EQ(m.config.vocab_size, 8);
  const SourceTensor *cls = m.find("output.weight");
  ASSERT_TRUE(cls);
  EXPECT_EQ(cls->shape, (std::vector<int64_t>{8, 16}));
  // The classifier is the last V*D floats of the file.
  const int64_t total = int64_t(b.size() - 28) / 4;
  EXPECT_EQ(first(m, "output.weight"), float(total - 8 * 16));
}

TEST(Llama2cReader, TokenizerBesideCheckpoint) {
  ScratchDir dir("l2c");
  Dims d;
  writeBytes(dir.file("m.bin"), checkpoint(d));
  std::vector<std::string> toks = {"<unk>", "\n<s>\n", "\n</s>\n", "<0x0A>", " the", "a", " ", "cat"};
  writeBytes(dir.file("tokenizer.bin"), tokenizerBin(toks));
  SourceModel m = readLlama2c(dir.file("m.bin"));
  const TokenizerData &t = m.tokenizer;
  EXPECT_EQ(t.kind, "llama");
  ASSERT_EQ(t.tokens.size(), 8u);
  EXPECT_EQ(t.tokens[1], "<s>");
  EXPECT_EQ(t.tokens[2], "</s>");
  EXPECT_EQ(t.tokens[4], "\xe2\x96\x81the");
  EXPECT_EQ(t.tokens[6], "\xe2\x96\x81");
  EXPECT_EQ(t.token_types[3], 6);
  EXPECT_EQ(t.token_types[1], 3);
  EXPECT_EQ(t.token_types[0], 2);
  EXPECT_EQ(t.token_types[7], 1);
  EXPECT_FLOAT_EQ(t.scores[5], -5.0f);
  EXPECT_EQ(t.bos_id, 1);
  EXPECT_EQ(t.eos_id, 2);
  EXPECT_EQ(t.unk_id, 0);
  EXPECT_TRUE(t.add_bos);
  EXPECT_TRUE(t.add_space_prefix);

  // tok<vocab>.bin is found too, and an explicit path wins.
  std::remove(dir.file("tokenizer.bin").c_str());
  writeBytes(dir.file("tok8.bin"), tokenizerBin(toks));
  EXPECT_EQ(readLlama2c(dir.file("m.bin")).tokenizer.tokens.size(), 8u);
  std::remove(dir.file("tok8.bin").c_str());
  EXPECT_TRUE(readLlama2c(dir.file("m.bin")).tokenizer.empty());
  writeBytes(dir.file("other.bin"), tokenizerBin(toks));
  EXPECT_EQ(readLlama2c(dir.file("m.bin"), dir.file("other.bin")).tokenizer.tokens[7], "cat");
  // readModel falls back to llama2.c for a file without GGUF magic.
  EXPECT_EQ(readModel(dir.file("m.bin"), dir.file("other.bin")).format, "llama2c");
}

TEST(Llama2cReader, BadTokenizer) {
  ScratchDir dir("l2c");
  writeBytes(dir.file("m.bin"), checkpoint(Dims{}));
  std::vector<uint8_t> tb = tokenizerBin({"<unk>", "<s>", "</s>", "a", "b", "c", "d", "e"});
  writeBytes(dir.file("tok.bin"), tb.data(), tb.size() - 2);
  expectImportError([&] { readLlama2c(dir.file("m.bin"), dir.file("tok.bin")); }, {"tok.bin", "truncated"});
  expectImportError([&] { readLlama2c(dir.file("m.bin"), dir.file("missing.bin")); }, {"missing.bin"});
}

TEST(Llama2cReader, BadHeaders) {
  ScratchDir dir("l2c");
  const std::string p = dir.file("m.bin");
  writeBytes(p, std::vector<uint8_t>(10, 0));
  expectImportError([&] { readLlama2c(p); }, {p, "too small"});
  std::vector<uint8_t> b = checkpoint(Dims{});
  int32_t three = 3; // n_heads: 16 % 3 != 0
  std::memcpy(b.data() + 12, &three, 4);
  writeBytes(p, b);
  expectImportError([&] { readLlama2c(p); }, {p, "n_heads"});
  b = checkpoint(Dims{});
  int32_t huge = 1 << 20;
  std::memcpy(b.data(), &huge, 4); // dim
  std::memcpy(b.data() + 4, &huge, 4); // hidden
  std::memcpy(b.data() + 8, &huge, 4); // layers
  writeBytes(p, b);
  expectImportError([&] { readLlama2c(p); }, {p, "does not match"});
  const uint32_t magic = 0x616b3432; // llama2.c's versioned export
  std::memcpy(b.data(), &magic, 4);
  writeBytes(p, b);
  expectImportError([&] { readLlama2c(p); }, {p, "ak42"});
}

TEST(Llama2cReader, CorruptedHeadersNeverCrash) {
  ScratchDir dir("l2c");
  corruptionSweep(dir.file("m.bin"), checkpoint(Dims{}), 28, 300,
                  [](const std::string &p) { readLlama2c(p); });
}
