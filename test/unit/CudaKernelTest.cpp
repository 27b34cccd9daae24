//===- CudaKernelTest.cpp - The generated CUDA kernels, here and for GPUs -===//
// Without a GPU: the generated CUDA matrix-vector kernels, run on the host
// by emulation (CudaEmulation.h), against a double-precision product of the
// dequantized rows, for every format, several widths, 1..8 tokens and a
// row count that leaves a block's last warps idle. With NVRTC (the CUDA
// toolkit this machine kind ships): the same source compiles to cubin for
// sm_80 and sm_90 and to PTX that ptxas assembles for sm_80 and sm_90. The
// runtime's choice of image for a device, and its clean "no device".
//===----------------------------------------------------------------------===//
#include "codegen/cuda/CudaCompiler.h"
#include "codegen/cuda/CudaKernelSource.h"
#include "CudaEmulatedObject.h"
#include "GeneratedObject.h"
#include "MissingInput.h"
#include "llmc/cuda.h"
#include "llmc/dtype.h"
#include "llmc/random_rows.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <tuple>
#include <unistd.h>

using namespace llmc;
using namespace llmc::codegen;

namespace {

using CudaMatvecFn = void (*)(const unsigned char *w, long long rowStride, const float *x,
                              long long ldx, int T, float *y, long long ldy, long long rows,
                              const float *res, long long ldr);
using CudaMatvec1Fn = void (*)(const unsigned char *w, long long rowStride, const float *x,
                               float *y, long long rows, const float *res);

const std::vector<DType> kFormats = {DType::F32,  DType::F16,  DType::Q8_0, DType::Q4_0,
                                     DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q4_K,
                                     DType::Q6_K};
const std::vector<int64_t> kWidths = {32, 96, 576, 1536};

std::vector<CudaMatvecSpec> allSpecs() {
  std::vector<CudaMatvecSpec> v;
  for (DType t : kFormats)
    for (int64_t c : kWidths)
      if (canGenerateCuda(t, c))
        v.push_back({t, c});
  v.push_back({DType::Q4_K, 256}); // one super-block a row
  v.push_back({DType::Q6_K, 256});
  // llmc's grouped integers: odd widths of bits, both signs, small and large groups
  for (auto [bits, sym, group, cols] : {std::tuple{4, false, 64, 576}, {4, true, 32, 96},
                                        {3, true, 32, 576}, {2, false, 16, 48},
                                        {8, true, 128, 1536}, {5, false, 8, 40},
                                        {6, true, 64, 192}, {7, false, 24, 72}})
    v.push_back({groupedIntDType(bits, sym, group), cols});
  return v;
}

/// `rows` seeded random rows of s's format: their bytes (stride apart) and
/// their dequantized values [rows, cols].
struct RandomMatrix {
  int64_t stride = 0;
  std::vector<unsigned char> w;
  std::vector<float> deq;
};

RandomMatrix randomMatrix(const CudaMatvecSpec &s, int64_t rows, std::mt19937 &rng) {
  RandomMatrix m;
  m.stride = rowBytes(s.dtype, s.cols);
  m.w.resize(size_t(rows * m.stride));
  m.deq.resize(size_t(rows * s.cols));
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<uint8_t> bytes = randomRow(s.dtype, s.cols, rng);
    std::copy(bytes.begin(), bytes.end(), m.w.begin() + r * m.stride);
    dequantizeRow(s.dtype, m.w.data() + r * m.stride, m.deq.data() + r * s.cols, s.cols);
  }
  return m;
}

} // namespace

