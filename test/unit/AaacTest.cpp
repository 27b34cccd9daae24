//===- AaacTest.cpp - AAAC codebook learning (compiler/quant/Aaac.h) -------===//
// The numerics behind llm-quantize method=aaac: the initial grids, the
// weighted k-means rounds lowering the activation-weighted error below the
// fixed grids', activation weighting paying off on the weighted error, the
// codebook choice (sign of the scale) surviving packing and the runtime's
// dequantizer, zero groups, independence from the thread count, and errors.
//===----------------------------------------------------------------------===//
#include "compiler/quant/Aaac.h"
#include "llmc/dtype.h"
#include "llmc/format/aaac.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

using namespace llmc;
using namespace llmc::quant;

namespace {

/// Rows of mixed character: Gaussian rows, heavy-tailed (Laplace-like)
/// rows and near-uniform rows, so the two codebooks have different jobs.
std::vector<float> mixedWeights(int64_t rows, int64_t cols, std::mt19937 &rng) {
  std::normal_distribution<float> nd(0.0f, 0.02f);
  std::exponential_distribution<float> ed(50.0f);
  std::uniform_real_distribution<float> ud(-0.04f, 0.04f);
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) {
      float &v = w[size_t(r * cols + j)];
      switch (r % 3) {
      case 0: v = nd(rng); break;
      case 1: v = (rng() % 2 ? 1.0f : -1.0f) * ed(rng); break;
      default: v = ud(rng); break;
      }
    }
  return w;
}

