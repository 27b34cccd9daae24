//===- CodegenKernelTest.cpp - Generated CPU kernels vs the scalar reference -===//
// Every generated format on random rows of several widths (odd ones for
// the float formats), 1..4 tokens (1..11 for float rows, which take any
// number) and odd row ranges, built for the baseline
// x86-64 level and this CPU's level by the host compiler, loaded and
// compared with dequantizeRow + a double-precision dot. The int8 kernels
// over the eight-row layout (q8_0, q4_0, q4_1) are compared with the
// runtime's portable eight-row kernel at both levels.
//===----------------------------------------------------------------------===//
#include "codegen/cpu/CpuKernelSource.h"
#include "llmc/codegen.h"
#include "codegen/cpu/HostCompiler.h"
#include "llmc/dtype.h"
#include "../../runtime/src/codegen/GeneratedKernels.h"
#include "../../runtime/src/kernels/dot_int8.h"
#include "../../runtime/src/kernels/rows8.h"
#include "GeneratedObject.h"
#include "RandomRows.h"

#include "MissingInput.h"
#include <gtest/gtest.h>

#include <cmath>
#include <dlfcn.h>
#include <fstream>
#include <memory>
#include <random>
#include <unistd.h>

using namespace llmc;
using namespace llmc::codegen;
using llmc::cgtest::GeneratedObject;
using llmc::cgtest::loadGenerated;

namespace {

struct Case {
  DType dtype;
  int64_t cols;
};

std::vector<Case> cases() {
  std::vector<Case> c;
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (int64_t cols : {7, 33, 64, 172, 576})
      c.push_back({t, cols});
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1})
    for (int64_t cols : {32, 96, 160, 576, 1536})
      c.push_back({t, cols});
  return c;
}

} // namespace

TEST(CodegenKernels, MatchTheScalarReferenceAtEveryLevel) {
  std::vector<MatvecSpec> specs;
  for (const Case &c : cases())
    specs.push_back({c.dtype, c.cols});
  const std::string source = kernelSource(specs);
  const std::vector<IsaLevel> levels = cgtest::testLevels();
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (IsaLevel level : levels) {
    GeneratedObject obj;
    loadGenerated(obj, source, level);
    if (HasFatalFailure())
      return;
    using AbiFn = int (*)();
    auto abi = reinterpret_cast<AbiFn>(dlsym(obj.h, "llmc_codegen_abi"));
    ASSERT_TRUE(abi && abi() == kAbi);
    for (const Case &c : cases()) {
      const MatvecSpec spec{c.dtype, c.cols};
      auto fn = reinterpret_cast<MatvecFn>(dlsym(obj.h, spec.symbol().c_str()));
      ASSERT_NE(fn, nullptr) << spec.symbol();
      const int64_t rows = 37, cols = c.cols;
      const int64_t stride = rowBytes(c.dtype, cols);
      std::vector<float> wf(size_t(rows * cols));
      for (float &v : wf)
        v = nd(rng);
      std::vector<uint8_t> w(size_t(rows * stride));
      for (int64_t r = 0; r < rows; ++r)
        quantizeRowRef(c.dtype, wf.data() + r * cols, w.data() + r * stride, cols);
      const int64_t ldx = cols + 3, ldy = rows + 5;
      // Float rows take any T (prefill in one call): 3-token passes and tails.
      const int maxT = floatRowsAnyT(c.dtype) ? 11 : kMaxRows;
      for (int T = 1; T <= maxT; ++T) {
        std::vector<float> x(size_t(T * ldx));
        for (float &v : x)
          v = nd(rng);
        std::vector<float> y(size_t(T * ldy), -7.0f);
        // An odd row range: rows outside it must stay untouched.
        const int64_t r0 = 3, r1 = rows - 3; // 31 rows: 4-row blocks and 3 more
        fn(w.data(), stride, x.data(), ldx, T, y.data(), ldy, r0, r1);
        std::vector<float> row(static_cast<size_t>(cols));
        for (int64_t r = 0; r < rows; ++r) {
          dequantizeRow(c.dtype, w.data() + r * stride, row.data(), cols);
          for (int t = 0; t < T; ++t) {
            const float got = y[size_t(t * ldy + r)];
            if (r < r0 || r >= r1) {
              ASSERT_EQ(got, -7.0f) << spec.symbol() << " wrote row " << r;
              continue;
            }
            double ref = 0, mag = 0;
            for (int64_t k = 0; k < cols; ++k) {
              ref += double(row[size_t(k)]) * x[size_t(t * ldx + k)];
              mag += std::fabs(double(row[size_t(k)]) * x[size_t(t * ldx + k)]);
            }
            ASSERT_NEAR(got, ref, 1e-5 * mag + 1e-6)
                << spec.symbol() << " at " << isaName(level) << ", T " << T << ", row " << r;
          }
        }
      }
    }
  }
}

