//===- ArtifactFormatTest.cpp - .llmc bytes: checksums, hand-built files -===//
// The byte level of the format: checksum64 (deterministic, sensitive to
// every bit and to the length, fast), and artifacts assembled by hand with a
// valid header and checksums around any manifest, so that the manifest and
// tensor-table checks are reached and each rejection names the file.
//===----------------------------------------------------------------------===//
#include "llmc/artifact.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <set>

using namespace llmc;
using nlohmann::json;

TEST(Checksum, DeterministicAndSensitive) {
  std::vector<uint8_t> data(1000);
  for (size_t i = 0; i < data.size(); ++i)
    data[i] = uint8_t(i * 31 + 7);
  uint64_t h = checksum64(data.data(), data.size());
  EXPECT_EQ(h, checksum64(data.data(), data.size()));
  EXPECT_NE(h, checksum64(data.data(), data.size(), 1));
  EXPECT_NE(h, checksum64(data.data(), data.size() - 1));
  for (size_t pos : {0ul, 5ul, 31ul, 32ul, 500ul, 997ul, 999ul}) {
    for (int bit : {0, 3, 7}) {
      std::vector<uint8_t> d = data;
      d[pos] ^= uint8_t(1 << bit);
      EXPECT_NE(h, checksum64(d.data(), d.size())) << pos << ":" << bit;
    }
  }
  // Lengths around the lane width all differ, also for zero bytes.
  std::vector<uint8_t> zeros(100, 0);
  std::set<uint64_t> seen;
  for (size_t n = 0; n <= 100; ++n)
    seen.insert(checksum64(zeros.data(), n));
  EXPECT_EQ(seen.size(), 101u);
}

TEST(Checksum, IsFast) {
  std::vector<uint8_t> big(size_t(100) << 20);
  for (size_t i = 0; i < big.size(); i += 4096)
    big[i] = uint8_t(i >> 12);
  checksum64(big.data(), 1 << 20); // warm up
  auto t0 = std::chrono::steady_clock::now();
  uint64_t h = checksum64(big.data(), big.size());
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(h, 0u);
  // Typically ~0.02 s; the bound is loose for loaded test machines.
  EXPECT_LT(s, 0.5) << "checksum64 of 100 MB took " << s << " s";
}

namespace {
/// Hand-assembles an artifact (valid header and checksums) around any
/// manifest, to reach the manifest and tensor-table checks.
std::vector<uint8_t> assemble(const std::string &m, const std::vector<uint8_t> &data) {
  uint64_t dataOffset = (64 + m.size() + 63) / 64 * 64;
  std::vector<uint8_t> b(dataOffset + data.size(), 0);
  std::memcpy(b.data(), kArtifactMagic, 8);
  auto put = [&](size_t at, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i)
      b[at + size_t(i)] = uint8_t(v >> (8 * i));
  };
  put(8, kArtifactVersion, 4);
  put(12, 0, 4);
  put(16, 64, 8);
  put(24, m.size(), 8);
  put(32, dataOffset, 8);
  put(40, data.size(), 8);
  put(48, checksum64(m.data(), m.size()), 8);
  put(56, checksum64(b.data(), 56), 8);
  std::memcpy(b.data() + 64, m.data(), m.size());
  std::copy(data.begin(), data.end(), b.begin() + long(dataOffset));
  return b;
}
std::vector<uint8_t> assemble(const json &manifest, const std::vector<uint8_t> &data) {
  return assemble(manifest.dump(), data);
}
} // namespace

TEST(Artifact, RejectsInconsistentTensorTable) {
  json base = {{"format_version", 1}, {"config", configToJson(ModelConfig())}};
  std::vector<uint8_t> data(256, 1);
  json good = base;
  good["tensors"] = {{{"name", "w"}, {"dtype", "f32"}, {"shape", {4, 8}}, {"offset", 64}, {"nbytes", 128}}};
  EXPECT_NO_THROW(Artifact::fromBuffer(assemble(good, data), "ok"));

  auto expectError = [&](json tensor, const std::string &needle) {
    json m = base;
    m["tensors"] = {tensor};
    try {
      Artifact::fromBuffer(assemble(m, data), "bad.llmc");
      ADD_FAILURE() << "expected an error containing '" << needle << "'";
    } catch (const std::runtime_error &e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("bad.llmc"), std::string::npos) << msg;
      EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    }
  };
  json t = good["tensors"][0];
  json bad = t;
  bad["offset"] = 192; // 192 + 128 > 256
  expectError(bad, "beyond the data section");
  bad = t;
  bad["offset"] = 65;
  expectError(bad, "aligned");
  bad = t;
  bad["nbytes"] = 100;
  expectError(bad, "does not match");
  bad = t;
  bad["dtype"] = "q3_xs";
  expectError(bad, "unknown dtype");
  bad = t;
  bad["shape"] = {-4, 8};
  expectError(bad, "negative");
  bad = t;
  bad["dtype"] = "q8_0"; // 8 is not a multiple of 32
  expectError(bad, "block size");
  bad = t;
  bad.erase("name");
  expectError(bad, "missing field 'name'");
  bad = t;
  bad["shape"] = "4x8";
  expectError(bad, "shape");

  json m = base;
  m["tensors"] = {t, t};
  EXPECT_THROW(Artifact::fromBuffer(assemble(m, data), "dup"), std::runtime_error);
  m = base;
  m.erase("config");
  EXPECT_THROW(Artifact::fromBuffer(assemble(m, data), "noconfig"), std::runtime_error);
  m = base;
  m["program"] = {{"nodes", {{{"op", "warp"}, {"out", 0}}}}, {"output", 0}};
  EXPECT_THROW(Artifact::fromBuffer(assemble(m, data), "badprog"), std::runtime_error);
  try {
    Artifact::fromBuffer(assemble(std::string("{not json"), data), "junk.llmc");
    ADD_FAILURE() << "expected an error";
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Artifact::fromBuffer(assemble(std::string("[1,2]"), data), "arr"), std::runtime_error);
}
