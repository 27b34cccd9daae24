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
//
// Replays cost a warp's work times its number of warp-wide calls (an
// attention warp makes three per cache entry). On x86-64 the shim also
// runs a warp's 32 lanes as fibers (llmc_emu_fibers, runKernelReplay's
// default): each warp-wide call deposits the lane's value and switches to
// the next lane (31 down to 0, as the plays run them); once all 32 have
// deposited, each lane resumes with the same butterfly or fragments a play
// would have answered. So every lane runs once, the results bit for bit a
// replay's (the unit tests of the attention and tensor-core kernels run
// both and compare the bytes).
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
// Fibers (x86-64): the lanes' saved stack pointers, the scheduler's, and the
// values deposited by the warp-wide calls: [call parity][lane] (a lane that
// resumed first may deposit its next call before the others read this one).
static int llmcFiberMode;
static void *llmcFiberSp[32], *llmcSchedulerSp;
static int llmcFiberLane, llmcFiberDone[32], llmcFiberCalls[32];
static double llmcFiberParts[2][32];
static unsigned llmcFiberMmaParts[2][32][6];
static void (*llmcFiberBody)(void *);
static void *llmcFiberArg;
#if defined(__x86_64__)
// Saves the callee-saved registers, MXCSR and the x87 control word on the
// current stack, stores the stack pointer in *from, and resumes the stack `to`.
extern "C" __attribute__((visibility("hidden"))) void llmc_fiber_switch(void **from, void *to);
asm(R"ASM(
.text
.hidden llmc_fiber_switch
.globl llmc_fiber_switch
.type llmc_fiber_switch,@function
llmc_fiber_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size llmc_fiber_switch, .-llmc_fiber_switch
)ASM");
static void llmcFiberYield() {
  llmc_fiber_switch(&llmcFiberSp[llmcFiberLane], llmcSchedulerSp);
  __asm__ volatile("" ::: "memory"); // the other lanes wrote the deposits
}
// A lane's fiber: runs the kernel, then clears its next deposit (lanes still
// waiting read zero from it, as from a lane that never deposits) and
// returns to the scheduler for good.
static void llmcFiberMain() {
  llmcFiberBody(llmcFiberArg);
  const int lane = llmcFiberLane, next = llmcFiberCalls[lane] & 1;
  llmcFiberParts[next][lane] = 0.0;
  std::memset(llmcFiberMmaParts[next][lane], 0, sizeof llmcFiberMmaParts[0][0]);
  llmcFiberDone[lane] = 1;
  llmcFiberYield();
  __builtin_trap(); // never resumed
}
constexpr unsigned long kLlmcFiberStack = 256 * 1024;
alignas(64) static unsigned char llmcFiberStacks[32][kLlmcFiberStack];
// Runs warp `warp` of block `block` (blockDim `threads`), each lane calling
// body(arg), as fibers.
extern "C" void llmc_emu_fibers(unsigned block, unsigned warp, unsigned threads,
                               void (*body)(void *), void *arg) {
  blockIdx.x = block;
  blockDim.x = threads;
  std::memset(llmcCalls[warp], 0, sizeof llmcCalls[0]);
  llmcFiberBody = body;
  llmcFiberArg = arg;
  unsigned control[2];
  __asm__ volatile("stmxcsr %0" : "=m"(control[0]));
  unsigned short cw;
  __asm__ volatile("fnstcw %0" : "=m"(cw));
  control[1] = cw;
  for (int lane = 0; lane < 32; ++lane) {
    llmcFiberDone[lane] = 0;
    llmcFiberCalls[lane] = 0;
    // A fresh stack whose first switch "returns" into llmcFiberMain, entered
    // as if called (the stack pointer 8 past a 16-byte boundary).
    unsigned long top = (unsigned long)(llmcFiberStacks[lane] + kLlmcFiberStack) & ~15ul;
    void **sp = (void **)top;
    *--sp = nullptr;                // llmcFiberMain's return address: none
    *--sp = (void *)&llmcFiberMain; // where the switch's ret goes
    for (int r = 0; r < 6; ++r) // rbp rbx r12 r13 r14 r15
      *--sp = nullptr;
    --sp;
    std::memcpy(sp, control, 8); // MXCSR, the x87 control word
    llmcFiberSp[lane] = sp;
  }
  llmcFiberMode = 1;
  for (int waiting = 32; waiting > 0;) {
    waiting = 0;
    for (int lane = 31; lane >= 0; --lane) {
      if (llmcFiberDone[lane])
        continue;
      llmcFiberLane = lane;
      threadIdx.x = warp * 32 + unsigned(lane);
      llmc_fiber_switch(&llmcSchedulerSp, llmcFiberSp[lane]);
      waiting += !llmcFiberDone[lane];
    }
  }
  llmcFiberMode = 0;
}
#else // no llmc_emu_fibers: runKernelReplay replays
static void llmcFiberYield() {}
#endif
extern "C" void llmc_emu_set(unsigned block, unsigned thread, unsigned threads) {
  blockIdx.x = block;
  blockDim.x = threads;
  threadIdx.x = thread;
  if ((thread & 31) == 31) // a warp starts (lanes run 31 down to 0)
    std::memset(llmcCalls[thread >> 5], 0, sizeof llmcCalls[0]);
  llmcAllCalls[thread & 31] = 0;
}
#if defined(__F16C__)
#include <immintrin.h>
#endif
namespace {
float llmcHalf(unsigned short h) {
// With F16C, the hardware's conversion: the software one's bits for all 65536
// halves but the signaling NaNs (which come back quiet).
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
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
#endif
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
// A fiber's warp-wide call: deposits v, waits for the other lanes; the
// deposits' parity slot, now complete.
int llmcFiberExchange(double v) {
  const int lane = int(threadIdx.x & 31), slot = llmcFiberCalls[lane]++ & 1;
  llmcFiberParts[slot][lane] = v;
  llmcFiberYield();
  return slot;
}
// All lanes need the sum: replayed (runKernelReplay), or exchanged by fibers.
template <typename T> T llmcAllSum(T v) {
  const int lane = int(threadIdx.x & 31);
  if (llmcFiberMode) {
    const int slot = llmcFiberExchange(double(v));
    T x[32];
    for (int i = 0; i < 32; ++i)
      x[i] = T(llmcFiberParts[slot][i]);
    return llmcButterfly(x, lane);
  }
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
  if (llmcFiberMode)
    return float(llmcFiberParts[llmcFiberExchange(double(v))][lane ^ (o & 31)]);
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
void llmcMmaResult(float *c, const unsigned (&p)[32][6], int lane) {
  const int g = lane >> 2, t = lane & 3;
  for (int i = 0; i < 4; ++i) {
    const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
    float s = 0.0f;
    for (int k = 0; k < 16; ++k)
      s += llmcMmaA(p, row, k) * llmcMmaB(p, k, col);
    c[i] += s;
  }
}
void llmcMma16816(float *c, const unsigned *a, const unsigned *b) {
  const int lane = int(threadIdx.x & 31);
  if (llmcFiberMode) {
    const int slot = llmcFiberCalls[lane] & 1;
    unsigned *mine = llmcFiberMmaParts[slot][lane];
    for (int i = 0; i < 4; ++i)
      mine[i] = a[i];
    mine[4] = b[0];
    mine[5] = b[1];
    llmcFiberExchange(0.0);
    llmcMmaResult(c, llmcFiberMmaParts[slot], lane);
    return;
  }
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
  llmcMmaResult(c, llmcMmaParts[call], lane);
}
// Whether every warp-wide call of this play was answered (its results are
// the kernel's): stores of a replayed kernel that writes in place wait for it.
bool llmcEmuPlayComplete() {
  return llmcFiberMode || llmcAllCalls[threadIdx.x & 31] <= llmcAnswered;
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

using CudaEmuPlayFn = void (*)(int answered);
using CudaEmuDepositedFn = int (*)();
using CudaEmuFibersFn = void (*)(unsigned block, unsigned warp, unsigned threads,
                                void (*body)(void *), void *arg);

/// A built kernel object's emulation entry points (llmc_emu_*).
struct CudaEmuEntries {
  CudaEmuSetFn set = nullptr;
  CudaEmuPlayFn play = nullptr;
  CudaEmuDepositedFn deposited = nullptr;
  CudaEmuFibersFn fibers = nullptr; // null (not x86-64): replays only
  bool useFibers = true;            // false: replays (the fibers' reference)
  template <typename Lookup> static CudaEmuEntries lookUp(Lookup symbol) {
    CudaEmuEntries e;
    e.set = reinterpret_cast<CudaEmuSetFn>(symbol("llmc_emu_set"));
    e.play = reinterpret_cast<CudaEmuPlayFn>(symbol("llmc_emu_play"));
    e.deposited = reinterpret_cast<CudaEmuDepositedFn>(symbol("llmc_emu_deposited"));
    e.fibers = reinterpret_cast<CudaEmuFibersFn>(symbol("llmc_emu_fibers"));
    return e;
  }
  bool complete() const { return set && play && deposited; }
};

/// `e` running kernels by replays (the fibers' reference).
inline CudaEmuEntries replaysOf(CudaEmuEntries e) {
  e.useFibers = false;
  return e;
}

/// runKernel for kernels with warp-wide calls whose result every lane
/// reads (llmcWarpAllSum[F], llmcWarpXorF, llmcMma16816): each warp's
/// lanes run as fibers where the object has them, else each warp is played
/// until a play deposits no new value (see the top; at most
/// kLlmcMaxAllSums such calls per warp).
template <typename Launch>
void runKernelReplay(const CudaEmuEntries &e, unsigned blocks, unsigned threads, Launch launch) {
  if (e.useFibers && e.fibers) {
    auto body = [](void *p) { (*static_cast<Launch *>(p))(); };
    for (unsigned b = 0; b < blocks; ++b)
      for (unsigned w = 0; w < threads / 32; ++w)
        e.fibers(b, w, threads, body, &launch);
    return;
  }
  for (unsigned b = 0; b < blocks; ++b)
    for (unsigned w = 0; w < threads / 32; ++w)
      for (int answered = 0;; ++answered) {
        e.play(answered);
        for (int lane = 31; lane >= 0; --lane) {
          e.set(b, w * 32 + unsigned(lane), threads);
          launch();
        }
        if (!e.deposited())
          break;
      }
  e.play(0);
}

} // namespace llmc::cgtest
