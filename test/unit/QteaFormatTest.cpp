//===- QteaFormatTest.cpp - QTEA storage format and kernels ----------------===//
// llmc/format/qtea.h: base-3 trit packing (round trip, digit order, invalid
// codes and bytes), FP8 E4M3 coding (known codes, every code round trips,
// round to nearest even against a brute-force search, saturation, NaN),
// sizes, dequantizeRowAux against a scalar reference written here from the
// documented layout, the fused dots (SIMD and portable) against that
// reference for nx = 1..4 on random shapes, and the errors for bad inputs.
//===----------------------------------------------------------------------===//
#include "../../runtime/src/kernels/family_rows.h"
#include "../../runtime/src/kernels/qtea_rows.h"
#include "llmc/dtype.h"
#include "llmc/format/qtea.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

using namespace llmc;

namespace {

//===- trits ---------------------------------------------------------------===//

TEST(QteaFormat, TritDigitOrder) {
  // weight k of a group is digit k % 5 of byte k / 5, digit = t + 1
  const int8_t t[7] = {-1, 0, 1, 1, -1, 1, 0};
  uint8_t b[2] = {0xAA, 0xAA};
  qtea::packTrits(t, 7, b);
  EXPECT_EQ(b[0], 0 * 1 + 1 * 3 + 2 * 9 + 2 * 27 + 0 * 81);
  EXPECT_EQ(b[1], 2 * 1 + 1 * 3); // higher digits of a partial byte are 0
  int8_t back[7];
  qtea::unpackTrits(b, 7, back);
  EXPECT_EQ(std::memcmp(t, back, 7), 0);
}

TEST(QteaFormat, TritRoundTrip) {
  std::mt19937 rng(1);
  for (int64_t n : {1, 2, 3, 4, 5, 6, 9, 10, 11, 64, 192, 4096}) {
    std::vector<int8_t> t(static_cast<size_t>(n)), back(size_t(n), 7);
    for (auto &x : t)
      x = int8_t(int(rng() % 3) - 1);
    std::vector<uint8_t> b(size_t(qtea::tritBytes(n)));
    qtea::packTrits(t.data(), n, b.data());
    for (uint8_t x : b)
      EXPECT_LT(x, 243);
    qtea::unpackTrits(b.data(), n, back.data());
    EXPECT_EQ(t, back) << n;
  }
  // the kernels' table agrees with unpackTrits for every valid byte
  for (int v = 0; v < 243; ++v) {
    uint8_t b = uint8_t(v);
    int8_t t[5];
    qtea::unpackTrits(&b, 5, t);
    for (int i = 0; i < 5; ++i)
      EXPECT_EQ(t[i], qtea::detail::kTrits.t[v][i]);
  }
  for (int v = 243; v < 256; ++v)
    for (int i = 0; i < 8; ++i)
      EXPECT_EQ(qtea::detail::kTrits.t[v][i], 0);
}

TEST(QteaFormat, TritErrors) {
  const int8_t bad[3] = {0, 2, 0};
  uint8_t b[1];
  EXPECT_THROW(qtea::packTrits(bad, 3, b), std::runtime_error);
  const uint8_t invalid[1] = {243};
  int8_t t[5];
  EXPECT_THROW(qtea::unpackTrits(invalid, 5, t), std::runtime_error);
}

//===- FP8 E4M3 --------------------------------------------------------------===//

TEST(QteaFormat, Fp8KnownCodes) {
  EXPECT_EQ(qtea::fp8e4m3Decode(0x00), 0.0f);
  EXPECT_EQ(qtea::fp8e4m3Decode(0x01), std::ldexp(1.0f, -9)); // smallest subnormal
  EXPECT_EQ(qtea::fp8e4m3Decode(0x07), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(qtea::fp8e4m3Decode(0x08), std::ldexp(1.0f, -6)); // smallest normal
  EXPECT_EQ(qtea::fp8e4m3Decode(0x38), 1.0f);
  EXPECT_EQ(qtea::fp8e4m3Decode(0x39), 1.125f);
  EXPECT_EQ(qtea::fp8e4m3Decode(0x40), 2.0f);
  EXPECT_EQ(qtea::fp8e4m3Decode(0x7E), 448.0f);
  EXPECT_EQ(qtea::fp8e4m3Decode(0xB8), -1.0f);
  EXPECT_EQ(qtea::fp8e4m3Decode(0xFE), -448.0f);
  EXPECT_TRUE(std::isnan(qtea::fp8e4m3Decode(0x7F)));
  EXPECT_TRUE(std::isnan(qtea::fp8e4m3Decode(0xFF)));
  EXPECT_TRUE(std::signbit(qtea::fp8e4m3Decode(0x80)));

  EXPECT_EQ(qtea::fp8e4m3Encode(1.0f), 0x38);
  EXPECT_EQ(qtea::fp8e4m3Encode(1.0625f), 0x38); // tie -> even mantissa 0
  EXPECT_EQ(qtea::fp8e4m3Encode(1.1875f), 0x3A); // tie between 1.125 and 1.25 -> 1.25
  EXPECT_EQ(qtea::fp8e4m3Encode(1.07f), 0x39);
  EXPECT_EQ(qtea::fp8e4m3Encode(448.0f), 0x7E);
  EXPECT_EQ(qtea::fp8e4m3Encode(460.0f), 0x7E);
  EXPECT_EQ(qtea::fp8e4m3Encode(1e9f), 0x7E); // saturates
  EXPECT_EQ(qtea::fp8e4m3Encode(-1e9f), 0xFE);
  EXPECT_EQ(qtea::fp8e4m3Encode(std::numeric_limits<float>::infinity()), 0x7E);
  EXPECT_EQ(qtea::fp8e4m3Encode(std::ldexp(1.0f, -10)), 0x00); // half the smallest: tie -> 0
  EXPECT_EQ(qtea::fp8e4m3Encode(std::ldexp(3.0f, -10)), 0x02); // 1.5 quanta -> 2 (even)
  EXPECT_EQ(qtea::fp8e4m3Encode(std::ldexp(1.0f, -20)), 0x00);
  EXPECT_EQ(qtea::fp8e4m3Encode(-0.0f), 0x80);
  EXPECT_EQ(qtea::fp8e4m3Encode(std::nanf("")) & 0x7F, 0x7F);
}

TEST(QteaFormat, Fp8EveryCodeRoundTrips) {
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7F) == 0x7F)
      continue;
    EXPECT_EQ(qtea::fp8e4m3Encode(qtea::fp8e4m3Decode(uint8_t(b))), b) << b;
  }
}

