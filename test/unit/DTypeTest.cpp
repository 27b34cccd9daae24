//===- DTypeTest.cpp - Weight types: table, fp16/bf16, (de)quantization ----===//
// Checks llmc's block formats bit for bit against reference results computed
// by gguf-py (test/fixtures/dequant_fixture.bin, made by
// test/fixtures/make_dequant_fixture.py), and fp16 conversion against the
// CPU's F16C instructions where available.
//===----------------------------------------------------------------------===//
#include "llmc/dtype.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

using namespace llmc;

namespace {

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

struct FixtureRecord {
  uint32_t kind = 0;
  std::string name;
  uint64_t n = 0, nbytes = 0;
  std::vector<uint8_t> payload;
};

std::vector<FixtureRecord> loadFixture() {
  std::string path = std::string(LLMC_SOURCE_DIR) + "/test/fixtures/dequant_fixture.bin";
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::runtime_error("cannot open " + path);
  std::vector<uint8_t> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t pos = 0;
  auto take = [&](void *dst, size_t n) {
    if (pos + n > b.size())
      throw std::runtime_error("fixture truncated: " + path);
    std::memcpy(dst, b.data() + pos, n);
    pos += n;
  };
  char magic[8];
  take(magic, 8);
  if (std::memcmp(magic, "LLMCDQF1", 8) != 0)
    throw std::runtime_error("bad fixture magic: " + path);
  uint32_t count;
  take(&count, 4);
  std::vector<FixtureRecord> recs;
  for (uint32_t i = 0; i < count; ++i) {
    FixtureRecord r;
    uint32_t name_len;
    take(&r.kind, 4);
    take(&name_len, 4);
    r.name.resize(name_len);
    take(r.name.data(), name_len);
    take(&r.n, 8);
    take(&r.nbytes, 8);
    size_t payload = 0;
    switch (r.kind) {
    case 0: case 1: payload = r.nbytes + 4 * r.n; break;
    case 2: payload = r.n * (4 + 2 + 2); break;
    case 3: payload = r.n * (2 + 4); break;
    default: throw std::runtime_error("bad fixture record kind");
    }
    r.payload.resize(payload);
    take(r.payload.data(), payload);
    recs.push_back(std::move(r));
  }
  return recs;
}

const std::vector<FixtureRecord> &fixture() {
  static const std::vector<FixtureRecord> recs = loadFixture();
  return recs;
}

} // namespace

TEST(DType, TableGeometry) {
  struct Want { DType t; const char *name; int64_t bs, bb; double bpw; };
  const Want want[] = {
      {DType::F32, "f32", 1, 4, 32.0},      {DType::F16, "f16", 1, 2, 16.0},
      {DType::BF16, "bf16", 1, 2, 16.0},    {DType::Q8_0, "q8_0", 32, 34, 8.5},
      {DType::Q4_0, "q4_0", 32, 18, 4.5},   {DType::Q4_1, "q4_1", 32, 20, 5.0},
      {DType::Q5_0, "q5_0", 32, 22, 5.5},   {DType::Q5_1, "q5_1", 32, 24, 6.0},
      {DType::Q4_K, "q4_k", 256, 144, 4.5}, {DType::Q5_K, "q5_k", 256, 176, 5.5},
      {DType::Q6_K, "q6_k", 256, 210, 6.5625},
  };
  for (const Want &w : want) {
    const DTypeInfo &info = dtypeInfo(w.t);
    EXPECT_EQ(info.name, w.name);
    EXPECT_EQ(dtypeName(w.t), w.name);
    EXPECT_EQ(info.block_size, w.bs) << w.name;
    EXPECT_EQ(info.block_bytes, w.bb) << w.name;
    EXPECT_DOUBLE_EQ(bitsPerWeight(w.t), w.bpw) << w.name;
    EXPECT_EQ(rowBytes(w.t, 3 * w.bs), 3 * w.bb) << w.name;
    ASSERT_TRUE(dtypeFromName(w.name).has_value()) << w.name;
    EXPECT_EQ(*dtypeFromName(w.name), w.t);
  }
  EXPECT_EQ(*dtypeFromName("Q4_K"), DType::Q4_K);
  EXPECT_FALSE(dtypeFromName("iq2_xxs").has_value());
  EXPECT_FALSE(dtypeFromName("").has_value());
  EXPECT_EQ(rowBytes(DType::Q4_1, 576), 360);
}

