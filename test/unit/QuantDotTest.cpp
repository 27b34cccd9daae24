//===- QuantDotTest.cpp - Fused dot kernels and fast dequantization --------===//
// Every fused kernel (SIMD and portable) against dequantizeRow + a double
// dot on random rows, for 1..4 activation rows and odd row lengths; the
// tolerance is relative to sum |w * x| (re-association only). dequantRowFast
// must equal dequantizeRow bit for bit. matmul is checked for decode-size and
// prefill-size T, with odd row counts, against the same reference.
//===----------------------------------------------------------------------===//
#include "../../runtime/src/exec/Matmul.h"
#include "../../runtime/src/kernels/dot_quant.h"
#include "RandomRows.h"
#include "llmc/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace llmc;
using llmc::testing::randomRow;

namespace {

const DType kAllTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,
                           DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                           DType::Q4_K, DType::Q5_K, DType::Q6_K};

struct RefDot {
  double value, magnitude; // sum w*x and sum |w*x|
};

RefDot refDot(const std::vector<float> &w, const float *x) {
  RefDot r{0, 0};
  for (size_t i = 0; i < w.size(); ++i) {
    r.value += double(w[i]) * x[i];
    r.magnitude += std::fabs(double(w[i]) * x[i]);
  }
  return r;
}

void checkKernel(kernels::DotFn fn, DType t, int nx, int64_t n, std::mt19937 &rng,
                 const std::string &what) {
  std::vector<uint8_t> row = randomRow(t, n, rng);
  std::vector<float> w(static_cast<size_t>(n));
  dequantizeRow(t, row.data(), w.data(), n);
  const int64_t ldx = n + 3; // rows not packed
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(ldx * nx));
  for (float &v : x)
    v = nd(rng);
  const int64_t lds = (n + 31) / 32 + 1;
  std::vector<float> sums(static_cast<size_t>(lds * nx), 0.0f);
  if (kernels::dotNeedsSums(t))
    for (int j = 0; j < nx; ++j)
      kernels::groupSums(x.data() + j * ldx, n, sums.data() + j * lds);
  const int64_t ldo = 2;
  std::vector<float> out(static_cast<size_t>(ldo * nx), NAN);
  fn(row.data(), n, x.data(), ldx, sums.data(), lds, out.data(), ldo);
  for (int j = 0; j < nx; ++j) {
    RefDot r = refDot(w, x.data() + j * ldx);
    EXPECT_NEAR(out[size_t(j * ldo)], r.value, 1e-5 * r.magnitude + 1e-30)
        << what << " " << dtypeName(t) << " nx=" << nx << " n=" << n << " row " << j;
  }
}

std::vector<int64_t> lengthsFor(DType t) {
  const int64_t bs = dtypeInfo(t).block_size;
  if (bs == 1)
    return {1, 7, 8, 15, 16, 17, 33, 576, 1001};
  if (bs == 32)
    return {32, 64, 96, 160, 576, 1536};
  return {256, 512, 768, 1536};
}

} // namespace

TEST(QuantDot, FusedKernelsMatchDequantizedDot) {
  std::mt19937 rng(1234);
  EXPECT_EQ(kernels::haveSimdDot(),
            kernels::dotKernel(DType::Q4_1, 1) != kernels::dotKernelScalar(DType::Q4_1, 1));
  for (DType t : kAllTypes)
    for (int64_t n : lengthsFor(t))
      for (int nx = 1; nx <= kernels::kMaxDotRows; ++nx) {
        checkKernel(kernels::dotKernel(t, nx), t, nx, n, rng, "best");
        checkKernel(kernels::dotKernelScalar(t, nx), t, nx, n, rng, "scalar");
      }
}

TEST(QuantDot, RejectsBadRowCounts) {
  EXPECT_THROW(kernels::dotKernel(DType::Q8_0, 0), std::runtime_error);
  EXPECT_THROW(kernels::dotKernel(DType::Q8_0, kernels::kMaxDotRows + 1), std::runtime_error);
}

TEST(QuantDot, GroupSums) {
  std::vector<float> x(96);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = float(i % 7) - 3.0f;
  float sums[3];
  kernels::groupSums(x.data(), 96, sums);
  for (int g = 0; g < 3; ++g) {
    double s = 0;
    for (int i = 0; i < 32; ++i)
      s += x[size_t(g * 32 + i)];
    EXPECT_FLOAT_EQ(sums[g], float(s));
  }
}

TEST(QuantDot, FastDequantIsBitExact) {
  std::mt19937 rng(99);
  for (DType t : kAllTypes)
    for (int64_t n : lengthsFor(t)) {
      std::vector<uint8_t> row = randomRow(t, n, rng);
      std::vector<float> ref(static_cast<size_t>(n)), fast(static_cast<size_t>(n), NAN);
      dequantizeRow(t, row.data(), ref.data(), n);
      kernels::dequantRowFast(t, row.data(), fast.data(), n);
      EXPECT_EQ(0, std::memcmp(ref.data(), fast.data(), size_t(n) * 4))
          << dtypeName(t) << " n=" << n;
    }
}

