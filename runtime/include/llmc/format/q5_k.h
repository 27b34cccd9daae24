//===- format/q5_k.h - GGUF Q5_K super-block layout ------------*- C++ -*-===//
// Q5_K: like Q4_K plus a 5th bit per weight. 256 weights: fp16 d, dmin,
// 12 bytes packed scales/mins, qh[32] (bit b of qh[l] is the 5th bit of
// weight l of sub-block b), qs[128] nibbles laid out as in Q4_K.
//   x = (d * scale[s]) * (q4 + 16 * hbit) - (dmin * min[s])
// 176 bytes per 256 weights = 5.5 bits per weight.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/format/k_scales.h"
#include <cstdint>

namespace llmc {

struct BlockQ5_K {
  uint16_t d;                     // fp16 super-block scale of the scales
  uint16_t dmin;                  // fp16 super-block scale of the mins
  uint8_t scales[kKScaleBytes];   // packed 6-bit scales and mins
  uint8_t qh[kQK_K / 8];          // 5th bits
  uint8_t qs[kQK_K / 2];          // low nibbles
};
static_assert(sizeof(BlockQ5_K) == 176, "Q5_K block must be 176 bytes");

} // namespace llmc
