//===- CudaEmulation.h - Run generated CUDA kernels on the host -*- C++ -*-===//
// A machine without a GPU still checks the generated CUDA kernels'
// arithmetic: the same source, prefixed with kCudaHostShim, is built by the
// host compiler (codegen::compileSharedObject) and each kernel is run lane
// by lane, one warp after another (runKernel below).
//
// The shim makes the CUDA keywords plain C++, keeps blockIdx/threadIdx in
// globals the runner sets (llmc_emu_set; blockDim too), converts f16 in
// software (round to nearest even, as cvt.rn.f16.f32), and emulates the
// warp sums. llmcWarpSum (read by lane 0 only, the products'): the runner
// calls lanes 31 down to 0, each call deposits its value, and lane 0's call
// returns the butterfly (shfl_xor 16, 8, 4, 2, 1) of all 32, the GPU's
// order of additions; the other lanes get 0, which they never use.
// llmcWarpAllSum / llmcWarpAllSumF (every lane reads the sum, and later
// work depends on it) and llmcWarpXorF (a lane's value to its xor partner)
// are replayed: runKernelReplay plays each warp again
// and again; in play k the first k all-sums return the butterfly of the
// values deposited for them, the (k+1)-th deposits, later ones return 0.
// When a play deposits nothing new, every sum was answered with the GPU's
// value and that play's writes are the kernel's result. Kernels must be out
// of place (a play must not read what an earlier play wrote).
//===----------------------------------------------------------------------===//
#pragma once
#include <cstdint>

