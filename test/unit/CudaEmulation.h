//===- CudaEmulation.h - Run generated CUDA kernels on the host -*- C++ -*-===//
// A machine without a GPU still checks the generated CUDA kernels'
// arithmetic: the same source, prefixed with kCudaHostShim, is built by the
// host compiler (codegen::compileSharedObject) and each kernel is run lane
// by lane, one warp after another (runKernel below).
//
// The shim makes the CUDA keywords plain C++, keeps blockIdx/threadIdx in
// globals the runner sets (llmc_emu_set; blockDim too), decodes f16 in software, and
// emulates llmcWarpSum for kernels whose warp sums are read by lane 0 only
// (the generated kernels': only lane 0 writes): the runner calls lanes 31
// down to 0, each call deposits its value, and lane 0's call returns the
// butterfly (shfl_xor 16, 8, 4, 2, 1) of all 32, the GPU's order of
// additions. The other lanes get 0, which they never use. llmcWarpAllSum
// (every lane reads the sum) is replayed: runKernelTwice plays each warp
// once to deposit the values and once more to hand out their butterfly.
//===----------------------------------------------------------------------===//
#pragma once
#include <cstdint>

namespace llmc::cgtest {

inline const char *kCudaHostShim = R"(
#define LLMC_CUDA_HOST_EMULATION 1
#define __device__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __restrict__ __restrict
#include <cstring>
#include <math.h>
struct LlmcDim3 { unsigned x, y, z; };
static int llmcPass;                   // all-reduce replay: 0 deposit, 1 answer
static int llmcCallsD[32][32];
static double llmcPartsD[32][16][32];
extern "C" void llmc_emu_pass(int pass) { llmcPass = pass; }
static LlmcDim3 blockIdx, threadIdx, blockDim;
static int llmcCalls[32][32];          // [warp][lane] warp sums called so far
static float llmcParts[32][16][32];    // [warp][call][lane] deposited values
extern "C" void llmc_emu_set(unsigned block, unsigned thread, unsigned threads) {
  blockIdx.x = block;
  blockDim.x = threads;
  threadIdx.x = thread;
  if ((thread & 31) == 31) { // a warp starts (lanes run 31 down to 0)
    std::memset(llmcCalls[thread >> 5], 0, sizeof llmcCalls[0]);
    std::memset(llmcCallsD[thread >> 5], 0, sizeof llmcCallsD[0]);
  }
}
namespace {
float llmcHalf(unsigned short h) {
  const unsigned sign = (h & 0x8000u) << 16, e = (h >> 10) & 31, m = h & 1023;
  unsigned bits;
  if (e == 0 && m == 0) bits = sign;
  else if (e == 0) { // subnormal: normalise
    int k = -1; unsigned mm = m;
    do { ++k; mm <<= 1; } while (!(mm & 1024));
    bits = sign | ((127 - 15 - k) << 23) | ((mm & 1023) << 13);
  } else if (e == 31) bits = sign | 0x7f800000u | (m << 13);
  else bits = sign | ((e + 112) << 23) | (m << 13);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
// Lane `lane`'s value after shfl_xor 16, 8, 4, 2, 1 over the 32 lanes' values.
template <typename T> T llmcButterfly(const T (&lanes)[32], int lane) {
  T x[32];
  std::memcpy(x, lanes, sizeof x);
  for (int o = 16; o > 0; o >>= 1) {
    T y[32];
    for (int i = 0; i < 32; ++i)
      y[i] = x[i] + x[i ^ o];
    std::memcpy(x, y, sizeof x);
  }
  return x[lane];
}
float llmcWarpSum(float v) {
  const int warp = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31);
  const int call = llmcCalls[warp][lane]++;
  llmcParts[warp][call][lane] = v;
  return lane == 0 ? llmcButterfly(llmcParts[warp][call], 0) : 0.0f;
}
// All lanes need the sum: the runner plays the warp twice (runKernelTwice);
// the first pass deposits, the second returns the butterfly of the first's
// values (the same in every lane). Kernels must be out of place.
double llmcWarpAllSum(double v) {
  const int warp = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31);
  const int call = llmcCallsD[warp][lane]++;
  if (llmcPass == 0) {
    llmcPartsD[warp][call][lane] = v;
    return 0.0;
  }
  return llmcButterfly(llmcPartsD[warp][call], lane);
}
} // namespace
)";

using CudaEmuSetFn = void (*)(unsigned block, unsigned thread, unsigned threads);

/// Runs a kernel over `blocks` blocks of `threads` threads (a multiple of
/// 32): warps in order, each warp's lanes 31 down to 0. `launch` calls the
/// kernel with its arguments.
template <typename Launch>
void runKernel(CudaEmuSetFn set, unsigned blocks, unsigned threads, Launch launch) {
  for (unsigned b = 0; b < blocks; ++b)
    for (unsigned w = 0; w < threads / 32; ++w)
      for (int lane = 31; lane >= 0; --lane) {
        set(b, w * 32 + unsigned(lane), threads);
        launch();
      }
}

using CudaEmuPassFn = void (*)(int pass);

/// runKernel for kernels with all-lane warp sums (llmcWarpAllSum): each
/// warp is played twice, first depositing, then with the sums.
template <typename Launch>
void runKernelTwice(CudaEmuSetFn set, CudaEmuPassFn pass, unsigned blocks, unsigned threads,
                    Launch launch) {
  for (unsigned b = 0; b < blocks; ++b)
    for (unsigned w = 0; w < threads / 32; ++w)
      for (int p = 0; p < 2; ++p) {
        pass(p);
        for (int lane = 31; lane >= 0; --lane) {
          set(b, w * 32 + unsigned(lane), threads);
          launch();
        }
      }
  pass(0);
}

} // namespace llmc::cgtest
