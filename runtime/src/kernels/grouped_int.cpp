//===- grouped_int.cpp - Grouped integer weights: names, packing, RTN ------===//
// The parametric "gq" family (llmc/format/grouped_int.h): DType encoding and
// names, packing precomputed codes (for GPTQ-style quantizers) and back, the
// reference dequantizer and the round-to-nearest reference quantizer.
//===----------------------------------------------------------------------===//
#include "grouped_int_rows.h"
#include "quant_rows.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

namespace llmc {
namespace {

bool validBits(int bits) { return bits >= kGroupedIntMinBits && bits <= kGroupedIntMaxBits; }
bool validGroup(int64_t g) {
  return g >= kGroupedIntMinGroup && g <= kGroupedIntMaxGroup && g % kGroupedIntGroupMultiple == 0;
}

GroupedIntSpec requireGrouped(DType t, const char *what) {
  auto s = groupedIntSpec(t);
  if (!s)
    throw std::runtime_error(std::string(what) + ": " + std::string(dtypeName(t)) +
                             " is not a grouped-integer type");
  return *s;
}

// Writes 8 codes of B bits as B bytes.
template <int B> void storeCodes8(const uint8_t *codes, uint8_t *dst) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= uint64_t(codes[i]) << (i * B);
  std::memcpy(dst, &v, B);
}

template <int B> void unpackCodes(const uint8_t *src, uint8_t *codes, int64_t group) {
  for (int64_t j = 0; j < group; j += 8, src += B) {
    const uint64_t v = detail::loadCodes8<B>(src);
    for (int i = 0; i < 8; ++i)
      codes[j + i] = uint8_t(detail::codeAt<B>(v, i));
  }
}

template <int B> void packCodes(const uint8_t *codes, uint8_t *dst, int64_t group) {
  for (int64_t j = 0; j < group; j += 8, dst += B)
    storeCodes8<B>(codes + j, dst);
}

template <int B>
void dequantGroups(bool sym, const uint8_t *src, float *dst, int64_t groups, int64_t group,
                   int64_t blockBytes) {
  const int off = sym ? groupedIntSymOffset(B) : 0;
  for (int64_t g = 0; g < groups; ++g, src += blockBytes) {
    const float d = halfToFloat(detail::loadU16(src));
    const float m = sym ? 0.0f : halfToFloat(detail::loadU16(src + 2));
    const uint8_t *qs = src + (sym ? 2 : 4);
    for (int64_t j = 0; j < group; j += 8, qs += B) {
      const uint64_t v = detail::loadCodes8<B>(qs);
      for (int i = 0; i < 8; ++i)
        dst[j + i] = sym ? d * float(detail::codeAt<B>(v, i) - off)
                         : d * float(detail::codeAt<B>(v, i)) + m;
    }
    dst += group;
  }
}

// Rounded code q in [0, qmax]; NaN becomes 0 (fmax/fmin drop NaN).
uint8_t clampCode(float q, int qmax) {
  return uint8_t(std::fmin(std::fmax(q, 0.0f), float(qmax)));
}

// The next fp16 value toward -infinity (h finite).
uint16_t halfNextDown(uint16_t h) {
  if (h == 0x0000u)
    return 0x8001u; // +0 -> smallest negative subnormal
  return (h & 0x8000u) ? uint16_t(h + 1) : uint16_t(h - 1);
}

// RTN for one group: codes, stored (fp16) scale and minimum.
void quantizeGroup(const GroupedIntSpec &s, const float *w, uint8_t *codes, uint16_t &dBits,
                   uint16_t &mBits) {
  const int64_t G = s.group;
  const int qmax = (1 << s.bits) - 1;
  if (s.sym) {
    // Scale from the value of largest magnitude, sign included, so that this
    // value maps exactly to code 0 (= -2^(B-1) after the offset).
    const int off = groupedIntSymOffset(s.bits);
    float amax = 0.0f, vmax = 0.0f;
    for (int64_t j = 0; j < G; ++j)
      if (std::fabs(w[j]) > amax) {
        amax = std::fabs(w[j]);
        vmax = w[j];
      }
    dBits = floatToHalf(vmax / float(-off));
    mBits = 0;
    const float d = halfToFloat(dBits);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int64_t j = 0; j < G; ++j)
      codes[j] = clampCode(std::nearbyint(w[j] * id) + float(off), qmax);
    return;
  }
  float lo = w[0], hi = w[0];
  for (int64_t j = 1; j < G; ++j) {
    lo = std::min(lo, w[j]);
    hi = std::max(hi, w[j]);
  }
  // Stored minimum: lo rounded to fp16, stepped down one fp16 ulp if
  // rounding went above lo, so no weight lies below the grid.
  mBits = floatToHalf(lo);
  if (halfToFloat(mBits) > lo)
    mBits = halfNextDown(mBits);
  const float m = halfToFloat(mBits);
  // Span from the stored minimum so the top code still reaches hi.
  dBits = floatToHalf(std::max(hi - m, 0.0f) / float(qmax));
  const float d = halfToFloat(dBits);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int64_t j = 0; j < G; ++j)
    codes[j] = clampCode(std::nearbyint((w[j] - m) * id), qmax);
}

} // namespace

DType groupedIntDType(int bits, bool sym, int64_t group) {
  if (!validBits(bits))
    throw std::runtime_error("grouped-integer type: " + std::to_string(bits) +
                             " bits (2..8 supported)");
  if (!validGroup(group))
    throw std::runtime_error("grouped-integer type: group size " + std::to_string(group) +
                             " (must be a multiple of 8 in [8, 4096])");
  return DType(kGroupedIntTag | (sym ? 1u << 20 : 0u) | (uint32_t(bits) << 16) |
               uint32_t(group));
}

