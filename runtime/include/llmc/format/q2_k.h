//===- format/q2_k.h - GGUF Q2_K super-block layout ------------*- C++ -*-===//
// Q2_K: 256 weights = 16 sub-blocks of 16. Each sub-block has a 4-bit scale
// (low nibble of scales[s]) and a 4-bit min (high nibble); fp16 d and dmin
// scale them. Codes are 2 bits, four per byte: in each 128-weight half h,
// weight h*128 + j*32 + l (j = 0..3, l = 0..31) is bits 2j..2j+1 of
// qs[h*32 + l].
//   x = (d * scale[s]) * q - (dmin * min[s]),  s = index / 16
// 84 bytes per 256 weights = 2.625 bits per weight.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/format/k_scales.h"
#include <cstdint>

namespace llmc {

struct BlockQ2_K {
  uint8_t scales[kQK_K / 16]; // scale (low nibble) and min (high nibble)
  uint8_t qs[kQK_K / 4];      // 2-bit codes
  uint16_t d;                 // fp16 super-block scale of the scales
  uint16_t dmin;              // fp16 super-block scale of the mins
};
static_assert(sizeof(BlockQ2_K) == 84, "Q2_K block must be 84 bytes");

} // namespace llmc
