//===- aaac_pack.cpp - AAAC rows and codebooks: packing and checks --------===//
// The writer side of llmc/format/aaac.h (scale fields with the codebook flag
// in the sign bit, codes as an LSB-first bitstream, fp16 codebooks) and the
// argument checks aaac.cpp shares.
//===----------------------------------------------------------------------===//
#include "aaac_rows.h"
#include "grouped_int_rows.h"
#include "quant_rows.h"

#include <cmath>
#include <cstring>
#include <stdexcept>

namespace llmc {
namespace detail {

std::string aaacName(const AaacSpec &s) {
  return "aaac" + std::to_string(s.bits) + "_g" + std::to_string(s.group);
}

AaacSpec requireAaac(DType t, const char *what) {
  auto s = aaacSpec(t);
  if (!s)
    throw std::runtime_error(std::string(what) + ": " + std::string(dtypeName(t)) +
                             " is not an aaac type");
  return *s;
}

int64_t aaacGroups(const AaacSpec &s, int64_t n, const char *what) {
  if (n < 0 || n % s.group != 0)
    throw std::runtime_error(std::string(what) + ": row of " + std::to_string(n) +
                             " weights is not a multiple of " + aaacName(s) + "'s group size " +
                             std::to_string(s.group));
  return n / s.group;
}

AaacTable aaacTable(const AaacSpec &s, const uint8_t *aux) {
  if (!aux)
    throw std::runtime_error(aaacName(s) + ": the matrix's codebooks (side data) are missing");
  AaacTable t{};
  const int k = aaacEntries(s.bits);
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < k; ++i)
      t.book[b][i] = halfToFloat(loadU16(aux + 2 * (b * k + i)));
  return t;
}

} // namespace detail

float aaacStoredScale(float magnitude) { return aaacScaleOf(aaacScaleField(magnitude, false)); }

uint16_t aaacScaleField(float magnitude, bool bookB) {
  const float a = std::fabs(magnitude);
  if (!std::isfinite(a) || a > kAaacMaxScale)
    throw std::runtime_error("aaac: scale " + std::to_string(magnitude) +
                             " does not fit in fp16 (finite, at most 65504)");
  uint16_t h = floatToHalf(std::fmax(a, kAaacMinScale)) & 0x7FFFu;
  return uint16_t(h | (bookB ? kAaacBookBBit : 0u));
}

float aaacScaleOf(uint16_t field) { return halfToFloat(uint16_t(field & 0x7FFFu)); }

void packAaacRow(DType t, const uint8_t *codes, const float *signedScales, void *dst, int64_t n) {
  const AaacSpec s = detail::requireAaac(t, "packAaacRow");
  const int64_t groups = detail::aaacGroups(s, n, "packAaacRow");
  const int limit = aaacEntries(s.bits);
  for (int64_t i = 0; i < n; ++i)
    if (codes[i] >= limit)
      throw std::runtime_error("packAaacRow: code " + std::to_string(codes[i]) + " at element " +
                               std::to_string(i) + " does not fit in " + std::to_string(s.bits) +
                               " bits");
  auto *out = static_cast<uint8_t *>(dst);
  const int64_t bb = aaacGroupBytes(s.bits, s.group);
  for (int64_t g = 0; g < groups; ++g) {
    uint8_t *blk = out + g * bb;
    const float sc = signedScales[g];
    if (std::isnan(sc))
      throw std::runtime_error("packAaacRow: scale of group " + std::to_string(g) + " is NaN");
    detail::storeU16(blk, aaacScaleField(sc, std::signbit(sc)));
    // 8 codes of B bits fill exactly B bytes of the stream.
    const uint8_t *c = codes + g * s.group;
    uint8_t *qs = blk + 2;
    for (int64_t j = 0; j < s.group; j += 8, qs += s.bits) {
      uint64_t v = 0;
      for (int i = 0; i < 8; ++i)
        v |= uint64_t(c[j + i]) << (i * s.bits);
      for (int b = 0; b < s.bits; ++b)
        qs[b] = uint8_t(v >> (8 * b));
    }
  }
}

void unpackAaacRow(DType t, const void *src, uint8_t *codes, float *signedScales, int64_t n) {
  const AaacSpec s = detail::requireAaac(t, "unpackAaacRow");
  const int64_t groups = detail::aaacGroups(s, n, "unpackAaacRow");
  const auto *in = static_cast<const uint8_t *>(src);
  const int64_t bb = aaacGroupBytes(s.bits, s.group);
  const uint64_t mask = (uint64_t(1) << s.bits) - 1;
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t *blk = in + g * bb;
    const uint16_t f = detail::loadU16(blk);
    if (signedScales)
      signedScales[g] = (f & kAaacBookBBit) ? -aaacScaleOf(f) : aaacScaleOf(f);
    if (!codes)
      continue;
    const uint8_t *qs = blk + 2;
    uint8_t *c = codes + g * s.group;
    for (int64_t j = 0; j < s.group; j += 8, qs += s.bits) {
      uint64_t v = 0;
      for (int b = 0; b < s.bits; ++b)
        v |= uint64_t(qs[b]) << (8 * b);
      for (int i = 0; i < 8; ++i)
        c[j + i] = uint8_t((v >> (i * s.bits)) & mask);
    }
  }
}

void packAaacCodebooks(DType t, const float *bookA, const float *bookB, void *dst) {
  const AaacSpec s = detail::requireAaac(t, "packAaacCodebooks");
  const int k = aaacEntries(s.bits);
  auto *out = static_cast<uint8_t *>(dst);
  for (int b = 0; b < 2; ++b) {
    const float *book = b ? bookB : bookA;
    for (int i = 0; i < k; ++i) {
      const uint16_t h = floatToHalf(book[i]);
      if ((h & 0x7C00u) == 0x7C00u)
        throw std::runtime_error("packAaacCodebooks: codebook " + std::string(b ? "B" : "A") +
                                 " entry " + std::to_string(i) + " (" + std::to_string(book[i]) +
                                 ") is not finite in fp16");
      detail::storeU16(out + 2 * (b * k + i), h);
    }
  }
}

void unpackAaacCodebooks(DType t, const void *src, float *bookA, float *bookB) {
  const AaacSpec s = detail::requireAaac(t, "unpackAaacCodebooks");
  const int k = aaacEntries(s.bits);
  const auto *in = static_cast<const uint8_t *>(src);
  for (int i = 0; i < k; ++i) {
    if (bookA)
      bookA[i] = halfToFloat(detail::loadU16(in + 2 * i));
    if (bookB)
      bookB[i] = halfToFloat(detail::loadU16(in + 2 * (k + i)));
  }
}

} // namespace llmc