TEST(CodegenKernels, EightRowInt8KernelsMatchTheLibraryAtEveryLevel) {
  std::vector<MatvecSpec> specs;
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1})
    for (int64_t cols : {32, 96, 576, 1536})
      specs.push_back({t, cols});
  specs.push_back({DType::Q4_K, 256});
  specs.push_back({DType::Q4_K, 1536});
  const std::string source = kernelSource(specs);
  const std::vector<IsaLevel> levels = cgtest::testLevels();
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (IsaLevel level : levels) {
    GeneratedObject obj;
    loadGenerated(obj, source, level);
    if (HasFatalFailure())
      return;
    for (const MatvecSpec &spec : specs) {
      auto fn = reinterpret_cast<Rows8Fn>(dlsym(obj.h, spec.rows8Symbol().c_str()));
      ASSERT_NE(fn, nullptr) << spec.rows8Symbol();
      const int64_t rows = 24, cols = spec.cols, stride = rowBytes(spec.dtype, cols);
      std::vector<float> wf(static_cast<size_t>(rows * cols));
      for (float &v : wf)
        v = nd(rng);
      const int64_t gb = kernels::rows8GroupBytes(spec.dtype, cols);
      std::vector<uint8_t> w(size_t(rows * stride)), packed(size_t(rows / 8 * gb));
      for (int64_t r = 0; r < rows; ++r) {
        if (spec.dtype == DType::Q4_K) { // no reference quantizer: random blocks
          const std::vector<uint8_t> row = llmc::testing::randomRow(spec.dtype, cols, rng);
          std::copy(row.begin(), row.end(), w.begin() + r * stride);
          dequantizeRow(spec.dtype, w.data() + r * stride, wf.data() + r * cols, cols);
        } else {
          quantizeRowRef(spec.dtype, wf.data() + r * cols, w.data() + r * stride, cols);
        }
      }
      kernels::packRows8(spec.dtype, w.data(), stride, rows, cols, packed.data());
      const int64_t ldq = cols + 32, ldd = cols / 32 + 2, ldy = rows + 3;
      for (int T = 1; T <= kMaxRows8; ++T) {
        std::vector<float> x(static_cast<size_t>(T * cols));
        for (float &v : x)
          v = nd(rng);
        std::vector<int8_t> q(size_t(T * ldq));
        std::vector<float> d(size_t(T * ldd)), sums(size_t(T * ldd));
        for (int t = 0; t < T; ++t)
          kernels::quantizeRowInt8(x.data() + t * cols, cols, q.data() + t * ldq,
                                   d.data() + t * ldd, sums.data() + t * ldd);
        std::vector<float> y(size_t(T * ldy), -7.0f), ref(size_t(T * ldy), 0.0f);
        fn(packed.data(), q.data(), d.data(), sums.data(), ldq, ldd, T, y.data(), ldy, 1, 3);
        // The library's scalar kernel one token at a time (it takes at most
        // kMaxInt8Rows; the generated ones up to kMaxRows8).
        const kernels::Rows8DotFn lib = kernels::rows8DotKernelScalar(spec.dtype, 1);
        for (int t = 0; t < T; ++t)
          for (int64_t g = 0; g < 3; ++g)
            lib(packed.data() + g * gb, cols, q.data() + t * ldq, d.data() + t * ldd,
                sums.data() + t * ldd, ldq, ldd, ref.data() + t * ldy + g * 8, ldy);
        for (int t = 0; t < T; ++t)
          for (int64_t r = 0; r < rows; ++r) {
            const float got = y[size_t(t * ldy + r)];
            if (r < 8) {
              ASSERT_EQ(got, -7.0f) << spec.rows8Symbol() << " wrote row " << r;
              continue;
            }
            double mag = 0;
            for (int64_t k = 0; k < cols; ++k)
              mag += std::fabs(double(wf[size_t(r * cols + k)]) * x[size_t(t * cols + k)]);
            ASSERT_NEAR(got, ref[size_t(t * ldy + r)], 1e-5 * mag + 1e-6)
                << spec.rows8Symbol() << " at " << isaName(level) << ", T " << T << ", row " << r;
          }
      }
    }
  }
}

