//===- format/grouped_int.h - Grouped integer block layout -----*- C++ -*-===//
// Grouped integer ("gq") weights: llmc's own parametric format for RTN, GPTQ
// and similar quantizers. A row is cut into groups of G weights (G a multiple
// of 8 in [8, 4096], dividing the row length); each group is one block:
//
//   uint16 d        fp16 scale
//   uint16 m        fp16 minimum   (asymmetric types only)
//   uint8  qs[G*B/8] the G codes, B bits each, as one bitstream: code j
//                   occupies stream bits [j*B, j*B+B), and stream bit k is
//                   bit (k % 8) of qs[k / 8] (LSB first). Because G is a
//                   multiple of 8 the stream fills whole bytes (no padding),
//                   and every 8 codes take exactly B bytes.
//
//   symmetric  (gq<B>s_g<G>): x[j] = d * (q[j] - 2^(B-1))
//   asymmetric (gq<B>a_g<G>): x[j] = d * q[j] + m
//
// B is 2..8. Names: "gq" bits ('s'|'a') "_g" group, no leading zeros, e.g.
// gq4a_g64 (4-bit asymmetric, groups of 64: 36 bytes = 4.5 bits per weight)
// or gq3s_g32 (3-bit symmetric, groups of 32: 14 bytes = 3.5 bits/weight).
//
// DType encoding: kGroupedIntTag | sym << 20 | bits << 16 | group.
//===----------------------------------------------------------------------===//
#pragma once
#include <cstdint>

namespace llmc {

inline constexpr int kGroupedIntMinBits = 2;
inline constexpr int kGroupedIntMaxBits = 8;
inline constexpr int64_t kGroupedIntMinGroup = 8;
inline constexpr int64_t kGroupedIntMaxGroup = 4096;
/// Groups must be a multiple of this so each group is whole bytes.
inline constexpr int64_t kGroupedIntGroupMultiple = 8;

inline constexpr uint32_t kGroupedIntTag = 0x47000000u; // 'G' in the top byte
inline constexpr uint32_t kGroupedIntTagMask = 0xFF000000u;

/// Bytes of one group (block) of G codes of B bits.
constexpr int64_t groupedIntBlockBytes(int bits, bool sym, int64_t group) {
  return (sym ? 2 : 4) + (group * bits + 7) / 8;
}
/// The code that means zero in a symmetric type: 2^(B-1).
constexpr int groupedIntSymOffset(int bits) { return 1 << (bits - 1); }

} // namespace llmc
