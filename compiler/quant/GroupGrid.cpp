//===- GroupGrid.cpp - Per-group integer grids -----------------------------===//
#include "compiler/quant/GroupGrid.h"
#include <algorithm>
#include <stdexcept>

namespace llmc::quant {

namespace {
// The next fp16 value toward -infinity (h finite).
float halfBelow(float v) {
  uint16_t h = floatToHalf(v);
  if (halfToFloat(h) <= v)
    return halfToFloat(h);
  h = h == 0 ? uint16_t(0x8001u) : (h & 0x8000u) ? uint16_t(h + 1) : uint16_t(h - 1);
  return halfToFloat(h);
}
} // namespace

Grid makeGrid(const GroupRange &r, const GridSpec &s, float clip) {
  Grid g;
  if (!(r.lo <= r.hi)) // empty or NaN
    return g;
  if (s.sym) {
    // The value of largest magnitude maps to code 0 (= -2^(b-1)).
    g.scale = roundToHalf(r.amaxSigned * clip / float(-s.offset()));
    return g;
  }
  float lo = r.lo, hi = r.hi;
  if (clip < 1.0f) {
    float amax = std::max(std::fabs(lo), std::fabs(hi)) * clip;
    lo = std::max(lo, -amax);
    hi = std::min(hi, amax);
  }
  g.min = halfBelow(lo); // no weight below the grid
  g.scale = roundToHalf(std::max(hi - g.min, 0.0f) / float(s.qmax()));
  return g;
}

std::vector<float> QuantizedMatrix::dequantized() const {
  std::vector<float> out(size_t(rows * cols));
  const int64_t G = spec.group, ng = groups();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < ng; ++g) {
      const Grid grid = grids[size_t(r * ng + g)];
      const int64_t at = r * cols + g * G;
      for (int64_t j = 0; j < G; ++j)
        out[size_t(at + j)] = dequantCode(codes[size_t(at + j)], grid, spec);
    }
  return out;
}

std::vector<uint8_t> QuantizedMatrix::pack() const {
  const DType t = spec.dtype();
  const int64_t rb = rowBytes(t, cols), ng = groups();
  std::vector<uint8_t> out(size_t(rows * rb));
  std::vector<float> d(static_cast<size_t>(ng)), m(static_cast<size_t>(ng));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < ng; ++g) {
      d[size_t(g)] = grids[size_t(r * ng + g)].scale;
      m[size_t(g)] = grids[size_t(r * ng + g)].min;
    }
    packGroupedRow(t, codes.data() + r * cols, d.data(), m.data(), out.data() + r * rb, cols);
  }
  return out;
}

namespace {

/// GroupRange::add over a group; addBounds unless `sym` (the asymmetric
/// grid reads only lo and hi).
GroupRange groupRange(const float *x, int64_t n, bool sym) {
  GroupRange range;
  for (int64_t j = 0; j < n; ++j)
    sym ? range.add(x[j]) : range.addBounds(x[j]);
  return range;
}

/// quantCode over a group, with the grid and spec copied into locals (the
/// byte stores would otherwise make the compiler reload them per weight).
void quantGroup(const float *x, int64_t n, const Grid &grid, const GridSpec &spec,
                uint8_t *codes) {
  const Grid g = grid;
  const GridSpec s = spec;
  for (int64_t j = 0; j < n; ++j)
    codes[j] = quantCode(x[j], g, s);
}

} // namespace

QuantizedMatrix rtnQuantize(const float *w, int64_t rows, int64_t cols, const GridSpec &s,
                            const float *clip) {
  if (cols % s.group != 0)
    throw std::runtime_error("rtnQuantize: " + std::to_string(cols) +
                             " columns is not a multiple of the group size " +
                             std::to_string(s.group));
  QuantizedMatrix q;
  q.spec = s;
  q.rows = rows;
  q.cols = cols;
  q.codes.resize(size_t(rows * cols));
  const int64_t ng = cols / s.group;
  q.grids.resize(size_t(rows * ng));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < ng; ++g) {
      const float *x = w + r * cols + g * s.group;
      const Grid grid = makeGrid(groupRange(x, s.group, s.sym), s, clip ? clip[r * ng + g] : 1.0f);
      q.grids[size_t(r * ng + g)] = grid;
      quantGroup(x, s.group, grid, s, q.codes.data() + r * cols + g * s.group);
    }
  return q;
}

double relativeError(const float *a, const float *b, int64_t n) {
  double err = 0, ref = 0;
  for (int64_t i = 0; i < n; ++i) {
    double d = double(a[i]) - b[i];
    err += d * d;
    ref += double(a[i]) * a[i];
  }
  return ref > 0 ? std::sqrt(err / ref) : 0.0;
}

} // namespace llmc::quant
