//===- CudaMmaSource.cpp - Tensor-core products for prefill ---------------===//
// The products of a prompt chunk (many tokens) on the tensor cores: warp
// matrix multiply-accumulate mma.sync.m16n8k16 (f16 inputs, f32
// accumulators; sm_80 and newer). A warp owns 16 weight rows and 32 tokens
// (four 16 x 8 accumulator tiles); a block is four warps over 64 rows.
//
// No shared memory and no barrier: each lane decodes its own weights in
// registers with the format's unit decoder (8 weights of a row, the same
// text the matrix-vector kernels use) and loads its own activations. That
// works because the sum over k may visit the columns in any order: the
// mma's logical k index is mapped onto the units so that lane (group g,
// thread t) holds exactly unit 4i + t of its two rows g and g + 8:
//   k slice 0: logical k 2t, 2t+1 -> v[0], v[1] (columns c0, c0+1),
//              logical k 2t+8, 2t+9 -> v[2], v[3] (c0+2, c0+3);
//   k slice 1: the same with v[4..7] (columns c1..c1+3).
// The B fragment (activations of token g of an 8-token tile) holds
// logical k 2t, 2t+1 (register b0) and 2t+8, 2t+9 (b1): lane (g, t) loads
// the same columns of its token, so A and B agree on every k. The fragment
// layouts are PTX's (Matrix Fragments for mma.m16n8k16, floating point):
//   A: a0 (row g, k 2t..2t+1), a1 (row g+8, same k), a2 (row g, k 2t+8..),
//      a3 (row g+8, k 2t+8..); B: b0 (k 2t..2t+1, column g), b1 (k 2t+8..);
//   C: c0, c1 (row g, columns 2t, 2t+1), c2, c3 (row g+8).
// The host emulation (test/unit/CudaEmulation.h) implements llmcMma16816
// from the same layout, so a layout slip in this file shows there.
//===----------------------------------------------------------------------===//
#include "codegen/cuda/CudaKernelSource.h"
#include "codegen/TemplateText.h"

namespace llmc::codegen {

namespace {

/// @NAME@, @COLS@, @DECODE@ (unit u of `row` into v[8], c0, c1), @WARPS@.
const char *kMmaTemplate = R"(
extern "C" __global__ void __launch_bounds__(32 * @WARPS@)
@NAME@(const unsigned char *__restrict__ w, long long rowStride, const float *__restrict__ x,
       long long ldx, int T, float *y, long long ldy, long long rows, const float *res,
       long long ldr) {
  constexpr int UNITS = @COLS@ / 8;
  const long long rowTiles = (rows + 16 * @WARPS@ - 1) / (16 * @WARPS@);
  const long long r0 = (blockIdx.x % rowTiles) * (16 * @WARPS@) + (threadIdx.x >> 5) * 16;
  const int n0 = (int)(blockIdx.x / rowTiles) * 32;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  if (r0 >= rows || n0 >= T) // the whole warp leaves together
    return;
  // Rows and tokens past the ends read the last one (their results are not stored).
  const long long ra = r0 + g < rows ? r0 + g : rows - 1;
  const long long rb = r0 + g + 8 < rows ? r0 + g + 8 : rows - 1;
  const float *xs[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int n = n0 + 8 * j + g;
    xs[j] = x + (long long)(n < T ? n : T - 1) * ldx;
  }
  float acc[4][4];
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i)
      acc[j][i] = 0.0f;
#pragma unroll 2
  for (int i = 0; i < UNITS / 4; ++i) {
    const int u = 4 * i + t;
    float va[8], vb[8]; // unit u of rows g and g + 8
    int c0, c1;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const unsigned char *row = w + (h ? rb : ra) * rowStride;
      float v[8];
@DECODE@
#pragma unroll
      for (int e = 0; e < 8; ++e)
        (h ? vb : va)[e] = v[e];
    }
    const unsigned a0[4] = {llmcPackHalf2(va[0], va[1]), llmcPackHalf2(vb[0], vb[1]),
                            llmcPackHalf2(va[2], va[3]), llmcPackHalf2(vb[2], vb[3])};
    const unsigned a1[4] = {llmcPackHalf2(va[4], va[5]), llmcPackHalf2(vb[4], vb[5]),
                            llmcPackHalf2(va[6], va[7]), llmcPackHalf2(vb[6], vb[7])};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float *xr = xs[j];
      const unsigned b0[2] = {llmcPackHalf2(xr[c0], xr[c0 + 1]),
                              llmcPackHalf2(xr[c0 + 2], xr[c0 + 3])};
      const unsigned b1[2] = {llmcPackHalf2(xr[c1], xr[c1 + 1]),
                              llmcPackHalf2(xr[c1 + 2], xr[c1 + 3])};
      llmcMma16816(acc[j], a0, b0);
      llmcMma16816(acc[j], a1, b1);
    }
  }
  if (!llmcEmuPlayComplete()) // the host emulation's replays store only when complete
    return;
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const long long r = r0 + g + (i >= 2 ? 8 : 0);
      const int n = n0 + 8 * j + 2 * t + (i & 1);
      if (r < rows && n < T) { // res may be y: this thread reads it, then writes it
        const float s = acc[j][i];
        y[(long long)n * ldy + r] = res ? s + res[(long long)n * ldr + r] : s;
      }
    }
}
)";

} // namespace

std::string CudaMatvecSpec::mmaSymbol() const {
  return "llmc_cu_mm_" + std::string(dtypeName(dtype)) + "_" + std::to_string(cols);
}

bool canGenerateCudaMma(DType dtype, int64_t cols) {
  return canGenerateCuda(dtype, cols) && cols % 32 == 0;
}

std::string cudaMmaKernel(const CudaMatvecSpec &s) {
  std::string k = replaceAll(kMmaTemplate, "@DECODE@", cudaUnitDecodeText(s.dtype));
  k = replaceAll(k, "@NAME@", s.mmaSymbol());
  k = replaceAll(k, "@COLS@", std::to_string(s.cols));
  k = replaceAll(k, "@WARPS@", std::to_string(kCudaMmaWarps));
  return "\n// the same on the tensor cores, a prompt chunk (f16 inputs, f32 sums)" + k;
}

} // namespace llmc::codegen