TEST(QuantDot, MatmulSmallAndLargeT) {
  std::mt19937 rng(7);
  ThreadPool pool(2);
  const DType types[] = {DType::Q4_1, DType::Q8_0, DType::Q6_K, DType::F16, DType::F32};
  for (DType t : types) {
    const int64_t cols = dtypeInfo(t).block_size == 256 ? 512 : 96;
    const int64_t rows = 37; // not a multiple of any row block
    std::vector<uint8_t> data;
    std::vector<float> wf(static_cast<size_t>(rows * cols));
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
    std::vector<float> bias(static_cast<size_t>(rows));
    for (float &b : bias)
      b = std::uniform_real_distribution<float>(-1, 1)(rng);
    for (int64_t T : {int64_t(1), int64_t(3), int64_t(5), kFusedMaxT, kFusedMaxT + 1, int64_t(9)}) {
      std::vector<float> x(static_cast<size_t>(T * cols)), y(size_t(T * rows), NAN);
      for (float &v : x)
        v = std::normal_distribution<float>(0, 1)(rng);
      matmul(pool, w, x.data(), T, cols, y.data(), rows, bias.data());
      for (int64_t tt = 0; tt < T; ++tt)
        for (int64_t r = 0; r < rows; ++r) {
          double s = bias[size_t(r)], mag = std::fabs(bias[size_t(r)]);
          for (int64_t k = 0; k < cols; ++k) {
            s += double(wf[size_t(r * cols + k)]) * x[size_t(tt * cols + k)];
            mag += std::fabs(double(wf[size_t(r * cols + k)]) * x[size_t(tt * cols + k)]);
          }
          EXPECT_NEAR(y[size_t(tt * rows + r)], s, 1e-5 * mag)
              << dtypeName(t) << " T=" << T << " row " << r;
        }
    }
  }
}

TEST(QuantDot, MatmulManyPairedEpilogue) {
  std::mt19937 rng(11);
  ThreadPool pool(2);
  const int64_t rows = 45, cols = 64;
  for (int64_t T : {int64_t(1), int64_t(2), int64_t(7)}) {
    std::vector<uint8_t> a, b;
    std::vector<float> wa(size_t(rows * cols)), wb(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<uint8_t> ra = randomRow(DType::Q4_1, cols, rng),
                           rb = randomRow(DType::Q8_0, cols, rng);
      dequantizeRow(DType::Q4_1, ra.data(), wa.data() + r * cols, cols);
      dequantizeRow(DType::Q8_0, rb.data(), wb.data() + r * cols, cols);
      a.insert(a.end(), ra.begin(), ra.end());
      b.insert(b.end(), rb.begin(), rb.end());
    }
    WeightMatrix A{a.data(), DType::Q4_1, rows, cols, rowBytes(DType::Q4_1, cols)};
    WeightMatrix B{b.data(), DType::Q8_0, rows, cols, rowBytes(DType::Q8_0, cols)};
    std::vector<float> x(size_t(T * cols)), ya(size_t(T * rows)), yb(size_t(T * rows));
    for (float &v : x)
      v = std::normal_distribution<float>(0, 1)(rng);
    std::vector<int> seen(size_t(rows), 0);
    const RowEpilogue epi = [&](int64_t r0, int64_t nr) { // product of the two, as gate * up
      for (int64_t t = 0; t < T; ++t)
        for (int64_t r = r0; r < r0 + nr; ++r)
          ya[size_t(t * rows + r)] *= yb[size_t(t * rows + r)];
      for (int64_t r = r0; r < r0 + nr; ++r)
        seen[size_t(r)] += 1;
    };
    const MatmulJob jobs[2] = {{&A, ya.data(), rows, nullptr}, {&B, yb.data(), rows, nullptr}};
    matmulMany(pool, jobs, 2, x.data(), T, cols, &epi);
    for (int64_t r = 0; r < rows; ++r)
      EXPECT_EQ(seen[size_t(r)], 1) << "row " << r;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t r = 0; r < rows; ++r) {
        double sa = 0, sb = 0, mag = 0;
        for (int64_t k = 0; k < cols; ++k) {
          sa += double(wa[size_t(r * cols + k)]) * x[size_t(t * cols + k)];
          sb += double(wb[size_t(r * cols + k)]) * x[size_t(t * cols + k)];
          mag += std::fabs(double(wa[size_t(r * cols + k)]) * x[size_t(t * cols + k)]) +
                 std::fabs(double(wb[size_t(r * cols + k)]) * x[size_t(t * cols + k)]);
        }
        EXPECT_NEAR(ya[size_t(t * rows + r)], sa * sb, 1e-5 * mag * mag + 1e-6)
            << "T=" << T << " row " << r;
      }
  }
}

TEST(QuantDot, MatmulFallsBackForTypesWithoutFusedKernels) {
  // Grouped-integer types have no fused kernel: decode uses dequantizeRow.
  const DType t = groupedIntDType(4, false, 64);
  EXPECT_FALSE(kernels::hasFusedDot(t));
  EXPECT_THROW(kernels::dotKernel(t, 1), std::runtime_error);
  std::mt19937 rng(5);
  ThreadPool pool(2);
  const int64_t rows = 19, cols = 128;
  std::vector<float> src(size_t(rows * cols)), wf(size_t(rows * cols));
  for (float &v : src)
    v = std::uniform_real_distribution<float>(-1, 1)(rng);
  const int64_t rb = rowBytes(t, cols);
  std::vector<uint8_t> data(size_t(rows * rb));
  for (int64_t r = 0; r < rows; ++r) {
    quantizeRowRef(t, src.data() + r * cols, data.data() + r * rb, cols);
    dequantizeRow(t, data.data() + r * rb, wf.data() + r * cols, cols);
  }
  WeightMatrix w{data.data(), t, rows, cols, rb};
  std::vector<float> x(static_cast<size_t>(cols)), y(static_cast<size_t>(rows));
  for (float &v : x)
    v = std::normal_distribution<float>(0, 1)(rng);
  matmul(pool, w, x.data(), 1, cols, y.data(), rows);
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0, mag = 0;
    for (int64_t k = 0; k < cols; ++k) {
      s += double(wf[size_t(r * cols + k)]) * x[size_t(k)];
      mag += std::fabs(double(wf[size_t(r * cols + k)]) * x[size_t(k)]);
    }
    EXPECT_NEAR(y[size_t(r)], s, 1e-5 * mag) << "row " << r;
  }
}
