//===- GroupedIntTest.cpp - Grouped integer weight types -------------------===//
// The parametric "gq" DType family (llmc/format/grouped_int.h): names and
// encoding, row sizes, RTN error bounds and exact grids for bits 2..8 x
// sym/asym x several group sizes (including the ones SmolLM2's 576 / 1536
// wide rows need), pack/unpack, the fused dot kernels against dequantizeRow,
// and the errors for malformed names and mismatched row lengths.
//===----------------------------------------------------------------------===//
#include "../../runtime/src/kernels/dot_grouped.h"
#include "llmc/dtype.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace llmc;

namespace {

const int64_t kGroups[] = {8, 32, 64, 96, 192};

std::string nameOf(int bits, bool sym, int64_t group) {
  return "gq" + std::to_string(bits) + (sym ? "s" : "a") + "_g" + std::to_string(group);
}

template <class F> void forEachConfig(F &&f) {
  for (int bits = 2; bits <= 8; ++bits)
    for (bool sym : {false, true})
      for (int64_t g : kGroups) {
        SCOPED_TRACE(nameOf(bits, sym, g));
        f(bits, sym, g);
      }
}

// Row lengths to try for group g: a few groups, and SmolLM2's widths.
std::vector<int64_t> lengthsFor(int64_t g) {
  std::vector<int64_t> ns = {g, 3 * g};
  for (int64_t n : {576, 1536})
    if (n % g == 0)
      ns.push_back(n);
  return ns;
}

std::vector<float> randomWeights(int64_t n, std::mt19937 &rng) {
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> w(static_cast<size_t>(n));
  for (float &v : w)
    v = nd(rng);
  // A few outliers, as real weight rows have.
  std::uniform_int_distribution<int64_t> at(0, n - 1);
  for (int k = 0; k < 3; ++k)
    w[size_t(at(rng))] *= 8.0f;
  return w;
}

template <class F> void expectThrowContaining(F &&f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error &e) {
    for (const std::string &p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what() << " lacks " << p;
  }
}

} // namespace

TEST(GroupedInt, NamesAndEncodingRoundTrip) {
  for (int bits = 2; bits <= 8; ++bits)
    for (bool sym : {false, true})
      for (int64_t g : {8, 16, 32, 64, 96, 128, 192, 256, 4096}) {
        const DType t = groupedIntDType(bits, sym, g);
        const std::string name = nameOf(bits, sym, g);
        EXPECT_EQ(dtypeName(t), name);
        EXPECT_EQ(dtypeFromName(name), t);
        std::string upper = name;
        for (char &c : upper)
          c = char(std::toupper(static_cast<unsigned char>(c)));
        EXPECT_EQ(dtypeFromName(upper), t);
        auto spec = groupedIntSpec(t);
        ASSERT_TRUE(spec);
        EXPECT_EQ(spec->bits, bits);
        EXPECT_EQ(spec->sym, sym);
        EXPECT_EQ(spec->group, g);
        EXPECT_TRUE(isGroupedInt(t));
        EXPECT_EQ(dtypeInfo(t).block_size, g);
        EXPECT_EQ(dtypeInfo(t).block_bytes, (sym ? 2 : 4) + g * bits / 8);
        // The interned name is the same storage every time.
        EXPECT_EQ(dtypeInfo(t).name.data(), dtypeName(t).data());
      }
  // The GGUF formats are untouched and not grouped.
  for (const char *n : {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k",
                        "q5_k", "q6_k"}) {
    auto t = dtypeFromName(n);
    ASSERT_TRUE(t) << n;
    EXPECT_EQ(dtypeName(*t), n);
    EXPECT_FALSE(groupedIntSpec(*t));
  }
  EXPECT_EQ(dtypeFromName("q4_1"), DType::Q4_1);
}

TEST(GroupedInt, MalformedNamesRejected) {
  for (const char *n :
       {"gq", "gq4a", "gq4a_g", "gq4a_g0", "gq4a_g064", "gq1a_g64", "gq9a_g64", "gq0s_g64",
        "gq4x_g64", "gq4a_64", "gq4a_x64", "gq4ag64", "gq4a_g60", "gq4a_g4", "gq4a_g4104",
        "gq4a_g8192", "gq4a_g64x", "gq10a_g64", "gq4a_g-8", " gq4a_g64", "gq4a_g64 ", "gqa4_g64",
        "q4a_g64", "gq4a_g+64", "gq4a__g64", ""})
    EXPECT_FALSE(dtypeFromName(n)) << n;

  expectThrowContaining([] { groupedIntDType(1, true, 32); }, {"1 bits"});
  expectThrowContaining([] { groupedIntDType(9, false, 32); }, {"9 bits"});
  expectThrowContaining([] { groupedIntDType(4, false, 60); }, {"group size 60"});
  expectThrowContaining([] { groupedIntDType(4, false, 0); }, {"group size 0"});
  expectThrowContaining([] { groupedIntDType(4, false, 4104); }, {"group size 4104"});
  // A raw value that is neither a named format nor a valid grouped type.
  const DType bogus = DType(0x47000000u | (9u << 16) | 64u);
  EXPECT_FALSE(groupedIntSpec(bogus));
  EXPECT_THROW(dtypeInfo(bogus), std::runtime_error);
  EXPECT_THROW(dtypeInfo(DType(200)), std::runtime_error);
}

