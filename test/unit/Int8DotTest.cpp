//===- Int8DotTest.cpp - Int8-activation dots, eight-row layout, matmul ----===//
// The activation quantizer (q d within d / 2 of x, s = d sum q); every int8
// kernel (SIMD and portable) against the exact dot of the dequantized
// weights with the dequantized activations, and against the f32 dot within
// the activation rounding bound; the eight-row kernels bit-identical between
// SIMD and portable and equal to the row kernels up to rounding; matmulMany
// with int8 activations (eight-row copies, tail rows, token tails) against
// the f32 product.
//===----------------------------------------------------------------------===//
#include "../../runtime/src/exec/Matmul.h"
#include "../../runtime/src/kernels/dot_int8.h"
#include "../../runtime/src/kernels/rows8.h"
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

const DType kInt8Types[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1};

/// nx activation rows of n values, quantized with row strides ldq / ldd
/// larger than needed (the kernels must honour them).
struct Acts {
  int64_t n, ldq, ldd;
  std::vector<float> x;
  std::vector<int8_t> q;
  std::vector<float> d, s;
  Acts(int nx, int64_t n_, std::mt19937 &rng) : n(n_), ldq(n_ + 32), ldd(n_ / 32 + 1) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    x.resize(size_t(nx * n));
    for (float &v : x)
      v = nd(rng);
    q.assign(size_t(nx * ldq), 0);
    d.assign(size_t(nx * ldd), 0.0f);
    s.assign(size_t(nx * ldd), 0.0f);
    for (int j = 0; j < nx; ++j)
      kernels::quantizeRowInt8(x.data() + j * n, n, q.data() + j * ldq, d.data() + j * ldd,
                               s.data() + j * ldd);
  }
  /// Row j as the kernels see it: q * d.
  double deq(int j, int64_t k) const { return double(q[size_t(j * ldq + k)]) * d[size_t(j * ldd + k / 32)]; }
};

/// rows x cols of t, random rows (RandomRows.h) one after another.
std::vector<uint8_t> randomMatrix(DType t, int64_t rows, int64_t cols, std::mt19937 &rng) {
  std::vector<uint8_t> m;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<uint8_t> row = randomRow(t, cols, rng);
    m.insert(m.end(), row.begin(), row.end());
  }
  return m;
}

struct Expect {
  double exact = 0, f32 = 0, magnitude = 0, roundBound = 0;
};

Expect expected(const std::vector<float> &w, const Acts &a, int j) {
  Expect e;
  for (int64_t k = 0; k < a.n; ++k) {
    e.exact += double(w[size_t(k)]) * a.deq(j, k);
    e.f32 += double(w[size_t(k)]) * a.x[size_t(j * a.n + k)];
    e.magnitude += std::fabs(double(w[size_t(k)]) * a.deq(j, k));
    e.roundBound += std::fabs(double(w[size_t(k)])) * 0.5 * a.d[size_t(j * a.ldd + k / 32)];
  }
  return e;
}

} // namespace

TEST(Int8Dot, QuantizerRoundsEachBlockToItsScale) {
  std::mt19937 rng(7);
  const int64_t n = 576;
  std::vector<float> x(n);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (float &v : x)
    v = nd(rng);
  for (int k = 64; k < 96; ++k) // an all-zero block
    x[size_t(k)] = 0.0f;
  std::vector<int8_t> q(n);
  std::vector<float> d(n / 32), s(n / 32);
  kernels::quantizeRowInt8(x.data(), n, q.data(), d.data(), s.data());
  for (int64_t b = 0; b < n / 32; ++b) {
    float amax = 0;
    int32_t sum = 0;
    for (int k = 0; k < 32; ++k) {
      amax = std::max(amax, std::fabs(x[size_t(b * 32 + k)]));
      sum += q[size_t(b * 32 + k)];
    }
    EXPECT_FLOAT_EQ(d[size_t(b)], amax / 127.0f) << "block " << b;
    EXPECT_FLOAT_EQ(s[size_t(b)], d[size_t(b)] * float(sum)) << "block " << b;
    for (int k = 0; k < 32; ++k) {
      const int64_t i = b * 32 + k;
      EXPECT_LE(std::fabs(double(q[size_t(i)]) * d[size_t(b)] - x[size_t(i)]),
                0.5 * d[size_t(b)] * (1 + 1e-5) + 1e-30)
          << "element " << i;
      EXPECT_LE(std::abs(int(q[size_t(i)])), 127);
    }
  }
  EXPECT_EQ(d[2], 0.0f);
  EXPECT_EQ(q[70], 0);
}

