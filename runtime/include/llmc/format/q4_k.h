//===- format/q4_k.h - GGUF Q4_K super-block layout ------------*- C++ -*-===//
// Q4_K: 256 weights per super-block = 8 sub-blocks of 32. fp16 d and dmin,
// 12 bytes of packed 6-bit scales/mins (see k_scales.h), 128 bytes of nibbles.
// Each 32-byte group of qs holds two sub-blocks: low nibbles are sub-block
// 2g, high nibbles sub-block 2g+1.
//   x = (d * scale[s]) * q - (dmin * min[s])
// 144 bytes per 256 weights = 4.5 bits per weight.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/format/k_scales.h"
#include <cstdint>

namespace llmc {

struct BlockQ4_K {
  uint16_t d;                     // fp16 super-block scale of the scales
  uint16_t dmin;                  // fp16 super-block scale of the mins
  uint8_t scales[kKScaleBytes];   // packed 6-bit scales and mins
  uint8_t qs[kQK_K / 2];          // nibbles
};
static_assert(sizeof(BlockQ4_K) == 144, "Q4_K block must be 144 bytes");

} // namespace llmc