TEST(QteaFormat, Fp8NearestEven) {
  // the finite non-negative codes in increasing order
  std::vector<std::pair<float, int>> codes;
  for (int b = 0; b < 0x7F; ++b)
    codes.push_back({qtea::fp8e4m3Decode(uint8_t(b)), b});
  auto reference = [&](float x) {
    const float a = std::fabs(x);
    if (a >= 448.0f)
      return (x < 0 ? 0x80 : 0) | 0x7E;
    int best = 0;
    for (size_t i = 1; i < codes.size(); ++i) {
      const float d = std::fabs(codes[i].first - a), db = std::fabs(codes[size_t(best)].first - a);
      if (d < db || (d == db && (codes[i].second & 1) == 0))
        best = int(i);
    }
    return (x < 0 ? 0x80 : 0) | codes[size_t(best)].second;
  };
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> e(-12.0f, 9.5f), s(1.0f, 2.0f);
  for (int i = 0; i < 20000; ++i) {
    float x = std::ldexp(s(rng), int(std::floor(e(rng))));
    if (rng() & 1)
      x = -x;
    ASSERT_EQ(qtea::fp8e4m3Encode(x), reference(x)) << x;
  }
  // every midpoint between neighbours (exact ties)
  for (size_t i = 0; i + 1 < codes.size(); ++i) {
    const float mid = 0.5f * (codes[i].first + codes[i + 1].first);
    ASSERT_EQ(qtea::fp8e4m3Encode(mid), reference(mid)) << mid;
    ASSERT_EQ(qtea::fp8e4m3Encode(-mid), reference(-mid)) << mid;
  }
}

//===- matrices --------------------------------------------------------------===//

