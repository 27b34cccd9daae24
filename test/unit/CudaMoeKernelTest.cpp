//===- CudaMoeKernelTest.cpp - The GPU engine's MoE row kernels -----------===//
// llmc_cu_moe_gather / _scatter_add / _fill (CudaKernelSource.h, op kind
// MoeRows), emulated on the host (CudaEmulation.h): the rows routed to one
// expert gathered from a strided matrix, its output rows added back to
// their rows with their routing weights, and the output started from the
// residual or from zeros; nothing else written.
//===----------------------------------------------------------------------===//
#include "codegen/cuda/CudaKernelSource.h"
#include "CudaEmulatedObject.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace llmc;
using namespace llmc::codegen;

TEST(CudaKernels, EmulatedMoeRowKernelsGatherAndAddBackWeightedRows) {
  CudaOpSpec moe;
  moe.kind = CudaOpSpec::Kind::MoeRows;
  cgtest::EmulatedCuda e;
  cgtest::loadEmulatedCuda(e, cudaKernelSource({}, {moe}));
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  using GatherFn = void (*)(const float *, long long, const int *, int, float *, long long,
                            long long);
  using ScatterFn = void (*)(const float *, long long, const int *, const float *, int, float *,
                             long long, long long);
  using FillFn = void (*)(const float *, float *, long long);
  auto gather = e.obj.fn<GatherFn>("llmc_cu_moe_gather");
  auto scatter = e.obj.fn<ScatterFn>("llmc_cu_moe_scatter_add");
  auto fill = e.obj.fn<FillFn>("llmc_cu_moe_fill");
  ASSERT_TRUE(gather && scatter && fill);
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  const int T = 7, cols = 45, ld = 50; // rows of x and out, strided
  std::vector<float> x(size_t(T * ld)), res(size_t(T * cols));
  for (float &v : x)
    v = nd(rng);
  for (float &v : res)
    v = nd(rng);
  const std::vector<int> rows = {5, 0, 3};
  const std::vector<float> w = {0.25f, 1.5f, -0.75f};
  const int n = int(rows.size());
  std::vector<float> g(size_t(n * ld), -7.0f);
  cgtest::runKernel(e.emu.set, unsigned(n), 32, [&] {
    gather(x.data(), ld, rows.data(), n, g.data(), ld, cols);
  });
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < ld; ++c)
      ASSERT_EQ(g[size_t(i * ld + c)], c < cols ? x[size_t(rows[size_t(i)] * ld + c)] : -7.0f)
          << "gathered row " << i << " col " << c;
  for (bool fromResidual : {true, false}) {
    std::vector<float> out(size_t(T * cols) + 1, 99.0f);
    cgtest::runKernel(e.emu.set, 2, 256, [&] {
      fill(fromResidual ? res.data() : nullptr, out.data(), T * cols);
    });
    ASSERT_EQ(out[size_t(T * cols)], 99.0f); // nothing past n
    // y: the expert's output rows (here the gathered rows, stride ld).
    cgtest::runKernel(e.emu.set, unsigned(n), 32, [&] {
      scatter(g.data(), ld, rows.data(), w.data(), n, out.data(), cols, cols);
    });
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < cols; ++c) {
        float want = fromResidual ? res[size_t(t * cols + c)] : 0.0f;
        for (int i = 0; i < n; ++i)
          if (rows[size_t(i)] == t)
            want += w[size_t(i)] * x[size_t(t * ld + c)];
        ASSERT_NEAR(out[size_t(t * cols + c)], want, 1e-6f * (1 + std::fabs(want)))
            << "row " << t << " col " << c;
      }
  }
}
