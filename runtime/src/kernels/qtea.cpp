//===- qtea.cpp - QTEA rows: layout, packing, FP8, dequantization ---------===//
// The storage format of llmc/format/qtea.h: side-data layout, trit and FP8
// E4M3 coding, pack/unpack of a whole matrix, and the row dequantizer the
// runtime uses for prefill (family_rows.h). The fused dots are in
// qtea_dot.cpp.
//===----------------------------------------------------------------------===//
#include "family_rows.h"
#include "qtea_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace llmc::qtea {

namespace {
[[noreturn]] void fail(const std::string &msg) { throw std::runtime_error("qtea: " + msg); }

std::string dims(int64_t rows, int64_t cols) {
  return std::to_string(rows) + "x" + std::to_string(cols);
}

void storeU16(uint8_t *p, uint16_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
}
uint16_t loadU16(const uint8_t *p) { return uint16_t(p[0] | p[1] << 8); }
} // namespace

AuxLayout auxLayout(const QteaSpec &s, int64_t rows, int64_t cols) {
  if (rows <= 0 || rows % kQuadRows != 0)
    fail("a " + dims(rows, cols) + " matrix has " + std::to_string(rows) +
         " rows, not a positive multiple of 4 (the 1:4 salient residual pattern)");
  if (cols <= 0)
    fail("a " + dims(rows, cols) + " matrix has no columns");
  AuxLayout L;
  L.salient = salientCount(cols, s.salientPct);
  L.vOffset = 0;
  L.idxOffset = 4 * cols;
  L.scaleOffset = L.idxOffset + 4 * L.salient;
  L.quadOffset = L.scaleOffset + 4 * L.salient;
  L.quadBytes = L.salient + (L.salient + 3) / 4;
  L.total = L.quadOffset + rows / kQuadRows * L.quadBytes;
  return L;
}

void packTrits(const int8_t *t, int64_t n, uint8_t *dst) {
  for (int64_t b = 0; b * 5 < n; ++b) {
    int v = 0;
    for (int i = 4; i >= 0; --i) {
      const int64_t k = b * 5 + i;
      int digit = 0;
      if (k < n) {
        if (t[k] < -1 || t[k] > 1)
          fail("ternary code " + std::to_string(int(t[k])) + " at " + std::to_string(k) +
               " is not -1, 0 or 1");
        digit = t[k] + 1;
      }
      v = v * 3 + digit;
    }
    dst[b] = uint8_t(v);
  }
}

void unpackTrits(const uint8_t *src, int64_t n, int8_t *t) {
  for (int64_t b = 0; b * 5 < n; ++b) {
    if (src[b] >= 243)
      fail("trit byte " + std::to_string(int(src[b])) + " at " + std::to_string(b) +
           " is not a valid base-3 group of five (must be < 243)");
    for (int i = 0; i < 5 && b * 5 + i < n; ++i)
      t[b * 5 + i] = detail::kTrits.t[src[b]][i];
  }
}

uint8_t fp8e4m3Encode(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x))
    return uint8_t(sign | 0x7F);
  const double a = std::fabs(double(x));
  if (a >= 448.0) // saturate (values in (448, 464) would round to 448 anyway)
    return uint8_t(sign | 0x7E);
  if (a == 0.0)
    return sign;
  int e2 = 0;
  (void)std::frexp(a, &e2);         // a = f * 2^e2, f in [0.5, 1)
  int E = std::max(e2 - 1, -6);     // exponent of the leading bit; -6 = subnormal range
  const double q = std::ldexp(a, 3 - E); // exact: mantissa with 3 fraction bits
  double m = std::floor(q);
  const double frac = q - m;
  if (frac > 0.5 || (frac == 0.5 && std::fmod(m, 2.0) != 0.0))
    m += 1.0; // nearest, ties to even
  int mi = int(m);
  if (mi >= 16) { // carried into the next binade
    mi = 8;
    ++E;
  }
  if (mi < 8) // subnormal (E == -6)
    return uint8_t(sign | mi);
  return uint8_t(sign | (E + 7) << 3 | (mi - 8));
}

float fp8e4m3Decode(uint8_t b) { return detail::fp8Table()[b]; }

