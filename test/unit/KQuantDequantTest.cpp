//===- KQuantDequantTest.cpp - Q2_K, Q3_K, IQ4_NL dequantization -----------===//
// The GGUF types llama.cpp's presets write that llmc reads but never writes:
// dequantizeRow must match gguf-py bit for bit (test/fixtures/
// kquant_fixture.bin, made by test/fixtures/make_kquant_fixture.py), they
// must have no fused dot (Matmul dequantizes, then dots) and the prefill
// helper dequantRowFast and matmul must agree with dequantizeRow.
//===----------------------------------------------------------------------===//
#include "../../runtime/src/exec/Matmul.h"
#include "../../runtime/src/kernels/dot_quant.h"
#include "llmc/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

using namespace llmc;

namespace {

const DType kTypes[] = {DType::Q2_K, DType::Q3_K, DType::IQ4_NL};

struct Record {
  std::string name;
  uint64_t n = 0, nbytes = 0;
  std::vector<uint8_t> raw;
  std::vector<float> want;
};

std::vector<Record> loadFixture() {
  const std::string path = std::string(LLMC_SOURCE_DIR) + "/test/fixtures/kquant_fixture.bin";
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
  uint32_t count = 0;
  take(&count, 4);
  std::vector<Record> recs;
  for (uint32_t i = 0; i < count; ++i) {
    Record r;
    uint32_t kind = 0, len = 0;
    take(&kind, 4);
    take(&len, 4);
    if (kind != 0)
      throw std::runtime_error("unexpected record kind in " + path);
    r.name.resize(len);
    take(r.name.data(), len);
    take(&r.n, 8);
    take(&r.nbytes, 8);
    r.raw.resize(r.nbytes);
    take(r.raw.data(), r.nbytes);
    r.want.resize(r.n);
    take(r.want.data(), 4 * r.n);
    recs.push_back(std::move(r));
  }
  return recs;
}

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

/// Random row with sane fp16 scales at the format's scale offsets.
std::vector<uint8_t> randomRow(DType t, int64_t n, std::mt19937 &rng) {
  const DTypeInfo &info = dtypeInfo(t);
  std::vector<uint8_t> row(size_t(rowBytes(t, n)));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.0005f, 0.01f);
  for (uint8_t &v : row)
    v = uint8_t(byte(rng));
  std::vector<int> halves;
  if (t == DType::Q2_K)
    halves = {80, 82};
  else if (t == DType::Q3_K)
    halves = {108};
  else
    halves = {0};
  for (int64_t b = 0; b < n / info.block_size; ++b)
    for (int off : halves) {
      const uint16_t h = floatToHalf(scale(rng));
      std::memcpy(row.data() + b * info.block_bytes + off, &h, 2);
    }
  return row;
}

} // namespace

TEST(KQuantDequant, Geometry) {
  struct Want { DType t; const char *name; int64_t bs, bb; double bpw; };
  for (const Want &w : {Want{DType::Q2_K, "q2_k", 256, 84, 2.625},
                        Want{DType::Q3_K, "q3_k", 256, 110, 3.4375},
                        Want{DType::IQ4_NL, "iq4_nl", 32, 18, 4.5}}) {
    const DTypeInfo &info = dtypeInfo(w.t);
    EXPECT_EQ(info.name, w.name);
    EXPECT_EQ(info.block_size, w.bs) << w.name;
    EXPECT_EQ(info.block_bytes, w.bb) << w.name;
    EXPECT_DOUBLE_EQ(bitsPerWeight(w.t), w.bpw) << w.name;
    ASSERT_TRUE(dtypeFromName(w.name).has_value()) << w.name;
    EXPECT_EQ(*dtypeFromName(w.name), w.t);
  }
  EXPECT_EQ(*dtypeFromName("IQ4_NL"), DType::IQ4_NL);
  EXPECT_EQ(rowBytes(DType::IQ4_NL, 576), 18 * 18);
  EXPECT_THROW(rowBytes(DType::Q3_K, 576), std::runtime_error); // 576 is not 256-aligned
  // The table still ends with U8 (side data), after the GGUF formats.
  EXPECT_EQ(dtypeName(DType::U8), "u8");
}

TEST(KQuantDequant, MatchesGgufPy) {
  const std::vector<Record> recs = loadFixture();
  int checked[3] = {0, 0, 0};
  for (const Record &r : recs) {
    auto t = dtypeFromName(r.name);
    ASSERT_TRUE(t) << r.name;
    ASSERT_EQ(uint64_t(rowBytes(*t, int64_t(r.n))), r.nbytes) << r.name;
    std::vector<uint8_t> shifted(r.nbytes + 1); // blocks must be readable unaligned
    std::memcpy(shifted.data() + 1, r.raw.data(), r.nbytes);
    for (const uint8_t *src : {r.raw.data(), static_cast<const uint8_t *>(shifted.data() + 1)}) {
      std::vector<float> got(r.n, NAN);
      dequantizeRow(*t, src, got.data(), int64_t(r.n));
      for (uint64_t i = 0; i < r.n; ++i)
        ASSERT_EQ(bitsOf(got[i]), bitsOf(r.want[i]))
            << r.name << " element " << i << ": got " << got[i] << " want " << r.want[i];
    }
    for (int k = 0; k < 3; ++k)
      checked[k] += *t == kTypes[k];
  }
  for (int k = 0; k < 3; ++k)
    EXPECT_GE(checked[k], 3) << dtypeName(kTypes[k]);
}