TEST(DType, RowSizeMustBeWholeBlocks) {
  EXPECT_THROW(rowBytes(DType::Q4_0, 33), std::runtime_error);
  EXPECT_THROW(rowBytes(DType::Q6_K, 128), std::runtime_error);
  std::vector<uint8_t> raw(64);
  float out[64];
  EXPECT_THROW(dequantizeRow(DType::Q8_0, raw.data(), out, 31), std::runtime_error);
  EXPECT_THROW(quantizeRowRef(DType::Q4_K, out, raw.data(), 256), std::runtime_error);
}

TEST(DType, FixtureHasEveryType) {
  std::vector<std::string> seen;
  for (const auto &r : fixture())
    if (r.kind == 0)
      seen.push_back(r.name);
  for (const char *name : {"f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k"})
    EXPECT_NE(std::find(seen.begin(), seen.end(), name), seen.end()) << name;
}

TEST(DType, DequantizeMatchesGgufPy) {
  int checked = 0;
  for (const auto &r : fixture()) {
    if (r.kind != 0)
      continue;
    auto t = dtypeFromName(r.name);
    ASSERT_TRUE(t) << r.name;
    ASSERT_EQ(uint64_t(rowBytes(*t, int64_t(r.n))), r.nbytes) << r.name;
    const uint8_t *raw = r.payload.data();
    const uint8_t *want = r.payload.data() + r.nbytes;
    // Also from an odd address: blocks must be readable unaligned.
    std::vector<uint8_t> shifted(r.nbytes + 1);
    std::memcpy(shifted.data() + 1, raw, r.nbytes);
    for (const uint8_t *src : {raw, static_cast<const uint8_t *>(shifted.data() + 1)}) {
      std::vector<float> got(r.n);
      dequantizeRow(*t, src, got.data(), int64_t(r.n));
      for (uint64_t i = 0; i < r.n; ++i) {
        float w;
        std::memcpy(&w, want + 4 * i, 4);
        ASSERT_EQ(bitsOf(got[i]), bitsOf(w)) << r.name << " element " << i << ": got " << got[i]
                                             << " want " << w;
      }
    }
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

TEST(DType, ReferenceQuantizersMatchGgufPy) {
  int checked = 0;
  for (const auto &r : fixture()) {
    if (r.kind != 1)
      continue;
    auto t = dtypeFromName(r.name);
    ASSERT_TRUE(t) << r.name;
    std::vector<float> x(r.n);
    std::memcpy(x.data(), r.payload.data(), 4 * r.n);
    const uint8_t *want = r.payload.data() + 4 * r.n;
    std::vector<uint8_t> got(r.nbytes);
    quantizeRowRef(*t, x.data(), got.data(), int64_t(r.n));
    for (uint64_t i = 0; i < r.nbytes; ++i)
      ASSERT_EQ(int(got[i]), int(want[i])) << r.name << " byte " << i;
    ++checked;
  }
  EXPECT_EQ(checked, 5);
}

TEST(DType, QuantizeRoundTripIsClose) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(256), y(256);
  for (float &v : x)
    v = dist(rng);
  struct Case { DType t; float tol; };
  for (Case c : {Case{DType::F32, 0.0f}, Case{DType::F16, 2e-3f}, Case{DType::BF16, 2e-2f},
                 Case{DType::Q8_0, 0.02f}, Case{DType::Q5_0, 0.15f}, Case{DType::Q5_1, 0.15f},
                 Case{DType::Q4_0, 0.35f}, Case{DType::Q4_1, 0.3f}}) {
    std::vector<uint8_t> q(rowBytes(c.t, 256));
    quantizeRowRef(c.t, x.data(), q.data(), 256);
    dequantizeRow(c.t, q.data(), y.data(), 256);
    for (int i = 0; i < 256; ++i)
      ASSERT_NEAR(y[i], x[i], c.tol) << dtypeName(c.t) << " element " << i;
  }
}

TEST(DType, FloatToHalfAndBf16MatchNumpy) {
  for (const auto &r : fixture()) {
    if (r.kind != 2)
      continue;
    const uint8_t *p = r.payload.data();
    for (uint64_t i = 0; i < r.n; ++i) {
      float x;
      uint16_t h, b;
      std::memcpy(&x, p + 4 * i, 4);
      std::memcpy(&h, p + 4 * r.n + 2 * i, 2);
      std::memcpy(&b, p + 6 * r.n + 2 * i, 2);
      EXPECT_EQ(floatToHalf(x), h) << "f16 of " << x << " (bits " << std::hex << bitsOf(x) << ")";
      EXPECT_EQ(floatToBf16(x), b) << "bf16 of " << x;
    }
    EXPECT_GT(r.n, 500u);
  }
}

TEST(DType, HalfToFloatMatchesNumpy) {
  for (const auto &r : fixture()) {
    if (r.kind != 3)
      continue;
    for (uint64_t i = 0; i < r.n; ++i) {
      uint16_t h;
      float want;
      std::memcpy(&h, r.payload.data() + 2 * i, 2);
      std::memcpy(&want, r.payload.data() + 2 * r.n + 4 * i, 4);
      ASSERT_EQ(bitsOf(halfToFloat(h)), bitsOf(want)) << "half 0x" << std::hex << h;
    }
  }
}

TEST(DType, HalfRoundTripIsExhaustivelyExact) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = halfToFloat(uint16_t(h));
    bool nan = (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0;
    if (nan) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      uint16_t back = floatToHalf(f);
      ASSERT_TRUE((back & 0x7C00) == 0x7C00 && (back & 0x3FF) != 0) << std::hex << h;
    } else {
      ASSERT_EQ(floatToHalf(f), uint16_t(h)) << std::hex << h;
    }
  }
  EXPECT_EQ(halfToFloat(0x3C00), 1.0f);
  EXPECT_EQ(halfToFloat(0xC000), -2.0f);
  EXPECT_EQ(halfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(floatToHalf(1e9f), 0x7C00);
  EXPECT_EQ(floatToHalf(-1e9f), 0xFC00);
}