namespace llmc::cgtest {

inline const char *kCudaHostShim = R"(
#define LLMC_CUDA_HOST_EMULATION 1
#define __device__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#include <cstring>
#include <math.h>
struct LlmcDim3 { unsigned x, y, z; };
#define __constant__
static LlmcDim3 blockIdx, threadIdx, blockDim;
static int llmcCalls[32][32];          // [warp][lane] lane-0 warp sums called so far
static float llmcParts[32][16][32];    // [warp][call][lane] deposited values
constexpr int kLlmcMaxAllSums = 4096;  // all-sums per warp a replay can answer
static int llmcAnswered;               // all-sums answered in this play
static int llmcDeposited;              // whether this play deposited a new one
static int llmcAllCalls[32];           // [lane] all-sums called in this play
static double llmcAllParts[kLlmcMaxAllSums][32];
// Answered all-sums' results for every lane, worked out once per warp (the
// plays of one warp answer the same calls again and again): valid where
// llmcAllSumsWarp[call] is the current warp's number.
static double llmcAllSums[kLlmcMaxAllSums][32];
static unsigned llmcAllSumsWarp[kLlmcMaxAllSums], llmcWarpNumber = 1;
extern "C" void llmc_emu_play(int answered) {
  if (answered == 0) // a warp's first play: new deposits
    ++llmcWarpNumber;
  llmcAnswered = answered;
  llmcDeposited = 0;
}
extern "C" int llmc_emu_deposited() { return llmcDeposited; }
extern "C" void llmc_emu_set(unsigned block, unsigned thread, unsigned threads) {
  blockIdx.x = block;
  blockDim.x = threads;
  threadIdx.x = thread;
  if ((thread & 31) == 31) // a warp starts (lanes run 31 down to 0)
    std::memset(llmcCalls[thread >> 5], 0, sizeof llmcCalls[0]);
  llmcAllCalls[thread & 31] = 0;
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
// Lane `lane`'s value after shfl_xor 16, 8, 4, 2, 1 over the 32 lanes' values,
// computing only the 31 additions that reach that lane: after the round of
// offset o, a[m] holds lane (lane ^ m)'s value for m < o, which is
// a[m] + a[m + o] of the round before (lane l adds lane l ^ o's value).
template <typename T> T llmcButterfly(const T (&lanes)[32], int lane) {
  T a[32];
  for (int m = 0; m < 32; ++m)
    a[m] = lanes[lane ^ m];
  for (int o = 16; o > 0; o >>= 1)
    for (int m = 0; m < o; ++m)
      a[m] = a[m] + a[m + o];
  return a[0];
}
float llmcWarpSum(float v) {
  const int warp = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31);
  const int call = llmcCalls[warp][lane]++;
  llmcParts[warp][call][lane] = v;
  return lane == 0 ? llmcButterfly(llmcParts[warp][call], 0) : 0.0f;
}
unsigned short llmcToHalf(float f) {
  unsigned x;
  std::memcpy(&x, &f, 4);
  const unsigned sign = (x >> 16) & 0x8000u;
  const unsigned ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) // inf, nan
    return (unsigned short)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
  if (ax >= 0x477ff000u) // rounds to >= 65520: inf
    return (unsigned short)(sign | 0x7c00u);
  if (ax < 0x38800000u) { // below the smallest normal: a subnormal (or 0)
    float a;
    std::memcpy(&a, &ax, 4);
    return (unsigned short)(sign | (unsigned)nearbyintf(a * 16777216.0f)); // * 2^24, RNE
  }
  const unsigned mant = ax & 0x7fffffu, e = (ax >> 23) - 112;
  unsigned h = (e << 10) | (mant >> 13);
  const unsigned rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
    ++h;
  return (unsigned short)(sign | h);
}
// All lanes need the sum: replayed (runKernelReplay).
template <typename T> T llmcAllSum(T v) {
  const int lane = int(threadIdx.x & 31);
  const int call = llmcAllCalls[lane]++;
  if (call >= kLlmcMaxAllSums)
    return T(0);
  if (call < llmcAnswered) {
    if (llmcAllSumsWarp[call] != llmcWarpNumber) {
      T x[32];
      for (int i = 0; i < 32; ++i)
        x[i] = T(llmcAllParts[call][i]);
      for (int i = 0; i < 32; ++i)
        llmcAllSums[call][i] = double(llmcButterfly(x, i));
      llmcAllSumsWarp[call] = llmcWarpNumber;
    }
    return T(llmcAllSums[call][lane]);
  }
  if (call == llmcAnswered) {
    llmcAllParts[call][lane] = double(v);
    llmcDeposited = 1;
  }
  return T(0);
}
double llmcWarpAllSum(double v) { return llmcAllSum<double>(v); }
// __shfl_xor_sync: replayed like the all-sums (it shares their count of
// calls); an answered call returns lane (lane ^ o)'s deposited value.
float llmcWarpXorF(float v, int o) {
  const int lane = int(threadIdx.x & 31);
  const int call = llmcAllCalls[lane]++;
  if (call >= kLlmcMaxAllSums)
    return 0.0f;
  if (call < llmcAnswered)
    return float(llmcAllParts[call][lane ^ (o & 31)]);
  if (call == llmcAnswered) {
    llmcAllParts[call][lane] = double(v);
    llmcDeposited = 1;
  }
  return 0.0f;
}
float llmcWarpAllSumF(float v) { return llmcAllSum<float>(v); }
// The tensor cores' mma.m16n8k16 (f16 A, B; f32 C), a warp-wide operation:
// replayed like the all-sums (it shares their count of calls). Each lane
// deposits its fragments (a0..a3, b0, b1); an answered call computes the
// lane's four results from all 32 lanes' fragments in PTX's layout (A: a0
// row g k 2t..2t+1, a1 row g+8, a2 row g k 2t+8.., a3 row g+8 k 2t+8..; B:
// b0 k 2t..2t+1 column g, b1 k 2t+8..; C: c0, c1 row g columns 2t, 2t+1,
// c2, c3 row g+8), each sum over k in order in float (f16 products are
// exact in float), added to c.
static unsigned llmcMmaParts[kLlmcMaxAllSums][32][6];
float llmcMmaA(const unsigned (&p)[32][6], int row, int k) {
  const int lane = (row & 7) * 4 + (k & 7) / 2, reg = (row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
  return llmcHalf((unsigned short)(p[lane][reg] >> (16 * (k & 1))));
}
float llmcMmaB(const unsigned (&p)[32][6], int k, int col) {
  const int lane = col * 4 + (k & 7) / 2, reg = 4 + (k >= 8 ? 1 : 0);
  return llmcHalf((unsigned short)(p[lane][reg] >> (16 * (k & 1))));
}
void llmcMma16816(float *c, const unsigned *a, const unsigned *b) {
  const int lane = int(threadIdx.x & 31);
  const int call = llmcAllCalls[lane]++;
  if (call >= kLlmcMaxAllSums)
    return;
  if (call == llmcAnswered) {
    for (int i = 0; i < 4; ++i)
      llmcMmaParts[call][lane][i] = a[i];
    llmcMmaParts[call][lane][4] = b[0];
    llmcMmaParts[call][lane][5] = b[1];
    llmcDeposited = 1;
  }
  if (call >= llmcAnswered)
    return;
  const int g = lane >> 2, t = lane & 3;
  for (int i = 0; i < 4; ++i) {
    const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
    float s = 0.0f;
    for (int k = 0; k < 16; ++k)
      s += llmcMmaA(llmcMmaParts[call], row, k) * llmcMmaB(llmcMmaParts[call], k, col);
    c[i] += s;
  }
}
// Whether every warp-wide call of this play was answered (its results are
// the kernel's): stores of a replayed kernel that writes in place wait for it.
bool llmcEmuPlayComplete() { return llmcAllCalls[threadIdx.x & 31] <= llmcAnswered; }
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

using CudaEmuPlayFn = void (*)(int answered);
using CudaEmuDepositedFn = int (*)();

/// runKernel for kernels with all-lane warp sums (llmcWarpAllSum[F]): each
/// warp is played until a play deposits no new sum (see the top). At most
/// kLlmcMaxAllSums (4096) all-sums per warp.
template <typename Launch>
void runKernelReplay(CudaEmuSetFn set, CudaEmuPlayFn play, CudaEmuDepositedFn deposited,
                     unsigned blocks, unsigned threads, Launch launch) {
  for (unsigned b = 0; b < blocks; ++b)
    for (unsigned w = 0; w < threads / 32; ++w)
      for (int answered = 0;; ++answered) {
        play(answered);
        for (int lane = 31; lane >= 0; --lane) {
          set(b, w * 32 + unsigned(lane), threads);
          launch();
        }
        if (!deposited())
          break;
      }
  play(0);
}

} // namespace llmc::cgtest