TEST(GroupedInt, RowBytesAndBitsPerWeight) {
  const DType a4 = *dtypeFromName("gq4a_g64");
  EXPECT_EQ(dtypeInfo(a4).block_bytes, 36);
  EXPECT_EQ(rowBytes(a4, 576), 9 * 36);
  EXPECT_EQ(rowBytes(a4, 1536), 24 * 36);
  EXPECT_DOUBLE_EQ(bitsPerWeight(a4), 4.5);
  const DType s3 = *dtypeFromName("gq3s_g32");
  EXPECT_EQ(dtypeInfo(s3).block_bytes, 14);
  EXPECT_EQ(rowBytes(s3, 576), 18 * 14);
  EXPECT_DOUBLE_EQ(bitsPerWeight(s3), 3.5);
  const DType s8 = groupedIntDType(8, true, 96);
  EXPECT_EQ(rowBytes(s8, 1536), 16 * 98);
  const DType a2 = groupedIntDType(2, false, 192);
  EXPECT_EQ(rowBytes(a2, 576), 3 * (4 + 48));
  EXPECT_EQ(rowBytes(a2, 0), 0);
}

TEST(GroupedInt, GroupNotDividingRowThrows) {
  const DType t = *dtypeFromName("gq4a_g64");
  std::vector<float> f(100, 0.0f), x(100, 1.0f);
  std::vector<uint8_t> b(1024), codes(100);
  std::vector<float> scales(2), mins(2);
  auto check = [&](auto fn) { expectThrowContaining(fn, {"100", "64"}); };
  check([&] { rowBytes(t, 100); });
  check([&] { dequantizeRow(t, b.data(), f.data(), 100); });
  check([&] { quantizeRowRef(t, f.data(), b.data(), 100); });
  check([&] { packGroupedRow(t, codes.data(), scales.data(), mins.data(), b.data(), 100); });
  check([&] { unpackGroupedRow(t, b.data(), codes.data(), scales.data(), mins.data(), 100); });
  check([&] { kernels::dotGroupedRow(t, b.data(), x.data(), 100); });
}

TEST(GroupedInt, PackRejectsBadInput) {
  const DType a3 = groupedIntDType(3, false, 8);
  std::vector<uint8_t> codes(8, 1), dst(16);
  float scale = 1.0f, mn = 0.0f;
  codes[5] = 8; // does not fit in 3 bits
  expectThrowContaining([&] { packGroupedRow(a3, codes.data(), &scale, &mn, dst.data(), 8); },
                        {"code 8", "element 5", "3 bits"});
  codes[5] = 7;
  expectThrowContaining([&] { packGroupedRow(a3, codes.data(), &scale, nullptr, dst.data(), 8); },
                        {"minimum"});
  EXPECT_THROW(packGroupedRow(DType::Q4_1, codes.data(), &scale, &mn, dst.data(), 32),
               std::runtime_error);
  // Symmetric types ignore mins: null is fine.
  packGroupedRow(groupedIntDType(3, true, 8), codes.data(), &scale, nullptr, dst.data(), 8);
}