/// Channel energies spanning two orders of magnitude, a few salient ones.
std::vector<double> energies(int64_t cols, std::mt19937 &rng) {
  std::lognormal_distribution<double> ld(0.0, 1.0);
  std::vector<double> h(static_cast<size_t>(cols));
  for (double &v : h)
    v = ld(rng);
  for (int64_t j = 0; j < cols; j += 37)
    h[size_t(j)] *= 100.0;
  return h;
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

TEST(Aaac, InitialBooks) {
  for (int bits = 2; bits <= 4; ++bits) {
    SCOPED_TRACE(bits);
    const int k = 1 << bits;
    std::vector<float> a = aaacInitialBook(bits, false), b = aaacInitialBook(bits, true);
    ASSERT_EQ(int(a.size()), k);
    ASSERT_EQ(int(b.size()), k);
    EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
    EXPECT_TRUE(std::is_sorted(b.begin(), b.end()));
    EXPECT_EQ(a.front(), -1.0f);
    EXPECT_EQ(a.back(), 1.0f);
    EXPECT_EQ(b.front(), -1.0f);
    EXPECT_EQ(b.back(), 1.0f);
    for (int i = 0; i < k; ++i) {
      EXPECT_EQ(a[size_t(i)], roundToHalf(a[size_t(i)]));
      EXPECT_NEAR(a[size_t(i)], -1.0 + 2.0 * i / (k - 1), 1e-3); // uniform
      EXPECT_NEAR(b[size_t(i)], -b[size_t(k - 1 - i)], 1e-3);     // symmetric
    }
    // Normal quantiles crowd the middle: the inner gap is below the uniform one.
    EXPECT_LT(b[size_t(k / 2)] - b[size_t(k / 2 - 1)], a[size_t(k / 2)] - a[size_t(k / 2 - 1)]);
  }
  EXPECT_THROW(aaacInitialBook(5, false), std::runtime_error);
}

TEST(Aaac, KMeansLowersWeightedErrorBelowInitialGrids) {
  std::mt19937 rng(5);
  const int64_t rows = 96, cols = 256;
  std::vector<float> w = mixedWeights(rows, cols, rng);
  std::vector<double> h = energies(cols, rng);
  for (int bits = 2; bits <= 4; ++bits) {
    SCOPED_TRACE(bits);
    AaacOptions o;
    o.bits = bits;
    o.group = 64;
    o.iters = 0;
    AaacMatrix fixed = aaacQuantize(w.data(), rows, cols, h.data(), o);
    o.iters = 15;
    AaacMatrix learned = aaacQuantize(w.data(), rows, cols, h.data(), o);
    EXPECT_EQ(fixed.iters, 0);
    EXPECT_GE(learned.iters, 1);
    EXPECT_NEAR(learned.initialError, fixed.finalError, 1e-12);
    EXPECT_LE(learned.finalError, learned.initialError);
    const double e0 = aaacWeightedError(w.data(), fixed.dequantized().data(), rows, cols, h.data());
    const double e1 =
        aaacWeightedError(w.data(), learned.dequantized().data(), rows, cols, h.data());
    EXPECT_LT(e1, 0.97 * e0) << "fixed " << e0 << " learned " << e1;
    // Both codebooks take part, and they are no longer the initial grids.
    EXPECT_GT(learned.shareB, 0.02);
    EXPECT_LT(learned.shareB, 0.98);
    EXPECT_NE(learned.book[0], aaacInitialBook(bits, false));
  }
}

TEST(Aaac, ActivationWeightingLowersWeightedError) {
  std::mt19937 rng(6);
  const int64_t rows = 64, cols = 256;
  std::vector<float> w = mixedWeights(rows, cols, rng);
  std::vector<double> h = energies(cols, rng);
  AaacOptions o;
  o.bits = 3;
  o.group = 64;
  AaacMatrix aware = aaacQuantize(w.data(), rows, cols, h.data(), o);
  AaacMatrix plain = aaacQuantize(w.data(), rows, cols, nullptr, o);
  const double ea = aaacWeightedError(w.data(), aware.dequantized().data(), rows, cols, h.data());
  const double ep = aaacWeightedError(w.data(), plain.dequantized().data(), rows, cols, h.data());
  EXPECT_LT(ea, 0.95 * ep) << "aware " << ea << " plain " << ep;
  // ... and the unweighted error is the plain run's to win.
  const double ua = aaacWeightedError(w.data(), aware.dequantized().data(), rows, cols, nullptr);
  const double up = aaacWeightedError(w.data(), plain.dequantized().data(), rows, cols, nullptr);
  EXPECT_LT(up, ua);
}

TEST(Aaac, CodebookChoiceSurvivesPacking) {
  std::mt19937 rng(7);
  const int64_t rows = 30, cols = 192;
  std::vector<float> w = mixedWeights(rows, cols, rng);
  for (int bits = 2; bits <= 4; ++bits) {
    SCOPED_TRACE(bits);
    AaacOptions o;
    o.bits = bits;
    o.group = 32;
    AaacMatrix m = aaacQuantize(w.data(), rows, cols, nullptr, o);
    ASSERT_GT(m.shareB, 0.0);
    ASSERT_LT(m.shareB, 1.0);
    const DType t = m.dtype();
    std::vector<uint8_t> bytes = m.pack(), aux = m.packCodebooks();
    ASSERT_EQ(int64_t(bytes.size()), rows * rowBytes(t, cols));
    ASSERT_EQ(int64_t(aux.size()), auxBytes(t, rows, cols));
    std::vector<float> deq = m.dequantized(), row(static_cast<size_t>(cols));
    std::vector<float> scales(size_t(m.groups()));
    const int64_t rb = rowBytes(t, cols);
    for (int64_t r = 0; r < rows; ++r) {
      unpackAaacRow(t, bytes.data() + r * rb, nullptr, scales.data(), cols);
      for (int64_t g = 0; g < m.groups(); ++g) {
        const float s = m.scales[size_t(r * m.groups() + g)];
        ASSERT_EQ(scales[size_t(g)], s) << "row " << r << " group " << g;
        ASSERT_GE(std::fabs(s), kAaacMinScale);
      }
      dequantizeRowAux(t, bytes.data() + r * rb, aux.data(), r, rows, row.data(), cols);
      for (int64_t j = 0; j < cols; ++j)
        ASSERT_EQ(row[size_t(j)], deq[size_t(r * cols + j)]) << "row " << r << " col " << j;
    }
  }
}

TEST(Aaac, ZeroGroupsAndZeroMatrix) {
  std::mt19937 rng(8);
  const int64_t rows = 8, cols = 128;
  std::vector<float> w = mixedWeights(rows, cols, rng);
  for (int64_t r = 0; r < rows; r += 2)
    std::fill(w.begin() + r * cols, w.begin() + r * cols + 64, 0.0f); // first group zero
  std::vector<double> h(static_cast<size_t>(cols), 1.0);
  std::fill(h.begin() + 64, h.end(), 0.0); // dead channels in the second group
  AaacOptions o;
  o.group = 64;
  AaacMatrix m = aaacQuantize(w.data(), rows, cols, h.data(), o);
  std::vector<float> deq = m.dequantized();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j)
      ASSERT_TRUE(std::isfinite(deq[size_t(r * cols + j)]));
    if (r % 2 == 0) {
      EXPECT_EQ(std::fabs(m.scales[size_t(r * 2)]), kAaacMinScale) << "row " << r;
      for (int64_t j = 0; j < 64; ++j)
        EXPECT_LE(std::fabs(deq[size_t(r * cols + j)]), kAaacMinScale) << "row " << r;
    }
  }
  // Dead channels (h = 0) still get quantized sensibly: damped energies.
  double err = 0, ref = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 64; j < cols; ++j) {
      const double d = deq[size_t(r * cols + j)] - w[size_t(r * cols + j)];
      err += d * d;
      ref += double(w[size_t(r * cols + j)]) * w[size_t(r * cols + j)];
    }
  EXPECT_LT(std::sqrt(err / ref), 0.2);

  std::vector<float> zero(static_cast<size_t>(rows * cols), 0.0f);
  AaacMatrix z = aaacQuantize(zero.data(), rows, cols, nullptr, o);
  EXPECT_EQ(z.finalError, 0.0);
  for (float v : z.dequantized())
    EXPECT_LE(std::fabs(v), kAaacMinScale);
  std::vector<uint8_t> bytes = z.pack();
  EXPECT_EQ(int64_t(bytes.size()), rows * rowBytes(z.dtype(), cols));
}

