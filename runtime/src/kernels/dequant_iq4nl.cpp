//===- dequant_iq4nl.cpp - Rows of IQ4_NL blocks ---------------------------===//
// Dequantization of IQ4_NL (layout in llmc/format/iq4_nl.h): 4-bit indices
// into a fixed table of 16 levels, one fp16 scale per 32 weights. llama.cpp
// writes it where a 256-weight i-quant does not fit a row (e.g. SmolLM2's
// 576-wide rows). Bit-exact with ggml: d * level is exact in float.
//===----------------------------------------------------------------------===//
#include "llmc/dtype.h"
#include "llmc/format/iq4_nl.h"
#include "quant_rows.h"

#include <cstddef>

namespace llmc::detail {

void dequantIq4_NL(const uint8_t *src, float *dst, int64_t nblocks) {
  constexpr int half = kIq4nlBlockSize / 2;
  for (int64_t b = 0; b < nblocks; ++b, src += sizeof(BlockIq4_NL), dst += kIq4nlBlockSize) {
    const float d = halfToFloat(loadU16(src + offsetof(BlockIq4_NL, d)));
    const uint8_t *qs = src + offsetof(BlockIq4_NL, qs);
    for (int j = 0; j < half; ++j) {
      dst[j] = d * float(kIq4nlValues[qs[j] & 0x0F]);
      dst[j + half] = d * float(kIq4nlValues[qs[j] >> 4]);
    }
  }
}

} // namespace llmc::detail
