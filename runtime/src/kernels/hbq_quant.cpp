//===- hbq_quant.cpp - HBQ quantizer (data-free, per L1 block) ------------===//
// hbqQuantizeRow (llmc/format/hbq.h), the authors' algorithm:
//   for each candidate L2 table T (Mix: FP-1 and FP-10; else the one table)
//     s1 = E5M3(max|x| / (elemMax * max T))     (nearest; at least the
//                                                smallest nonzero code)
//     for each sub-block and each t in T: x^ = (s1 t) * Q(x / (s1 t)), Q the
//       nearest element (ties away from zero); keep the t with the least
//       sum of squared errors (the first on a tie)
//   keep the candidate table with the least block error (FP-1 on a tie).
// The inner loop rounds with compare-and-select on the magnitude midpoints
// so the compiler can vectorize it; the codes are found again for the
// chosen scales only when packing.
//===----------------------------------------------------------------------===//
#include "hbq_rows.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace llmc {
namespace {

template <int B> struct Rounder {
  static constexpr int K = 1 << (B - 1); // magnitudes
  float mag[K], mid[K];                  // mid[m]: between mag[m-1] and mag[m] (m >= 1)
  Rounder() {
    const float *m = hbqMagnitudes(B);
    for (int i = 0; i < K; ++i) {
      mag[i] = m[i];
      mid[i] = i ? 0.5f * (m[i - 1] + m[i]) : 0.0f;
    }
  }
  /// Sum of squared errors of sub-block x (n values) at scale st > 0.
  float error(const float *x, int64_t n, float st) const {
    float e = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
      const float a = std::fabs(x[j] / st);
      float r = mag[0];
      for (int m = 1; m < K; ++m)
        r = a >= mid[m] ? mag[m] : r;
      const float d = std::fabs(x[j]) - st * r; // |x| - |x^|: the sign matches
      e += d * d;
    }
    return e;
  }
  /// The element code of x at scale st > 0.
  uint8_t code(float x, float st) const {
    const float q = x / st, a = std::fabs(q);
    int idx = 0;
    for (int m = 1; m < K; ++m)
      idx += a >= mid[m];
    return uint8_t(idx | (q < 0.0f && mag[idx] != 0.0f ? K : 0));
  }
};

struct Choice {
  uint8_t table = 0, scale = 0, l2 = 0;
  double err = std::numeric_limits<double>::infinity();
};

template <int B>
void quantizeRow(const HbqSpec &spec, HbqTable table, const float *src, uint8_t *dst,
                 int64_t blocks, HbqRowStats *stats) {
  static const Rounder<B> rnd;
  const int64_t sub = spec.block / kHbqSubBlocks, bytes = detail::hbqBlockBytes(spec);
  const float emax = rnd.mag[Rounder<B>::K - 1];
  uint8_t cands[2];
  int ncand = 0;
  if (table == HbqTable::Mix) {
    cands[ncand++] = hbqTableByte(HbqTable::Mix, false);
    cands[ncand++] = hbqTableByte(HbqTable::Mix, true);
  } else {
    cands[ncand++] = hbqTableByte(table);
  }
  for (int64_t b = 0; b < blocks; ++b) {
    const float *x = src + b * spec.block;
    uint8_t *blk = dst + b * bytes;
    float amax = 0.0f;
    for (int64_t j = 0; j < spec.block; ++j)
      amax = std::fmax(amax, std::fabs(x[j]));
    Choice best;
    for (int c = 0; c < ncand; ++c) {
      const float *t = hbqL2Values(cands[c]);
      Choice ch;
      ch.table = cands[c];
      if (amax > 0.0f) {
        ch.scale = hbqScaleEncode(amax / (emax * t[kHbqL2Entries - 1]));
        if (ch.scale == 0)
          ch.scale = 1; // a nonzero block keeps a nonzero scale
      }
      const float s1 = hbqScaleDecode(ch.scale);
      ch.err = 0.0;
      for (int k = 0; k < kHbqSubBlocks && s1 > 0.0f; ++k) {
        float bestErr = std::numeric_limits<float>::infinity();
        int bestL = 0;
        for (int l = 0; l < kHbqL2Entries; ++l) {
          const float e = rnd.error(x + k * sub, sub, s1 * t[l]);
          if (e < bestErr) {
            bestErr = e;
            bestL = l;
          }
        }
        ch.l2 |= uint8_t(bestL << (2 * k));
        ch.err += double(bestErr);
      }
      if (s1 == 0.0f) // all-zero block: exact
        ch.err = 0.0;
      if (ch.err < best.err)
        best = ch;
    }
    // Pack the chosen block.
    blk[0] = best.scale;
    blk[1] = best.l2;
    blk[2] = best.table;
    uint8_t *qs = blk + kHbqHeaderBytes;
    for (int64_t j = 0; j < spec.block * B / 8; ++j)
      qs[j] = 0;
    const float s1 = hbqScaleDecode(best.scale);
    const float *t = hbqL2Values(best.table);
    for (int k = 0; k < kHbqSubBlocks; ++k) {
      const int l = (best.l2 >> (2 * k)) & 3;
      const float st = s1 * t[l];
      for (int64_t j = 0; j < sub; ++j) {
        const int64_t i = k * sub + j;
        const uint32_t code = st > 0.0f ? rnd.code(x[i], st) : 0u;
        const int64_t bit = i * B;
        qs[bit / 8] |= uint8_t(code << (bit % 8));
        if (bit % 8 + B > 8)
          qs[bit / 8 + 1] |= uint8_t(code >> (8 - bit % 8));
      }
      if (stats)
        ++stats->l2Histogram[l];
    }
    if (stats) {
      ++stats->blocks;
      stats->fp10Blocks += best.table == hbqTableByte(HbqTable::Mix, true);
      stats->sqError += best.err;
    }
  }
}

} // namespace

void hbqQuantizeRow(const HbqSpec &spec, HbqTable table, const float *src, uint8_t *dst,
                    int64_t n, HbqRowStats *stats) {
  const int64_t blocks = detail::hbqBlocks(spec, n, "hbqQuantizeRow");
  if (uint8_t(table) > uint8_t(HbqTable::Int))
    throw std::runtime_error("hbqQuantizeRow: bad table id " + std::to_string(int(table)));
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(src[i]))
      throw std::runtime_error("hbqQuantizeRow: weight " + std::to_string(i) +
                               " of the row is not finite");
  detail::hbqWithBits(spec.bits, [&](auto B) { quantizeRow<B>(spec, table, src, dst, blocks, stats); });
}

} // namespace llmc