/// A random matrix with every field filled (alpha/beta fp16 values).
qtea::Matrix randomMatrix(int64_t rows, int64_t cols, int64_t group, int pct, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  qtea::Matrix m;
  m.spec = QteaSpec{group, pct};
  m.rows = rows;
  m.cols = cols;
  const int64_t ng = cols / group, S = qtea::salientCount(cols, pct), quads = rows / 4;
  m.trits.resize(size_t(rows * cols));
  for (auto &t : m.trits)
    t = int8_t(int(rng() % 3) - 1);
  for (int64_t i = 0; i < rows * ng; ++i) {
    m.alpha.push_back(roundToHalf(0.05f * std::fabs(nd(rng)) + 0.001f));
    m.beta.push_back(roundToHalf(0.01f * nd(rng)));
  }
  for (int64_t j = 0; j < cols; ++j)
    m.v.push_back(0.5f + std::fabs(nd(rng)));
  std::vector<int32_t> all(static_cast<size_t>(cols));
  for (int64_t j = 0; j < cols; ++j)
    all[size_t(j)] = int32_t(j);
  std::shuffle(all.begin(), all.end(), rng);
  m.salient.assign(all.begin(), all.begin() + S);
  std::sort(m.salient.begin(), m.salient.end());
  for (int64_t s = 0; s < S; ++s)
    m.scale.push_back(0.01f * std::fabs(nd(rng)) / 448.0f);
  for (int64_t i = 0; i < quads * S; ++i) {
    m.pos.push_back(uint8_t(rng() % 4));
    uint8_t code = uint8_t(rng() % 256);
    if ((code & 0x7F) == 0x7F)
      code = 0x10;
    m.fp8.push_back(code);
  }
  return m;
}

/// The documented reconstruction, straight from the fields.
std::vector<float> reference(const qtea::Matrix &m) {
  const int64_t G = m.spec.group, ng = m.cols / G, S = int64_t(m.salient.size());
  std::vector<double> out(size_t(m.rows * m.cols));
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t j = 0; j < m.cols; ++j)
      out[size_t(r * m.cols + j)] =
          double(m.alpha[size_t(r * ng + j / G)]) * m.v[size_t(j)] * m.trits[size_t(r * m.cols + j)] +
          m.beta[size_t(r * ng + j / G)];
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t s = 0; s < S; ++s)
      if (m.pos[size_t(r / 4 * S + s)] == r % 4)
        out[size_t(r * m.cols + m.salient[size_t(s)])] +=
            double(qtea::fp8e4m3Decode(m.fp8[size_t(r / 4 * S + s)])) * m.scale[size_t(s)];
  return std::vector<float>(out.begin(), out.end());
}

struct Shape {
  int64_t rows, cols, group;
  int pct;
};
const Shape kShapes[] = {{4, 64, 64, 5},   {8, 192, 64, 5},  {12, 576, 192, 5}, {16, 128, 8, 0},
                         {4, 40, 40, 50},  {20, 96, 32, 10}, {8, 1536, 192, 5}, {4, 16, 8, 1}};

TEST(QteaFormat, Sizes) {
  const DType t = qteaDType(64, 5);
  EXPECT_EQ(dtypeName(t), "qtea_g64_s5");
  EXPECT_EQ(rowBytes(t, 576), 9 * (4 + 13));
  EXPECT_EQ(rowBytes(qteaDType(192, 5), 1536), 8 * (4 + 39));
  EXPECT_TRUE(needsAux(t));
  // 4*cols + 8*S + rows/4 * (S + ceil(S/4)); S = ceil(576 * 5 / 100) = 29
  EXPECT_EQ(auxBytes(t, 576, 576), 4 * 576 + 8 * 29 + 144 * (29 + 8));
  EXPECT_EQ(auxBytes(qteaDType(64, 0), 8, 64), 4 * 64);
  EXPECT_EQ(qtea::salientCount(1536, 5), 77);
}

