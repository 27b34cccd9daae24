//===- families.cpp - Names, geometry and dispatch of AAAC, QTEA, HBQ ------===//
// DType encoding of the parametric families (a tag in the top byte, like
// grouped integers): 'A' aaac: bits << 16 | group; 'T' qtea: salientPct << 16
// | group; 'H' hbq: bits << 16 | block. Their DTypeInfo is interned on first
// use. The row code itself lives in aaac.cpp, qtea.cpp and hbq.cpp.
//===----------------------------------------------------------------------===//
#include "family_rows.h"

#include <charconv>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <string>

namespace llmc {
namespace {

constexpr uint32_t kTagMask = 0xFF000000u;
constexpr uint32_t kAaacTag = 0x41000000u; // 'A'
constexpr uint32_t kQteaTag = 0x54000000u; // 'T'
constexpr uint32_t kHbqTag = 0x48000000u;  // 'H'

bool validGroup(int64_t g) { return g >= 8 && g <= 4096 && g % 8 == 0; }

std::string nameOf(DType t) {
  if (auto a = aaacSpec(t))
    return "aaac" + std::to_string(a->bits) + "_g" + std::to_string(a->group);
  if (auto q = qteaSpec(t))
    return "qtea_g" + std::to_string(q->group) + "_s" + std::to_string(q->salientPct);
  if (auto h = hbqSpec(t))
    return "hbq" + std::to_string(h->bits) + "_b" + std::to_string(h->block);
  return {};
}

/// Parses a decimal without sign or leading zeros; -1 if `s` is not one.
int64_t number(std::string_view s) {
  if (s.empty() || s.size() > 6 || (s.size() > 1 && s[0] == '0'))
    return -1;
  int64_t v = 0;
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size() ? v : -1;
}

} // namespace

DType aaacDType(int bits, int64_t group) {
  if (bits < 2 || bits > 4)
    throw std::runtime_error("aaac type: " + std::to_string(bits) + " bits (2..4 supported)");
  if (!validGroup(group))
    throw std::runtime_error("aaac type: group size " + std::to_string(group) +
                             " (must be a multiple of 8 in [8, 4096])");
  return DType(kAaacTag | uint32_t(bits) << 16 | uint32_t(group));
}

std::optional<AaacSpec> aaacSpec(DType t) {
  const uint32_t v = uint32_t(t);
  if ((v & kTagMask) != kAaacTag)
    return std::nullopt;
  AaacSpec s{int((v >> 16) & 0xFFu), int64_t(v & 0xFFFFu)};
  if (s.bits < 2 || s.bits > 4 || !validGroup(s.group))
    return std::nullopt;
  return s;
}

DType qteaDType(int64_t group, int salientPct) {
  if (!validGroup(group))
    throw std::runtime_error("qtea type: group size " + std::to_string(group) +
                             " (must be a multiple of 8 in [8, 4096])");
  if (salientPct < 0 || salientPct > 50)
    throw std::runtime_error("qtea type: salient share " + std::to_string(salientPct) +
                             "% (0..50 supported)");
  return DType(kQteaTag | uint32_t(salientPct) << 16 | uint32_t(group));
}

std::optional<QteaSpec> qteaSpec(DType t) {
  const uint32_t v = uint32_t(t);
  if ((v & kTagMask) != kQteaTag)
    return std::nullopt;
  QteaSpec s{int64_t(v & 0xFFFFu), int((v >> 16) & 0xFFu)};
  if (!validGroup(s.group) || s.salientPct > 50)
    return std::nullopt;
  return s;
}

DType hbqDType(int bits, int64_t block) {
  if (bits < 2 || bits > 4)
    throw std::runtime_error("hbq type: " + std::to_string(bits) +
                             "-bit elements (2..4 supported)");
  if (block < 32 || block > 4096 || block % 32 != 0)
    throw std::runtime_error("hbq type: block size " + std::to_string(block) +
                             " (must be a multiple of 32 in [32, 4096])");
  return DType(kHbqTag | uint32_t(bits) << 16 | uint32_t(block));
}

std::optional<HbqSpec> hbqSpec(DType t) {
  const uint32_t v = uint32_t(t);
  if ((v & kTagMask) != kHbqTag)
    return std::nullopt;
  HbqSpec s{int((v >> 16) & 0xFFu), int64_t(v & 0xFFFFu)};
  if (s.bits < 2 || s.bits > 4 || s.block < 32 || s.block > 4096 || s.block % 32 != 0)
    return std::nullopt;
  return s;
}

bool needsAux(DType t) { return aaacSpec(t).has_value() || qteaSpec(t).has_value(); }

int64_t auxBytes(DType t, int64_t rows, int64_t cols) {
  if (auto a = aaacSpec(t))
    return detail::aaacAuxBytes(*a, rows, cols);
  if (auto q = qteaSpec(t))
    return detail::qteaAuxBytes(*q, rows, cols);
  return 0;
}

void dequantizeRowAux(DType t, const void *row, const void *aux, int64_t r, int64_t rows,
                      float *dst, int64_t n) {
  const auto *src = static_cast<const uint8_t *>(row);
  const auto *side = static_cast<const uint8_t *>(aux);
  if (auto a = aaacSpec(t)) {
    (void)rowBytes(t, n); // checks n against the group
    if (!side)
      throw std::runtime_error("dequantizeRowAux: " + nameOf(t) + " needs its side data");
    detail::aaacDequantRow(*a, src, side, dst, n);
    return;
  }
  if (auto q = qteaSpec(t)) {
    (void)rowBytes(t, n);
    if (!side)
      throw std::runtime_error("dequantizeRowAux: " + nameOf(t) + " needs its side data");
    if (r < 0 || r >= rows)
      throw std::runtime_error("dequantizeRowAux: row " + std::to_string(r) + " of " +
                               std::to_string(rows));
    detail::qteaDequantRow(*q, src, side, r, rows, dst, n);
    return;
  }
  dequantizeRow(t, row, dst, n);
}

namespace detail {

std::optional<FamilyGeometry> familyGeometry(DType t) {
  if (auto a = aaacSpec(t))
    return FamilyGeometry{a->group, aaacBlockBytes(*a)};
  if (auto q = qteaSpec(t))
    return FamilyGeometry{q->group, qteaBlockBytes(*q)};
  if (auto h = hbqSpec(t))
    return FamilyGeometry{h->block, hbqBlockBytes(*h)};
  return std::nullopt;
}

const DTypeInfo *familyInfo(DType t) {
  auto g = familyGeometry(t);
  if (!g)
    return nullptr;
  struct Interned {
    std::string name;
    DTypeInfo info;
  };
  static std::shared_mutex mu;
  static std::map<uint32_t, std::unique_ptr<Interned>> interned;
  {
    std::shared_lock<std::shared_mutex> lock(mu);
    auto it = interned.find(uint32_t(t));
    if (it != interned.end())
      return &it->second->info;
  }
  std::unique_lock<std::shared_mutex> lock(mu);
  auto &slot = interned[uint32_t(t)];
  if (!slot) {
    auto i = std::make_unique<Interned>();
    i->name = nameOf(t);
    i->info = DTypeInfo{i->name, g->block_size, g->block_bytes};
    slot = std::move(i);
  }
  return &slot->info;
}

std::optional<DType> parseFamilyName(std::string_view s) {
  auto tryMake = [](auto make) -> std::optional<DType> {
    try {
      return make();
    } catch (const std::exception &) {
      return std::nullopt;
    }
  };
  auto split = [&](std::string_view rest, std::string_view sep, int64_t &a, int64_t &b) {
    size_t k = rest.find(sep);
    if (k == std::string_view::npos)
      return false;
    a = number(rest.substr(0, k));
    b = number(rest.substr(k + sep.size()));
    return a >= 0 && b >= 0;
  };
  int64_t a = 0, b = 0;
  if (s.rfind("aaac", 0) == 0 && split(s.substr(4), "_g", a, b))
    return tryMake([&] { return aaacDType(int(a), b); });
  if (s.rfind("qtea_g", 0) == 0 && split(s.substr(6), "_s", a, b))
    return tryMake([&] { return qteaDType(a, int(b)); });
  if (s.rfind("hbq", 0) == 0 && split(s.substr(3), "_b", a, b))
    return tryMake([&] { return hbqDType(int(a), b); });
  return std::nullopt;
}

} // namespace detail

namespace kernels {

bool isFamilyType(DType t) { return detail::familyGeometry(t).has_value(); }

void familyDotRows(DType t, const uint8_t *row, const uint8_t *aux, int64_t r, int64_t rows,
                   int64_t n, const float *x, int64_t ldx, int nx, float *out, int64_t ldo) {
  if (auto a = aaacSpec(t))
    return aaacDotRows(*a, row, aux, n, x, ldx, nx, out, ldo);
  if (auto q = qteaSpec(t))
    return qteaDotRows(*q, row, aux, r, rows, n, x, ldx, nx, out, ldo);
  if (auto h = hbqSpec(t))
    return hbqDotRows(*h, row, n, x, ldx, nx, out, ldo);
  throw std::runtime_error("familyDotRows: not an aaac/qtea/hbq type");
}

} // namespace kernels
} // namespace llmc