TEST(CudaKernels, EmulatedMatvecMatchesDequantizedDoubleProduct) {
  cgtest::GeneratedObject obj;
  cgtest::loadGenerated(obj, std::string(cgtest::kCudaHostShim) + cudaKernelSource(allSpecs()),
                        IsaLevel::X86_64);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  auto set = obj.fn<cgtest::CudaEmuSetFn>("llmc_emu_set");
  ASSERT_NE(set, nullptr);
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t rows = 13; // 4 blocks of 4 warps: the last block has 1 row
  for (const CudaMatvecSpec &s : allSpecs()) {
    auto fn = obj.fn<CudaMatvecFn>(s.symbol());
    ASSERT_NE(fn, nullptr) << s.symbol();
    const RandomMatrix m = randomMatrix(s, rows, rng);
    const int64_t stride = m.stride;
    const std::vector<unsigned char> &w = m.w;
    const std::vector<float> &deq = m.deq;
    for (int T : {1, 3, 8}) {
      const int64_t ldx = s.cols + 3, ldy = rows + 2;
      std::vector<float> x(size_t(T * ldx)), y(size_t(T * ldy), -7.0f);
      for (float &v : x)
        v = nd(rng);
      const unsigned blocks = unsigned((rows + kCudaRowsPerBlock - 1) / kCudaRowsPerBlock);
      cgtest::runKernel(set, blocks, 32 * kCudaRowsPerBlock, [&] {
        fn(w.data(), stride, x.data(), ldx, T, y.data(), ldy, rows, nullptr, 0);
      });
      // The fused residual: into another buffer, and in place (res == y).
      const int64_t ldr = rows + 5;
      std::vector<float> res(size_t(T * ldr)), yr(size_t(T * ldy), -7.0f), yi(size_t(T * ldy));
      for (float &v : res)
        v = nd(rng);
      for (int t = 0; t < T; ++t)
        for (int64_t r = 0; r < rows; ++r)
          yi[size_t(t * ldy + r)] = res[size_t(t * ldr + r)];
      cgtest::runKernel(set, blocks, 32 * kCudaRowsPerBlock, [&] {
        fn(w.data(), stride, x.data(), ldx, T, yr.data(), ldy, rows, res.data(), ldr);
      });
      cgtest::runKernel(set, blocks, 32 * kCudaRowsPerBlock, [&] {
        fn(w.data(), stride, x.data(), ldx, T, yi.data(), ldy, rows, yi.data(), ldy);
      });
      for (int t = 0; t < T; ++t)
        for (int64_t r = 0; r < rows; ++r) {
          const float want = y[size_t(t * ldy + r)] + res[size_t(t * ldr + r)];
          ASSERT_EQ(yr[size_t(t * ldy + r)], want) << s.symbol() << " residual, row " << r;
          ASSERT_EQ(yi[size_t(t * ldy + r)], want) << s.symbol() << " in place, row " << r;
        }
      for (int t = 0; t < T; ++t)
        for (int64_t r = 0; r < rows; ++r) {
          double ref = 0, mag = 0;
          for (int64_t c = 0; c < s.cols; ++c) {
            ref += double(deq[size_t(r * s.cols + c)]) * x[size_t(t * ldx + c)];
            mag += std::fabs(double(deq[size_t(r * s.cols + c)]) * x[size_t(t * ldx + c)]);
          }
          ASSERT_NEAR(y[size_t(t * ldy + r)], ref, 1e-5 * mag + 1e-6)
              << s.symbol() << " T " << T << " t " << t << " row " << r;
        }
      for (int t = 0; t < T; ++t) // nothing past the rows
        ASSERT_EQ(y[size_t(t * ldy + rows)], -7.0f) << s.symbol();
      if (T != 1)
        continue;
      // The one-token decode kernel: the general kernel's bits at T = 1,
      // with and without the residual, nothing past the rows.
      auto fn1 = obj.fn<CudaMatvec1Fn>(s.decodeSymbol());
      ASSERT_NE(fn1, nullptr) << s.decodeSymbol();
      std::vector<float> y1(size_t(rows + 1), -7.0f), y1r(size_t(rows + 1), -7.0f);
      const unsigned blocks1 =
          unsigned((rows + kCudaDecodeRowsPerBlock - 1) / kCudaDecodeRowsPerBlock);
      cgtest::runKernel(set, blocks1, 32 * kCudaDecodeRowsPerBlock,
                        [&] { fn1(w.data(), stride, x.data(), y1.data(), rows, nullptr); });
      cgtest::runKernel(set, blocks1, 32 * kCudaDecodeRowsPerBlock,
                        [&] { fn1(w.data(), stride, x.data(), y1r.data(), rows, res.data()); });
      for (int64_t r = 0; r < rows; ++r) {
        ASSERT_EQ(y1[size_t(r)], y[size_t(r)]) << s.decodeSymbol() << " row " << r;
        ASSERT_EQ(y1r[size_t(r)], yr[size_t(r)]) << s.decodeSymbol() << " residual, row " << r;
      }
      ASSERT_EQ(y1[size_t(rows)], -7.0f) << s.decodeSymbol();
    }
  }
}