// The VNNI form of the eight-row kernels (VPDPBUSD) must give the AVX2
// form's results bit for bit: both sum exact integers. It runs here through
// LLMC_EMULATE_VNNI (the same code with an exact AVX2 stand-in for the one
// instruction); the native -vnni levels are built (their object must load
// and export every kernel) and run where this CPU has them. So do the v4
// levels' 512-bit forms (two groups a pass; 5 groups here: two pairs and
// one group left for the 256-bit code).
TEST(CodegenKernels, VnniEightRowKernelsEqualTheAvx2OnesBitForBit) {
  if (!hostRuns(IsaLevel::V3))
    GTEST_SKIP() << "this CPU has no AVX2 (x86-64-v3)";
  std::vector<MatvecSpec> specs;
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1})
    for (int64_t cols : {32, 576, 1536})
      specs.push_back({t, cols});
  specs.push_back({DType::Q4_K, 1536});
  const std::string source = kernelSource(specs);
  ASSERT_NE(source.find("LLMC_DPBUSD"), std::string::npos);
  GeneratedObject avx2, emulated;
  loadGenerated(avx2, source, IsaLevel::V3);
  loadGenerated(emulated, "#define LLMC_EMULATE_VNNI 1\n" + source, IsaLevel::V3);
  if (HasFatalFailure())
    return;
  // The -vnni and v4 levels this CPU runs.
  std::vector<std::pair<IsaLevel, std::unique_ptr<GeneratedObject>>> native;
  for (IsaLevel level : {IsaLevel::V3Vnni, IsaLevel::V4, IsaLevel::V4Vnni}) {
    auto obj = std::make_unique<GeneratedObject>();
    loadGenerated(*obj, source, level); // builds (and loads) on any x86-64 host
    if (HasFatalFailure())
      return;
    for (const MatvecSpec &spec : specs)
      ASSERT_NE(obj->fn<Rows8Fn>(spec.rows8Symbol()), nullptr) << isaName(level);
    if (hostRuns(level))
      native.emplace_back(level, std::move(obj));
  }
  std::mt19937 rng(23);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const MatvecSpec &spec : specs) {
    const int64_t rows = 40, cols = spec.cols, stride = rowBytes(spec.dtype, cols);
    std::vector<float> wf(static_cast<size_t>(rows * cols));
    for (float &v : wf)
      v = nd(rng) * (spec.dtype == DType::Q8_0 ? 3.0f : 1.0f);
    std::vector<uint8_t> w(size_t(rows * stride)),
        packed(size_t(rows / 8 * kernels::rows8GroupBytes(spec.dtype, cols)));
    for (int64_t r = 0; r < rows; ++r) {
      if (spec.dtype == DType::Q4_K) {
        const std::vector<uint8_t> row = llmc::testing::randomRow(spec.dtype, cols, rng);
        std::copy(row.begin(), row.end(), w.begin() + r * stride);
      } else {
        quantizeRowRef(spec.dtype, wf.data() + r * cols, w.data() + r * stride, cols);
      }
    }
    kernels::packRows8(spec.dtype, w.data(), stride, rows, cols, packed.data());
    for (int T = 1; T <= kMaxRows8; ++T) {
      // Activations at the int8 extremes too (+-127 in every block).
      std::vector<float> x(static_cast<size_t>(T * cols));
      for (size_t k = 0; k < x.size(); ++k)
        x[k] = k % 7 == 0 ? (k % 2 ? 50.0f : -50.0f) : nd(rng);
      const int64_t nb = cols / 32;
      std::vector<int8_t> q(size_t(T * cols));
      std::vector<float> d(size_t(T * nb)), sums(size_t(T * nb));
      for (int t = 0; t < T; ++t)
        kernels::quantizeRowInt8(x.data() + t * cols, cols, q.data() + t * cols,
                                 d.data() + t * nb, sums.data() + t * nb);
      auto run = [&](const GeneratedObject &o) {
        std::vector<float> y(size_t(T * rows), -7.0f);
        o.fn<Rows8Fn>(spec.rows8Symbol())(packed.data(), q.data(), d.data(), sums.data(), cols,
                                          nb, T, y.data(), rows, 0, rows / 8);
        return y;
      };
      const std::vector<float> want = run(avx2);
      EXPECT_EQ(run(emulated), want) << spec.rows8Symbol() << " emulated VNNI, T " << T;
      for (const auto &[level, o] : native)
        EXPECT_EQ(run(*o), want) << spec.rows8Symbol() << " native " << isaName(level)
                                 << ", T " << T;
    }
  }
}