TEST(Int8Dot, KernelsMatchTheDequantizedDot) {
  std::mt19937 rng(99);
  for (DType t : kInt8Types)
    for (int64_t n : {32, 64, 96, 576, 1536})
      for (int nx = 1; nx <= kernels::kMaxInt8Rows; ++nx) {
        std::vector<uint8_t> row = randomRow(t, n, rng);
        std::vector<float> w(static_cast<size_t>(n));
        dequantizeRow(t, row.data(), w.data(), n);
        Acts a(nx, n, rng);
        for (int pass = 0; pass < 2; ++pass) {
          kernels::Int8DotFn fn =
              pass ? kernels::int8DotKernelScalar(t, nx) : kernels::int8DotKernel(t, nx);
          std::vector<float> out(size_t(3 * nx), NAN);
          fn(row.data(), n, a.q.data(), a.d.data(), a.s.data(), a.ldq, a.ldd, out.data(), 3);
          for (int j = 0; j < nx; ++j) {
            const Expect e = expected(w, a, j);
            const std::string what = std::string(pass ? "scalar " : "best ") +
                                     std::string(dtypeInfo(t).name) + " n=" + std::to_string(n) +
                                     " nx=" + std::to_string(nx) + " row " + std::to_string(j);
            EXPECT_NEAR(out[size_t(3 * j)], e.exact, 2e-5 * e.magnitude + 1e-30) << what;
            EXPECT_NEAR(out[size_t(3 * j)], e.f32, e.roundBound + 2e-5 * e.magnitude) << what;
          }
        }
      }
}

TEST(Int8Dot, RejectsOtherTypesAndRowCounts) {
  EXPECT_FALSE(kernels::hasInt8Dot(DType::F32));
  EXPECT_FALSE(kernels::hasInt8Dot(DType::Q4_K));
  EXPECT_THROW(kernels::int8DotKernel(DType::Q4_K, 1), std::runtime_error);
  EXPECT_THROW(kernels::int8DotKernel(DType::Q4_0, 0), std::runtime_error);
  EXPECT_THROW(kernels::int8DotKernel(DType::Q4_0, kernels::kMaxInt8Rows + 1), std::runtime_error);
}

TEST(Rows8, PackedKernelsAreExactAndMatchTheRowKernels) {
  std::mt19937 rng(5);
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::Q5_0, DType::Q5_1})
    for (int64_t cols : {32, 96, 576})
      for (int nx = 1; nx <= 4; ++nx) {
        const int64_t rows = 16, stride = rowBytes(t, cols);
        const std::vector<uint8_t> m = randomMatrix(t, rows, cols, rng);
        std::vector<uint8_t> packed(static_cast<size_t>(rows / 8 * kernels::rows8GroupBytes(t, cols)));
        ASSERT_EQ(int64_t(packed.size()), rows * stride) << "the layout keeps the size";
        kernels::packRows8(t, m.data(), stride, rows, cols, packed.data());
        Acts a(nx, cols, rng);
        const int64_t ldo = 20;
        std::vector<float> best(size_t(ldo * nx), NAN), scalar(best);
        for (int64_t g = 0; g < rows / 8; ++g) {
          const uint8_t *grp = packed.data() + g * kernels::rows8GroupBytes(t, cols);
          kernels::rows8DotKernel(t, nx)(grp, cols, a.q.data(), a.d.data(), a.s.data(), a.ldq,
                                         a.ldd, best.data() + g * 8, ldo);
          kernels::rows8DotKernelScalar(t, nx)(grp, cols, a.q.data(), a.d.data(), a.s.data(), a.ldq,
                                               a.ldd, scalar.data() + g * 8, ldo);
        }
        const kernels::Int8DotFn rowFn = kernels::int8DotKernelScalar(t, 1);
        for (int j = 0; j < nx; ++j)
          for (int64_t r = 0; r < rows; ++r) {
            const std::string what = std::string(dtypeInfo(t).name) + " cols=" +
                                     std::to_string(cols) + " nx=" + std::to_string(nx) +
                                     " token " + std::to_string(j) + " row " + std::to_string(r);
            const float b = best[size_t(j * ldo + r)], sc = scalar[size_t(j * ldo + r)];
            EXPECT_EQ(std::memcmp(&b, &sc, 4), 0) << what << ": " << b << " vs " << sc;
            float one = NAN;
            rowFn(m.data() + r * stride, cols, a.q.data() + j * a.ldq, a.d.data() + j * a.ldd,
                  a.s.data() + j * a.ldd, a.ldq, a.ldd, &one, 1);
            std::vector<float> w(static_cast<size_t>(cols));
            dequantizeRow(t, m.data() + r * stride, w.data(), cols);
            EXPECT_NEAR(b, one, 2e-5 * expected(w, a, j).magnitude + 1e-30) << what;
          }
      }
}

