//===- format/qtea.h - QTEA: ternary codes + salient FP8 residuals -*- C++ -*-===//
// QTEA weights ("qtea_g<G>_s<P>", see llmc/dtype.h QteaSpec): a ternary base
// with per-(row, group) fp16 level alpha and centre beta, a per-column f32
// rescale v, and, in S = ceil(cols * P / 100) "salient" columns, a 1:4
// semi-structured FP8 (E4M3) residual: one kept entry per 4 consecutive rows.
//
//   w[r][j] = alpha[r][g] * v[j] * t[r][j] + beta[r][g]      (g = j / G)
//           + scale[s] * fp8(val[r/4][s])   if j = idx[s] and r % 4 = pos[r/4][s]
//
// Rows: a row of n weights is n / G blocks (G a multiple of 8, dividing n),
// each 4 + ceil(G/5) bytes:
//   uint16 alpha   fp16
//   uint16 beta    fp16
//   uint8  trits[ceil(G/5)]  the group's codes t in {-1, 0, 1}, base 3, five
//                  per byte: weight k of the group is digit k % 5 of byte
//                  k / 5, i.e. byte = sum_i (t[5b + i] + 1) * 3^i. Packing
//                  restarts at every group; the last byte of a group holds
//                  G % 5 digits when G is not a multiple of 5 and its higher
//                  digits are 0. Bytes 243..255 are invalid: unpackTrits
//                  rejects them, kernels read them as zeros (never crash).
//
// Side data (companion U8 tensor "<weight>.aux", per [rows, cols] matrix;
// rows must be a multiple of 4), auxBytes = 4*cols + 8*S + rows/4 * quadBytes:
//   f32   v[cols]        per-column rescale
//   int32 idx[S]         salient columns, strictly ascending, < cols
//   f32   scale[S]       residual scale of each salient column
//   rows/4 quad records, one per 4 consecutive rows (rows 4q .. 4q+3), each
//   quadBytes = S + ceil(S/4) bytes:
//     uint8 val[S]           E4M3 code of salient column s (bit exact OCP
//                            E4M3: bias 7, no infinities, 0x7F/0xFF NaN,
//                            max 448)
//     uint8 pos[ceil(S/4)]   2-bit row-in-quad of salient column s: bits
//                            2*(s%4) .. 2*(s%4)+1 of pos[s/4]; unused high
//                            bits of the last byte are 0
// All multi-byte fields are little endian and may be unaligned (a 3-D expert
// tensor's matrices follow each other at multiples of auxBytes).
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/dtype.h"

#include <cstdint>
#include <vector>

namespace llmc::qtea {

/// Rows per residual quad (the 1:4 pattern).
inline constexpr int64_t kQuadRows = 4;
/// Largest finite E4M3 magnitude.
inline constexpr float kFp8Max = 448.0f;

constexpr int64_t tritBytes(int64_t group) { return (group + 4) / 5; }
constexpr int64_t blockBytes(int64_t group) { return 4 + tritBytes(group); }
/// S: salient columns of a matrix with `cols` columns.
constexpr int64_t salientCount(int64_t cols, int salientPct) {
  return (cols * int64_t(salientPct) + 99) / 100;
}

/// Byte offsets of the side data of one [rows, cols] matrix.
struct AuxLayout {
  int64_t salient = 0;      // S
  int64_t vOffset = 0;      // f32 v[cols]
  int64_t idxOffset = 0;    // int32 idx[S]
  int64_t scaleOffset = 0;  // f32 scale[S]
  int64_t quadOffset = 0;   // first quad record
  int64_t quadBytes = 0;    // S + ceil(S/4)
  int64_t total = 0;        // auxBytes
};
/// Throws std::runtime_error if rows is not a positive multiple of 4 or cols
/// is not positive.
AuxLayout auxLayout(const QteaSpec &s, int64_t rows, int64_t cols);

/// Packs n codes in {-1, 0, 1} into tritBytes(n) bytes (one group's worth).
/// Throws on a code outside {-1, 0, 1}.
void packTrits(const int8_t *t, int64_t n, uint8_t *dst);
/// Inverse of packTrits; throws on a byte >= 243.
void unpackTrits(const uint8_t *src, int64_t n, int8_t *t);

/// OCP FP8 E4M3 (e4m3fn): round to nearest even, saturating to +-448
/// (infinities included), NaN -> 0x7F with the sign bit kept.
uint8_t fp8e4m3Encode(float x);
/// Exact value of an E4M3 code (0x7F / 0xFF: NaN).
float fp8e4m3Decode(uint8_t b);

/// One matrix in unpacked form (what a quantizer produces; pack* write the
/// stored bytes, unpack reads them back).
struct Matrix {
  QteaSpec spec{};
  int64_t rows = 0, cols = 0;
  std::vector<int8_t> trits;     // [rows * cols] row-major, in {-1, 0, 1}
  std::vector<float> alpha;      // [rows * cols/G]: stored as fp16 (packRows rounds)
  std::vector<float> beta;       // [rows * cols/G]
  std::vector<float> v;          // [cols]
  std::vector<int32_t> salient;  // [S] ascending
  std::vector<float> scale;      // [S]
  std::vector<uint8_t> pos;      // [rows/4 * S]: pos[q * S + s] in 0..3
  std::vector<uint8_t> fp8;      // [rows/4 * S]: E4M3 codes

  /// Row-major dequantized values, scalar reference of the layout above.
  std::vector<float> dequantize() const;
};

/// Stored rows (rows * rowBytes) and side data (auxBytes) of m. Throw
/// std::runtime_error naming the problem if a field has the wrong size or
/// an invalid value (code, salient index order, position).
std::vector<uint8_t> packRows(const Matrix &m);
std::vector<uint8_t> packAux(const Matrix &m);
/// Reads a matrix back (alpha/beta as the fp16 values stored). Throws on
/// malformed data (bad trit byte, salient index out of range or unordered).
Matrix unpack(const QteaSpec &s, int64_t rows, int64_t cols, const uint8_t *rowData,
              const uint8_t *aux);

} // namespace llmc::qtea
