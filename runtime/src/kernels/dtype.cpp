//===- dtype.cpp - Weight storage types: table, sizes, conversion ----------===//
// The DType table (names, block geometry), fp16/bf16 conversions (bit exact,
// round to nearest even) and the dequantizeRow / quantizeRowRef dispatchers.
// The per-format block code lives in dequant_*.cpp and quant_ref.cpp;
// grouped-integer types (values outside the table) in grouped_int.cpp, their
// DTypeInfo built on first use and interned here.
//===----------------------------------------------------------------------===//
#include "llmc/dtype.h"
#include "family_rows.h"
#include "llmc/format/hbq.h"
#include "grouped_int_rows.h"
#include "quant_rows.h"

#include <cctype>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <string>

namespace llmc {
namespace {

// Indexed by DType; order must follow the enum.
constexpr DTypeInfo kInfos[] = {
    {"f32", 1, 4},     {"f16", 1, 2},     {"bf16", 1, 2},    {"q8_0", 32, 34},
    {"q4_0", 32, 18},  {"q4_1", 32, 20},  {"q5_0", 32, 22},  {"q5_1", 32, 24},
    {"q4_k", 256, 144}, {"q5_k", 256, 176}, {"q6_k", 256, 210}, {"q2_k", 256, 84},
    {"q3_k", 256, 110}, {"iq4_nl", 32, 18},  {"u8", 1, 1},
};
constexpr size_t kNumTypes = sizeof(kInfos) / sizeof(kInfos[0]);
static_assert(kNumTypes == size_t(DType::U8) + 1, "DType table out of sync");

uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Interned DTypeInfo of grouped-integer types: built once per type, never
// freed, so references and names handed out stay valid.
struct GroupedInfo {
  std::string name;
  DTypeInfo info;
};

const DTypeInfo &groupedInfo(DType t, const GroupedIntSpec &s) {
  static std::shared_mutex mu;
  static std::map<uint32_t, std::unique_ptr<GroupedInfo>> interned;
  {
    std::shared_lock<std::shared_mutex> lock(mu);
    auto it = interned.find(uint32_t(t));
    if (it != interned.end())
      return it->second->info;
  }
  std::unique_lock<std::shared_mutex> lock(mu);
  auto &slot = interned[uint32_t(t)];
  if (!slot) {
    auto g = std::make_unique<GroupedInfo>();
    g->name = detail::groupedIntName(s);
    g->info = DTypeInfo{g->name, s.group, detail::groupedBlockBytes(s)};
    slot = std::move(g);
  }
  return slot->info;
}

// Block geometry without touching the interned table (hot paths).
struct Geometry {
  int64_t block_size, block_bytes;
};
Geometry geometry(DType t) {
  if (auto s = groupedIntSpec(t))
    return {s->group, detail::groupedBlockBytes(*s)};
  if (auto f = detail::familyGeometry(t))
    return {f->block_size, f->block_bytes};
  const DTypeInfo &info = dtypeInfo(t);
  return {info.block_size, info.block_bytes};
}

int64_t checkedBlocks(DType t, int64_t n, const char *what) {
  const Geometry g = geometry(t);
  if (n < 0 || n % g.block_size != 0)
    throw std::runtime_error(std::string(what) + ": " + std::to_string(n) +
                             " elements is not a multiple of the " + std::string(dtypeName(t)) +
                             " block size " + std::to_string(g.block_size));
  return n / g.block_size;
}

} // namespace

const DTypeInfo &dtypeInfo(DType t) {
  size_t i = size_t(t);
  if (i < kNumTypes)
    return kInfos[i];
  if (auto s = groupedIntSpec(t))
    return groupedInfo(t, *s);
  if (const DTypeInfo *f = detail::familyInfo(t))
    return *f;
  throw std::runtime_error("unknown dtype id " + std::to_string(i));
}

std::optional<DType> dtypeFromName(std::string_view name) {
  std::string lower(name);
  for (char &c : lower)
    c = char(std::tolower(static_cast<unsigned char>(c)));
  for (size_t i = 0; i < kNumTypes; ++i)
    if (kInfos[i].name == lower)
      return DType(i);
  if (auto s = detail::parseGroupedIntName(lower))
    return groupedIntDType(*s);
  return detail::parseFamilyName(lower);
}

int64_t rowBytes(DType t, int64_t n) {
  return checkedBlocks(t, n, "rowBytes") * geometry(t).block_bytes;
}

double bitsPerWeight(DType t) {
  const Geometry g = geometry(t);
  return double(g.block_bytes) * 8.0 / double(g.block_size);
}

//===- fp16 / bf16 ---------------------------------------------------------===//

float halfToFloat(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F) // inf / NaN: keep the payload
    return bitsFloat(sign | 0x7F800000u | (mant << 13));
  if (exp == 0) {
    // zero or subnormal: mant * 2^-24 is exact in float
    float mag = float(mant) * 0x1p-24f;
    return bitsFloat(sign | floatBits(mag));
  }
  return bitsFloat(sign | ((exp + (127 - 15)) << 23) | (mant << 13));
}