TEST(CodegenKernels, SourceIsDeterministicAndRejectsOtherFormats) {
  std::vector<MatvecSpec> specs = {{DType::Q4_0, 576}, {DType::Q8_0, 576}, {DType::Q4_0, 576}};
  EXPECT_EQ(kernelSource(specs), kernelSource(specs));
  // Duplicates are emitted once.
  const std::string src = kernelSource(specs);
  EXPECT_EQ(src.find("void llmc_mv_q4_0_576("), src.rfind("void llmc_mv_q4_0_576("));
  EXPECT_NE(src.find("void llmc_r8_q4_0_576("), std::string::npos);
  EXPECT_EQ(src.find("void llmc_r8_q4_0_576("), src.rfind("void llmc_r8_q4_0_576("));
  EXPECT_FALSE(canGenerate(DType::Q4_K, 576));
  EXPECT_FALSE(canGenerate(DType::Q8_0, 40)); // not a whole number of blocks
  EXPECT_THROW(kernelSource({{DType::Q6_K, 256}}), std::invalid_argument);
  EXPECT_THROW(kernelSource({{DType::Q4_K, 576}}), std::invalid_argument);
  // q4_K: the int8 eight-row kernel only.
  const std::string k = kernelSource({{DType::Q4_K, 512}});
  EXPECT_NE(k.find("void llmc_r8_q4_k_512("), std::string::npos);
  EXPECT_EQ(k.find("llmc_mv_q4_k"), std::string::npos);
}

TEST(CodegenKernels, IsaNamesRoundTripAndLlmcIsaIsChecked) {
  for (IsaLevel l : kAllIsaLevels)
    EXPECT_EQ(parseIsa(isaName(l)), l);
  EXPECT_EQ(std::string(isaName(IsaLevel::V4Vnni)), "x86-64-v4-vnni");
  EXPECT_NE(compileFlags(IsaLevel::V4Vnni).find("-march=x86-64-v4 "), std::string::npos);
  EXPECT_NE(compileFlags(IsaLevel::V4Vnni).find("-mavx512vnni"), std::string::npos);
  EXPECT_NE(compileFlags(IsaLevel::V3Vnni).find("-mavxvnni"), std::string::npos);
  EXPECT_TRUE(hostRuns(IsaLevel::X86_64));
  EXPECT_TRUE(hostRuns(hostIsa()));
  for (IsaLevel l : kAllIsaLevels) { // every level the host runs is at most its best
    if (hostRuns(l)) {
      EXPECT_LE(int(l), int(hostIsa())) << isaName(l);
    }
  }
  if (!hostRuns(IsaLevel::V4Vnni)) {
    setenv("LLMC_ISA", "x86-64-v4-vnni", 1);
    EXPECT_THROW(targetIsa(), std::runtime_error);
  }
  EXPECT_FALSE(parseIsa("avx9"));
  setenv("LLMC_ISA", "x86-64", 1);
  EXPECT_EQ(targetIsa(), IsaLevel::X86_64);
  setenv("LLMC_ISA", "avx9", 1);
  EXPECT_THROW(targetIsa(), std::runtime_error);
  unsetenv("LLMC_ISA");
  EXPECT_EQ(targetIsa(), hostIsa());
}

TEST(CodegenKernels, CpuLevelsNameAllHostOrAnIncreasingList) {
  std::string err;
  EXPECT_EQ(parseCpuLevels("all", err).size(), std::size(kAllIsaLevels));
  EXPECT_TRUE(err.empty());
  unsetenv("LLMC_ISA");
  EXPECT_EQ(parseCpuLevels("host", err), std::vector<IsaLevel>{hostIsa()});
  setenv("LLMC_ISA", "x86-64", 1); // host: the level this process's kernels run at
  EXPECT_EQ(parseCpuLevels("host", err), std::vector<IsaLevel>{IsaLevel::X86_64});
  unsetenv("LLMC_ISA");
  EXPECT_EQ(parseCpuLevels("x86-64,x86-64-v3,x86-64-v4-vnni", err),
            (std::vector<IsaLevel>{IsaLevel::X86_64, IsaLevel::V3, IsaLevel::V4Vnni}));
  EXPECT_EQ(parseCpuLevels("x86-64-v2", err), std::vector<IsaLevel>{IsaLevel::V2});
  for (const char *bad : {"", "native", "x86-64-v3,x86-64", "x86-64,x86-64", "x86-64,",
                          ",x86-64", "x86-64 ,x86-64-v2", "ALL"}) {
    EXPECT_TRUE(parseCpuLevels(bad, err).empty()) << bad;
    EXPECT_FALSE(err.empty()) << bad;
  }
}
