//===- kv_q8_row.cpp - Q8 KV rows: int8 codes, one f16 scale per 32 -------===//
#include "kv_q8_row.h"
#include "llmc/dtype.h"
#include "llmc/kv_row_type.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace llmc::kernels {

void q8Row(const float *src, int64_t n, unsigned char *dst) {
  const int64_t groups = n / kKvQ8Group;
  unsigned char *codes = dst + 2 * groups;
  for (int64_t g = 0; g < groups; ++g) {
    const float *x = src + g * kKvQ8Group;
    float amax = 0;
    bool finite = true;
    for (int64_t i = 0; i < kKvQ8Group; ++i) {
      finite = finite && std::isfinite(x[i]);
      amax = std::max(amax, std::fabs(x[i]));
    }
    const uint16_t h =
        floatToHalf(finite ? amax / 127.0f : std::numeric_limits<float>::quiet_NaN());
    std::memcpy(dst + 2 * g, &h, 2);
    const float scale = halfToFloat(h);
    const bool coded = finite && scale > 0;
    for (int64_t i = 0; i < kKvQ8Group; ++i) {
      // x / scale can round to 127.5 when the scale rounded down: clamp.
      const float c = coded ? std::round(x[i] / scale) : 0.0f;
      const int8_t code = int8_t(std::clamp(c, -127.0f, 127.0f));
      std::memcpy(codes + g * kKvQ8Group + i, &code, 1);
    }
  }
}

void floatRowQ8(const unsigned char *src, int64_t n, float *dst) {
  const int64_t groups = n / kKvQ8Group;
  const unsigned char *codes = src + 2 * groups;
  for (int64_t g = 0; g < groups; ++g) {
    uint16_t h;
    std::memcpy(&h, src + 2 * g, 2);
    const float scale = halfToFloat(h);
    for (int64_t i = 0; i < kKvQ8Group; ++i) {
      int8_t code;
      std::memcpy(&code, codes + g * kKvQ8Group + i, 1);
      dst[g * kKvQ8Group + i] = float(code) * scale;
    }
  }
}

} // namespace llmc::kernels
