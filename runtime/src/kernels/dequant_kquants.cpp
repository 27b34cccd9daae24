//===- dequant_kquants.cpp - Rows of Q2_K..Q6_K super-blocks ---------------===//
// Dequantization of the 256-weight K-quant formats (layouts in
// llmc/format/q2_k.h, q3_k.h, q4_k.h, q5_k.h, q6_k.h), in ggml's order of
// operations: sub-block scale = d * scale (exact), then scale * q - dmin * min.
//===----------------------------------------------------------------------===//
#include "llmc/dtype.h"
#include "llmc/format/q2_k.h"
#include "llmc/format/q3_k.h"
#include "llmc/format/q4_k.h"
#include "llmc/format/q5_k.h"
#include "llmc/format/q6_k.h"
#include "quant_rows.h"

#include <cstddef>

namespace llmc::detail {

void dequantQ2_K(const uint8_t *src, float *dst, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, src += sizeof(BlockQ2_K)) {
    const float d = halfToFloat(loadU16(src + offsetof(BlockQ2_K, d)));
    const float dmin = halfToFloat(loadU16(src + offsetof(BlockQ2_K, dmin)));
    const uint8_t *scales = src + offsetof(BlockQ2_K, scales);
    const uint8_t *qs = src + offsetof(BlockQ2_K, qs);
    // Two halves of 128 weights; in each, shift j selects 32 weights (two
    // sub-blocks of 16) from the same 32 bytes.
    for (int h = 0; h < 2; ++h, qs += 32) {
      for (int j = 0; j < 4; ++j, dst += 32) {
        const int s = h * 8 + j * 2;
        const float d0 = d * float(scales[s] & 0x0F), m0 = dmin * float(scales[s] >> 4);
        const float d1 = d * float(scales[s + 1] & 0x0F), m1 = dmin * float(scales[s + 1] >> 4);
        for (int l = 0; l < 16; ++l) {
          dst[l] = d0 * float((qs[l] >> (2 * j)) & 3) - m0;
          dst[l + 16] = d1 * float((qs[l + 16] >> (2 * j)) & 3) - m1;
        }
      }
    }
  }
}

void dequantQ3_K(const uint8_t *src, float *dst, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, src += sizeof(BlockQ3_K)) {
    const float d = halfToFloat(loadU16(src + offsetof(BlockQ3_K, d)));
    const uint8_t *hmask = src + offsetof(BlockQ3_K, hmask);
    const uint8_t *scales = src + offsetof(BlockQ3_K, scales);
    const uint8_t *qs = src + offsetof(BlockQ3_K, qs);
    for (int h = 0; h < 2; ++h, qs += 32) {
      for (int j = 0; j < 4; ++j, dst += 32) {
        const int s = h * 8 + j * 2;
        const int bit = h * 4 + j; // hmask bit of these 32 weights
        const float d0 = d * float(unpackQ3KScale(scales, s));
        const float d1 = d * float(unpackQ3KScale(scales, s + 1));
        for (int l = 0; l < 32; ++l) {
          const int lo = (qs[l] >> (2 * j)) & 3;
          const int q = lo - (((hmask[l] >> bit) & 1) ? 0 : 4);
          dst[l] = (l < 16 ? d0 : d1) * float(q);
        }
      }
    }
  }
}

void dequantQ4_K(const uint8_t *src, float *dst, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, src += sizeof(BlockQ4_K)) {
    const float d = halfToFloat(loadU16(src + offsetof(BlockQ4_K, d)));
    const float dmin = halfToFloat(loadU16(src + offsetof(BlockQ4_K, dmin)));
    const uint8_t *scales = src + offsetof(BlockQ4_K, scales);
    const uint8_t *qs = src + offsetof(BlockQ4_K, qs);
    // 4 groups of 64 weights; each group's 32 bytes hold two sub-blocks.
    for (int g = 0; g < 4; ++g, qs += 32) {
      uint8_t sc0, m0, sc1, m1;
      unpackKScaleMin(scales, 2 * g, sc0, m0);
      unpackKScaleMin(scales, 2 * g + 1, sc1, m1);
      const float d0 = d * float(sc0), min0 = dmin * float(m0);
      const float d1 = d * float(sc1), min1 = dmin * float(m1);
      for (int l = 0; l < 32; ++l) {
        dst[l] = d0 * float(qs[l] & 0x0F) - min0;
        dst[l + 32] = d1 * float(qs[l] >> 4) - min1;
      }
      dst += 64;
    }
  }
}

void dequantQ5_K(const uint8_t *src, float *dst, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, src += sizeof(BlockQ5_K)) {
    const float d = halfToFloat(loadU16(src + offsetof(BlockQ5_K, d)));
    const float dmin = halfToFloat(loadU16(src + offsetof(BlockQ5_K, dmin)));
    const uint8_t *scales = src + offsetof(BlockQ5_K, scales);
    const uint8_t *qh = src + offsetof(BlockQ5_K, qh);
    const uint8_t *qs = src + offsetof(BlockQ5_K, qs);
    for (int g = 0; g < 4; ++g, qs += 32) {
      uint8_t sc0, m0, sc1, m1;
      unpackKScaleMin(scales, 2 * g, sc0, m0);
      unpackKScaleMin(scales, 2 * g + 1, sc1, m1);
      const float d0 = d * float(sc0), min0 = dmin * float(m0);
      const float d1 = d * float(sc1), min1 = dmin * float(m1);
      const int bit0 = 2 * g, bit1 = 2 * g + 1; // qh bit of each sub-block
      for (int l = 0; l < 32; ++l) {
        const int q0 = (qs[l] & 0x0F) | (((qh[l] >> bit0) & 1) << 4);
        const int q1 = (qs[l] >> 4) | (((qh[l] >> bit1) & 1) << 4);
        dst[l] = d0 * float(q0) - min0;
        dst[l + 32] = d1 * float(q1) - min1;
      }
      dst += 64;
    }
  }
}

void dequantQ6_K(const uint8_t *src, float *dst, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, src += sizeof(BlockQ6_K)) {
    const float d = halfToFloat(loadU16(src + offsetof(BlockQ6_K, d)));
    const uint8_t *ql = src + offsetof(BlockQ6_K, ql);
    const uint8_t *qh = src + offsetof(BlockQ6_K, qh);
    const auto *sc = reinterpret_cast<const int8_t *>(src + offsetof(BlockQ6_K, scales));
    // Two halves of 128 weights.
    for (int h = 0; h < 2; ++h, ql += 64, qh += 32, sc += 8, dst += 128) {
      for (int l = 0; l < 32; ++l) {
        const int s = l / 16;
        const int q0 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q1 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        dst[l] = (d * float(sc[s + 0])) * float(q0);
        dst[l + 32] = (d * float(sc[s + 2])) * float(q1);
        dst[l + 64] = (d * float(sc[s + 4])) * float(q2);
        dst[l + 96] = (d * float(sc[s + 6])) * float(q3);
      }
    }
  }
}

} // namespace llmc::detail