// The tensor-core product (llmc_cu_mm_*: mma.m16n8k16 in PTX's fragment
// layout, emulated from the same layout): against the product of the
// f16-rounded weights and activations in double (the kernel's own inputs;
// a fragment slip would be off by the size of the product), and within f16
// rounding of the f32 product; 21 rows (a warp with 5 rows, two idle
// warps) and 37 tokens (a second token tile with 5); the fused residual,
// into another buffer and in place.
TEST(CudaKernels, EmulatedTensorCoreProductMatchesF16Product) {
  std::vector<CudaMatvecSpec> specs;
  for (DType t : kFormats)
    for (int64_t c : {32, 96, 256})
      if (canGenerateCudaMma(t, c) && (c == 256) == (t == DType::Q4_K || t == DType::Q6_K))
        specs.push_back({t, c});
  specs.push_back({groupedIntDType(4, true, 32), 96});
  cgtest::EmulatedCuda e;
  cgtest::loadEmulatedCuda(e, cudaKernelSource(specs));
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  auto &obj = e.obj;
  const cgtest::CudaEmuEntries &emu = e.emu;
  std::mt19937 rng(23);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t rows = 21;
  const int T = 37;
  auto half = [](float v) { return double(halfToFloat(floatToHalf(v))); };
  for (const CudaMatvecSpec &s : specs) {
    auto fn = obj.fn<CudaMatvecFn>(s.mmaSymbol());
    ASSERT_NE(fn, nullptr) << s.mmaSymbol();
    const RandomMatrix m = randomMatrix(s, rows, rng);
    const int64_t stride = m.stride;
    const std::vector<unsigned char> &w = m.w;
    const std::vector<float> &deq = m.deq;
    const int64_t ldx = s.cols + 3, ldy = rows + 2, ldr = rows + 5;
    std::vector<float> x(size_t(T * ldx)), y(size_t(T * ldy), -7.0f), res(size_t(T * ldr));
    for (float &v : x)
      v = nd(rng);
    for (float &v : res)
      v = nd(rng);
    std::vector<float> yr(y.size(), -7.0f), yi(y.size(), -7.0f);
    for (int t = 0; t < T; ++t)
      for (int64_t r = 0; r < rows; ++r)
        yi[size_t(t * ldy + r)] = res[size_t(t * ldr + r)];
    const unsigned blocks = unsigned((rows + 16 * kCudaMmaWarps - 1) / (16 * kCudaMmaWarps) *
                                     ((T + kCudaMmaTokens - 1) / kCudaMmaTokens));
    auto launch = [&](float *out, const float *r, long long lr,
                      const cgtest::CudaEmuEntries &how) {
      cgtest::runKernelReplay(how, blocks, 32 * kCudaMmaWarps, [&] {
        fn(w.data(), stride, x.data(), ldx, T, out, ldy, rows, r, lr);
      });
    };
    launch(y.data(), nullptr, 0, emu);
    { // the emulation's fibers give its replays' values, bit for bit
      std::vector<float> replayed(y.size(), -7.0f);
      launch(replayed.data(), nullptr, 0, cgtest::replaysOf(emu));
      EXPECT_EQ(0, std::memcmp(y.data(), replayed.data(), y.size() * sizeof(float)))
          << s.mmaSymbol() << " fibers against replays";
    }
    launch(yr.data(), res.data(), ldr, emu);
    launch(yi.data(), yi.data(), ldy, emu);
    for (int t = 0; t < T; ++t) {
      for (int64_t r = 0; r < rows; ++r) {
        double ref16 = 0, ref = 0, mag = 0;
        for (int64_t c = 0; c < s.cols; ++c) {
          const float wv = deq[size_t(r * s.cols + c)], xv = x[size_t(t * ldx + c)];
          ref16 += half(wv) * half(xv);
          ref += double(wv) * xv;
          mag += std::fabs(double(wv) * xv);
        }
        const float got = y[size_t(t * ldy + r)];
        ASSERT_NEAR(got, ref16, 1e-5 * mag + 1e-6)
            << s.mmaSymbol() << " token " << t << " row " << r << " (f16 inputs)";
        ASSERT_NEAR(got, ref, 2e-3 * mag + 1e-6) << s.mmaSymbol() << " token " << t << " row " << r;
        const float want = got + res[size_t(t * ldr + r)];
        ASSERT_EQ(yr[size_t(t * ldy + r)], want) << s.mmaSymbol() << " residual, row " << r;
        ASSERT_EQ(yi[size_t(t * ldy + r)], want) << s.mmaSymbol() << " in place, row " << r;
      }
      ASSERT_EQ(y[size_t(t * ldy + rows)], -7.0f) << s.mmaSymbol(); // nothing past the rows
    }
  }
}