TEST(QteaFormat, PackUnpackAndDequantize) {
  for (const Shape &sh : kShapes) {
    const qtea::Matrix m = randomMatrix(sh.rows, sh.cols, sh.group, sh.pct, 11);
    const DType t = qteaDType(sh.group, sh.pct);
    const std::vector<uint8_t> rows = qtea::packRows(m), aux = qtea::packAux(m);
    ASSERT_EQ(int64_t(rows.size()), sh.rows * rowBytes(t, sh.cols));
    ASSERT_EQ(int64_t(aux.size()), auxBytes(t, sh.rows, sh.cols));

    const qtea::Matrix back = qtea::unpack(m.spec, sh.rows, sh.cols, rows.data(), aux.data());
    EXPECT_EQ(back.trits, m.trits);
    EXPECT_EQ(back.alpha, m.alpha);
    EXPECT_EQ(back.beta, m.beta);
    EXPECT_EQ(back.v, m.v);
    EXPECT_EQ(back.salient, m.salient);
    EXPECT_EQ(back.scale, m.scale);
    EXPECT_EQ(back.pos, m.pos);
    EXPECT_EQ(back.fp8, m.fp8);

    const std::vector<float> ref = reference(m), viaMatrix = m.dequantize();
    std::vector<float> row(size_t(sh.cols));
    for (int64_t r = 0; r < sh.rows; ++r) {
      dequantizeRowAux(t, rows.data() + r * rowBytes(t, sh.cols), aux.data(), r, sh.rows,
                       row.data(), sh.cols);
      for (int64_t j = 0; j < sh.cols; ++j) {
        const float want = ref[size_t(r * sh.cols + j)];
        ASSERT_NEAR(row[size_t(j)], want, 1e-6f * (1 + std::fabs(want)))
            << sh.rows << "x" << sh.cols << " g" << sh.group << " r" << r << " c" << j;
        ASSERT_NEAR(viaMatrix[size_t(r * sh.cols + j)], want, 1e-6f * (1 + std::fabs(want)));
      }
    }
  }
}

TEST(QteaFormat, DotsMatchReference) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const Shape &sh : kShapes) {
    const qtea::Matrix m = randomMatrix(sh.rows, sh.cols, sh.group, sh.pct, 23);
    const DType t = qteaDType(sh.group, sh.pct);
    const QteaSpec spec{sh.group, sh.pct};
    const std::vector<uint8_t> rows = qtea::packRows(m), aux = qtea::packAux(m);
    const std::vector<float> w = reference(m);
    const int64_t ldx = sh.cols + 3;
    std::vector<float> x(size_t(4 * ldx));
    for (auto &v : x)
      v = nd(rng);
    for (int nx = 1; nx <= 4; ++nx)
      for (int64_t r = 0; r < sh.rows; ++r) {
        const uint8_t *row = rows.data() + r * rowBytes(t, sh.cols);
        float fast[8] = {}, slow[8] = {}, viaFamily[8] = {};
        kernels::qteaDotRows(spec, row, aux.data(), r, sh.rows, sh.cols, x.data(), ldx, nx, fast, 2);
        kernels::qteaDotRowsScalar(spec, row, aux.data(), r, sh.rows, sh.cols, x.data(), ldx, nx,
                                   slow, 2);
        kernels::familyDotRows(t, row, aux.data(), r, sh.rows, sh.cols, x.data(), ldx, nx,
                               viaFamily, 2);
        for (int k = 0; k < nx; ++k) {
          double want = 0, mag = 0;
          for (int64_t j = 0; j < sh.cols; ++j) {
            want += double(w[size_t(r * sh.cols + j)]) * x[size_t(k * ldx + j)];
            mag += std::fabs(double(w[size_t(r * sh.cols + j)]) * x[size_t(k * ldx + j)]);
          }
          const double tol = 1e-5 * mag + 1e-6;
          ASSERT_NEAR(fast[2 * k], want, tol) << "nx " << nx << " row " << r << " g" << sh.group;
          ASSERT_NEAR(slow[2 * k], want, tol) << "nx " << nx << " row " << r;
          ASSERT_EQ(viaFamily[2 * k], fast[2 * k]);
        }
        for (int k = nx; k < 4; ++k)
          ASSERT_EQ(fast[2 * k], 0.0f); // nothing written beyond nx
      }
  }
  std::printf("qtea dot: %s kernel\n", kernels::haveSimdQteaDot() ? "AVX2" : "portable");
}

