//===- ArtifactTest.cpp - .llmc format: write, open, validate, reject -------===//
// Round trips (buffer and file), 64-byte tensor alignment, the JSON forms of
// config / tokenizer / program, and rejection of bad magic, unknown version,
// truncation and corrupted checksums with errors naming the file; atomic
// writes leave no file behind when they fail. checksum64 and hand-assembled
// artifacts (the tensor-table checks): ArtifactFormatTest.cpp.
//===----------------------------------------------------------------------===//
#include "llmc/artifact.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <limits>
#include <sys/stat.h>
#include <unistd.h>

using namespace llmc;
using nlohmann::json;

namespace {

std::string makeTempDir() {
  std::string tmpl = ::testing::TempDir() + "llmc_artifact_XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data()))
    throw std::runtime_error("mkdtemp failed");
  return buf.data();
}

std::vector<std::string> listDir(const std::string &dir) {
  std::vector<std::string> names;
  if (DIR *d = ::opendir(dir.c_str())) {
    while (dirent *e = ::readdir(d))
      if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, ".."))
        names.push_back(e->d_name);
    ::closedir(d);
  }
  return names;
}

bool exists(const std::string &p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

void writeBytes(const std::string &path, const std::vector<uint8_t> &b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char *>(b.data()), std::streamsize(b.size()));
}

std::vector<uint8_t> readBytes(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

ModelConfig sampleConfig() {
  ModelConfig c;
  c.architecture = "qwen2";
  c.name = "tiny-test";
  c.vocab_size = 50;
  c.hidden_size = 16;
  c.intermediate_size = 32;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.context_length = 128;
  c.rope_theta = 1000000.0;
  c.rope_style = RopeStyle::Interleaved;
  c.norm_eps = 1e-6;
  c.norm = NormKind::LayerNorm;
  c.activation = Activation::GELU;
  c.tied_embeddings = true;
  c.attention_bias = true;
  c.num_experts = 8;
  c.num_experts_per_token = 2;
  c.sliding_window = 4096;
  return c;
}

TokenizerData sampleTokenizer() {
  TokenizerData t;
  t.kind = "llama";
  t.pre = "default";
  t.tokens = {"<unk>", "<s>", "</s>", "\xE2\x96\x81hello", std::string("\xFF\xFE", 2), "a"};
  t.scores = {0.0f, 0.0f, 0.0f, -1.5f, -std::numeric_limits<float>::infinity(), 0.25f};
  t.token_types = {2, 3, 3, 1, 6, 1};
  t.merges = {"a b", "\xC4\xA0 t"};
  t.bos_id = 1;
  t.eos_id = 2;
  t.unk_id = 0;
  t.pad_id = -1;
  t.add_bos = true;
  t.add_space_prefix = true;
  t.chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}";
  return t;
}

Program sampleProgram() {
  Program p;
  ProgramNode e;
  e.op = "embed";
  e.out = 0;
  e.weights["table"] = "emb";
  ProgramNode n;
  n.op = "rms_norm";
  n.in = {0};
  n.out = 1;
  n.weights["weight"] = "norm";
  n.attrs = json{{"eps", 1e-5}};
  p.nodes = {e, n};
  p.output = 1;
  return p;
}

/// A small artifact with a few tensors of different dtypes.
struct Sample {
  std::vector<float> emb, norm;
  std::vector<uint16_t> half;
  std::vector<uint8_t> q8;
  json manifest;

  Sample() {
    for (int i = 0; i < 3 * 5; ++i)
      emb.push_back(float(i) * 0.5f - 2.0f);
    for (int i = 0; i < 7; ++i)
      norm.push_back(1.0f + float(i));
    for (int i = 0; i < 2 * 8; ++i)
      half.push_back(uint16_t(0x3C00 + i)); // around 1.0
    q8.resize(size_t(rowBytes(DType::Q8_0, 32) * 2));
    for (size_t i = 0; i < q8.size(); ++i)
      q8[i] = uint8_t(i * 7 + 1);
    manifest = json{{"config", configToJson(sampleConfig())},
                    {"pipeline", "default"},
                    {"source", {{"path", "model.gguf"}, {"format", "gguf"}}},
                    {"tokenizer", tokenizerToJson(sampleTokenizer())},
                    {"program", sampleProgram().toJson()}};
  }

