//===- qtea_rows.h - Shared pieces of the QTEA row code ---------*- C++ -*-===//
// The decode tables (byte -> five trits, E4M3 code -> float), a view of one
// matrix's side data (llmc/format/qtea.h) and the salient-residual part of a
// row, used by qtea.cpp (layout, dequantization) and qtea_dot.cpp (fused
// dots); plus the portable dot for tests. Internal to the runtime.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/format/qtea.h"

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace llmc::qtea::detail {

/// Byte -> its five trits in {-1, 0, 1}, padded to 8 (zeros); bytes 243..255
/// (invalid) decode to zeros.
struct TritTable {
  int8_t t[256][8];
  constexpr TritTable() : t{} {
    for (int b = 0; b < 243; ++b) {
      int v = b;
      for (int i = 0; i < 5; ++i) {
        t[b][i] = int8_t(v % 3 - 1);
        v /= 3;
      }
    }
  }
};
inline constexpr TritTable kTrits{};

/// All 256 E4M3 values (NaN codes included).
const float *fp8Table();

inline float loadF32(const uint8_t *p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}
inline int32_t loadI32(const uint8_t *p) {
  int32_t i;
  std::memcpy(&i, p, 4);
  return i;
}

/// One matrix's side data.
struct AuxView {
  AuxLayout L;
  const uint8_t *aux;
  const uint8_t *v() const { return aux + L.vOffset; } // f32 [cols], unaligned
  int32_t idx(int64_t s) const { return loadI32(aux + L.idxOffset + 4 * s); }
  float scale(int64_t s) const { return loadF32(aux + L.scaleOffset + 4 * s); }
  const uint8_t *quad(int64_t q) const { return aux + L.quadOffset + q * L.quadBytes; }
};

/// Checks (rows, r, n against the group) and returns the view; `what` names
/// the caller in errors.
AuxView auxView(const QteaSpec &s, const uint8_t *aux, int64_t r, int64_t rows, int64_t n,
                const char *what);

/// Calls f(column, value) for each salient residual entry of row r (the
/// salient columns whose kept row in this quad is r): four positions per
/// byte are matched at once and only the matches are visited. Throws if a
/// stored column index is out of range (malformed side data).
template <class F> inline void forEachResidual(const AuxView &a, int64_t r, int64_t n, F &&f) {
  const int64_t S = a.L.salient;
  if (S == 0)
    return;
  const uint8_t *q = a.quad(r / kQuadRows);
  const uint8_t *pos = q + S;
  const unsigned want = unsigned(r % kQuadRows) * 0x55u; // r % 4 in all four fields
  const float *tab = fp8Table();
  const int64_t nb = (S + 3) / 4;
  for (int64_t b = 0; b < nb; ++b) {
    const unsigned diff = pos[b] ^ want;
    unsigned m = ~(diff | (diff >> 1)) & 0x55u; // bit 2i: field i equals r % 4
    if (b == nb - 1 && S % 4 != 0)
      m &= (1u << (2 * (S % 4))) - 1; // fields past S are padding
    while (m) {
      const int64_t s = 4 * b + (__builtin_ctz(m) >> 1);
      m &= m - 1;
      const int32_t c = a.idx(s);
      if (c < 0 || c >= n)
        throw std::runtime_error("qtea: salient column index " + std::to_string(c) +
                                 " out of range for rows of " + std::to_string(n) +
                                 " (malformed side data)");
      f(int64_t(c), tab[q[s]] * a.scale(s));
    }
  }
}

} // namespace llmc::qtea::detail

namespace llmc::kernels {
/// The portable QTEA dot, whatever the build targets (for tests); same
/// contract as qteaDotRows (family_rows.h).
void qteaDotRowsScalar(const QteaSpec &s, const uint8_t *row, const uint8_t *aux, int64_t r,
                       int64_t rows, int64_t n, const float *x, int64_t ldx, int nx, float *out,
                       int64_t ldo);
/// Whether qteaDotRows uses the AVX2 kernel in this build.
bool haveSimdQteaDot();
} // namespace llmc::kernels
