//===- CudaKernelSource.h - CUDA C++ source of a model's GPU kernels -*- C++ -*-===//
// The CUDA backend's first kernels: one matrix-vector product per (weight
// format, input width) the model multiplies by, with the width and the
// block layout compile-time constants, over f32 activations. The source is
// self-contained CUDA C++ (no CUDA headers: NVRTC compiles it as is), so
// the compiler turns it into cubin and PTX without a GPU (CudaCompiler.h).
//
// Kernel ABI (extern "C", one per (format, width)):
//   llmc_cu_mv_<format>_<cols>(const unsigned char *w, long long rowStride,
//       const float *x, long long ldx, int T, float *y, long long ldy,
//       long long rows, const float *res, long long ldr)
// y[t * ldy + r] = dot(row r of w (rowStride bytes apart), x + t * ldx)
// (+ res[t * ldr + r] when res is not null: the residual add fused; res may
// be y) for t < T (1..kCudaMaxTokens) and r < rows (ABI 2, llmc/cuda.h). One warp per row, launched with
// blockDim.x = 32 * kCudaRowsPerBlock and gridDim.x = ceil(rows /
// kCudaRowsPerBlock). A lane takes units of 8 weights (a quarter of a
// 32-weight block), strided by 32 over the row, then the warp sums its
// lanes by shuffles.
//   llmc_cu_mv1_<format>_<cols>(const unsigned char *w, long long rowStride,
//       const float *x, float *y, long long rows, const float *res)
// the same for one token (decode steps; the same bits as T = 1 above),
// launched with blockDim.x = 32 * kCudaDecodeRowsPerBlock.
//   llmc_cu_mm_<format>_<cols>(the arguments of llmc_cu_mv_*, any T >= 1)
// the same product on the tensor cores (sm_80+; weights and activations
// rounded to f16, sums in f32: a prompt chunk's products,
// CudaMmaSource.cpp), launched with blockDim.x = 32 * kCudaMmaWarps and
// gridDim.x = ceil(rows / (16 * kCudaMmaWarps)) * ceil(T / kCudaMmaTokens);
// generated where the width is a multiple of 32.
//===----------------------------------------------------------------------===//
#pragma once
#include "codegen/cuda/CudaAttentionSource.h"
#include "llmc/dtype.h"
#include "llmc/ir_enums.h"

#include <cstdint>
#include <string>
#include <vector>

namespace llmc::codegen {

constexpr int kCudaMaxTokens = 8;
constexpr int kCudaRowsPerBlock = 4;
constexpr int kCudaDecodeRowsPerBlock = 8;
/// The tensor-core product (llmc_cu_mm_*): warps per block (16 rows each)
/// and tokens per block.
constexpr int kCudaMmaWarps = 4;
constexpr int kCudaMmaTokens = 32;

struct CudaMatvecSpec {
  DType dtype;
  int64_t cols;
  std::string symbol() const;      // llmc_cu_mv_<format>_<cols>
  std::string embedSymbol() const; // llmc_cu_embed_<format>_<cols>
  std::string decodeSymbol() const; // llmc_cu_mv1_<format>_<cols>
  std::string mmaSymbol() const;    // llmc_cu_mm_<format>_<cols>
};

/// Formats with a generated CUDA matrix-vector kernel: f32, f16, q8_0,
/// q4_0, q4_1, q5_0 and q5_1 at widths that are a multiple of 32, q4_k and
/// q6_k at multiples of 256.
bool canGenerateCuda(DType dtype, int64_t cols);

/// Whether a llmc_cu_mm_* kernel is generated for this format and width.
bool canGenerateCudaMma(DType dtype, int64_t cols);
/// The tensor-core kernel of `s` (canGenerateCudaMma must hold).
std::string cudaMmaKernel(const CudaMatvecSpec &s);
/// The kernels' decoding of unit u (8 weights) of a row of `dtype`: fills
/// v[8], c0, c1 from `row` and `u` (v[0..3] multiply columns c0..c0+3,
/// v[4..7] columns c1..c1+3). std::invalid_argument for other formats.
std::string cudaUnitDecodeText(DType dtype);

/// The element-wise and per-row op kernels (f32 rows, out of place where
/// they read and write rows):
///   RmsNorm: llmc_cu_rms_norm_<cols>(const float *x, const float *w,
///     float *y, long long rows, float eps): y = x * w / sqrt(mean(x^2) +
///     eps), the sum of squares in double; one warp per row (gridDim.x =
///     rows, blockDim.x = 32), all lanes given the warp's sum by shuffles.
///   Gate: llmc_cu_gate_<silu|gelu>(float *g, const float *u, long long n):
///     g = act(g) * u in place, one element per thread (any grid covering n).
///   Add: llmc_cu_add(const float *a, const float *b, float *y, long long n).
///   MoeRows (an MoE layer's rows routed to one expert), three kernels, one
///     block per row (gridDim.x = n), any blockDim.x:
///     llmc_cu_moe_gather(const float *x, long long ldx, const int *rows,
///       int n, float *y, long long ldy, long long cols): y row i = x row
///       rows[i];
///     llmc_cu_moe_scatter_add(const float *y, long long ldy, const int
///       *rows, const float *w, int n, float *out, long long ldo, long long
///       cols): out row rows[i] += w[i] * y row i (rows distinct);
///     llmc_cu_moe_fill(const float *src, float *dst, long long n): dst =
///       src, or 0 where src is null (one element per thread).
struct CudaOpSpec {
  enum class Kind { RmsNorm, Gate, Add, MoeRows };
  Kind kind = Kind::Add;
  int64_t cols = 0;       // RmsNorm
  Activation activation = Activation::SiLU; // Gate
  std::string symbol() const;
};

/// Embedding lookup (one per table format and width; the same formats as
/// the products):
///   llmc_cu_embed_<format>_<cols>(const unsigned char *table,
///     long long rowStride, long long vocab, const int *tokens, int T,
///     float *out, long long ldo): row tokens[t] of the table, dequantized,
///     to out + t * ldo; one warp per token (gridDim.x = T, blockDim.x =
///     32); an id outside [0, vocab) gives zeros.
///
/// The translation unit: a kernel for each of `specs`, `ops`, `embeddings`
/// and the three kernels of each of `attention` (CudaAttentionSource.h),
/// deduplicated, in order. std::invalid_argument for a spec
/// canGenerateCuda() or canGenerateCudaAttention() refuses, a norm width <
/// 1.
std::string cudaKernelSource(const std::vector<CudaMatvecSpec> &specs,
                             const std::vector<CudaOpSpec> &ops = {},
                             const std::vector<CudaMatvecSpec> &embeddings = {},
                             const std::vector<CudaAttentionSpec> &attention = {});

} // namespace llmc::codegen