  std::vector<ArtifactWriter::Tensor> tensors() const {
    return {{"emb", DType::F32, {3, 5}, int64_t(emb.size() * 4), emb.data()},
            {"norm", DType::F32, {7}, int64_t(norm.size() * 4), norm.data()},
            {"half", DType::F16, {2, 8}, int64_t(half.size() * 2), half.data()},
            {"q8", DType::Q8_0, {2, 32}, int64_t(q8.size()), q8.data()}};
  }
  ArtifactWriter writer() const { return ArtifactWriter(manifest, tensors()); }
};

void expectSameConfig(const ModelConfig &a, const ModelConfig &b) {
  EXPECT_EQ(a.architecture, b.architecture);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.num_layers, b.num_layers);
  EXPECT_EQ(a.num_heads, b.num_heads);
  EXPECT_EQ(a.num_kv_heads, b.num_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.context_length, b.context_length);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.rope_style, b.rope_style);
  EXPECT_EQ(a.norm_eps, b.norm_eps);
  EXPECT_EQ(a.norm, b.norm);
  EXPECT_EQ(a.activation, b.activation);
  EXPECT_EQ(a.tied_embeddings, b.tied_embeddings);
  EXPECT_EQ(a.attention_bias, b.attention_bias);
  EXPECT_EQ(a.num_experts, b.num_experts);
  EXPECT_EQ(a.num_experts_per_token, b.num_experts_per_token);
  EXPECT_EQ(a.sliding_window, b.sliding_window);
}

void expectSameTokenizer(const TokenizerData &a, const TokenizerData &b) {
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.pre, b.pre);
  EXPECT_EQ(a.tokens, b.tokens);
  ASSERT_EQ(a.scores.size(), b.scores.size());
  for (size_t i = 0; i < a.scores.size(); ++i)
    EXPECT_EQ(a.scores[i], b.scores[i]) << i;
  EXPECT_EQ(a.token_types, b.token_types);
  EXPECT_EQ(a.merges, b.merges);
  EXPECT_EQ(a.bos_id, b.bos_id);
  EXPECT_EQ(a.eos_id, b.eos_id);
  EXPECT_EQ(a.unk_id, b.unk_id);
  EXPECT_EQ(a.pad_id, b.pad_id);
  EXPECT_EQ(a.add_bos, b.add_bos);
  EXPECT_EQ(a.add_space_prefix, b.add_space_prefix);
  EXPECT_EQ(a.chat_template, b.chat_template);
}

/// The sample's model (config, tokenizer, program, manifest fields and
/// tensors), however the artifact holds it.
void expectModelContents(const Artifact &a, const Sample &s) {
  expectSameConfig(a.config(), sampleConfig());
  expectSameTokenizer(a.tokenizer(), sampleTokenizer());
  EXPECT_EQ(a.program().toJson(), sampleProgram().toJson());
  EXPECT_EQ(a.manifest()["pipeline"], "default");
  EXPECT_EQ(a.manifest()["source"]["format"], "gguf");
  EXPECT_EQ(a.manifest()["format_version"], kArtifactVersion);
  ASSERT_EQ(a.tensors().size(), 4u);
  const TensorView *emb = a.tensor("emb");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->dtype, DType::F32);
  EXPECT_EQ(emb->shape, (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(std::memcmp(emb->data, s.emb.data(), s.emb.size() * 4), 0);
  const TensorView *q8 = a.tensor("q8");
  ASSERT_NE(q8, nullptr);
  EXPECT_EQ(q8->dtype, DType::Q8_0);
  EXPECT_EQ(q8->nbytes, int64_t(s.q8.size()));
  EXPECT_EQ(std::memcmp(q8->data, s.q8.data(), s.q8.size()), 0);
  EXPECT_EQ(std::memcmp(a.tensor("half")->data, s.half.data(), s.half.size() * 2), 0);
  EXPECT_EQ(std::memcmp(a.tensor("norm")->data, s.norm.data(), s.norm.size() * 4), 0);
  EXPECT_EQ(a.tensor("missing"), nullptr);
}

/// The same, from a written artifact: also its tensors' 64-byte offsets.
void expectContents(const Artifact &a, const Sample &s) {
  expectModelContents(a, s);
  for (const json &t : a.manifest()["tensors"])
    EXPECT_EQ(t["offset"].get<int64_t>() % kArtifactAlign, 0) << t["name"];
}

} // namespace

