//===- hbq.cpp - HBQ rows: scale/element/table helpers, dequantization ----===//
// The numeric building blocks of llmc/format/hbq.h (E5M3 scales, element
// sets, L2 tables) and the reference row dequantizer behind dequantizeRow.
// The fused dots are in hbq_dot.cpp, the quantizer in hbq_quant.cpp.
//===----------------------------------------------------------------------===//
#include "hbq_rows.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace llmc {
namespace {

void checkBits(int bits, const char *what) {
  if (bits < 2 || bits > 4)
    throw std::runtime_error(std::string(what) + ": " + std::to_string(bits) +
                             "-bit hbq elements (2..4 supported)");
}

} // namespace

std::optional<HbqTable> hbqTableFromName(std::string_view name) {
  if (name == "mix")
    return HbqTable::Mix;
  if (name == "fp1")
    return HbqTable::Fp1;
  if (name == "fp10")
    return HbqTable::Fp10;
  if (name == "int")
    return HbqTable::Int;
  return std::nullopt;
}

const char *hbqTableName(HbqTable t) {
  switch (t) {
  case HbqTable::Mix: return "mix";
  case HbqTable::Fp1: return "fp1";
  case HbqTable::Fp10: return "fp10";
  case HbqTable::Int: return "int";
  }
  return "?";
}

static_assert(detail::hbqValidTableByte(hbqTableByte(HbqTable::Mix, false)) &&
                  detail::hbqValidTableByte(hbqTableByte(HbqTable::Mix, true)) &&
                  detail::hbqValidTableByte(hbqTableByte(HbqTable::Fp1)) &&
                  detail::hbqValidTableByte(hbqTableByte(HbqTable::Fp10)) &&
                  detail::hbqValidTableByte(hbqTableByte(HbqTable::Int)),
              "table bytes and kHbqL2 out of sync");

const float *hbqL2Values(uint8_t b) {
  return detail::hbqValidTableByte(b) ? detail::kHbqL2[b] : nullptr;
}

float hbqScaleDecode(uint8_t code) { return detail::kHbqScales.v[code]; }

uint8_t hbqScaleEncode(float v) {
  if (!std::isfinite(v) || v < 0.0f)
    throw std::runtime_error("hbq: E5M3 scale of " + std::to_string(v) +
                             " (must be finite and >= 0)");
  const float *t = detail::kHbqScales.v;
  // First code above v; v lies in [t[c-1], t[c]).
  const int c = int(std::upper_bound(t, t + 256, v) - t);
  if (c >= 256)
    return 255; // saturate
  // Midpoints of neighbouring codes have 5 significant bits: exact in float.
  const float mid = 0.5f * (t[c - 1] + t[c]);
  return uint8_t(v >= mid ? c : c - 1);
}

const float *hbqMagnitudes(int bits) {
  checkBits(bits, "hbqMagnitudes");
  return detail::kHbqMagnitudes[bits - 2];
}

int hbqMagnitudeCount(int bits) {
  checkBits(bits, "hbqMagnitudeCount");
  return 1 << (bits - 1);
}

float hbqElementMax(int bits) { return hbqMagnitudes(bits)[hbqMagnitudeCount(bits) - 1]; }

uint8_t hbqElementEncode(int bits, float v) {
  const float *mag = hbqMagnitudes(bits);
  const int k = hbqMagnitudeCount(bits);
  const float a = std::fabs(v);
  int idx = 0;
  for (int j = 0; j + 1 < k; ++j) // midpoints are exact (one more bit)
    idx += a >= 0.5f * (mag[j] + mag[j + 1]);
  const bool neg = v < 0.0f && mag[idx] != 0.0f;
  return uint8_t(idx | (neg ? k : 0));
}

float hbqElementDecode(int bits, uint8_t code) {
  checkBits(bits, "hbqElementDecode");
  if (code >= (1u << bits))
    throw std::runtime_error("hbqElementDecode: code " + std::to_string(code) + " has more than " +
                             std::to_string(bits) + " bits");
  return detail::kHbqSigned[bits - 2].v[code];
}

namespace detail {

std::string hbqName(const HbqSpec &s) {
  return "hbq" + std::to_string(s.bits) + "_b" + std::to_string(s.block);
}

int64_t hbqBlocks(const HbqSpec &s, int64_t n, const char *what) {
  if (s.bits < 2 || s.bits > 4 || s.block < 32 || s.block % 32 != 0)
    throw std::runtime_error(std::string(what) + ": bad hbq spec " + hbqName(s));
  if (n < 0 || n % s.block != 0)
    throw std::runtime_error(std::string(what) + ": " + hbqName(s) + " row of " +
                             std::to_string(n) + " weights is not a multiple of the block size " +
                             std::to_string(s.block));
  return n / s.block;
}

void hbqBadTableByte(const HbqSpec &s, uint8_t tableByte, int64_t b) {
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02x", tableByte);
  throw std::runtime_error(hbqName(s) + ": block " + std::to_string(b) +
                           " has an invalid L2 table byte " + hex + " (corrupt row?)");
}

namespace {
template <int B>
void dequantRows(const HbqSpec &s, const uint8_t *row, float *dst, int64_t blocks) {
  const int64_t bytes = hbqBlockBytes(s), sub = s.block / kHbqSubBlocks;
  const float *scale = kHbqScales.v;
  const float *val = kHbqSigned[B - 2].v;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t *blk = row + b * bytes;
    const float *t = hbqTableOf(s, blk[2], b);
    const float s1 = scale[blk[0]];
    const uint8_t *qs = blk + kHbqHeaderBytes;
    for (int k = 0; k < kHbqSubBlocks; ++k) {
      const float st = s1 * t[(blk[1] >> (2 * k)) & 3];
      for (int64_t j = 0; j < sub; j += 8, qs += B, dst += 8) {
        const uint32_t w = hbqLoad8<B>(qs);
        for (int i = 0; i < 8; ++i)
          dst[i] = st * val[(w >> (i * B)) & ((1u << B) - 1)];
      }
    }
  }
}
} // namespace

void hbqDequantRow(const HbqSpec &s, const uint8_t *row, float *dst, int64_t n) {
  const int64_t blocks = hbqBlocks(s, n, "dequantizeRow");
  hbqWithBits(s.bits, [&](auto B) { dequantRows<B>(s, row, dst, blocks); });
}

} // namespace detail
} // namespace llmc