static std::vector<CudaOpSpec> allOps() {
  std::vector<CudaOpSpec> v;
  for (int64_t c : {7, 64, 576}) {
    CudaOpSpec s;
    s.kind = CudaOpSpec::Kind::RmsNorm;
    s.cols = c;
    v.push_back(s);
  }
  for (Activation a : {Activation::SiLU, Activation::GELU}) {
    CudaOpSpec s;
    s.kind = CudaOpSpec::Kind::Gate;
    s.activation = a;
    v.push_back(s);
  }
  v.push_back(CudaOpSpec{});
  CudaOpSpec moe;
  moe.kind = CudaOpSpec::Kind::MoeRows; // checked by CudaMoeKernelTest.cpp
  v.push_back(moe);
  return v;
}

// RMSNorm (one warp per row, all lanes given the sum of squares), the SiLU
// and GELU gates and the add, emulated on the host, against the same
// formulas in double precision.
TEST(CudaKernels, EmulatedOpKernelsMatchTheirFormulas) {
  cgtest::EmulatedCuda e;
  cgtest::loadEmulatedCuda(e, cudaKernelSource({}, allOps()));
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  auto &obj = e.obj;
  const cgtest::CudaEmuEntries &emu = e.emu;
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  auto randoms = [&](size_t n) {
    std::vector<float> v(n);
    for (float &x : v)
      x = nd(rng);
    return v;
  };
  for (const CudaOpSpec &s : allOps()) {
    if (s.kind == CudaOpSpec::Kind::MoeRows)
      continue; // CudaMoeKernelTest.cpp
    if (s.kind == CudaOpSpec::Kind::RmsNorm) {
      using Fn = void (*)(const float *, const float *, float *, long long, float);
      auto fn = obj.fn<Fn>(s.symbol());
      ASSERT_NE(fn, nullptr) << s.symbol();
      const int64_t rows = 3, D = s.cols;
      const std::vector<float> x = randoms(size_t(rows * D)), w = randoms(size_t(D));
      std::vector<float> y(x.size(), -1.0f);
      cgtest::runKernelReplay(emu, unsigned(rows), 32,
                              [&] { fn(x.data(), w.data(), y.data(), rows, 1e-5f); });
      for (int64_t r = 0; r < rows; ++r) {
        double ss = 0;
        for (int64_t i = 0; i < D; ++i)
          ss += double(x[size_t(r * D + i)]) * x[size_t(r * D + i)];
        const double scale = 1.0 / std::sqrt(ss / double(D) + 1e-5);
        for (int64_t i = 0; i < D; ++i)
          ASSERT_NEAR(y[size_t(r * D + i)], x[size_t(r * D + i)] * scale * w[size_t(i)],
                      1e-5 * (1 + std::fabs(x[size_t(r * D + i)] * scale * w[size_t(i)])))
              << s.symbol() << " row " << r << " i " << i;
      }
    } else if (s.kind == CudaOpSpec::Kind::Gate) {
      using Fn = void (*)(float *, const float *, long long);
      auto fn = obj.fn<Fn>(s.symbol());
      ASSERT_NE(fn, nullptr) << s.symbol();
      const int64_t n = 77;
      std::vector<float> g = randoms(size_t(n));
      const std::vector<float> g0 = g, u = randoms(size_t(n));
      cgtest::runKernel(emu.set, 2, 64, [&] { fn(g.data(), u.data(), n); });
      for (int64_t i = 0; i < n; ++i) {
        const double v = g0[size_t(i)];
        const double act = s.activation == Activation::SiLU ? v / (1 + std::exp(-v))
                                                  : 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
        ASSERT_NEAR(g[size_t(i)], act * u[size_t(i)], 1e-5 * (1 + std::fabs(act * u[size_t(i)])))
            << s.symbol() << " i " << i;
      }
    } else {
      using Fn = void (*)(const float *, const float *, float *, long long);
      auto fn = obj.fn<Fn>(s.symbol());
      ASSERT_NE(fn, nullptr) << s.symbol();
      const int64_t n = 70;
      const std::vector<float> a = randoms(size_t(n)), b = randoms(size_t(n));
      std::vector<float> y(size_t(n) + 1, -3.0f);
      cgtest::runKernel(emu.set, 3, 32, [&] { fn(a.data(), b.data(), y.data(), n); });
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(y[size_t(i)], a[size_t(i)] + b[size_t(i)]) << i;
      ASSERT_EQ(y[size_t(n)], -3.0f); // nothing past n
    }
  }
}