TEST(DType, Bf16Conversion) {
  for (uint32_t b = 0; b < 0x10000; b += 3) {
    if ((b & 0x7F80) == 0x7F80 && (b & 0x7F) != 0)
      continue; // NaN
    ASSERT_EQ(floatToBf16(bf16ToFloat(uint16_t(b))), uint16_t(b)) << std::hex << b;
  }
  // Ties go to even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7.
  EXPECT_EQ(floatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);
  EXPECT_EQ(floatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(std::nanf("")))));
}

#if defined(__x86_64__) && defined(__GNUC__)
namespace {
__attribute__((target("f16c"))) uint16_t hardwareHalf(float f) {
  __m128i h = _mm_cvtps_ph(_mm_set1_ps(f), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return uint16_t(_mm_extract_epi16(h, 0));
}
__attribute__((target("f16c"))) float hardwareFloat(uint16_t h) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_set1_epi16(short(h))));
}
} // namespace

TEST(DType, HalfConversionMatchesF16C) {
  if (!__builtin_cpu_supports("f16c"))
    GTEST_SKIP() << "CPU has no F16C";
  // A sweep over all float bit patterns (odd stride hits every exponent and
  // many rounding cases); NaNs are compared as NaN-ness only.
  for (uint64_t u = 0; u < (1ull << 32); u += 4093) {
    uint32_t bits = uint32_t(u);
    float f;
    std::memcpy(&f, &bits, 4);
    uint16_t mine = floatToHalf(f), hw = hardwareHalf(f);
    if (std::isnan(f))
      ASSERT_EQ(mine & 0x7C00, 0x7C00);
    else
      ASSERT_EQ(mine, hw) << "float bits 0x" << std::hex << bits;
  }
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0)
      continue;
    ASSERT_EQ(bitsOf(halfToFloat(uint16_t(h))), bitsOf(hardwareFloat(uint16_t(h)))) << std::hex << h;
  }
}
#endif
