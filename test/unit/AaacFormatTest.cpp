//===- AaacFormatTest.cpp - AAAC storage format and kernels ----------------===//
// llmc/format/aaac.h: pack/unpack round trips (codes, signed scales with the
// codebook flag in the sign bit, fp16 codebooks), the row dequantizer against
// a reference decoder written here from the documented layout, the fused dot
// kernels (SIMD and portable) against that reference for 2..4 bits, several
// group sizes and group counts, 1..4 activation rows, Matmul over an AAAC
// matrix (fused and blocked paths), and the errors for bad inputs.
//===----------------------------------------------------------------------===//
#include "../../runtime/src/exec/Matmul.h"
#include "../../runtime/src/kernels/aaac_rows.h"
#include "../../runtime/src/kernels/family_rows.h"
#include "llmc/dtype.h"
#include "llmc/format/aaac.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

using namespace llmc;

namespace {

/// A random AAAC row: codes, signed scales (some on codebook B), packed bytes.
struct Row {
  std::vector<uint8_t> codes, bytes;
  std::vector<float> scales;
};

Row randomRow(DType t, int64_t n, std::mt19937 &rng) {
  const AaacSpec s = *aaacSpec(t);
  Row r;
  r.codes.resize(size_t(n));
  std::uniform_int_distribution<int> code(0, (1 << s.bits) - 1);
  for (uint8_t &c : r.codes)
    c = uint8_t(code(rng));
  std::uniform_real_distribution<float> mag(0.001f, 0.2f);
  for (int64_t g = 0; g < n / s.group; ++g)
    r.scales.push_back(rng() % 2 ? -mag(rng) : mag(rng));
  r.bytes.resize(size_t(rowBytes(t, n)));
  packAaacRow(t, r.codes.data(), r.scales.data(), r.bytes.data(), n);
  return r;
}

struct Books {
  std::vector<float> a, b;
  std::vector<uint8_t> aux;
};

Books randomBooks(DType t, std::mt19937 &rng) {
  const int k = aaacEntries(aaacSpec(t)->bits);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Books b;
  for (int i = 0; i < k; ++i) {
    b.a.push_back(nd(rng));
    b.b.push_back(nd(rng));
  }
  b.aux.resize(size_t(auxBytes(t, 1, 1)));
  packAaacCodebooks(t, b.a.data(), b.b.data(), b.aux.data());
  return b;
}

/// Reference decoder from the layout in llmc/format/aaac.h, bit by bit.
std::vector<float> referenceDequant(int bits, int64_t group, const uint8_t *row,
                                    const uint8_t *aux, int64_t n) {
  const int k = 1 << bits;
  auto half = [](const uint8_t *p) { return uint16_t(p[0] | (p[1] << 8)); };
  std::vector<float> out(static_cast<size_t>(n));
  const int64_t bb = 2 + group * bits / 8;
  for (int64_t g = 0; g < n / group; ++g) {
    const uint8_t *blk = row + g * bb;
    const uint16_t f = half(blk);
    const int book = f >> 15;
    const float scale = halfToFloat(uint16_t(f & 0x7FFF));
    for (int64_t j = 0; j < group; ++j) {
      int q = 0;
      for (int b = 0; b < bits; ++b) {
        const int64_t bit = j * bits + b;
        q |= ((blk[2 + bit / 8] >> (bit % 8)) & 1) << b;
      }
      out[size_t(g * group + j)] = scale * halfToFloat(half(aux + 2 * (book * k + q)));
    }
  }
  return out;
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

const int64_t kGroups[] = {8, 24, 64, 128};

} // namespace

TEST(AaacFormat, GeometryAndSideDataSize) {
  for (int bits = 2; bits <= 4; ++bits)
    for (int64_t g : kGroups) {
      const DType t = aaacDType(bits, g);
      EXPECT_EQ(dtypeName(t), "aaac" + std::to_string(bits) + "_g" + std::to_string(g));
      EXPECT_EQ(rowBytes(t, 3 * g), 3 * (2 + g * bits / 8));
      EXPECT_TRUE(needsAux(t));
      EXPECT_EQ(auxBytes(t, 7, 3 * g), 4 << bits);
    }
  EXPECT_EQ(auxBytes(aaacDType(4, 64), 576, 576), 64);
}

TEST(AaacFormat, PackUnpackRoundTrip) {
  std::mt19937 rng(1);
  for (int bits = 2; bits <= 4; ++bits)
    for (int64_t g : kGroups) {
      SCOPED_TRACE("bits " + std::to_string(bits) + " group " + std::to_string(g));
      const DType t = aaacDType(bits, g);
      const int64_t n = 5 * g;
      Row r = randomRow(t, n, rng);
      std::vector<uint8_t> codes(static_cast<size_t>(n));
      std::vector<float> scales(size_t(n / g));
      unpackAaacRow(t, r.bytes.data(), codes.data(), scales.data(), n);
      EXPECT_EQ(codes, r.codes);
      for (size_t i = 0; i < scales.size(); ++i) {
        EXPECT_EQ(std::signbit(scales[i]), std::signbit(r.scales[i])) << "group " << i;
        EXPECT_EQ(std::fabs(scales[i]), roundToHalf(std::fabs(r.scales[i]))) << "group " << i;
      }
      Books b = randomBooks(t, rng);
      std::vector<float> a2(b.a.size()), b2(b.b.size());
      unpackAaacCodebooks(t, b.aux.data(), a2.data(), b2.data());
      for (size_t i = 0; i < a2.size(); ++i) {
        EXPECT_EQ(a2[i], roundToHalf(b.a[i]));
        EXPECT_EQ(b2[i], roundToHalf(b.b[i]));
      }
    }
}

TEST(AaacFormat, ScaleFlagSurvivesTinyAndZeroScales) {
  const DType t = aaacDType(4, 8);
  const float scales[] = {0.0f, -0.0f, 1e-9f, -1e-9f, 65504.0f, -3.0f};
  std::vector<uint8_t> codes(6 * 8, 15), bytes(size_t(rowBytes(t, 48)));
  packAaacRow(t, codes.data(), scales, bytes.data(), 48);
  std::vector<float> back(6);
  unpackAaacRow(t, bytes.data(), nullptr, back.data(), 48);
  const bool bookB[] = {false, true, false, true, false, true};
  const float mag[] = {kAaacMinScale, kAaacMinScale, kAaacMinScale, kAaacMinScale, 65504.0f, 3.0f};
  for (int g = 0; g < 6; ++g) {
    EXPECT_EQ(std::signbit(back[g]), bookB[g]) << "group " << g;
    EXPECT_EQ(std::fabs(back[g]), mag[g]) << "group " << g;
  }
  // The dequantized group uses the flagged codebook and the clamped scale.
  std::vector<float> a(16, 0.0f), b(16, 0.0f);
  a[15] = 1.0f;
  b[15] = -2.0f;
  std::vector<uint8_t> aux(64);
  packAaacCodebooks(t, a.data(), b.data(), aux.data());
  std::vector<float> w(48);
  dequantizeRowAux(t, bytes.data(), aux.data(), 0, 1, w.data(), 48);
  EXPECT_EQ(w[0], kAaacMinScale);
  EXPECT_EQ(w[8], -2.0f * kAaacMinScale);
  EXPECT_EQ(w[47], -6.0f);
}

TEST(AaacFormat, DequantMatchesReference) {
  std::mt19937 rng(2);
  for (int bits = 2; bits <= 4; ++bits)
    for (int64_t g : kGroups)
      for (int64_t groups : {1, 3, 9}) {
        SCOPED_TRACE("bits " + std::to_string(bits) + " group " + std::to_string(g) + " x " +
                     std::to_string(groups));
        const DType t = aaacDType(bits, g);
        const int64_t n = groups * g;
        Row r = randomRow(t, n, rng);
        Books b = randomBooks(t, rng);
        std::vector<float> got(static_cast<size_t>(n));
        dequantizeRowAux(t, r.bytes.data(), b.aux.data(), 0, 1, got.data(), n);
        EXPECT_EQ(got, referenceDequant(bits, g, r.bytes.data(), b.aux.data(), n));
        // The codes and scales given to the packer are what comes back.
        const int k = 1 << bits;
        for (int64_t i = 0; i < n; ++i) {
          const float s = r.scales[size_t(i / g)];
          const float c = roundToHalf((std::signbit(s) ? b.b : b.a)[r.codes[size_t(i)]]);
          ASSERT_EQ(got[size_t(i)], roundToHalf(std::fabs(s)) * c) << "element " << i;
        }
        (void)k;
      }
}

TEST(AaacFormat, DotKernelsMatchReference) {
  std::mt19937 rng(3);
  for (int bits = 2; bits <= 4; ++bits)
    for (int64_t g : kGroups)
      for (int64_t groups : {1, 2, 3, 7})
        for (int nx = 1; nx <= 4; ++nx) {
          SCOPED_TRACE("bits " + std::to_string(bits) + " group " + std::to_string(g) + " x " +
                       std::to_string(groups) + " nx " + std::to_string(nx));
          const DType t = aaacDType(bits, g);
          const AaacSpec s = *aaacSpec(t);
          const int64_t n = groups * g, ldx = n + 5, ldo = 3;
          Row r = randomRow(t, n, rng);
          Books b = randomBooks(t, rng);
          std::vector<float> w = referenceDequant(bits, g, r.bytes.data(), b.aux.data(), n);
          std::vector<float> x(size_t(nx * ldx));
          for (float &v : x)
            v = std::normal_distribution<float>(0, 1)(rng);
          std::vector<float> simd(size_t(nx * ldo), NAN), scalar(simd), fam(simd);
          kernels::aaacDotRows(s, r.bytes.data(), b.aux.data(), n, x.data(), ldx, nx,
                               simd.data(), ldo);
          kernels::aaacDotRowsScalar(s, r.bytes.data(), b.aux.data(), n, x.data(), ldx, nx,
                                     scalar.data(), ldo);
          kernels::familyDotRows(t, r.bytes.data(), b.aux.data(), 0, 1, n, x.data(), ldx, nx,
                                 fam.data(), ldo);
          for (int k = 0; k < nx; ++k) {
            double ref = 0, mag = 0;
            for (int64_t i = 0; i < n; ++i) {
              ref += double(w[size_t(i)]) * x[size_t(k * ldx + i)];
              mag += std::fabs(double(w[size_t(i)]) * x[size_t(k * ldx + i)]);
            }
            EXPECT_NEAR(simd[size_t(k * ldo)], ref, 1e-5 * mag + 1e-30) << "row " << k;
            EXPECT_NEAR(scalar[size_t(k * ldo)], ref, 1e-5 * mag + 1e-30) << "row " << k;
            EXPECT_EQ(fam[size_t(k * ldo)], simd[size_t(k * ldo)]) << "row " << k;
          }
        }
}

TEST(AaacFormat, MatmulFusedAndBlocked) {
  std::mt19937 rng(4);
  ThreadPool pool(2);
  const DType t = aaacDType(3, 32);
  const int64_t rows = 37, cols = 96;
  Books b = randomBooks(t, rng);
  std::vector<uint8_t> data;
  std::vector<float> wf;
  for (int64_t r = 0; r < rows; ++r) {
    Row row = randomRow(t, cols, rng);
    std::vector<float> w = referenceDequant(3, 32, row.bytes.data(), b.aux.data(), cols);
    wf.insert(wf.end(), w.begin(), w.end());
    data.insert(data.end(), row.bytes.begin(), row.bytes.end());
  }
  WeightMatrix w;
  w.data = data.data();
  w.dtype = t;
  w.rows = rows;
  w.cols = cols;
  w.rowStride = rowBytes(t, cols);
  w.aux = b.aux.data();
  for (int64_t T : {int64_t(1), int64_t(3), kFusedMaxT + 1, int64_t(9)}) {
    std::vector<float> x(size_t(T * cols)), y(size_t(T * rows), NAN);
    for (float &v : x)
      v = std::normal_distribution<float>(0, 1)(rng);
    matmul(pool, w, x.data(), T, cols, y.data(), rows);
    for (int64_t tt = 0; tt < T; ++tt)
      for (int64_t r = 0; r < rows; ++r) {
        double s = 0, mag = 0;
        for (int64_t k = 0; k < cols; ++k) {
          s += double(wf[size_t(r * cols + k)]) * x[size_t(tt * cols + k)];
          mag += std::fabs(double(wf[size_t(r * cols + k)]) * x[size_t(tt * cols + k)]);
        }
        EXPECT_NEAR(y[size_t(tt * rows + r)], s, 1e-5 * mag) << "T=" << T << " row " << r;
      }
  }
}

TEST(AaacFormat, BadInputsThrow) {
  const DType t = aaacDType(4, 64);
  const AaacSpec s = *aaacSpec(t);
  std::vector<uint8_t> codes(128, 0), bytes(size_t(rowBytes(t, 128))), aux(64, 0);
  std::vector<float> scales = {0.1f, -0.2f};
  std::vector<float> x(128 * 4, 1.0f), out(4);

  codes[70] = 16;
  expectThrowContaining([&] { packAaacRow(t, codes.data(), scales.data(), bytes.data(), 128); },
                        {"code 16", "element 70", "4 bits"});
  codes[70] = 0;
  expectThrowContaining([&] { packAaacRow(t, codes.data(), scales.data(), bytes.data(), 100); },
                        {"100", "aaac4_g64", "64"});
  expectThrowContaining(
      [&] { packAaacRow(DType::Q4_0, codes.data(), scales.data(), bytes.data(), 128); },
      {"q4_0", "not an aaac type"});
  for (float bad : {NAN, INFINITY, -1e6f}) {
    scales[1] = bad;
    EXPECT_THROW(packAaacRow(t, codes.data(), scales.data(), bytes.data(), 128),
                 std::runtime_error);
  }
  scales[1] = -0.2f;
  packAaacRow(t, codes.data(), scales.data(), bytes.data(), 128);

  std::vector<float> book(16, 0.0f), bookB(16, 0.0f);
  bookB[3] = 1e6f;
  expectThrowContaining([&] { packAaacCodebooks(t, book.data(), bookB.data(), aux.data()); },
                        {"codebook B", "entry 3", "not finite in fp16"});
  bookB[3] = NAN;
  EXPECT_THROW(packAaacCodebooks(t, book.data(), bookB.data(), aux.data()), std::runtime_error);
  EXPECT_THROW(unpackAaacCodebooks(DType::F32, aux.data(), book.data(), nullptr),
               std::runtime_error);

  std::vector<float> row(128);
  expectThrowContaining(
      [&] { dequantizeRowAux(t, bytes.data(), nullptr, 0, 1, row.data(), 128); },
      {"aaac4_g64", "side data"});
  EXPECT_THROW(dequantizeRowAux(t, bytes.data(), aux.data(), 0, 1, row.data(), 96),
               std::runtime_error);
  for (int nx : {0, 5})
    expectThrowContaining(
        [&] { kernels::aaacDotRows(s, bytes.data(), aux.data(), 128, x.data(), 128, nx,
                                   out.data(), 1); },
        {std::to_string(nx) + " activation rows"});
  expectThrowContaining(
      [&] { kernels::aaacDotRows(s, bytes.data(), aux.data(), 96, x.data(), 128, 1, out.data(),
                                 1); },
      {"96", "group size 64"});
  expectThrowContaining(
      [&] { kernels::aaacDotRowsScalar(s, bytes.data(), nullptr, 128, x.data(), 128, 1,
                                       out.data(), 1); },
      {"codebooks", "missing"});
}
