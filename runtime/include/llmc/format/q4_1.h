//===- format/q4_1.h - GGUF Q4_1 block layout ------------------*- C++ -*-===//
// Q4_1: 32 weights per block, fp16 scale d and fp16 minimum m, then 16 bytes
// of 4-bit values (low nibble: weight j, high nibble: weight j+16).
//   x[j] = d * lo(qs[j]) + m,  x[j+16] = d * hi(qs[j]) + m
// 20 bytes per 32 weights = 5.0 bits per weight.
//===----------------------------------------------------------------------===//
#pragma once
#include <cstdint>

namespace llmc {

inline constexpr int kQ4_1BlockSize = 32;

struct BlockQ4_1 {
  uint16_t d;      // fp16 scale
  uint16_t m;      // fp16 minimum
  uint8_t qs[16];  // nibbles
};
static_assert(sizeof(BlockQ4_1) == 20, "Q4_1 block must be 20 bytes");

} // namespace llmc
