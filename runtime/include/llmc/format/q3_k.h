//===- format/q3_k.h - GGUF Q3_K super-block layout ------------*- C++ -*-===//
// Q3_K: 256 weights = 16 sub-blocks of 16, symmetric. Codes are 3 bits: the
// low 2 bits are packed like Q2_K's (weight h*128 + j*32 + l is bits 2j..2j+1
// of qs[h*32 + l]); the high bit of weight k*32 + l (k = 0..7) is bit k of
// hmask[l], and a CLEAR high bit means "subtract 4": q = lo - (hbit ? 0 : 4),
// so q is in -4..3. Sub-block scales are 6 bits, stored minus 32 (signed):
//   scale s, low 4 bits:  s < 8 ? scales[s] & 15 : scales[s - 8] >> 4
//   scale s, high 2 bits: (scales[8 + s % 4] >> (2 * (s / 4))) & 3
//   x = (d * (scale[s] - 32)) * q,  s = index / 16
// 110 bytes per 256 weights = 3.4375 bits per weight.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/format/k_scales.h"
#include <cstdint>

namespace llmc {

inline constexpr int kQ3KScaleBytes = 12; // 16 packed 6-bit scales

struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];       // high bits
  uint8_t qs[kQK_K / 4];          // low 2 bits
  uint8_t scales[kQ3KScaleBytes]; // packed 6-bit scales
  uint16_t d;                     // fp16 super-block scale
};
static_assert(sizeof(BlockQ3_K) == 110, "Q3_K block must be 110 bytes");

/// Signed scale (-32..31) of sub-block s (0..15) from the 12 packed bytes.
inline int unpackQ3KScale(const uint8_t *scales, int s) {
  const int lo = s < 8 ? (scales[s] & 0x0F) : (scales[s - 8] >> 4);
  const int hi = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
  return (lo | (hi << 4)) - 32;
}

} // namespace llmc