TEST(GroupedInt, BitstreamLayout) {
  // Codes 0..7 of 3 bits, LSB first: 0xFAC688 little-endian after d and m.
  const DType t = groupedIntDType(3, false, 8);
  const uint8_t codes[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  const float scale = 0.5f, mn = -1.0f;
  uint8_t blk[7];
  packGroupedRow(t, codes, &scale, &mn, blk, 8);
  uint16_t d, m;
  std::memcpy(&d, blk, 2);
  std::memcpy(&m, blk + 2, 2);
  EXPECT_EQ(d, floatToHalf(0.5f));
  EXPECT_EQ(m, floatToHalf(-1.0f));
  EXPECT_EQ(blk[4], 0x88);
  EXPECT_EQ(blk[5], 0xC6);
  EXPECT_EQ(blk[6], 0xFA);
  float w[8];
  dequantizeRow(t, blk, w, 8);
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(w[i], 0.5f * float(i) - 1.0f);
  // Symmetric 4-bit: nibble j of the stream is code j; w = d * (q - 8).
  const DType s4 = groupedIntDType(4, true, 8);
  const uint8_t c4[8] = {0, 15, 8, 9, 1, 2, 3, 4};
  uint8_t b4[6];
  packGroupedRow(s4, c4, &scale, nullptr, b4, 8);
  EXPECT_EQ(b4[2], 0xF0);
  EXPECT_EQ(b4[3], 0x98);
  dequantizeRow(s4, b4, w, 8);
  EXPECT_EQ(w[0], -4.0f);
  EXPECT_EQ(w[1], 3.5f);
  EXPECT_EQ(w[2], 0.0f);
}

TEST(GroupedInt, PackUnpackRoundTrip) {
  std::mt19937 rng(7);
  forEachConfig([&](int bits, bool sym, int64_t g) {
    const DType t = groupedIntDType(bits, sym, g);
    const int64_t n = 3 * g, groups = 3;
    std::uniform_int_distribution<int> code(0, (1 << bits) - 1);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    std::vector<uint8_t> codes(static_cast<size_t>(n)), codes2(static_cast<size_t>(n));
    std::vector<float> scales(groups), mins(groups), scales2(groups), mins2(groups, -99.0f);
    for (auto &c : codes)
      c = uint8_t(code(rng));
    for (int64_t k = 0; k < groups; ++k) {
      scales[size_t(k)] = roundToHalf(u(rng));
      mins[size_t(k)] = roundToHalf(u(rng));
    }
    std::vector<uint8_t> row(static_cast<size_t>(rowBytes(t, n)));
    packGroupedRow(t, codes.data(), scales.data(), mins.data(), row.data(), n);
    unpackGroupedRow(t, row.data(), codes2.data(), scales2.data(), mins2.data(), n);
    EXPECT_EQ(codes, codes2);
    EXPECT_EQ(scales, scales2);
    if (sym)
      EXPECT_EQ(mins2, std::vector<float>(groups, -99.0f)); // not written
    else
      EXPECT_EQ(mins, mins2);
    // And dequantizeRow agrees with the documented formula.
    std::vector<float> w(static_cast<size_t>(n));
    dequantizeRow(t, row.data(), w.data(), n);
    const int off = 1 << (bits - 1);
    for (int64_t i = 0; i < n; ++i) {
      const float d = scales[size_t(i / g)], m = mins[size_t(i / g)];
      const float want = sym ? d * float(int(codes[size_t(i)]) - off) : d * float(codes[size_t(i)]) + m;
      ASSERT_EQ(w[size_t(i)], want) << i;
    }
  });
}

TEST(GroupedInt, RoundToHalf) {
  EXPECT_EQ(roundToHalf(1.0f), 1.0f);
  EXPECT_EQ(roundToHalf(1.0f + 0x1p-12f), 1.0f);
  EXPECT_EQ(roundToHalf(1.0f + 0x1p-10f), 1.0f + 0x1p-10f);
  // Expected values worked out by hand: fp16 keeps 10 fraction bits, so
  // x = 1.f * 2^e becomes round(f * 1024) / 1024 * 2^e, ties to even.
  EXPECT_EQ(roundToHalf(0.1f), 0.0999755859375f);  // 1.6 * 2^-4: 1638.4 -> 1638
  EXPECT_EQ(roundToHalf(1.0f / 3), 0.333251953125f); // 1.333 * 2^-2: 1365.33 -> 1365
  EXPECT_EQ(roundToHalf(0.7f), 0.7001953125f);       // 1.4 * 2^-1: 409.6 -> 410 (up)
  EXPECT_EQ(roundToHalf(-0.7f), -0.7001953125f);
  EXPECT_EQ(roundToHalf(1.0f + 0x1p-11f), 1.0f);            // tie: down to even 0
  EXPECT_EQ(roundToHalf(1.0f + 3 * 0x1p-11f), 1.0f + 0x1p-9f); // tie: up to even 2
  EXPECT_EQ(roundToHalf(65519.0f), 65504.0f);                // the largest half
  EXPECT_EQ(roundToHalf(65520.0f), INFINITY);                // past it: overflow
  // Subnormals: multiples of 2^-24.
  EXPECT_EQ(roundToHalf(0x1p-25f), 0.0f);             // tie: down to even 0
  EXPECT_EQ(roundToHalf(3 * 0x1p-26f), 0x1p-24f);     // 0.75 ulp -> 1 ulp
  EXPECT_EQ(roundToHalf(3 * 0x1p-25f), 0x1p-23f);     // tie: up to even 2 ulp
}

TEST(GroupedInt, RtnErrorBounds) {
  std::mt19937 rng(11);
  forEachConfig([&](int bits, bool sym, int64_t g) {
    const DType t = groupedIntDType(bits, sym, g);
    const int off = 1 << (bits - 1);
    for (int64_t n : lengthsFor(g)) {
      const std::vector<float> w = randomWeights(n, rng);
      std::vector<uint8_t> row(static_cast<size_t>(rowBytes(t, n)));
      quantizeRowRef(t, w.data(), row.data(), n);
      std::vector<float> back(static_cast<size_t>(n));
      dequantizeRow(t, row.data(), back.data(), n);
      std::vector<float> scales(static_cast<size_t>(n / g)), mins(static_cast<size_t>(n / g));
      std::vector<uint8_t> codes(static_cast<size_t>(n));
      unpackGroupedRow(t, row.data(), codes.data(), scales.data(), mins.data(), n);
      for (int64_t k = 0; k < n / g; ++k) {
        const float d = std::fabs(scales[size_t(k)]);
        const float *wg = w.data() + k * g;
        const float *bg = back.data() + k * g;
        float amax = 0.0f;
        int64_t imax = 0;
        for (int64_t j = 0; j < g; ++j)
          if (std::fabs(wg[j]) > amax) {
            amax = std::fabs(wg[j]);
            imax = j;
          }
        // Float slack: a few ulps of the group's magnitude.
        const float slack = 4e-7f * amax;
        for (int64_t j = 0; j < g; ++j) {
          const float err = std::fabs(wg[j] - bg[j]);
          if (!sym) {
            ASSERT_LE(err, d / 2 + slack) << "group " << k << " j " << j;
          } else if (std::fabs(wg[j]) <= d * (float(off) - 0.5f)) {
            ASSERT_LE(err, d / 2 + slack) << "group " << k << " j " << j;
          } else {
            // Only the top of the opposite sign clamps: at most one step.
            ASSERT_LE(err, d + slack) << "group " << k << " j " << j;
          }
        }
        if (sym) {
          // The largest magnitude maps to code 0 (= -2^(bits-1) * d).
          EXPECT_EQ(codes[size_t(k * g + imax)], 0);
          EXPECT_LE(std::fabs(bg[imax] - wg[imax]), amax * 0x1p-11f);
        }
      }
    }
  });
}

TEST(GroupedInt, ZeroAndConstantGroups) {
  forEachConfig([&](int bits, bool sym, int64_t g) {
    const DType t = groupedIntDType(bits, sym, g);
    std::vector<float> w(static_cast<size_t>(2 * g), 0.0f), back(static_cast<size_t>(2 * g), 1.0f);
    std::fill(w.begin() + g, w.end(), 0.3f);
    std::vector<uint8_t> row(static_cast<size_t>(rowBytes(t, 2 * g)));
    quantizeRowRef(t, w.data(), row.data(), 2 * g);
    dequantizeRow(t, row.data(), back.data(), 2 * g);
    for (int64_t j = 0; j < g; ++j)
      ASSERT_EQ(back[size_t(j)], 0.0f);
    for (int64_t j = g; j < 2 * g; ++j)
      ASSERT_NEAR(back[size_t(j)], 0.3f, 0.3f * 0x1p-10f);
  });
}

TEST(GroupedInt, ExactGridIsReproduced) {
  // Weights that lie exactly on a grid with fp16 scale / minimum and use the
  // extreme codes come back bit for bit, and requantize to the same bytes.
  std::mt19937 rng(3);
  forEachConfig([&](int bits, bool sym, int64_t g) {
    const DType t = groupedIntDType(bits, sym, g);
    const int qmax = (1 << bits) - 1;
    const int64_t n = 4 * g, groups = 4;
    std::uniform_int_distribution<int> code(0, qmax), kd(1, 16), km(0, 31), sign(0, 1);
    std::uniform_int_distribution<int64_t> pos(0, g - 1);
    std::vector<uint8_t> codes(static_cast<size_t>(n));
    std::vector<float> scales(groups), mins(groups);
    for (int64_t k = 0; k < groups; ++k) {
      float d = float(kd(rng)) / 128.0f;
      if (sym && sign(rng))
        d = -d; // the largest magnitude is then positive
      scales[size_t(k)] = d;
      // +0, not -0, for a zero minimum: RTN sees min(w) = +0.
      mins[size_t(k)] = float(km(rng)) / -32.0f + 0.0f;
      uint8_t *c = codes.data() + k * g;
      for (int64_t j = 0; j < g; ++j)
        c[j] = uint8_t(code(rng));
      if (sym) {
        for (int64_t j = 0; j < g; ++j)
          c[j] = uint8_t(std::max<int>(c[j], 1)); // code 0 exactly once
        c[pos(rng)] = 0;
      } else {
        const int64_t a = pos(rng);
        int64_t b = pos(rng);
        if (b == a)
          b = (a + 1) % g;
        c[a] = 0;
        c[b] = uint8_t(qmax);
      }
    }
    std::vector<uint8_t> row(static_cast<size_t>(rowBytes(t, n))), row2(row.size());
    packGroupedRow(t, codes.data(), scales.data(), mins.data(), row.data(), n);
    std::vector<float> w(static_cast<size_t>(n)), back(static_cast<size_t>(n));
    dequantizeRow(t, row.data(), w.data(), n);
    quantizeRowRef(t, w.data(), row2.data(), n);
    for (size_t i = 0; i < row.size(); ++i)
      ASSERT_EQ(int(row[i]), int(row2[i])) << "byte " << i << " of " << row.size();
    dequantizeRow(t, row2.data(), back.data(), n);
    EXPECT_EQ(w, back);
  });
}

TEST(GroupedInt, DotMatchesDequantize) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  forEachConfig([&](int bits, bool sym, int64_t g) {
    const DType t = groupedIntDType(bits, sym, g);
    for (int64_t n : lengthsFor(g)) {
      const std::vector<float> w = randomWeights(n, rng);
      std::vector<uint8_t> row(static_cast<size_t>(rowBytes(t, n)));
      quantizeRowRef(t, w.data(), row.data(), n);
      std::vector<float> deq(static_cast<size_t>(n));
      dequantizeRow(t, row.data(), deq.data(), n);
      const int nx = kernels::kMaxGroupedDotRows;
      const int64_t ldx = n + 8;
      std::vector<float> x(static_cast<size_t>(nx * ldx));
      for (float &v : x)
        v = nd(rng);
      double ref[kernels::kMaxGroupedDotRows], mag[kernels::kMaxGroupedDotRows];
      for (int k = 0; k < nx; ++k) {
        ref[k] = mag[k] = 0.0;
        for (int64_t i = 0; i < n; ++i) {
          ref[k] += double(deq[size_t(i)]) * x[size_t(k * ldx + i)];
          mag[k] += std::fabs(double(deq[size_t(i)]) * x[size_t(k * ldx + i)]);
        }
      }
      auto tol = [&](int k) { return 1e-5 * mag[k] + 1e-30; };
      EXPECT_NEAR(kernels::dotGroupedRow(t, row.data(), x.data(), n), ref[0], tol(0));
      for (int rows = 1; rows <= nx; ++rows) {
        float out[2 * kernels::kMaxGroupedDotRows], outS[2 * kernels::kMaxGroupedDotRows];
        kernels::dotGroupedRows(t, row.data(), n, x.data(), ldx, rows, out, 2);
        kernels::dotGroupedRowsScalar(t, row.data(), n, x.data(), ldx, rows, outS, 2);
        for (int k = 0; k < rows; ++k) {
          EXPECT_NEAR(out[2 * k], ref[k], tol(k)) << "rows " << rows << " k " << k;
          EXPECT_NEAR(outS[2 * k], ref[k], tol(k)) << "rows " << rows << " k " << k;
        }
      }
    }
  });
  EXPECT_THROW(kernels::dotGroupedRows(groupedIntDType(4, true, 32), nullptr, 32, nullptr, 32, 5,
                                       nullptr, 1),
               std::runtime_error);
}

TEST(GroupedInt, InterningIsThreadSafe) {
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int th = 0; th < 4; ++th)
    threads.emplace_back([th, &bad] {
      for (int rep = 0; rep < 50; ++rep)
        for (int bits = 2; bits <= 8; ++bits)
          for (int64_t g = 8; g <= 512; g += 8) {
            const DType t = groupedIntDType(bits, (rep + th) % 2 == 0, g);
            const DTypeInfo &info = dtypeInfo(t);
            if (info.name != nameOf(bits, (rep + th) % 2 == 0, g) || info.block_size != g)
              ++bad[size_t(th)];
          }
    });
  for (auto &t : threads)
    t.join();
  for (int b : bad)
    EXPECT_EQ(b, 0);
}