// Q4_K's layout unpacks the 6-bit sub-block scales and mins; its portable
// kernel against the dequantized weights times the int8 activations.
TEST(Rows8, Q4KPackedKernelMatchesTheDequantizedDot) {
  std::mt19937 rng(9);
  const DType t = DType::Q4_K;
  for (int64_t cols : {256, 768})
    for (int nx = 1; nx <= 4; ++nx) {
      const int64_t rows = 16, stride = rowBytes(t, cols);
      const std::vector<uint8_t> m = randomMatrix(t, rows, cols, rng);
      const int64_t gb = kernels::rows8GroupBytes(t, cols);
      ASSERT_EQ(gb, cols / 256 * 1184);
      std::vector<uint8_t> packed(size_t(rows / 8 * gb));
      kernels::packRows8(t, m.data(), stride, rows, cols, packed.data());
      Acts a(nx, cols, rng);
      const int64_t ldo = 20;
      std::vector<float> got(size_t(ldo * nx), NAN);
      for (int64_t g = 0; g < rows / 8; ++g)
        kernels::rows8DotKernel(t, nx)(packed.data() + g * gb, cols, a.q.data(), a.d.data(),
                                       a.s.data(), a.ldq, a.ldd, got.data() + g * 8, ldo);
      for (int j = 0; j < nx; ++j)
        for (int64_t r = 0; r < rows; ++r) {
          std::vector<float> w(static_cast<size_t>(cols));
          dequantizeRow(t, m.data() + r * stride, w.data(), cols);
          const Expect e = expected(w, a, j);
          EXPECT_NEAR(got[size_t(j * ldo + r)], e.exact, 1e-4 * e.magnitude + 1e-30)
              << "cols " << cols << " nx " << nx << " token " << j << " row " << r;
        }
    }
  // Vectorized (AVX2) wherever Q4_0's kernel is.
  EXPECT_EQ(kernels::hasFastRows8Kernel(t), kernels::hasFastRows8Kernel(DType::Q4_0));
  std::vector<uint8_t> src(8 * 144 * 2), dst(8 * 1184 * 2);
  EXPECT_THROW(kernels::packRows8(t, src.data(), 144 * 2, 8, 288, dst.data()), std::runtime_error);
}

TEST(Rows8, RejectsShapesAndTypesWithoutALayout) {
  std::vector<uint8_t> src(12 * 18), dst(12 * 18);
  EXPECT_THROW(kernels::packRows8(DType::Q4_0, src.data(), 18, 12, 32, dst.data()),
               std::runtime_error);
  EXPECT_FALSE(kernels::hasRows8(DType::Q6_K));
  EXPECT_TRUE(kernels::hasRows8(DType::Q5_0));
  EXPECT_EQ(kernels::hasFastRows8Kernel(DType::Q5_0), kernels::hasFastRows8Kernel(DType::Q4_0));
  EXPECT_THROW(kernels::rows8DotKernel(DType::F32, 1), std::runtime_error);
}

