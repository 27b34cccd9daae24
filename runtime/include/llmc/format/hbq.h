//===- format/hbq.h - HBQ hierarchical block FP layout ----------*- C++ -*-===//
// HBQ (Hierarchical Block Quantization, weights): a row is cut into L1 blocks
// of B weights (B a multiple of 32, dividing the row); each L1 block has one
// E5M3 scale s1, and each of its four L2 sub-blocks (B/4 weights) a 2-bit
// index into a small table of "significand" scales t. Every L1 block is
// 3 + B*bits/8 bytes:
//
//   byte 0      s1, E5M3 (below)
//   byte 1      the four L2 indices: sub-block k in bits 2k..2k+1
//   byte 2      the L2 table: bits 1..2 = table set, bit 0 = choice in it
//                 set 0 (mix):  bit 0 = 0 FP-1 {1, 1.25, 1.5, 1.75},
//                               bit 0 = 1 FP-10 {1, 1.125, 1.25, 1.375}
//                 set 1: FP-1, set 2: FP-10, set 3: INT {1, 2, 3, 4}
//               (bit 0 is 0 for sets 1..3); bits 3..7 are 0. Any other
//               byte is rejected (std::runtime_error), so a block says by
//               itself how to decode it whatever table option made it.
//   byte 3..    the B element codes, `bits` bits each, as one LSB-first
//               bitstream: code j occupies stream bits [j*bits, j*bits+bits),
//               stream bit k being bit (k % 8) of byte 3 + k / 8. Every 8
//               codes take exactly `bits` bytes, so sub-blocks start on
//               whole bytes.
//
//   weight j of the block = s1 * t[l2(j / (B/4))] * elem(code j), computed
//   in float as (s1 * t) * elem.
//
// E5M3 scale (unsigned, 8 bits eeeeemmm, exponent bias 15, no inf/NaN):
//   e = 0:     m/8 * 2^-14           (subnormals; code 0 is 0.0)
//   e = 1..31: (1 + m/8) * 2^(e-15)  (largest 1.875 * 2^16 = 122880)
// All 256 codes are finite, distinct and increasing. hbqScaleEncode rounds
// to nearest with ties away from zero (the authors' floor(m + 0.5)) and
// saturates. The authors' quantizer clips s1 to the normal range with
// emax = 15 (2^-14 .. 61440); we keep subnormal and e = 31 scales too, which
// differs only for blocks with max|w| below ~6e-4 or above ~6e5.
//
// Element codes: a sign bit (the code's top bit) and a (bits-1)-bit index
// into increasing magnitudes; rounding is to nearest, ties away from zero,
// saturating at the largest magnitude; a zero magnitude is written with a
// clear sign bit.
//   4 bits: FP4 E2M1 {0, 0.5, 1, 1.5, 2, 3, 4, 6}: the OCP FP4 encoding
//           (the paper's weight format).
//   3 bits: E2M0 magnitudes {0, 1, 2, 4} (7 levels, a wasted -0).
//   2 bits: magnitudes {0.5, 1.5}: the uniform 4-level grid without zero
//           {-1.5, -0.5, 0.5, 1.5}.
// The paper is a 4-bit method; the 3- and 2-bit element sets are llmc
// extensions, chosen on SmolLM2-135M (mean KLD, hbq<bits>_b64, 512 tokens;
// docs/results/hbq.md):
// at 3 bits E2M0 1.05 beat E1M1 {0, 0.5, 1, 1.5} 1.25 and a zero-free
// uniform {0.5 .. 3.5} 5.8 (INT table; with mix E2M0 reaches 0.89); at
// 2 bits {0.5, 1.5} 8.4 beat ternary {0, 1} 11.7 with mix (9.06 vs 9.03
// with INT): no 2-bit variant is usable without calibration (RTN 2-bit: 9.1).
//
// Names: "hbq<bits>_b<B>" (llmc/dtype.h hbqDType). HBQ-A is hbq4_b64 with
// the mix table: 3 + 32 bytes per 64 weights = 4.375 bits per weight (the
// paper counts 4.27: 8 + 4*2 + 1 bits per block; we keep the header
// byte-aligned and spend the table byte's spare bits on self-description).
// HBQ-E-like is hbq4_b128 (4.1875 bpw); rows must be whole blocks, so
// 576-wide rows (SmolLM2) take b64, b96 or b192 instead.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/dtype.h"

#include <cstdint>
#include <optional>
#include <string_view>

namespace llmc {

inline constexpr int kHbqHeaderBytes = 3;
inline constexpr int kHbqSubBlocks = 4;  // L2 sub-blocks per L1 block
inline constexpr int kHbqL2Entries = 4;  // 2-bit L2 indices

/// The L2 table(s) a quantizer may use (llm-quantize's hbq-table option).
enum class HbqTable : uint8_t { Mix = 0, Fp1 = 1, Fp10 = 2, Int = 3 };
/// "mix", "fp1", "fp10", "int" (lower case); nullopt for anything else.
std::optional<HbqTable> hbqTableFromName(std::string_view name);
const char *hbqTableName(HbqTable t);

/// Byte 2 of a block using table set `set` (for Mix, fp10 picks FP-10).
constexpr uint8_t hbqTableByte(HbqTable set, bool fp10 = false) {
  return uint8_t(uint8_t(set) << 1 | (set == HbqTable::Mix && fp10 ? 1 : 0));
}
/// The 4 L2 scales byte 2 of a block selects (increasing), or nullptr when
/// the byte is not a valid table byte.
const float *hbqL2Values(uint8_t tableByte);

/// E5M3 scale (see above). Encode: v finite and >= 0, else throws
/// std::runtime_error.
float hbqScaleDecode(uint8_t code);
uint8_t hbqScaleEncode(float v);

/// The 2^(bits-1) element magnitudes of `bits`-bit codes (increasing), and
/// the largest. bits is 2..4 (else throws std::runtime_error).
const float *hbqMagnitudes(int bits);
int hbqMagnitudeCount(int bits);
float hbqElementMax(int bits);
/// Nearest element code of v (ties away from zero, saturating); v must not
/// be NaN.
uint8_t hbqElementEncode(int bits, float v);
/// The value of an element code (code < 2^bits).
float hbqElementDecode(int bits, uint8_t code);

/// What hbqQuantizeRow chose, accumulated over calls.
struct HbqRowStats {
  int64_t blocks = 0;
  int64_t fp10Blocks = 0;          // Mix blocks that picked FP-10
  int64_t l2Histogram[4] = {};     // L2 index use, over sub-blocks
  double sqError = 0;              // sum of squared errors
};

/// Quantize n floats (n a multiple of spec.block) into n / spec.block HBQ
/// blocks at dst (the authors' algorithm, see hbq.cpp): per L1 block and
/// candidate table, s1 = E5M3(max|x| / (elemMax * max t)); per sub-block
/// the t with the least squared error; for Mix the table with the smaller
/// block error. Throws std::runtime_error on a bad spec, a length that is
/// not whole blocks, or a non-finite input.
void hbqQuantizeRow(const HbqSpec &spec, HbqTable table, const float *src, uint8_t *dst,
                    int64_t n, HbqRowStats *stats = nullptr);

} // namespace llmc
