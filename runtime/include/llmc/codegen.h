//===- codegen.h - Generated CPU kernels: ISA levels, host compiler -*- C++ -*-===//
// Generated kernels are C++ source (their portable form), built by the
// compiler (codegen/cpu/HostCompiler.h) for every x86-64 instruction-set
// level below; the artifact stores one object per level and the runtime
// loads the best one its CPU runs. The runtime never compiles anything.
//
// Levels (the psABI's x86-64 micro-architecture levels): baseline x86-64
// (SSE2), v2 (SSE4.2, POPCNT), v3 (AVX2, FMA, F16C, BMI2), v4 (AVX-512
// F/BW/CD/DQ/VL), each with a -vnni variant.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/dtype.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace llmc::codegen {

/// Version of the generated kernels' calling convention (llmc_codegen_abi()).
inline constexpr int kAbi = 4;

/// A generated kernel: y[t*ldy + r] = dot(W row r, x + t*ldx) for t < T
/// and r in [r0, r1); W rows are `stride` bytes apart, in the kernel's
/// format. T is 1..kMaxRows for block formats, any T >= 1 for f32, f16 and
/// bf16 rows (floatRowsAnyT).
using MatvecFn = void (*)(const uint8_t *w, int64_t stride, const float *x, int64_t ldx,
                          int32_t T, float *y, int64_t ldy, int64_t r0, int64_t r1);