namespace {
/// Every weight of m (rows of t) at its largest magnitude: all quant, fifth
/// bit and (Q4_K) 6-bit scale and min bytes 0xFF (Q8_0's codes -127); the
/// fp16 scales kept.
void saturateWeights(DType t, std::vector<uint8_t> &m) {
  const DTypeInfo &info = dtypeInfo(t);
  const int64_t scaleBytes = t == DType::Q4_1 || t == DType::Q5_1 || t == DType::Q4_K ? 4 : 2;
  for (size_t at = 0; at < m.size(); at += size_t(info.block_bytes))
    std::memset(m.data() + at + scaleBytes, t == DType::Q8_0 ? 0x81 : 0xFF,
                size_t(info.block_bytes - scaleBytes));
}
} // namespace

// The AVX2 eight-row kernels give the portable kernels' very bits, for every
// layout, several widths and 1..4 activation rows; also at the limits of
// their 16-bit sums (every weight at its largest magnitude, activations
// +-127 in a row).
TEST(Rows8, SimdKernelsAreBitIdenticalToThePortableOnes) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") ||
      !kernels::hasFastRows8Kernel(DType::Q4_0))
    GTEST_SKIP() << "no AVX2 eight-row kernels in this build or on this CPU";
  std::mt19937 rng(31);
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::Q5_0, DType::Q5_1, DType::Q4_K}) {
    const std::string name(dtypeInfo(t).name);
    EXPECT_TRUE(kernels::hasFastRows8Kernel(t)) << name;
    const std::vector<int64_t> widths = t == DType::Q4_K ? std::vector<int64_t>{256, 768, 1536}
                                                         : std::vector<int64_t>{256, 576, 1536};
    for (int64_t cols : widths)
      for (int extreme = 0; extreme < 2; ++extreme)
        for (int nx = 1; nx <= 4; ++nx) {
          ASSERT_NE(kernels::rows8DotKernel(t, nx), kernels::rows8DotKernelScalar(t, nx)) << name;
          const int64_t rows = 16, stride = rowBytes(t, cols);
          const int64_t gb = kernels::rows8GroupBytes(t, cols);
          std::vector<uint8_t> m = randomMatrix(t, rows, cols, rng);
          if (extreme)
            saturateWeights(t, m);
          std::vector<uint8_t> packed(size_t(rows / 8 * gb));
          kernels::packRows8(t, m.data(), stride, rows, cols, packed.data());
          Acts a(nx, cols, rng);
          for (int j = 0; extreme && j < nx; ++j)
            std::memset(a.q.data() + j * a.ldq, j % 2 ? 0x81 : 0x7F, size_t(cols));
          const int64_t ldo = 20;
          std::vector<float> simd(size_t(ldo * nx), NAN), scalar(simd);
          for (int64_t g = 0; g < rows / 8; ++g) {
            kernels::rows8DotKernel(t, nx)(packed.data() + g * gb, cols, a.q.data(), a.d.data(),
                                           a.s.data(), a.ldq, a.ldd, simd.data() + g * 8, ldo);
            kernels::rows8DotKernelScalar(t, nx)(packed.data() + g * gb, cols, a.q.data(),
                                                 a.d.data(), a.s.data(), a.ldq, a.ldd,
                                                 scalar.data() + g * 8, ldo);
          }
          for (int j = 0; j < nx; ++j)
            for (int64_t r = 0; r < rows; ++r) {
              const float v = simd[size_t(j * ldo + r)], w = scalar[size_t(j * ldo + r)];
              uint32_t vb, wb;
              std::memcpy(&vb, &v, 4);
              std::memcpy(&wb, &w, 4);
              EXPECT_EQ(vb, wb) << name << " cols=" << cols << (extreme ? " saturated" : "")
                                << " nx=" << nx << " token " << j << " row " << r << ": " << v
                                << " vs " << w;
            }
        }
  }
}