std::optional<GroupedIntSpec> groupedIntSpec(DType t) {
  const uint32_t v = uint32_t(t);
  if ((v & kGroupedIntTagMask) != kGroupedIntTag || (v & 0x00E00000u) != 0)
    return std::nullopt;
  GroupedIntSpec s{int((v >> 16) & 0xFu), ((v >> 20) & 1u) != 0, int64_t(v & 0xFFFFu)};
  if (!validBits(s.bits) || !validGroup(s.group))
    return std::nullopt;
  return s;
}

float roundToHalf(float f) { return halfToFloat(floatToHalf(f)); }

void packGroupedRow(DType t, const uint8_t *codes, const float *scales, const float *mins,
                    void *dst, int64_t n) {
  const GroupedIntSpec s = requireGrouped(t, "packGroupedRow");
  const int64_t groups = detail::groupedGroups(s, n, "packGroupedRow");
  if (!s.sym && groups > 0 && !mins)
    throw std::runtime_error("packGroupedRow: " + detail::groupedIntName(s) +
                             " is asymmetric and needs per-group minimums");
  const int limit = 1 << s.bits;
  for (int64_t i = 0; i < n; ++i)
    if (codes[i] >= limit)
      throw std::runtime_error("packGroupedRow: code " + std::to_string(codes[i]) +
                               " at element " + std::to_string(i) + " does not fit in " +
                               std::to_string(s.bits) + " bits");
  auto *out = static_cast<uint8_t *>(dst);
  const int64_t bb = detail::groupedBlockBytes(s);
  detail::withBits(s.bits, [&](auto B) {
    for (int64_t g = 0; g < groups; ++g) {
      uint8_t *blk = out + g * bb;
      detail::storeU16(blk, floatToHalf(scales[g]));
      if (!s.sym)
        detail::storeU16(blk + 2, floatToHalf(mins[g]));
      packCodes<B>(codes + g * s.group, blk + detail::groupedCodesOffset(s), s.group);
    }
  });
}

void unpackGroupedRow(DType t, const void *src, uint8_t *codes, float *scales, float *mins,
                      int64_t n) {
  const GroupedIntSpec s = requireGrouped(t, "unpackGroupedRow");
  const int64_t groups = detail::groupedGroups(s, n, "unpackGroupedRow");
  const auto *in = static_cast<const uint8_t *>(src);
  const int64_t bb = detail::groupedBlockBytes(s);
  detail::withBits(s.bits, [&](auto B) {
    for (int64_t g = 0; g < groups; ++g) {
      const uint8_t *blk = in + g * bb;
      if (scales)
        scales[g] = halfToFloat(detail::loadU16(blk));
      if (mins && !s.sym)
        mins[g] = halfToFloat(detail::loadU16(blk + 2));
      if (codes)
        unpackCodes<B>(blk + detail::groupedCodesOffset(s), codes + g * s.group, s.group);
    }
  });
}

namespace detail {

std::string groupedIntName(const GroupedIntSpec &s) {
  return "gq" + std::to_string(s.bits) + (s.sym ? "s" : "a") + "_g" + std::to_string(s.group);
}

std::optional<GroupedIntSpec> parseGroupedIntName(std::string_view name) {
  // gq <digit> (s|a) _g <digits, no leading zero>
  if (name.size() < 7 || name.substr(0, 2) != "gq")
    return std::nullopt;
  const char b = name[2], kind = name[3];
  if (b < '0' || b > '9' || (kind != 's' && kind != 'a') || name.substr(4, 2) != "_g")
    return std::nullopt;
  std::string_view digits = name.substr(6);
  if (digits.empty() || digits.size() > 4 || digits[0] == '0')
    return std::nullopt;
  int64_t group = 0;
  for (char c : digits) {
    if (c < '0' || c > '9')
      return std::nullopt;
    group = group * 10 + (c - '0');
  }
  GroupedIntSpec s{b - '0', kind == 's', group};
  if (!validBits(s.bits) || !validGroup(s.group))
    return std::nullopt;
  return s;
}

int64_t groupedGroups(const GroupedIntSpec &s, int64_t n, const char *what) {
  if (n < 0 || n % s.group != 0)
    throw std::runtime_error(std::string(what) + ": " + std::to_string(n) +
                             " elements is not a multiple of the " + groupedIntName(s) +
                             " group size " + std::to_string(s.group));
  return n / s.group;
}

void dequantGroupedRow(const GroupedIntSpec &s, const uint8_t *src, float *dst, int64_t n) {
  const int64_t groups = groupedGroups(s, n, "dequantizeRow");
  const int64_t bb = groupedBlockBytes(s);
  withBits(s.bits, [&](auto B) { dequantGroups<B>(s.sym, src, dst, groups, s.group, bb); });
}

void quantGroupedRowRef(const GroupedIntSpec &s, const float *src, uint8_t *dst, int64_t n) {
  const int64_t groups = groupedGroups(s, n, "quantizeRowRef");
  const int64_t bb = groupedBlockBytes(s);
  std::vector<uint8_t> codes(static_cast<size_t>(s.group));
  withBits(s.bits, [&](auto B) {
    for (int64_t g = 0; g < groups; ++g) {
      uint8_t *blk = dst + g * bb;
      uint16_t d = 0, m = 0;
      quantizeGroup(s, src + g * s.group, codes.data(), d, m);
      storeU16(blk, d);
      if (!s.sym)
        storeU16(blk + 2, m);
      packCodes<B>(codes.data(), blk + groupedCodesOffset(s), s.group);
    }
  });
}

} // namespace detail
} // namespace llmc