TEST(ArtifactJson, ConfigRoundTrip) {
  ModelConfig c = sampleConfig();
  json j = configToJson(c);
  EXPECT_EQ(j["rope_style"], "interleaved");
  EXPECT_EQ(j["norm"], "layer_norm");
  EXPECT_EQ(j["activation"], "gelu");
  expectSameConfig(configFromJson(j), c);
  ModelConfig d;
  expectSameConfig(configFromJson(configToJson(d)), d);

  json bad = j;
  bad["rope_style"] = "sideways";
  EXPECT_THROW(configFromJson(bad), std::runtime_error);
  bad = j;
  bad["num_layers"] = "two";
  try {
    configFromJson(bad);
    FAIL() << "expected an error";
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find("num_layers"), std::string::npos) << e.what();
  }
}

TEST(ArtifactJson, TokenizerRoundTrip) {
  TokenizerData t = sampleTokenizer();
  json j = tokenizerToJson(t);
  // Survives text serialization (invalid UTF-8 and -inf are encoded).
  expectSameTokenizer(tokenizerFromJson(json::parse(j.dump())), t);
  EXPECT_TRUE(tokenizerFromJson(json()).empty());
  json bad = j;
  bad["scores"].push_back(1.0);
  EXPECT_THROW(tokenizerFromJson(bad), std::runtime_error);
}