TEST(Int8Dot, MatmulWithInt8ActivationsMatchesTheF32Product) {
  std::mt19937 rng(11);
  ThreadPool pool(2);
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::Q5_1})
    for (int64_t rows : {8, 21, 40})
      for (int64_t T : {1, 3, 4, 5, 9}) {
        const int64_t cols = 96, stride = rowBytes(t, cols);
        const std::vector<uint8_t> m = randomMatrix(t, rows, cols, rng);
        WeightMatrix w;
        w.data = m.data();
        w.dtype = t;
        w.rows = rows;
        w.cols = cols;
        w.rowStride = stride;
        std::vector<uint8_t> packed;
        if (kernels::hasRows8(t) && rows % 8 == 0) {
          packed.resize(size_t(rows * stride));
          kernels::packRows8(t, m.data(), stride, rows, cols, packed.data());
          w.rows8 = packed.data();
          w.rows8Type = t;
        }
        std::normal_distribution<float> nd(0.0f, 1.0f);
        std::vector<float> x(static_cast<size_t>(T * cols));
        for (float &v : x)
          v = nd(rng);
        std::vector<float> y8(size_t(T * rows), NAN), yf(y8);
        MatmulJob job{&w, y8.data(), rows, nullptr};
        MatmulPaths int8;
        int8.int8 = true;
        matmulMany(pool, &job, 1, x.data(), T, cols, nullptr, int8);
        job.y = yf.data();
        matmulMany(pool, &job, 1, x.data(), T, cols);
        std::vector<float> wr(static_cast<size_t>(cols));
        for (int64_t r = 0; r < rows; ++r) {
          dequantizeRow(t, m.data() + r * stride, wr.data(), cols);
          double wAbs = 0;
          for (float v : wr)
            wAbs += std::fabs(v);
          for (int64_t i = 0; i < T; ++i) {
            float amax = 0;
            for (int64_t k = 0; k < cols; ++k)
              amax = std::max(amax, std::fabs(x[size_t(i * cols + k)]));
            // Loose bound: every element off by at most half the largest scale.
            EXPECT_NEAR(y8[size_t(i * rows + r)], yf[size_t(i * rows + r)],
                        wAbs * 0.5 * amax / 127.0 * 1.01 + 1e-4)
                << dtypeInfo(t).name << " rows=" << rows << " T=" << T << " row " << r
                << " token " << i << (w.rows8 ? " (eight-row copy)" : "");
          }
        }
      }
}

TEST(Rows8, GroupedIntegersPackIntoTheBlockLayouts) {
  std::mt19937 rng(23);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const struct {
    const char *name;
    DType layout;
  } cases[] = {{"gq4s_g32", DType::Q4_0}, {"gq4s_g64", DType::Q4_0}, {"gq4a_g64", DType::Q4_1},
               {"gq4a_g128", DType::Q4_1}, {"gq8s_g32", DType::Q8_0}};
  for (const auto &c : cases) {
    const DType t = *dtypeFromName(c.name);
    ASSERT_EQ(kernels::rows8Layout(t), c.layout) << c.name;
    const int64_t rows = 16, cols = 256, stride = rowBytes(t, cols);
    std::vector<float> wf(static_cast<size_t>(rows * cols));
    for (float &v : wf)
      v = nd(rng);
    std::vector<uint8_t> m(size_t(rows * stride));
    for (int64_t r = 0; r < rows; ++r)
      quantizeRowRef(t, wf.data() + r * cols, m.data() + r * stride, cols);
    const int64_t gb = kernels::rows8GroupBytes(c.layout, cols);
    std::vector<uint8_t> packed(size_t(rows / 8 * gb));
    kernels::packRows8(t, m.data(), stride, rows, cols, packed.data());
    for (int nx = 1; nx <= 4; ++nx) {
      Acts a(nx, cols, rng);
      std::vector<float> out(size_t(nx * rows), NAN);
      for (int64_t g = 0; g < rows / 8; ++g)
        kernels::rows8DotKernel(c.layout, nx)(packed.data() + g * gb, cols, a.q.data(),
                                              a.d.data(), a.s.data(), a.ldq, a.ldd,
                                              out.data() + g * 8, rows);
      std::vector<float> w(static_cast<size_t>(cols));
      for (int64_t r = 0; r < rows; ++r) {
        dequantizeRow(t, m.data() + r * stride, w.data(), cols);
        for (int j = 0; j < nx; ++j) {
          const Expect e = expected(w, a, j);
          EXPECT_NEAR(out[size_t(j * rows + r)], e.exact, 2e-5 * e.magnitude + 1e-30)
              << c.name << " nx=" << nx << " row " << r << " token " << j;
        }
      }
    }
  }
  EXPECT_FALSE(kernels::rows8Layout(*dtypeFromName("gq4s_g16"))); // groups below 32
  EXPECT_FALSE(kernels::rows8Layout(*dtypeFromName("gq3s_g32"))); // no 3-bit layout
  EXPECT_FALSE(kernels::rows8Layout(*dtypeFromName("gq8a_g32")));
}