TEST(Aaac, SameResultForAnyThreadCount) {
  std::mt19937 rng(9);
  const int64_t rows = 70, cols = 128;
  std::vector<float> w = mixedWeights(rows, cols, rng);
  std::vector<double> h = energies(cols, rng);
  AaacOptions o;
  o.group = 32;
  o.iters = 4;
  o.threads = 1;
  AaacMatrix a = aaacQuantize(w.data(), rows, cols, h.data(), o);
  o.threads = 3;
  AaacMatrix b = aaacQuantize(w.data(), rows, cols, h.data(), o);
  EXPECT_EQ(a.pack(), b.pack());
  EXPECT_EQ(a.packCodebooks(), b.packCodebooks());
  EXPECT_EQ(a.finalError, b.finalError);
}

/// Every code is its weight's nearest entry (ties to the lower one) of the
/// group's codebook at the group's scale: the vector search of the
/// assignment against a scalar count of the midpoints below w / s.
TEST(Aaac, EveryCodeIsTheNearestEntryOfItsGroupsBook) {
  for (int bits = 2; bits <= 4; ++bits) {
    SCOPED_TRACE(bits);
    std::mt19937 rng(uint32_t(40 + bits));
    const int64_t rows = 24, cols = 128;
    std::vector<float> w = mixedWeights(rows, cols, rng);
    std::vector<double> h = energies(cols, rng);
    AaacOptions o;
    o.bits = bits;
    o.group = 32;
    o.iters = 3;
    const AaacMatrix m = aaacQuantize(w.data(), rows, cols, h.data(), o);
    int64_t wrong = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t g = 0; g < m.groups(); ++g) {
        const float scale = m.scales[size_t(r * m.groups() + g)];
        const std::vector<float> &book = m.book[scale < 0 ? 1 : 0];
        const float inv = 1.0f / std::fabs(scale);
        for (int64_t j = g * o.group; j < (g + 1) * o.group; ++j) {
          const float t = w[size_t(r * cols + j)] * inv;
          int below = 0;
          for (size_t i = 0; i + 1 < book.size(); ++i)
            below += t > 0.5f * (book[i] + book[i + 1]) ? 1 : 0;
          wrong += m.codes[size_t(r * cols + j)] != below;
        }
      }
    EXPECT_EQ(wrong, 0);
  }
}

TEST(Aaac, BadInputsThrow) {
  std::vector<float> w(4 * 64, 0.01f);
  std::vector<double> h(64, 1.0);
  AaacOptions o;
  o.group = 32;
  w[70] = NAN;
  expectThrowContaining([&] { aaacQuantize(w.data(), 4, 64, h.data(), o); },
                        {"row 1", "column 6"});
  w[70] = 1e6f;
  expectThrowContaining([&] { aaacQuantize(w.data(), 4, 64, h.data(), o); },
                        {"row 1", "column 6", "fp16"});
  w[70] = 0.01f;
  h[5] = -1.0;
  expectThrowContaining([&] { aaacQuantize(w.data(), 4, 64, h.data(), o); },
                        {"input channel 5"});
  h[5] = NAN;
  EXPECT_THROW(aaacQuantize(w.data(), 4, 64, h.data(), o), std::runtime_error);
  h[5] = 1.0;
  expectThrowContaining([&] { aaacQuantize(w.data(), 5, 48, h.data(), o); },
                        {"5x48", "groups of 32"});
  o.bits = 5;
  expectThrowContaining([&] { aaacQuantize(w.data(), 4, 64, h.data(), o); }, {"5 bits"});
  o.bits = 4;
  o.clips = {1.0f, 1.5f};
  expectThrowContaining([&] { aaacQuantize(w.data(), 4, 64, h.data(), o); }, {"clip factor"});
  o.clips = {1.0f};
  o.iters = -1;
  EXPECT_THROW(aaacQuantize(w.data(), 4, 64, h.data(), o), std::runtime_error);
}
