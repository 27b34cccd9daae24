//===- format/q8_0.h - GGUF Q8_0 block layout ------------------*- C++ -*-===//
// Q8_0: 32 weights per block, one fp16 scale and 32 signed bytes.
//   x[i] = d * qs[i]
// 34 bytes per 32 weights = 8.5 bits per weight.
//===----------------------------------------------------------------------===//
#pragma once
#include <cstdint>

namespace llmc {

inline constexpr int kQ8_0BlockSize = 32;

struct BlockQ8_0 {
  uint16_t d;      // fp16 scale
  int8_t qs[32];   // quantized values
};
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block must be 34 bytes");

} // namespace llmc
