//===- grouped_int_rows.h - Grouped integer rows (internal) ----*- C++ -*-===//
// Helpers behind the grouped-integer DType family: names, bitstream code
// access, reference (de)quantization. dtype.cpp dispatches here; the fused
// dot product is in dot_grouped.cpp. Layout: llmc/format/grouped_int.h.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/dtype.h"
#include "llmc/format/grouped_int.h"

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

namespace llmc::detail {

/// "gq4a_g64" for {4, false, 64}.
std::string groupedIntName(const GroupedIntSpec &s);
/// Parses a lower-case grouped-integer name; nullopt if malformed or out of
/// range.
std::optional<GroupedIntSpec> parseGroupedIntName(std::string_view lower);

inline int64_t groupedBlockBytes(const GroupedIntSpec &s) {
  return groupedIntBlockBytes(s.bits, s.sym, s.group);
}
/// Byte offset of the codes inside a block.
inline int groupedCodesOffset(const GroupedIntSpec &s) { return s.sym ? 2 : 4; }

/// Number of groups in a row of n; throws std::runtime_error (prefixed by
/// `what`, naming n and the group size) unless the group divides n.
int64_t groupedGroups(const GroupedIntSpec &s, int64_t n, const char *what);

/// The 8 codes of B bits stored in the B bytes at p (little-endian stream).
/// Reads exactly those B bytes, as two overlapping register loads (a
/// B-byte memcpy into a zeroed word would stall on store forwarding).
template <int B> inline uint64_t loadCodes8(const uint8_t *p) {
  if constexpr (B == 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
  } else if constexpr (B >= 4) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + B - 4, 4);
    return uint64_t(lo) | (uint64_t(hi) << (8 * (B - 4)));
  } else {
    uint16_t lo, hi;
    std::memcpy(&lo, p, 2);
    std::memcpy(&hi, p + B - 2, 2);
    return uint64_t(lo) | (uint64_t(hi) << (8 * (B - 2)));
  }
}
template <int B> inline int codeAt(uint64_t v, int i) {
  return int((v >> (i * B)) & ((1u << B) - 1u));
}

void dequantGroupedRow(const GroupedIntSpec &s, const uint8_t *src, float *dst, int64_t n);
void quantGroupedRowRef(const GroupedIntSpec &s, const float *src, uint8_t *dst, int64_t n);

/// Calls f(std::integral_constant<int, B>{}) for the runtime bit count.
template <class F> inline decltype(auto) withBits(int bits, F &&f) {
  switch (bits) {
  case 2: return f(std::integral_constant<int, 2>{});
  case 3: return f(std::integral_constant<int, 3>{});
  case 4: return f(std::integral_constant<int, 4>{});
  case 5: return f(std::integral_constant<int, 5>{});
  case 6: return f(std::integral_constant<int, 6>{});
  case 7: return f(std::integral_constant<int, 7>{});
  default: return f(std::integral_constant<int, 8>{});
  }
}

} // namespace llmc::detail