TEST(CudaKernels, RefusesFormatsWithoutAKernel) {
  EXPECT_FALSE(canGenerateCuda(DType::Q4_K, 576)); // not whole super-blocks
  EXPECT_FALSE(canGenerateCuda(DType::Q6_K, 96));
  EXPECT_FALSE(canGenerateCuda(DType::Q8_0, 48));
  EXPECT_FALSE(canGenerateCuda(DType::Q3_K, 256));
  EXPECT_THROW(cudaKernelSource({{DType::Q3_K, 256}}), std::invalid_argument);
  EXPECT_THROW(cudaKernelSource({{DType::Q4_K, 576}}), std::invalid_argument);
}

TEST(CudaKernels, NvrtcBuildsCubinForSm90AndPtxThatPtxasAssemblesForSm80AndSm90) {
  std::string why;
  if (!nvrtcVersion(&why))
    LLMC_MISSING_INPUT(why);
  // Every format's kernels at its narrowest and widest width (the widths
  // between differ only in a constant; the host emulation tests run them
  // all), every grouped-integer variant, op and attention shape.
  std::vector<CudaMatvecSpec> specs;
  for (const CudaMatvecSpec &s : allSpecs())
    if (s.cols == 32 || s.cols == 256 || s.cols == 1536 || isGroupedInt(s.dtype))
      specs.push_back(s);
  // The second shape also has its PolyKV kernels.
  std::vector<CudaAttentionSpec> attention = {{9, 3, 64, 1e5, RopeStyle::Half},
                                              {8, 1, 128, 5e5, RopeStyle::Interleaved}};
  attention[1].polyKv = true;
  const std::string src = cudaKernelSource(specs, allOps(), specs, attention);
  // NVRTC's sm_90 cubin, and its compute_80 PTX assembled below for both
  // sm_80 and sm_90 by ptxas: every kernel reaches machine code for both
  // architectures. (NVRTC's own sm_80 cubin is checked end to end on
  // SmolLM2's kernels by test_cuda_codegen; here it cost a third of this
  // test's 260 s from an empty kernel cache.)
  const std::string cubin = compileCuda(src, "sm_90");
  ASSERT_GT(cubin.size(), 4u);
  EXPECT_EQ(cubin.substr(0, 4), std::string("\x7f" "ELF"));
  const std::string ptx = compileCuda(src, "compute_80");
  EXPECT_NE(ptx.find(".visible .entry llmc_cu_mv_q4_1_1536"), std::string::npos);
  EXPECT_NE(ptx.find(".visible .entry llmc_cu_mv1_q4_k_256"), std::string::npos);
  EXPECT_NE(ptx.find(".visible .entry llmc_cu_rms_norm_576"), std::string::npos);
  EXPECT_NE(ptx.find(".visible .entry llmc_cu_moe_scatter_add"), std::string::npos);
  for (const char *k : {"llmc_cu_embed_q8_0_32", "llmc_cu_rope_kv_9_3_64_half_100000",
                        "llmc_cu_attend_9_3_64", "llmc_cu_attend_combine_9_64",
                        "llmc_cu_attend_8_1_128", "llmc_cu_pkv_rope_8_1_128_interleaved_500000",
                        "llmc_cu_pkv_attend_8_1_128", "llmc_cu_pkv_combine_8_128"})
    EXPECT_NE(ptx.find(std::string(".visible .entry ") + k), std::string::npos) << k;
  EXPECT_THROW(compileCuda(src + "\nthis is not CUDA;\n", "sm_90"), std::runtime_error);
  const char *ptxas = "/usr/local/cuda/bin/ptxas";
  if (access(ptxas, X_OK) != 0)
    LLMC_MISSING_INPUT(ptxas);
  char tmpl[] = "/tmp/llmc-ptx-XXXXXX";
  const int fd = mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  close(fd);
  std::ofstream(tmpl) << ptx;
  for (const char *arch : {"sm_80", "sm_90"}) {
    const std::string cmd = std::string(ptxas) + " -arch=" + arch + " " + tmpl +
                            " -o /dev/null 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  unlink(tmpl);
}

// The runtime's choice of image: the highest cubin of the device's major
// version at or below its minor, else the highest PTX at or below its
// capability, else none (with the reason).
TEST(CudaImage, PicksTheCubinOfTheMajorElsePtx) {
  const std::vector<std::string> cubin = {"sm_80", "sm_90"}, ptx = {"compute_80"};
  std::string why;
  EXPECT_EQ(cuda::pickCudaImage(cubin, ptx, 9, 0, why), "sm_90");
  EXPECT_EQ(cuda::pickCudaImage(cubin, ptx, 8, 9, why), "sm_80");
  EXPECT_EQ(cuda::pickCudaImage(cubin, ptx, 8, 0, why), "sm_80");
  EXPECT_EQ(cuda::pickCudaImage(cubin, ptx, 10, 0, why), "compute_80");
  EXPECT_EQ(cuda::pickCudaImage({"sm_86"}, ptx, 8, 0, why), "compute_80");
  EXPECT_EQ(cuda::pickCudaImage(cubin, ptx, 7, 5, why), "");
  EXPECT_NE(why.find("7.5"), std::string::npos) << why;
}

// Without a driver or GPU (this machine kind), opening a device reports why
// instead of failing; with one, it names it.
TEST(CudaImage, OpeningADeviceSaysWhyThereIsNone) {
  std::string why;
  std::unique_ptr<cuda::CudaDevice> dev = cuda::CudaDevice::open(why);
  if (dev)
    EXPECT_FALSE(dev->name().empty());
  else
    EXPECT_FALSE(why.empty());
}
