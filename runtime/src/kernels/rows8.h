//===- rows8.h - Eight-row interleaved block weights for int8 dots -*- C++ -*-===//
// The kernel engine's fastest layout for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and
// Q4_K matrices: each group of 8 consecutive rows is rewritten block by
// block so that one 32-byte load holds 4 consecutive weights of all 8 rows,
// and the 8 rows' scales (and minimums) are 16 contiguous bytes. A dot with
// one int8 activation block then multiplies that load by the 4 matching
// activation bytes broadcast to every row (VPMADDUBSW), and the 8 row sums
// come out in the 8 lanes of one register: no horizontal sums, one scale
// conversion per 8 rows. The group's bytes per 32-weight column block, in
// order:
//   Q4_0: d[8] (fp16) | for s in 0..3, r in 0..7: qs_r[4s..4s+3]
//   Q4_1: d[8] | m[8] | the same 128 quant bytes
//   Q8_0: d[8] | for s in 0..7, r in 0..7: qs_r[4s..4s+3]
//   Q5_0: d[8] | qh_r (4 bytes) for r in 0..7 | the Q4_0 quant bytes
//   Q5_1: d[8] | m[8] | qh_r for r in 0..7 | the Q4_0 quant bytes
// (Q4_x/Q5_x byte j holds weight j in its low nibble and j + 16 in its high
// one, so the low nibbles of step s are weights 4s.. and the high ones
// 16 + 4s..; Q5_x qh bit j is weight j's fifth bit). The size equals the
// source's. Built at load time (PlanEngine), from rows whose count is a
// multiple of 8. Q4_K (per 256-weight super-block, 1184 bytes a group, 148
// per row against the source's 144: the 6-bit sub-block scales and mins
// unpacked to bytes):
//   d[8] | dmin[8] | sc[j][r] | m[j][r] (j: 8 sub-blocks) |
//   for chunk c in 0..3, s in 0..7, r in 0..7: qs_r[32c + 4s..+3]
// (sub-block 2c is chunk c's low nibbles, 2c+1 its high ones).
// Every layout has an AVX2 library kernel (bit-identical to the portable
// one); without AVX2 the engine packs a matrix only for a generated kernel.
//
// Internal to the runtime: the AVX2 kernels live in rows8_avx2.cpp.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/dtype.h"

#include <cstdint>
#include <optional>

namespace llmc::kernels {

inline constexpr int64_t kRows8 = 8;

/// The eight-row layout a matrix of type t is packed into: Q4_0, Q4_1,
/// Q5_0, Q5_1, Q8_0 and Q4_K their own; llmc's grouped integers with a group a multiple of 32
/// that the layout holds exactly: gq4s_g* as Q4_0 (d (q - 8)), gq4a_g* as
/// Q4_1 (d q + m), gq8s_g* as Q8_0 (d (q - 128)), each group's scale (and
/// minimum) repeated for its 32-weight blocks. nullopt for any other type.
std::optional<DType> rows8Layout(DType t);
inline bool hasRows8(DType t) { return rows8Layout(t).has_value(); }
/// Bytes of one 8-row group of cols columns in layout t (8 source rows'
/// bytes for the 32-weight block types; 1184 per 256 columns for Q4_K).
int64_t rows8GroupBytes(DType t, int64_t cols);
/// Rewrite rows [0, rows) (rows a multiple of 8, cols of 32) of a matrix
/// of type t whose row r starts at src + r * rowStride into dst (rows / 8
/// groups of layout rows8Layout(t)).
void packRows8(DType t, const uint8_t *src, int64_t rowStride, int64_t rows, int64_t cols,
               uint8_t *dst);

/// Row r (0..7) of one eight-row group of layout t (Q4_0, Q4_1, Q5_0, Q5_1,
/// Q8_0 or Q4_K) back in t's own row bytes (rowBytes(t, cols)): how
/// row-major readers (an f32 product, the reference engine) read a weight
/// the compiler stored packed.
void unpackRows8Row(DType t, const uint8_t *group, int r, int64_t cols, uint8_t *row);
/// Row r of an eight-row group of a grouped-integer matrix of type t (stored
/// in its layout rows8Layout(t): Q4_0, Q4_1 or Q8_0) back in t's own bytes
/// (rowBytes(t, cols)): the exact inverse of packRows8 for those types.
void unpackRows8GroupedRow(DType t, const uint8_t *group, int r, int64_t cols, uint8_t *row);

/// out[j * ldo + r] = dot(row r of the group, activation row j), r < 8,
/// j < nx (1..4); the int8 rows as in Int8DotFn (dot_int8.h).
using Rows8DotFn = void (*)(const uint8_t *group, int64_t cols, const int8_t *xq, const float *xd,
                            const float *xs, int64_t ldq, int64_t ldd, float *out, int64_t ldo);
/// The fastest kernel this build has (bit-identical to the portable one).
Rows8DotFn rows8DotKernel(DType t, int nx);
/// Whether rows8DotKernel(t, .) is vectorized here (AVX2 for Q4_0, Q4_1,
/// Q5_0, Q5_1, Q8_0 and Q4_K); the portable kernels are slower than the row
/// kernels.
bool hasFastRows8Kernel(DType t);
Rows8DotFn rows8DotKernelScalar(DType t, int nx);

namespace detail {
Rows8DotFn avx2Rows8DotKernel(DType t, int nx); // null without AVX2
} // namespace detail

} // namespace llmc::kernels