TEST(KQuantDequant, Iq4nlHandBuiltBlock) {
  // d = 0.5; weight j is the low nibble of qs[j], weight j + 16 the high one.
  uint8_t block[18] = {};
  const uint16_t h = floatToHalf(0.5f);
  std::memcpy(block, &h, 2);
  for (int j = 0; j < 16; ++j)
    block[2 + j] = uint8_t(j | ((15 - j) << 4));
  float out[32];
  dequantizeRow(DType::IQ4_NL, block, out, 32);
  EXPECT_EQ(out[0], -63.5f);  // level 0: -127
  EXPECT_EQ(out[8], 0.5f);    // level 8: 1
  EXPECT_EQ(out[15], 56.5f);  // level 15: 113
  EXPECT_EQ(out[16], 56.5f);  // high nibble of qs[0] = 15
  EXPECT_EQ(out[31], -63.5f); // high nibble of qs[15] = 0
}

TEST(KQuantDequant, Q3KHighBitClearSubtractsFour) {
  // All scales 32 + 1 (i.e. +1), d = 1, low bits 0: a clear hmask bit gives -4.
  uint8_t block[110] = {};
  for (int i = 0; i < 8; ++i)
    block[96 + i] = 0x11;          // low nibbles of scales 0..15 = 1
  for (int i = 0; i < 4; ++i)
    block[96 + 8 + i] = 0xAA;      // high 2 bits = 2 -> scale 33 - 32 = 1
  const uint16_t one = floatToHalf(1.0f);
  std::memcpy(block + 108, &one, 2);
  block[0] = 0x01;                 // weight 0 (bit 0 of hmask[0]): high bit set
  block[32] = 0x03 << 2;           // weight 32 (shift 1 of qs[0]): low bits 3
  float out[256];
  dequantizeRow(DType::Q3_K, block, out, 256);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], -4.0f);
  EXPECT_EQ(out[32], -1.0f); // 3 - 4
  EXPECT_EQ(out[255], -4.0f);
}

TEST(KQuantDequant, NoFusedDotAndFastDequantIsExact) {
  std::mt19937 rng(5);
  for (DType t : kTypes) {
    EXPECT_FALSE(kernels::hasFusedDot(t)) << dtypeName(t);
    EXPECT_THROW(kernels::dotKernel(t, 1), std::runtime_error) << dtypeName(t);
    std::vector<float> x(256, 1.0f);
    std::vector<uint8_t> q(size_t(rowBytes(t, 256)));
    EXPECT_THROW(quantizeRowRef(t, x.data(), q.data(), 256), std::runtime_error) << dtypeName(t);
    for (int64_t n : {int64_t(256), int64_t(1536)}) {
      std::vector<uint8_t> row = randomRow(t, n, rng);
      std::vector<float> ref(static_cast<size_t>(n)), fast(static_cast<size_t>(n), NAN);
      dequantizeRow(t, row.data(), ref.data(), n);
      kernels::dequantRowFast(t, row.data(), fast.data(), n);
      EXPECT_EQ(0, std::memcmp(ref.data(), fast.data(), size_t(n) * 4)) << dtypeName(t);
    }
  }
}

TEST(KQuantDequant, MatmulDequantizesThenDots) {
  std::mt19937 rng(11);
  ThreadPool pool(2);
  for (DType t : kTypes) {
    const int64_t cols = dtypeInfo(t).block_size == 256 ? 512 : 96, rows = 13;
    std::vector<uint8_t> data;
    std::vector<float> wf(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<uint8_t> row = randomRow(t, cols, rng);
      dequantizeRow(t, row.data(), wf.data() + r * cols, cols);
      data.insert(data.end(), row.begin(), row.end());
    }
    WeightMatrix w;
    w.data = data.data();
    w.dtype = t;
    w.rows = rows;
    w.cols = cols;
    w.rowStride = rowBytes(t, cols);
    for (int64_t T : {int64_t(1), int64_t(6)}) { // decode-size and prefill-size
      std::vector<float> x(size_t(T * cols)), y(size_t(T * rows), NAN);
      for (float &v : x)
        v = std::normal_distribution<float>(0, 1)(rng);
      matmul(pool, w, x.data(), T, cols, y.data(), rows);
      for (int64_t tt = 0; tt < T; ++tt)
        for (int64_t r = 0; r < rows; ++r) {
          double s = 0, mag = 0;
          for (int64_t c = 0; c < cols; ++c) {
            const double p = double(wf[size_t(r * cols + c)]) * x[size_t(tt * cols + c)];
            s += p;
            mag += std::fabs(p);
          }
          EXPECT_NEAR(y[size_t(tt * rows + r)], s, 1e-5 * mag + 1e-30)
              << dtypeName(t) << " T=" << T << " row " << r;
        }
    }
  }
}