uint16_t floatToHalf(float f) {
  const uint32_t u = floatBits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7FFFFFFFu;
  if (a >= 0x7F800000u) { // inf or NaN (NaN stays NaN: force a mantissa bit)
    if (a == 0x7F800000u)
      return uint16_t(sign | 0x7C00u);
    return uint16_t(sign | 0x7C00u | 0x200u | ((a >> 13) & 0x3FFu));
  }
  if (a >= 0x477FF000u) // >= 65520 rounds to infinity
    return uint16_t(sign | 0x7C00u);
  if (a < 0x38800000u) {
    // Result is subnormal (or zero): adding 0.5 aligns the half's subnormal
    // ulp (2^-24) with float's ulp at 0.5, so the FPU rounds (RNE) for us.
    float mag = bitsFloat(a) + 0.5f;
    return uint16_t(sign | (floatBits(mag) - 0x3F000000u));
  }
  // Normal: rebias the exponent and round the 13 dropped bits to nearest even.
  const uint32_t odd = (a >> 13) & 1u;
  a += (uint32_t(15 - 127) << 23) + 0xFFFu + odd;
  return uint16_t(sign | (a >> 13));
}

uint16_t floatToBf16(float f) {
  const uint32_t u = floatBits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) // NaN: truncate and force quiet
    return uint16_t((u >> 16) | 0x40u);
  return uint16_t((uint64_t(u) + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

//===- dispatch ------------------------------------------------------------===//

void dequantizeRow(DType t, const void *src, float *dst, int64_t n) {
  const int64_t nb = checkedBlocks(t, n, "dequantizeRow");
  const auto *s = static_cast<const uint8_t *>(src);
  switch (t) {
  case DType::F32: std::memcpy(dst, s, size_t(n) * 4); return;
  case DType::F16: detail::dequantF16(s, dst, n); return;
  case DType::BF16: detail::dequantBF16(s, dst, n); return;
  case DType::Q8_0: detail::dequantQ8_0(s, dst, nb); return;
  case DType::Q4_0: detail::dequantQ4_0(s, dst, nb); return;
  case DType::Q4_1: detail::dequantQ4_1(s, dst, nb); return;
  case DType::Q5_0: detail::dequantQ5_0(s, dst, nb); return;
  case DType::Q5_1: detail::dequantQ5_1(s, dst, nb); return;
  case DType::Q4_K: detail::dequantQ4_K(s, dst, nb); return;
  case DType::Q5_K: detail::dequantQ5_K(s, dst, nb); return;
  case DType::Q6_K: detail::dequantQ6_K(s, dst, nb); return;
  case DType::Q2_K: detail::dequantQ2_K(s, dst, nb); return;
  case DType::Q3_K: detail::dequantQ3_K(s, dst, nb); return;
  case DType::IQ4_NL: detail::dequantIq4_NL(s, dst, nb); return;
  case DType::U8:
    for (int64_t i = 0; i < n; ++i)
      dst[i] = float(s[i]);
    return;
  default:
    if (auto g = groupedIntSpec(t)) {
      detail::dequantGroupedRow(*g, s, dst, n);
      return;
    }
    if (auto h = hbqSpec(t)) {
      detail::hbqDequantRow(*h, s, dst, n);
      return;
    }
    if (needsAux(t))
      throw std::runtime_error("dequantizeRow: " + std::string(dtypeName(t)) +
                               " rows need their matrix's side data (dequantizeRowAux)");
    break;
  }
  throw std::runtime_error("dequantizeRow: unknown dtype");
}

void quantizeRowRef(DType t, const float *src, void *dst, int64_t n) {
  const int64_t nb = checkedBlocks(t, n, "quantizeRowRef");
  auto *d = static_cast<uint8_t *>(dst);
  switch (t) {
  case DType::F32: std::memcpy(d, src, size_t(n) * 4); return;
  case DType::F16:
    for (int64_t i = 0; i < n; ++i)
      detail::storeU16(d + 2 * i, floatToHalf(src[i]));
    return;
  case DType::BF16:
    for (int64_t i = 0; i < n; ++i)
      detail::storeU16(d + 2 * i, floatToBf16(src[i]));
    return;
  case DType::Q8_0: detail::quantQ8_0(src, d, nb); return;
  case DType::Q4_0: detail::quantQ4_0(src, d, nb); return;
  case DType::Q4_1: detail::quantQ4_1(src, d, nb); return;
  case DType::Q5_0: detail::quantQ5_0(src, d, nb); return;
  case DType::Q5_1: detail::quantQ5_1(src, d, nb); return;
  default:
    if (auto g = groupedIntSpec(t)) {
      detail::quantGroupedRowRef(*g, src, d, n);
      return;
    }
    if (auto h = hbqSpec(t)) { // data-free: HBQ-A's mix table
      hbqQuantizeRow(*h, HbqTable::Mix, src, d, n);
      return;
    }
    break;
  }
  throw std::runtime_error("quantizeRowRef: no reference quantizer for " +
                           std::string(dtypeName(t)));
}

} // namespace llmc
