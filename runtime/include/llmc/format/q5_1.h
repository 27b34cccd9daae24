//===- format/q5_1.h - GGUF Q5_1 block layout ------------------*- C++ -*-===//
// Q5_1: 32 weights per block: fp16 scale d, fp16 minimum m, 32 high bits
// (qh, little endian u32, bit i belongs to weight i), 16 bytes of low
// nibbles (low nibble: weight j, high nibble: weight j+16).
//   x[i] = d * q5[i] + m
// 24 bytes per 32 weights = 6.0 bits per weight.
//===----------------------------------------------------------------------===//
#pragma once
#include <cstdint>

namespace llmc {

inline constexpr int kQ5_1BlockSize = 32;

struct BlockQ5_1 {
  uint16_t d;      // fp16 scale
  uint16_t m;      // fp16 minimum
  uint8_t qh[4];   // 5th bits, little endian u32
  uint8_t qs[16];  // low nibbles
};
static_assert(sizeof(BlockQ5_1) == 24, "Q5_1 block must be 24 bytes");

} // namespace llmc
