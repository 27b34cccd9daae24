//===- format/iq4_nl.h - GGUF IQ4_NL block layout --------------*- C++ -*-===//
// IQ4_NL: 32 weights per block, one fp16 scale d and 16 bytes of 4-bit
// indices into a fixed non-uniform table of 16 int8 levels (denser near 0).
// Nibble order is Q4_0's: weight j is the low nibble of qs[j], weight j + 16
// the high nibble (j < 16).
//   x = d * kIq4nlValues[index]
// 18 bytes per 32 weights = 4.5 bits per weight.
//===----------------------------------------------------------------------===//
#pragma once
#include <cstdint>

namespace llmc {

inline constexpr int kIq4nlBlockSize = 32;

/// The 16 levels (ggml's kvalues_iq4nl).
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

struct BlockIq4_NL {
  uint16_t d;                      // fp16 scale
  uint8_t qs[kIq4nlBlockSize / 2]; // 4-bit table indices
};
static_assert(sizeof(BlockIq4_NL) == 18, "IQ4_NL block must be 18 bytes");

} // namespace llmc
