//===- format/q6_k.h - GGUF Q6_K super-block layout ------------*- C++ -*-===//
// Q6_K: 256 weights = 16 sub-blocks of 16, each with a signed 8-bit scale,
// one fp16 d. Weights are 6-bit: low 4 bits in ql[128], high 2 bits in
// qh[64]. Per half (128 weights, ql += 64, qh += 32, scales += 8), for l < 32:
//   w[l]    = lo(ql[l])    | ((qh[l] >> 0) & 3) << 4
//   w[l+32] = lo(ql[l+32]) | ((qh[l] >> 2) & 3) << 4
//   w[l+64] = hi(ql[l])    | ((qh[l] >> 4) & 3) << 4
//   w[l+96] = hi(ql[l+32]) | ((qh[l] >> 6) & 3) << 4
//   x = (d * scales[w_index / 16]) * (w - 32)
// 210 bytes per 256 weights = 6.5625 bits per weight.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/format/k_scales.h"
#include <cstdint>

namespace llmc {

struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];      // low 4 bits
  uint8_t qh[kQK_K / 4];      // high 2 bits
  int8_t scales[kQK_K / 16];  // sub-block scales
  uint16_t d;                 // fp16 super-block scale
};
static_assert(sizeof(BlockQ6_K) == 210, "Q6_K block must be 210 bytes");

} // namespace llmc