namespace detail {

const float *fp8Table() {
  static const auto table = [] {
    struct T {
      float v[256];
    } t{};
    for (int b = 0; b < 256; ++b) {
      const int e = (b >> 3) & 15, m = b & 7;
      float mag;
      if (e == 15 && m == 7)
        mag = std::nanf("");
      else if (e == 0)
        mag = std::ldexp(float(m), -9);
      else
        mag = std::ldexp(float(8 + m), e - 10);
      t.v[b] = (b & 0x80) ? -mag : mag;
    }
    return t;
  }();
  return table.v;
}

AuxView auxView(const QteaSpec &s, const uint8_t *aux, int64_t r, int64_t rows, int64_t n,
                const char *what) {
  if (!aux)
    throw std::runtime_error(std::string(what) + ": " + std::string(dtypeName(qteaDType(s.group, s.salientPct))) +
                             " needs its side data");
  if (n <= 0 || n % s.group != 0)
    throw std::runtime_error(std::string(what) + ": rows of " + std::to_string(n) +
                             " weights are not a multiple of the group size " +
                             std::to_string(s.group));
  if (r < 0 || r >= rows)
    throw std::runtime_error(std::string(what) + ": row " + std::to_string(r) + " of " +
                             std::to_string(rows));
  return AuxView{auxLayout(s, rows, n), aux};
}

} // namespace detail

std::vector<float> Matrix::dequantize() const {
  const int64_t G = spec.group, ng = cols / G, S = int64_t(salient.size());
  std::vector<float> out(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t k = r * ng + j / G;
      out[size_t(r * cols + j)] = alpha[size_t(k)] * v[size_t(j)] *
                                      float(trits[size_t(r * cols + j)]) +
                                  beta[size_t(k)];
    }
  for (int64_t q = 0; q < rows / kQuadRows; ++q)
    for (int64_t s = 0; s < S; ++s) {
      const int64_t r = q * kQuadRows + pos[size_t(q * S + s)];
      out[size_t(r * cols + salient[size_t(s)])] +=
          fp8e4m3Decode(fp8[size_t(q * S + s)]) * scale[size_t(s)];
    }
  return out;
}

namespace {
void checkShape(const Matrix &m) {
  const QteaSpec &s = m.spec;
  const std::string where = "matrix " + dims(m.rows, m.cols);
  if (s.group <= 0 || m.cols % s.group != 0)
    fail(where + ": columns are not a multiple of the group size " + std::to_string(s.group));
  const AuxLayout L = auxLayout(s, m.rows, m.cols);
  const int64_t ng = m.cols / s.group, S = L.salient, quads = m.rows / kQuadRows;
  auto want = [&](size_t have, int64_t need, const char *field) {
    if (int64_t(have) != need)
      fail(where + ": field '" + field + "' has " + std::to_string(have) + " entries, expected " +
           std::to_string(need));
  };
  want(m.trits.size(), m.rows * m.cols, "trits");
  want(m.alpha.size(), m.rows * ng, "alpha");
  want(m.beta.size(), m.rows * ng, "beta");
  want(m.v.size(), m.cols, "v");
  want(m.salient.size(), S, "salient");
  want(m.scale.size(), S, "scale");
  want(m.pos.size(), quads * S, "pos");
  want(m.fp8.size(), quads * S, "fp8");
  for (int64_t i = 0; i < S; ++i)
    if (m.salient[size_t(i)] < 0 || m.salient[size_t(i)] >= m.cols ||
        (i > 0 && m.salient[size_t(i)] <= m.salient[size_t(i - 1)]))
      fail(where + ": salient column list must be strictly ascending and within 0.." +
           std::to_string(m.cols - 1) + " (entry " + std::to_string(i) + " is " +
           std::to_string(m.salient[size_t(i)]) + ")");
  for (uint8_t p : m.pos)
    if (p >= kQuadRows)
      fail(where + ": residual position " + std::to_string(int(p)) + " is not 0..3");
}
} // namespace

std::vector<uint8_t> packRows(const Matrix &m) {
  checkShape(m);
  const int64_t G = m.spec.group, ng = m.cols / G, BB = blockBytes(G);
  std::vector<uint8_t> out(size_t(m.rows * ng * BB));
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t g = 0; g < ng; ++g) {
      uint8_t *blk = out.data() + (r * ng + g) * BB;
      storeU16(blk, floatToHalf(m.alpha[size_t(r * ng + g)]));
      storeU16(blk + 2, floatToHalf(m.beta[size_t(r * ng + g)]));
      packTrits(m.trits.data() + r * m.cols + g * G, G, blk + 4);
    }
  return out;
}