// Weights the compiler stores only in the eight-row layout are read back
// row by row (f32 products, the reference engine): unpacking a row gives the
// layout's own row bytes, and a packed-only WeightMatrix's loadRow gives the
// exact values of the source row, for the block formats and the grouped
// integers packed into them; a matmul with f32 activations over it equals
// the one over the row-major source bit for bit (both take the blocked
// f32 path at this T; at decode sizes the source would take the fused one).
TEST(Rows8, PackedOnlyWeightsReadBackExactly) {
  std::mt19937 rng(29);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  ThreadPool pool(2);
  for (const char *name : {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_K", "gq4s_g64",
                           "gq4a_g128", "gq8s_g32"}) {
    const DType t = *dtypeFromName(name);
    const DType layout = *kernels::rows8Layout(t);
    const int64_t rows = 24, cols = 256, stride = rowBytes(t, cols);
    std::vector<float> wf(static_cast<size_t>(rows * cols));
    for (float &v : wf)
      v = nd(rng);
    std::vector<uint8_t> m(size_t(rows * stride));
    if (t == DType::Q4_K) // no reference quantizer: random blocks with sane scales
      m = randomMatrix(t, rows, cols, rng);
    else
      for (int64_t r = 0; r < rows; ++r)
        quantizeRowRef(t, wf.data() + r * cols, m.data() + r * stride, cols);
    const int64_t gb = kernels::rows8GroupBytes(layout, cols);
    std::vector<uint8_t> packed(size_t(rows / 8 * gb));
    kernels::packRows8(t, m.data(), stride, rows, cols, packed.data());
    WeightMatrix src, only;
    src.data = m.data();
    src.dtype = only.dtype = t;
    src.rows = only.rows = rows;
    src.cols = only.cols = cols;
    src.rowStride = only.rowStride = stride;
    only.rows8 = packed.data();
    only.rows8Type = layout;
    std::vector<float> want(static_cast<size_t>(cols)), got(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      if (layout == t) { // the block formats: the very bytes of the source row
        std::vector<uint8_t> row(static_cast<size_t>(stride));
        kernels::unpackRows8Row(t, packed.data() + (r / 8) * gb, int(r % 8), cols, row.data());
        EXPECT_EQ(0, std::memcmp(row.data(), m.data() + r * stride, size_t(stride)))
            << name << " row " << r;
      }
      loadRow(src, r, want.data());
      loadRow(only, r, got.data());
      EXPECT_EQ(0, std::memcmp(want.data(), got.data(), size_t(cols) * 4)) << name << " row " << r;
    }
    const int64_t T = kFusedMaxT + 3; // both through the blocked f32 product
    std::vector<float> x(size_t(T * cols)), y1(size_t(T * rows)), y2(size_t(T * rows));
    for (float &v : x)
      v = nd(rng);
    matmul(pool, src, x.data(), T, cols, y1.data(), rows);
    matmul(pool, only, x.data(), T, cols, y2.data(), rows);
    EXPECT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * 4)) << name << " f32 matmul";
  }
  std::vector<uint8_t> group(1184), row(144);
  EXPECT_THROW(kernels::unpackRows8Row(DType::Q4_K, group.data(), 0, 128, row.data()),
               std::runtime_error); // Q4_K rows are whole super-blocks of 256
}