TEST(ArtifactJson, ProgramValidation) {
  Program p = sampleProgram();
  json j = p.toJson();
  EXPECT_EQ(Program::fromJson(j).toJson(), j);

  auto expectError = [](const json &pj, const std::string &needle) {
    try {
      Program::fromJson(pj);
      ADD_FAILURE() << "expected an error containing '" << needle << "'";
    } catch (const std::runtime_error &e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  json bad = j;
  bad["nodes"][1]["op"] = "conv2d";
  expectError(bad, "unknown op 'conv2d'");
  bad = j;
  bad["nodes"][1]["in"] = {7};
  expectError(bad, "input value 7");
  bad = j;
  bad["nodes"][1].erase("out");
  expectError(bad, "missing field 'out'");
  bad = j;
  bad["nodes"][1]["weights"].erase("weight");
  expectError(bad, "missing weight 'weight'");
  bad = j;
  bad["nodes"][1]["in"] = json::array();
  expectError(bad, "takes 1 input");
  bad = j;
  bad["output"] = 9;
  expectError(bad, "output value 9");
  bad = j;
  bad["nodes"][0]["out"] = -3;
  expectError(bad, "out of range");
  expectError(json::array(), "program");
}

TEST(Artifact, BufferRoundTrip) {
  Sample s;
  std::unique_ptr<Artifact> a = Artifact::fromBuffer(s.writer().toBuffer(), "in-memory");
  expectContents(*a, s);
  EXPECT_EQ(a->path(), "in-memory");
}

/// An artifact over tensors held elsewhere: the same contents as a written
/// one, each tensor read where it lies (no copy); a tensor whose size does
/// not match its type and shape, a duplicate name or a bad config throws.
TEST(Artifact, ViewsOverTensorsHeldElsewhere) {
  Sample s;
  auto views = [&] {
    std::vector<TensorView> v;
    for (const ArtifactWriter::Tensor &t : s.tensors())
      v.push_back(TensorView{t.name, t.dtype, t.shape, t.data, t.nbytes});
    return v;
  };
  std::unique_ptr<Artifact> a = Artifact::fromViews(s.manifest, views(), "views");
  expectModelContents(*a, s);
  EXPECT_EQ(a->tensor("emb")->data, static_cast<const void *>(s.emb.data()));
  EXPECT_EQ(a->tensor("q8")->data, static_cast<const void *>(s.q8.data()));

  std::vector<TensorView> bad = views();
  bad[3].nbytes -= 1;
  EXPECT_THROW(Artifact::fromViews(s.manifest, bad, "views"), std::runtime_error);
  bad = views();
  bad[1].name = "emb";
  EXPECT_THROW(Artifact::fromViews(s.manifest, bad, "views"), std::runtime_error);
  json noConfig = s.manifest;
  noConfig.erase("config");
  EXPECT_THROW(Artifact::fromViews(noConfig, views(), "views"), std::runtime_error);
}

TEST(Artifact, FileRoundTripIsAlignedAndMapped) {
  Sample s;
  std::string dir = makeTempDir();
  std::string path = dir + "/model.llmc";
  s.writer().writeFile(path);
  EXPECT_EQ(listDir(dir), std::vector<std::string>{"model.llmc"}); // no temp file left
  std::unique_ptr<Artifact> a = Artifact::open(path);
  expectContents(*a, s);
  EXPECT_EQ(a->fileSize(), readBytes(path).size());
  EXPECT_EQ(readBytes(path), s.writer().toBuffer());
  for (const TensorView &t : a->tensors())
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % kArtifactAlign, 0u) << t.name;
  // Overwriting an existing artifact works.
  s.writer().writeFile(path);
  EXPECT_NO_THROW(Artifact::open(path));
}

namespace {
void expectOpenError(const std::string &path, const std::vector<std::string> &needles,
                     bool verify = true) {
  try {
    Artifact::open(path, verify);
    ADD_FAILURE() << "expected open(" << path << ") to fail";
  } catch (const std::runtime_error &e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    for (const std::string &n : needles)
      EXPECT_NE(msg.find(n), std::string::npos) << msg;
  }
}
} // namespace

TEST(Artifact, RejectsBadMagic) {
  std::string dir = makeTempDir();
  std::string path = dir + "/junk.llmc";
  std::vector<uint8_t> junk(200, 'x');
  writeBytes(path, junk);
  expectOpenError(path, {"not an llmc artifact (bad magic)"});
  writeBytes(path, {'L', 'L'});
  expectOpenError(path, {"bad magic"});
  expectOpenError(dir + "/does-not-exist.llmc", {"cannot open"});
}

TEST(Artifact, RejectsUnknownVersion) {
  Sample s;
  std::vector<uint8_t> b = s.writer().toBuffer();
  b[8] = 7;
  std::string path = makeTempDir() + "/v7.llmc";
  writeBytes(path, b);
  expectOpenError(path, {"unsupported artifact format version 7 (this runtime reads 1)"});
}

TEST(Artifact, RejectsTruncated) {
  Sample s;
  std::vector<uint8_t> b = s.writer().toBuffer();
  std::string dir = makeTempDir();
  for (size_t keep : {b.size() - 1, b.size() - 100, size_t(300), size_t(40)}) {
    std::string path = dir + "/cut" + std::to_string(keep) + ".llmc";
    writeBytes(path, std::vector<uint8_t>(b.begin(), b.begin() + long(keep)));
    expectOpenError(path, {"truncated"});
  }
}

TEST(Artifact, RejectsCorruption) {
  Sample s;
  std::vector<uint8_t> b = s.writer().toBuffer();
  std::string dir = makeTempDir();

  // A flipped bit in the q8 tensor's data.
  std::unique_ptr<Artifact> ok = Artifact::fromBuffer(b, "x");
  uint64_t dataOffset = 0;
  for (int i = 0; i < 8; ++i)
    dataOffset |= uint64_t(b[32 + size_t(i)]) << (8 * i);
  uint64_t q8Offset = 0;
  for (const json &t : ok->manifest()["tensors"])
    if (t["name"] == "q8")
      q8Offset = t["offset"].get<uint64_t>();
  std::vector<uint8_t> c = b;
  c[dataOffset + q8Offset + 5] ^= 0x10;
  std::string path = dir + "/tensor.llmc";
  writeBytes(path, c);
  expectOpenError(path, {"q8", "checksum"});
  EXPECT_NO_THROW(Artifact::open(path, /*verify_tensors=*/false));
  EXPECT_THROW(Artifact::fromBuffer(c, "buf"), std::runtime_error);

  // A changed byte in the manifest.
  c = b;
  c[70] ^= 0x01;
  path = dir + "/manifest.llmc";
  writeBytes(path, c);
  expectOpenError(path, {"manifest checksum"});

  // A changed byte in the header's size fields.
  c = b;
  c[40] ^= 0x01;
  path = dir + "/header.llmc";
  writeBytes(path, c);
  expectOpenError(path, {"header checksum"});
}

// Artifacts of 16 MiB and more hash their tensors on several threads; the
// error still names the first corrupted tensor in file order.
TEST(Artifact, ParallelVerificationReportsTheFirstCorruptedTensor) {
  Sample s;
  const int n = 12;
  const int64_t floats = int64_t(1) << 19; // 2 MiB each, 24 MiB in all
  std::vector<std::vector<float>> big(n, std::vector<float>(size_t(floats)));
  std::vector<ArtifactWriter::Tensor> tensors = s.tensors();
  for (int i = 0; i < n; ++i) {
    for (int64_t k = 0; k < floats; ++k)
      big[size_t(i)][size_t(k)] = float(i * 31 + k % 97);
    tensors.push_back({"big" + std::to_string(i), DType::F32, {floats}, floats * 4,
                       big[size_t(i)].data()});
  }
  std::vector<uint8_t> b = ArtifactWriter(s.manifest, tensors).toBuffer();
  std::string dir = makeTempDir();
  std::string path = dir + "/big.llmc";
  writeBytes(path, b);
  EXPECT_NO_THROW(Artifact::open(path));
  std::unique_ptr<Artifact> ok = Artifact::fromBuffer(b, "x");
  uint64_t dataOffset = 0;
  for (int i = 0; i < 8; ++i)
    dataOffset |= uint64_t(b[32 + size_t(i)]) << (8 * i);
  auto offsetOf = [&](const std::string &name) {
    for (const json &t : ok->manifest()["tensors"])
      if (t["name"] == name)
        return t["offset"].get<uint64_t>();
    ADD_FAILURE() << name;
    return uint64_t(0);
  };
  std::vector<uint8_t> c = b;
  c[dataOffset + offsetOf("big9") + 1000] ^= 0x04;
  c[dataOffset + offsetOf("big4") + 123456] ^= 0x80;
  writeBytes(path, c);
  expectOpenError(path, {"tensor 'big4' checksum mismatch"});
  c = b;
  c[dataOffset + offsetOf("big11") + 4 * floats - 1] ^= 0x01; // its last byte
  writeBytes(path, c);
  expectOpenError(path, {"tensor 'big11' checksum mismatch"});
}

TEST(ArtifactWriter, FailedWritesLeaveNoFile) {
  Sample s;
  std::string dir = makeTempDir();
  std::string missing = dir + "/no/such/folder/model.llmc";
  try {
    s.writer().writeFile(missing);
    ADD_FAILURE() << "expected an error";
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
  EXPECT_FALSE(exists(missing));

  // A tensor whose byte count does not match its dtype and shape.
  std::vector<ArtifactWriter::Tensor> ts = s.tensors();
  ts[1].nbytes -= 4;
  std::string path = dir + "/bad.llmc";
  try {
    ArtifactWriter(s.manifest, ts).writeFile(path);
    ADD_FAILURE() << "expected an error";
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find("norm"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(exists(path));
  EXPECT_TRUE(listDir(dir).empty());

  // Duplicate names and quantized rows that are not whole blocks.
  ts = s.tensors();
  ts[1].name = "emb";
  EXPECT_THROW(ArtifactWriter(s.manifest, ts).toBuffer(), std::runtime_error);
  ts = s.tensors();
  ts[3].shape = {4, 16};
  EXPECT_THROW(ArtifactWriter(s.manifest, ts).writeFile(path), std::runtime_error);
  EXPECT_TRUE(listDir(dir).empty());
}
