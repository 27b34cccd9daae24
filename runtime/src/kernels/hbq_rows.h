//===- hbq_rows.h - HBQ rows (internal) ------------------------*- C++ -*-===//
// What hbq.cpp (format helpers, dequantization), hbq_dot.cpp (fused dots)
// and hbq_quant.cpp (the quantizer) share: block geometry checks, the
// constant tables (E5M3 scales, L2 tables, element sets: the one definition
// of the numbers in llmc/format/hbq.h, inline so kernels index them without
// calls) and the code bitstream reader.
//===----------------------------------------------------------------------===//
#pragma once
#include "family_rows.h"
#include "llmc/format/hbq.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

namespace llmc::detail {

/// "hbq4_b64".
std::string hbqName(const HbqSpec &s);

/// Number of L1 blocks in a row of n; throws std::runtime_error (prefixed by
/// `what`) unless the block divides n.
int64_t hbqBlocks(const HbqSpec &s, int64_t n, const char *what);

//===- Constant tables (inline so kernels index them without calls) ----===//

constexpr float hbqPow2(int e) {
  float v = 1.0f;
  for (; e > 0; --e)
    v *= 2.0f;
  for (; e < 0; ++e)
    v *= 0.5f;
  return v;
}

/// The 256 E5M3 scale values, indexed by code (exact: 4 significant bits).
struct HbqScaleValues {
  float v[256];
};
constexpr HbqScaleValues makeHbqScales() {
  HbqScaleValues t{};
  for (int c = 0; c < 256; ++c) {
    const int e = c >> 3, m = c & 7;
    t.v[c] = e == 0 ? float(m) * hbqPow2(-17) : float(8 + m) * hbqPow2(e - 18);
  }
  return t;
}
inline constexpr HbqScaleValues kHbqScales = makeHbqScales();

/// L2 tables by table byte (rows of invalid bytes are zero).
inline constexpr float kHbqL2[8][4] = {
    {1.0f, 1.25f, 1.5f, 1.75f},   // 0: mix, FP-1
    {1.0f, 1.125f, 1.25f, 1.375f}, // 1: mix, FP-10
    {1.0f, 1.25f, 1.5f, 1.75f},   // 2: FP-1
    {0, 0, 0, 0},
    {1.0f, 1.125f, 1.25f, 1.375f}, // 4: FP-10
    {0, 0, 0, 0},
    {1.0f, 2.0f, 3.0f, 4.0f},     // 6: INT
    {0, 0, 0, 0},
};
/// Bit i set: byte i is a valid table byte.
inline constexpr unsigned kHbqValidTableBytes = 0x57;
inline constexpr bool hbqValidTableByte(uint8_t b) {
  return b < 8 && ((kHbqValidTableBytes >> b) & 1u);
}

/// Element magnitudes by bits - 2, padded to 8 lanes (see llmc/format/hbq.h).
inline constexpr float kHbqMagnitudes[3][8] = {
    {0.5f, 1.5f, 0, 0, 0, 0, 0, 0},                 // 2 bits: uniform, no zero
    {0.0f, 1.0f, 2.0f, 4.0f, 0, 0, 0, 0},           // 3 bits: E2M0
    {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f}, // 4 bits: FP4 E2M1
};

/// The value of every `bits`-bit code (sign bit on top), by bits - 2.
struct HbqSignedValues {
  float v[16];
};
constexpr HbqSignedValues makeHbqSigned(int bits) {
  HbqSignedValues t{};
  const int half = 1 << (bits - 1);
  for (int c = 0; c < 2 * half; ++c) {
    const float m = kHbqMagnitudes[bits - 2][c & (half - 1)];
    t.v[c] = (c & half) ? -m : m;
  }
  return t;
}
inline constexpr HbqSignedValues kHbqSigned[3] = {makeHbqSigned(2), makeHbqSigned(3),
                                                  makeHbqSigned(4)};

/// Throws the std::runtime_error for block b's invalid table byte.
[[noreturn]] void hbqBadTableByte(const HbqSpec &s, uint8_t tableByte, int64_t b);

/// The L2 table of block b's byte 2, or throws (a corrupt or foreign row).
inline const float *hbqTableOf(const HbqSpec &s, uint8_t tableByte, int64_t b) {
  if (__builtin_expect(!hbqValidTableByte(tableByte), 0))
    hbqBadTableByte(s, tableByte, b);
  return kHbqL2[tableByte];
}

/// The 8 codes of B bits stored in the B bytes at p, as one word (8*B <= 32
/// bits), reading exactly those bytes.
template <int B> inline uint32_t hbqLoad8(const uint8_t *p) {
  if constexpr (B == 4) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
  } else if constexpr (B == 3) {
    uint16_t lo, hi;
    std::memcpy(&lo, p, 2);
    std::memcpy(&hi, p + 1, 2);
    return uint32_t(lo) | uint32_t(hi) << 8;
  } else {
    static_assert(B == 2, "hbq elements are 2..4 bits");
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
  }
}

/// Calls f(std::integral_constant<int, bits>) for bits in 2..4.
template <class F> decltype(auto) hbqWithBits(int bits, F &&f) {
  switch (bits) {
  case 2: return f(std::integral_constant<int, 2>{});
  case 3: return f(std::integral_constant<int, 3>{});
  default: return f(std::integral_constant<int, 4>{});
  }
}

} // namespace llmc::detail

namespace llmc::kernels {
/// The portable kernel behind hbqDotRows, whatever the build targets (tests).
void hbqDotRowsScalar(const HbqSpec &s, const uint8_t *row, int64_t n, const float *x,
                      int64_t ldx, int nx, float *out, int64_t ldo);
/// Whether hbqDotRows uses SIMD kernels in this build.
bool haveSimdHbqDot();
} // namespace llmc::kernels