TEST(QteaFormat, BadInputsThrow) {
  const DType t = qteaDType(64, 5);
  const QteaSpec spec{64, 5};
  // rows must be a multiple of 4
  EXPECT_THROW(auxBytes(t, 6, 64), std::runtime_error);
  EXPECT_THROW(auxBytes(t, 0, 64), std::runtime_error);
  try {
    auxBytes(t, 6, 64);
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 4"), std::string::npos) << e.what();
  }
  const qtea::Matrix m = randomMatrix(8, 128, 64, 5, 3);
  const std::vector<uint8_t> rows = qtea::packRows(m);
  std::vector<uint8_t> aux = qtea::packAux(m);
  std::vector<float> dst(128), x(128, 1.0f);
  float out[4];
  // row length not a multiple of the group, row index out of range, no side data
  EXPECT_THROW(dequantizeRowAux(t, rows.data(), aux.data(), 0, 8, dst.data(), 100),
               std::runtime_error);
  EXPECT_THROW(dequantizeRowAux(t, rows.data(), aux.data(), 8, 8, dst.data(), 128),
               std::runtime_error);
  EXPECT_THROW(dequantizeRowAux(t, rows.data(), nullptr, 0, 8, dst.data(), 128),
               std::runtime_error);
  EXPECT_THROW(kernels::qteaDotRows(spec, rows.data(), aux.data(), 0, 8, 96, x.data(), 128, 1, out, 1),
               std::runtime_error);
  EXPECT_THROW(kernels::qteaDotRows(spec, rows.data(), aux.data(), 0, 8, 128, x.data(), 128, 0, out, 1),
               std::runtime_error);
  EXPECT_THROW(kernels::qteaDotRows(spec, rows.data(), aux.data(), 0, 8, 128, x.data(), 128, 5, out, 1),
               std::runtime_error);
  EXPECT_THROW(kernels::qteaDotRows(spec, rows.data(), nullptr, 0, 8, 128, x.data(), 128, 1, out, 1),
               std::runtime_error);
  EXPECT_THROW(kernels::qteaDotRows(spec, rows.data(), aux.data(), 0, 6, 128, x.data(), 128, 1, out, 1),
               std::runtime_error);
  // malformed side data: a salient index out of range is caught, not read
  const qtea::AuxLayout L = qtea::auxLayout(spec, 8, 128);
  std::vector<uint8_t> bad = aux;
  const int32_t huge = 1 << 20;
  std::memcpy(bad.data() + L.idxOffset, &huge, 4);
  for (int64_t q = 0; q < 2; ++q) { // make sure salient 0 hits rows 0 and 4 with a non-zero value
    bad[size_t(L.quadOffset + q * L.quadBytes)] = 0x38;
    bad[size_t(L.quadOffset + q * L.quadBytes + L.salient)] &= 0xFC;
  }
  EXPECT_THROW(kernels::qteaDotRows(spec, rows.data(), bad.data(), 0, 8, 128, x.data(), 128, 1, out, 1),
               std::runtime_error);
  EXPECT_THROW(dequantizeRowAux(t, rows.data(), bad.data(), 4, 8, dst.data(), 128),
               std::runtime_error);
  EXPECT_THROW(qtea::unpack(spec, 8, 128, rows.data(), bad.data()), std::runtime_error);
  // invalid trit bytes: unpack rejects them, the kernels read zeros
  std::vector<uint8_t> badRows = rows;
  badRows[4] = 250;
  EXPECT_THROW(qtea::unpack(spec, 8, 128, badRows.data(), aux.data()), std::runtime_error);
  EXPECT_NO_THROW(dequantizeRowAux(t, badRows.data(), aux.data(), 0, 8, dst.data(), 128));
  // pack checks its fields
  qtea::Matrix w = m;
  w.alpha.pop_back();
  EXPECT_THROW(qtea::packRows(w), std::runtime_error);
  w = m;
  std::swap(w.salient[0], w.salient[1]);
  EXPECT_THROW(qtea::packAux(w), std::runtime_error);
  w = m;
  w.pos[0] = 4;
  EXPECT_THROW(qtea::packAux(w), std::runtime_error);
  w = m;
  w.trits[3] = 2;
  EXPECT_THROW(qtea::packRows(w), std::runtime_error);
  w = m;
  w.rows = 6;
  EXPECT_THROW(qtea::packRows(w), std::runtime_error);
}

} // namespace
