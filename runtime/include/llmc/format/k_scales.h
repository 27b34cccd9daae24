//===- format/k_scales.h - 6-bit scale packing of Q4_K / Q5_K --*- C++ -*-===//
// Q4_K and Q5_K super-blocks carry 8 sub-block scales and 8 sub-block mins,
// 6 bits each, packed into 12 bytes:
//   bytes 0..3:  low 6 bits of scales 0..3, top 2 bits = high bits of scales 4..7
//   bytes 4..7:  low 6 bits of mins 0..3,   top 2 bits = high bits of mins 4..7
//   bytes 8..11: low nibble = low 4 bits of scales 4..7, high nibble = of mins 4..7
//===----------------------------------------------------------------------===//
#pragma once
#include <cstdint>

namespace llmc {

inline constexpr int kQK_K = 256;       // weights per K-quant super-block
inline constexpr int kKScaleBytes = 12; // packed scales/mins of Q4_K, Q5_K

/// Scale and min of sub-block j (0..7) from the 12 packed bytes.
inline void unpackKScaleMin(const uint8_t *s, int j, uint8_t &scale, uint8_t &min) {
  if (j < 4) {
    scale = s[j] & 63;
    min = s[j + 4] & 63;
  } else {
    scale = uint8_t((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4));
    min = uint8_t((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

} // namespace llmc