inline constexpr int kMaxRows = 4;
/// Float-row kernels (f32, f16, bf16) take any T (prefill in one call).
inline bool floatRowsAnyT(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

/// A generated int8-activation kernel (abi 2) over the runtime's eight-row
/// interleaved copy of a Q8_0/Q4_0/Q4_1 matrix (runtime/src/kernels/rows8.h):
/// y[t*ldy + 8g + r] = dot(row 8g + r, activation row t) for groups g in
/// [g0, g1), r < 8, t < T (1..kMaxRows8); activation row t is int8 values at
/// xq + t*ldq with per-32 scales and scaled sums at xd / xs + t*ldd
/// (runtime/src/kernels/dot_int8.h).
using Rows8Fn = void (*)(const uint8_t *packed, const int8_t *xq, const float *xd,
                         const float *xs, int64_t ldq, int64_t ldd, int32_t T, float *y,
                         int64_t ldy, int64_t g0, int64_t g1);
/// Tokens per Rows8Fn call (abi 4; 4 before): each pass over a row block's
/// weights serves up to 8 activation rows (at the v4 levels in one pass,
/// below in two passes of 4 inside the kernel).
inline constexpr int kMaxRows8 = 8;

// Op kernels (abi 3): the plan's other kernels, specialised to the model's
// widths, head shapes, RoPE frequencies and embedding format.

/// y = x * rsqrt(mean(x^2) + eps) * w for `rows` rows of the kernel's width.
using RmsNormFn = void (*)(const float *x, const float *w, float *y, int64_t rows, float eps);
/// g[i] = act(g[i]) * u[i] for i < n (the kernel's activation).
using GateFn = void (*)(float *g, const float *u, int64_t n);
/// For T rows of [q | k | v] (ld floats apart) at positions pos..: q rotated
/// into q ([T, heads*head_dim]), k rotated and v copied into kv ([T, 2 *
/// kv_heads*head_dim], k then v).
using RopeFn = void (*)(const float *qkv, int64_t ld, float *q, float *kv, int64_t T,
                        int64_t pos);
/// One query head against n cached key and value rows (head_dim floats
/// each): w[j] = softmax_j(dot(q, k_j) / sqrt(head_dim)), out = sum_j w[j] v_j.
using AttendFn = void (*)(const float *q, const float *k, const float *v, int64_t n, float *w,
                          float *out);
/// The same over rows given by pointers (k_j = krows[j], v_j = vrows[j]: a
/// paged cache's rows in their blocks), with the same arithmetic as AttendFn
/// (equal results for equal rows).
using AttendRowsFn = void (*)(const float *q, const float *const *krows,
                              const float *const *vrows, int64_t n, float *w, float *out);
/// The G query heads that share one KV head (q: G heads of head_dim
/// floats, one after another; out likewise) against n cached rows in one
/// pass; head g's probabilities go to w + g * ldw. Each head's results are
/// AttendFn's bit for bit.
using AttendGroupFn = void (*)(const float *q, const float *k, const float *v, int64_t n,
                               float *w, int64_t ldw, float *out);
/// The same over rows given by pointers (AttendRowsFn's rows).
using AttendRowsGroupFn = void (*)(const float *q, const float *const *krows,
                                   const float *const *vrows, int64_t n, float *w, int64_t ldw,
                                   float *out);
/// The same over IEEE f16 rows given by pointers (a paged cache on an f16
/// pool): each row widened to f32, then AttendRowsGroupFn's arithmetic, so
/// the results are its results on the widened rows bit for bit.
using AttendRowsGroupF16Fn = void (*)(const float *q, const uint16_t *const *krows,
                                      const uint16_t *const *vrows, int64_t n, float *w,
                                      int64_t ldw, float *out);
/// The same over Q8 rows given by pointers (a paged cache on a Q8 pool;
/// each row kvRowBytes(Q8, head_dim) bytes: scales, then codes): each row
/// decoded to f32 (exactly), then AttendRowsGroupFn's arithmetic.
using AttendRowsGroupQ8Fn = void (*)(const float *q, const uint8_t *const *krows,
                                     const uint8_t *const *vrows, int64_t n, float *w,
                                     int64_t ldw, float *out);
/// A model's attention kernels (null: none generated for it).
struct AttendKernels {
  AttendFn flat = nullptr;
  AttendRowsFn rows = nullptr;
  AttendGroupFn group = nullptr;
  AttendRowsGroupFn rowsGroup = nullptr;
  AttendRowsGroupF16Fn rowsGroupF16 = nullptr;
  AttendRowsGroupQ8Fn rowsGroupQ8 = nullptr;
};
/// One embedding row (the kernel's format and width) to floats.
using EmbedFn = void (*)(const uint8_t *row, float *out);
/// y[i] = a[i] + b[i] for i < n.
using AddFn = void (*)(const float *a, const float *b, float *y, int64_t n);


/// Levels in increasing order. The -vnni levels add the 8-bit dot-product
/// instructions (VPDPBUSD): AVX-VNNI on top of v3 (e.g. Alder Lake), AVX-512
/// VNNI on top of v4 (Cascade Lake and later Xeons, Zen 4 and later). Each
/// level runs where every feature it names is present (hostRuns); v3-vnni
/// is not a subset of v4, so the order alone does not decide that.
enum class IsaLevel { X86_64 = 0, V2 = 1, V3 = 2, V3Vnni = 3, V4 = 4, V4Vnni = 5 };
inline constexpr IsaLevel kAllIsaLevels[] = {IsaLevel::X86_64, IsaLevel::V2,     IsaLevel::V3,
                                             IsaLevel::V3Vnni, IsaLevel::V4,     IsaLevel::V4Vnni};

/// "x86-64", "x86-64-v2", ..., "x86-64-v4-vnni" (the key of stored objects).
const char *isaName(IsaLevel l);
std::optional<IsaLevel> parseIsa(const std::string &s);

/// The highest level this CPU runs.
IsaLevel hostIsa();
/// Whether this CPU has every feature of `l`.
bool hostRuns(IsaLevel l);
/// AVX-512 VNNI or AVX-VNNI present.
bool hostHasVnni();

/// The level kernels run at: LLMC_ISA if set (an error when this CPU lacks
/// one of its features, or unknown), else the host's. Throws
/// std::runtime_error.
IsaLevel targetIsa();

/// The levels a `--cpu-levels` text names: "all" (every level), "host" (the
/// level this process's kernels run at: targetIsa(), i.e. this CPU's or
/// LLMC_ISA's) or a comma-separated list of level names (x86-64,
/// x86-64-v2, x86-64-v3, x86-64-v3-vnni, x86-64-v4, x86-64-v4-vnni), in
/// increasing order without repeats. Empty (and `error` set) for any other
/// text.
std::vector<IsaLevel> parseCpuLevels(const std::string &text, std::string &error);

} // namespace llmc::codegen
