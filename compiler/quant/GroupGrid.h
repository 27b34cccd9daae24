//===- GroupGrid.h - Per-group integer grids (the gq storage math) -*- C++ -*-===//
// The grid one group of weights is rounded onto, in the grouped-integer
// storage format (llmc/format/grouped_int.h): asymmetric w = d*q + m,
// symmetric w = d*(q - 2^(bits-1)), with d and m held as fp16. Grids are
// built from the group's range exactly like the runtime's RTN quantizer
// (fp16-rounded scale and minimum), optionally clipped (AWQ's clip search),
// so GPTQ/AWQ codes are computed against the values that will be stored.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/dtype.h"
#include <cmath>
#include <cstdint>
#include <vector>

namespace llmc::quant {

struct GridSpec {
  int bits = 4;
  bool sym = false;
  int64_t group = 64;
  int qmax() const { return (1 << bits) - 1; }
  int offset() const { return sym ? 1 << (bits - 1) : 0; }
  DType dtype() const { return groupedIntDType(bits, sym, group); }
};

/// One group's stored parameters (already fp16-rounded).
struct Grid {
  float scale = 0; // d
  float min = 0;   // m (asymmetric only)
};

/// Running range of one group's values (min, max, and the signed value of
/// largest magnitude for symmetric grids).
struct GroupRange {
  float lo = INFINITY, hi = -INFINITY, amaxSigned = 0;
  /// lo and hi only (all an asymmetric grid reads): fmin/fmax as glibc
  /// computes them (a NaN w ignored; of equal values the new one), without
  /// its out-of-line calls (this is the calibrated methods' inner loop).
  void addBounds(float w) {
    lo = (lo < w || std::isnan(w)) ? lo : w;
    hi = (hi > w || std::isnan(w)) ? hi : w;
  }
  void add(float w) {
    addBounds(w);
    if (std::fabs(w) > std::fabs(amaxSigned))
      amaxSigned = w;
  }
};

/// The grid for a group with this range; `clip` in (0, 1] shrinks the range
/// toward zero (AWQ clip search: values beyond clip*max|w| saturate).
Grid makeGrid(const GroupRange &r, const GridSpec &s, float clip = 1.0f);

inline uint8_t quantCode(float w, const Grid &g, const GridSpec &s) {
  const float id = g.scale != 0.0f ? 1.0f / g.scale : 0.0f;
  float q = s.sym ? std::nearbyint(w * id) + float(s.offset()) : std::nearbyint((w - g.min) * id);
  q = q > 0.0f ? q : 0.0f; // fmax(q, 0): NaN -> 0
  const float top = float(s.qmax());
  return uint8_t(q < top ? q : top);
}

inline float dequantCode(uint8_t q, const Grid &g, const GridSpec &s) {
  return s.sym ? g.scale * float(int(q) - s.offset()) : g.scale * float(q) + g.min;
}

/// A quantized matrix [rows, cols] in the gq layout's terms: codes row-major,
/// one grid per (row, group) (row-major over groups).
struct QuantizedMatrix {
  GridSpec spec;
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> codes;
  std::vector<Grid> grids;

  int64_t groups() const { return cols / spec.group; }
  /// The weights the runtime will see, row-major [rows, cols].
  std::vector<float> dequantized() const;
  /// Packed rows of type spec.dtype(): rows * rowBytes(dtype, cols) bytes.
  std::vector<uint8_t> pack() const;
};

/// Round-to-nearest of a row-major matrix, group by group, each group's grid
/// clipped by clip[row * groups + g] when `clip` is given.
QuantizedMatrix rtnQuantize(const float *w, int64_t rows, int64_t cols, const GridSpec &s,
                            const float *clip = nullptr);

/// ||A - B||_F / ||A||_F (0 when A is zero).
double relativeError(const float *a, const float *b, int64_t n);

} // namespace llmc::quant
