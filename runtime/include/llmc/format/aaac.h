//===- format/aaac.h - AAAC codebook weights: layout and packing -*- C++ -*-===//
// AAAC (activation-aware adaptive codebooks): every matrix has two learned
// scalar codebooks A and B of K = 2^B entries (B = 2..4 bits); each group of
// G weights of a row (G a multiple of 8 in [8, 4096], dividing the row) picks
// one of them and has its own positive scale. The pick costs no storage: it
// is the sign bit of the scale, which a scale never needs.
//
// Row: groups back to back, each one block of 2 + G*B/8 bytes:
//
//   uint16 s          fp16 scale. Bit 15 (sign) = 0: codebook A, 1: codebook B.
//                     The magnitude |s| is the scale; it is never zero (the
//                     writer clamps it to >= 2^-14, the smallest normal fp16)
//                     so the flag survives any reader that compares floats.
//   uint8 qs[G*B/8]   the G codes, B bits each, one LSB-first bitstream exactly
//                     like grouped integers (llmc/format/grouped_int.h): code j
//                     occupies stream bits [j*B, j*B+B), stream bit k is bit
//                     (k % 8) of qs[k / 8].
//
//   x[j] = |s| * book[signbit(s)][q[j]]
//
// Side data (the companion U8 tensor "<weight>.aux"), per matrix: codebook A
// then codebook B, K fp16 values each (4*K bytes: 64 at 4 bits). Entries are
// any finite fp16 values in any order. A 3-D expert tensor [E, F, D] holds E
// of these back to back.
//
// Names: "aaac" bits "_g" group, e.g. aaac4_g64 (34 bytes per 64 weights =
// 4.25 bits per weight, plus 64 bytes per matrix).
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/dtype.h"

#include <cstdint>

namespace llmc {

inline constexpr int kAaacMinBits = 2;
inline constexpr int kAaacMaxBits = 4;
/// Scale-field bit that selects codebook B.
inline constexpr uint16_t kAaacBookBBit = 0x8000u;
/// Smallest stored scale magnitude: the smallest normal fp16, 2^-14.
inline constexpr float kAaacMinScale = 6.103515625e-05f;
/// Largest stored scale magnitude: the largest finite fp16.
inline constexpr float kAaacMaxScale = 65504.0f;

/// Entries of one codebook: 2^bits.
constexpr int aaacEntries(int bits) { return 1 << bits; }
/// Bytes of one group (block): 2 + group * bits / 8.
constexpr int64_t aaacGroupBytes(int bits, int64_t group) { return 2 + group * bits / 8; }
/// Bytes of one matrix's side data: both codebooks as fp16.
constexpr int64_t aaacCodebookBytes(int bits) { return 2 * 2 * int64_t(aaacEntries(bits)); }

/// The stored scale field of a signed scale: |s| rounded to fp16 and clamped
/// up to kAaacMinScale, with the sign bit set when `bookB`. Throws
/// std::runtime_error when |s| is NaN, infinite or above kAaacMaxScale.
uint16_t aaacScaleField(float magnitude, bool bookB);
/// The scale magnitude a stored field means (its sign bit masked off).
float aaacScaleOf(uint16_t field);
/// The fp16-exact magnitude aaacScaleField would store for `magnitude`.
float aaacStoredScale(float magnitude);

/// Pack one row of n weights of AAAC type t. codes: n values < 2^bits.
/// signedScales: n / group values; the magnitude is the group's scale (see
/// aaacScaleField) and a negative sign (std::signbit, so -0.0 too) selects
/// codebook B. Throws std::runtime_error if t is not an AAAC type, n is not
/// a multiple of the group, a code does not fit or a scale is bad.
void packAaacRow(DType t, const uint8_t *codes, const float *signedScales, void *dst, int64_t n);
/// Inverse of packAaacRow: codes (n) and signed scales (n / group: the stored
/// magnitude, negative for codebook B). Either output may be null.
void unpackAaacRow(DType t, const void *src, uint8_t *codes, float *signedScales, int64_t n);

/// Write one matrix's side data (aaacCodebookBytes bytes): bookA and bookB,
/// 2^bits values each, rounded to fp16. Throws std::runtime_error if t is
/// not an AAAC type or an entry is not finite in fp16.
void packAaacCodebooks(DType t, const float *bookA, const float *bookB, void *dst);
/// Read one matrix's side data back (either output may be null).
void unpackAaacCodebooks(DType t, const void *src, float *bookA, float *bookB);

} // namespace llmc
