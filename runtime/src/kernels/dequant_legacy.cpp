//===- dequant_legacy.cpp - Rows of F16, BF16 and 32-weight blocks ---------===//
// Dequantization of the float types and the "legacy" GGUF block formats
// (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1; layouts in llmc/format/*.h). Results are
// bit-exact with ggml's reference: every scale*q product is exact in float,
// so the one rounding is the same whether or not the compiler fuses it.
//===----------------------------------------------------------------------===//
#include "llmc/dtype.h"
#include "llmc/format/q4_0.h"
#include "llmc/format/q4_1.h"
#include "llmc/format/q5_0.h"
#include "llmc/format/q5_1.h"
#include "llmc/format/q8_0.h"
#include "quant_rows.h"

#include <cstddef>

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace llmc::detail {

void dequantF16(const uint8_t *src, float *dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  // Hardware conversion is exact (it only quiets signalling NaNs).
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i *>(src + 2 * i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i)
    dst[i] = halfToFloat(loadU16(src + 2 * i));
}

void dequantBF16(const uint8_t *src, float *dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    dst[i] = bf16ToFloat(loadU16(src + 2 * i));
}

void dequantQ8_0(const uint8_t *src, float *dst, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, src += sizeof(BlockQ8_0), dst += kQ8_0BlockSize) {
    const float d = halfToFloat(loadU16(src + offsetof(BlockQ8_0, d)));
    const auto *qs = reinterpret_cast<const int8_t *>(src + offsetof(BlockQ8_0, qs));
    for (int j = 0; j < kQ8_0BlockSize; ++j)
      dst[j] = float(qs[j]) * d;
  }
}

void dequantQ4_0(const uint8_t *src, float *dst, int64_t nblocks) {
  constexpr int half = kQ4_0BlockSize / 2;
  for (int64_t b = 0; b < nblocks; ++b, src += sizeof(BlockQ4_0), dst += kQ4_0BlockSize) {
    const float d = halfToFloat(loadU16(src + offsetof(BlockQ4_0, d)));
    const uint8_t *qs = src + offsetof(BlockQ4_0, qs);
    for (int j = 0; j < half; ++j) {
      dst[j] = float(int(qs[j] & 0x0F) - 8) * d;
      dst[j + half] = float(int(qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantQ4_1(const uint8_t *src, float *dst, int64_t nblocks) {
  constexpr int half = kQ4_1BlockSize / 2;
  for (int64_t b = 0; b < nblocks; ++b, src += sizeof(BlockQ4_1), dst += kQ4_1BlockSize) {
    const float d = halfToFloat(loadU16(src + offsetof(BlockQ4_1, d)));
    const float m = halfToFloat(loadU16(src + offsetof(BlockQ4_1, m)));
    const uint8_t *qs = src + offsetof(BlockQ4_1, qs);
    for (int j = 0; j < half; ++j) {
      dst[j] = float(qs[j] & 0x0F) * d + m;
      dst[j + half] = float(qs[j] >> 4) * d + m;
    }
  }
}

void dequantQ5_0(const uint8_t *src, float *dst, int64_t nblocks) {
  constexpr int half = kQ5_0BlockSize / 2;
  for (int64_t b = 0; b < nblocks; ++b, src += sizeof(BlockQ5_0), dst += kQ5_0BlockSize) {
    const float d = halfToFloat(loadU16(src + offsetof(BlockQ5_0, d)));
    const uint32_t qh = loadU32(src + offsetof(BlockQ5_0, qh));
    const uint8_t *qs = src + offsetof(BlockQ5_0, qs);
    for (int j = 0; j < half; ++j) {
      const int lo = int(qs[j] & 0x0F) | int(((qh >> j) & 1u) << 4);
      const int hi = int(qs[j] >> 4) | int(((qh >> (j + half)) & 1u) << 4);
      dst[j] = float(lo - 16) * d;
      dst[j + half] = float(hi - 16) * d;
    }
  }
}

void dequantQ5_1(const uint8_t *src, float *dst, int64_t nblocks) {
  constexpr int half = kQ5_1BlockSize / 2;
  for (int64_t b = 0; b < nblocks; ++b, src += sizeof(BlockQ5_1), dst += kQ5_1BlockSize) {
    const float d = halfToFloat(loadU16(src + offsetof(BlockQ5_1, d)));
    const float m = halfToFloat(loadU16(src + offsetof(BlockQ5_1, m)));
    const uint32_t qh = loadU32(src + offsetof(BlockQ5_1, qh));
    const uint8_t *qs = src + offsetof(BlockQ5_1, qs);
    for (int j = 0; j < half; ++j) {
      const int lo = int(qs[j] & 0x0F) | int(((qh >> j) & 1u) << 4);
      const int hi = int(qs[j] >> 4) | int(((qh >> (j + half)) & 1u) << 4);
      dst[j] = float(lo) * d + m;
      dst[j + half] = float(hi) * d + m;
    }
  }
}

} // namespace llmc::detail