std::vector<uint8_t> packAux(const Matrix &m) {
  checkShape(m);
  const AuxLayout L = auxLayout(m.spec, m.rows, m.cols);
  const int64_t S = L.salient;
  std::vector<uint8_t> out(size_t(L.total), 0);
  std::memcpy(out.data() + L.vOffset, m.v.data(), size_t(4 * m.cols));
  std::memcpy(out.data() + L.idxOffset, m.salient.data(), size_t(4 * S));
  std::memcpy(out.data() + L.scaleOffset, m.scale.data(), size_t(4 * S));
  for (int64_t q = 0; q < m.rows / kQuadRows; ++q) {
    uint8_t *rec = out.data() + L.quadOffset + q * L.quadBytes;
    for (int64_t s = 0; s < S; ++s) {
      rec[s] = m.fp8[size_t(q * S + s)];
      rec[S + s / 4] |= uint8_t(m.pos[size_t(q * S + s)] << (2 * (s % 4)));
    }
  }
  return out;
}

Matrix unpack(const QteaSpec &s, int64_t rows, int64_t cols, const uint8_t *rowData,
              const uint8_t *aux) {
  if (s.group <= 0 || cols % s.group != 0)
    fail("matrix " + dims(rows, cols) + ": columns are not a multiple of the group size " +
         std::to_string(s.group));
  const AuxLayout L = auxLayout(s, rows, cols);
  const int64_t G = s.group, ng = cols / G, BB = blockBytes(G), S = L.salient,
                quads = rows / kQuadRows;
  Matrix m;
  m.spec = s;
  m.rows = rows;
  m.cols = cols;
  m.trits.resize(size_t(rows * cols));
  m.alpha.resize(size_t(rows * ng));
  m.beta.resize(size_t(rows * ng));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < ng; ++g) {
      const uint8_t *blk = rowData + (r * ng + g) * BB;
      m.alpha[size_t(r * ng + g)] = halfToFloat(loadU16(blk));
      m.beta[size_t(r * ng + g)] = halfToFloat(loadU16(blk + 2));
      unpackTrits(blk + 4, G, m.trits.data() + r * cols + g * G);
    }
  m.v.resize(size_t(cols));
  std::memcpy(m.v.data(), aux + L.vOffset, size_t(4 * cols));
  m.salient.resize(size_t(S));
  m.scale.resize(size_t(S));
  std::memcpy(m.salient.data(), aux + L.idxOffset, size_t(4 * S));
  std::memcpy(m.scale.data(), aux + L.scaleOffset, size_t(4 * S));
  m.pos.resize(size_t(quads * S));
  m.fp8.resize(size_t(quads * S));
  for (int64_t q = 0; q < quads; ++q) {
    const uint8_t *rec = aux + L.quadOffset + q * L.quadBytes;
    for (int64_t k = 0; k < S; ++k) {
      m.fp8[size_t(q * S + k)] = rec[k];
      m.pos[size_t(q * S + k)] = uint8_t((rec[S + k / 4] >> (2 * (k % 4))) & 3);
    }
  }
  checkShape(m); // rejects bad salient indices
  return m;
}

} // namespace llmc::qtea

namespace llmc::detail {

int64_t qteaAuxBytes(const QteaSpec &s, int64_t rows, int64_t cols) {
  return qtea::auxLayout(s, rows, cols).total;
}

void qteaDequantRow(const QteaSpec &s, const uint8_t *row, const uint8_t *aux, int64_t r,
                    int64_t rows, float *dst, int64_t n) {
  const qtea::detail::AuxView a = qtea::detail::auxView(s, aux, r, rows, n, "qtea dequantize");
  const int64_t G = s.group, BB = qtea::blockBytes(G);
  const uint8_t *v = a.v();
  for (int64_t g = 0; g < n / G; ++g) {
    const uint8_t *blk = row + g * BB;
    const float alpha = halfToFloat(qtea::loadU16(blk)), beta = halfToFloat(qtea::loadU16(blk + 2));
    const uint8_t *codes = blk + 4;
    for (int64_t k0 = 0; k0 < G; k0 += 5) {
      const int8_t *t = qtea::detail::kTrits.t[codes[k0 / 5]];
      for (int64_t i = 0; i < 5 && k0 + i < G; ++i) {
        const int64_t j = g * G + k0 + i;
        dst[j] = alpha * qtea::detail::loadF32(v + 4 * j) * float(t[i]) + beta;
      }
    }
  }
  qtea::detail::forEachResidual(a, r, n, [&](int64_t c, float val) { dst[c] += val; });
}

} // namespace llmc::detail
