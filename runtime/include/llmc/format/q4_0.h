//===- format/q4_0.h - GGUF Q4_0 block layout ------------------*- C++ -*-===//
// Q4_0: 32 weights per block, one fp16 scale and 16 bytes of 4-bit values.
// Byte j holds weight j in its low nibble and weight j+16 in its high nibble.
//   x[j] = d * (lo(qs[j]) - 8),  x[j+16] = d * (hi(qs[j]) - 8)
// 18 bytes per 32 weights = 4.5 bits per weight.
//===----------------------------------------------------------------------===//
#pragma once
#include <cstdint>

namespace llmc {

inline constexpr int kQ4_0BlockSize = 32;

struct BlockQ4_0 {
  uint16_t d;      // fp16 scale
  uint8_t qs[16];  // nibbles
};
static_assert(sizeof(BlockQ4_0) == 18, "Q4_0 block must be 18 bytes");

} // namespace llmc
