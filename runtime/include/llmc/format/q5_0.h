//===- format/q5_0.h - GGUF Q5_0 block layout ------------------*- C++ -*-===//
// Q5_0: 32 weights per block: fp16 scale, 32 high bits (qh, little endian
// u32, bit i is the 5th bit of weight i), 16 bytes of low nibbles (low
// nibble: weight j, high nibble: weight j+16).
//   x[i] = d * (q5[i] - 16)
// 22 bytes per 32 weights = 5.5 bits per weight.
//===----------------------------------------------------------------------===//
#pragma once
#include <cstdint>

namespace llmc {

inline constexpr int kQ5_0BlockSize = 32;

struct BlockQ5_0 {
  uint16_t d;      // fp16 scale
  uint8_t qh[4];   // 5th bits, little endian u32
  uint8_t qs[16];  // low nibbles
};
static_assert(sizeof(BlockQ5_0) == 22, "Q5_0 block must be 22 bytes");

} // namespace llmc
