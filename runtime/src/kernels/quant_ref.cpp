//===- quant_ref.cpp - Reference quantizers for the 32-weight formats ------===//
// Straightforward float -> block quantizers with ggml's reference rounding
// (the same results as gguf-py's `gguf.quants.quantize`). Used by tests and
// tools to produce quantized weights; not tuned for speed or accuracy
// beyond what the reference does.
//===----------------------------------------------------------------------===//
// The reference computes x*id + 0.5 with two roundings; keep the compiler
// from fusing it into one FMA so results match bit for bit.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "llmc/dtype.h"
#include "llmc/format/q4_0.h"
#include "llmc/format/q4_1.h"
#include "llmc/format/q5_0.h"
#include "llmc/format/q5_1.h"
#include "llmc/format/q8_0.h"
#include "quant_rows.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstring>

namespace llmc::detail {
namespace {

// The element of largest magnitude, with its sign (first one on ties).
float signedAbsMax(const float *x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void minMax(const float *x, int n, float &mn, float &mx) {
  mn = FLT_MAX;
  mx = -FLT_MAX;
  for (int j = 0; j < n; ++j) {
    mn = std::min(mn, x[j]);
    mx = std::max(mx, x[j]);
  }
}

inline float inverseOrZero(float d) { return d != 0.0f ? 1.0f / d : 0.0f; }

// Truncate toward zero and clamp to [0, hi].
inline int truncClamp(float v, int hi) {
  int q = int(v);
  return std::max(0, std::min(hi, q));
}

} // namespace

void quantQ8_0(const float *src, uint8_t *dst, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, src += kQ8_0BlockSize, dst += sizeof(BlockQ8_0)) {
    float amax = 0.0f;
    for (int j = 0; j < kQ8_0BlockSize; ++j)
      amax = std::max(amax, std::fabs(src[j]));
    const float d = amax / 127.0f;
    const float id = inverseOrZero(d);
    storeU16(dst + offsetof(BlockQ8_0, d), floatToHalf(d));
    auto *qs = reinterpret_cast<int8_t *>(dst + offsetof(BlockQ8_0, qs));
    for (int j = 0; j < kQ8_0BlockSize; ++j)
      qs[j] = int8_t(std::round(src[j] * id));
  }
}

void quantQ4_0(const float *src, uint8_t *dst, int64_t nblocks) {
  constexpr int half = kQ4_0BlockSize / 2;
  for (int64_t b = 0; b < nblocks; ++b, src += kQ4_0BlockSize, dst += sizeof(BlockQ4_0)) {
    const float d = signedAbsMax(src, kQ4_0BlockSize) / -8.0f;
    const float id = inverseOrZero(d);
    storeU16(dst + offsetof(BlockQ4_0, d), floatToHalf(d));
    uint8_t *qs = dst + offsetof(BlockQ4_0, qs);
    for (int j = 0; j < half; ++j) {
      const int q0 = truncClamp(src[j] * id + 8.5f, 15);
      const int q1 = truncClamp(src[j + half] * id + 8.5f, 15);
      qs[j] = uint8_t(q0 | (q1 << 4));
    }
  }
}

void quantQ4_1(const float *src, uint8_t *dst, int64_t nblocks) {
  constexpr int half = kQ4_1BlockSize / 2;
  for (int64_t b = 0; b < nblocks; ++b, src += kQ4_1BlockSize, dst += sizeof(BlockQ4_1)) {
    float mn, mx;
    minMax(src, kQ4_1BlockSize, mn, mx);
    const float d = (mx - mn) / 15.0f;
    const float id = inverseOrZero(d);
    storeU16(dst + offsetof(BlockQ4_1, d), floatToHalf(d));
    storeU16(dst + offsetof(BlockQ4_1, m), floatToHalf(mn));
    uint8_t *qs = dst + offsetof(BlockQ4_1, qs);
    for (int j = 0; j < half; ++j) {
      const int q0 = truncClamp((src[j] - mn) * id + 0.5f, 15);
      const int q1 = truncClamp((src[j + half] - mn) * id + 0.5f, 15);
      qs[j] = uint8_t(q0 | (q1 << 4));
    }
  }
}

namespace {
// Shared by Q5_0 / Q5_1: pack 32 five-bit values into qh (5th bits) and qs.
void packQ5(const int *q, uint8_t *qh_out, uint8_t *qs) {
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = uint8_t((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
    qh |= uint32_t((q[j] >> 4) & 1) << j;
    qh |= uint32_t((q[j + 16] >> 4) & 1) << (j + 16);
  }
  std::memcpy(qh_out, &qh, 4);
}
} // namespace

void quantQ5_0(const float *src, uint8_t *dst, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, src += kQ5_0BlockSize, dst += sizeof(BlockQ5_0)) {
    const float d = signedAbsMax(src, kQ5_0BlockSize) / -16.0f;
    const float id = inverseOrZero(d);
    storeU16(dst + offsetof(BlockQ5_0, d), floatToHalf(d));
    int q[kQ5_0BlockSize];
    for (int j = 0; j < kQ5_0BlockSize; ++j)
      q[j] = truncClamp(src[j] * id + 16.5f, 31);
    packQ5(q, dst + offsetof(BlockQ5_0, qh), dst + offsetof(BlockQ5_0, qs));
  }
}

void quantQ5_1(const float *src, uint8_t *dst, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, src += kQ5_1BlockSize, dst += sizeof(BlockQ5_1)) {
    float mn, mx;
    minMax(src, kQ5_1BlockSize, mn, mx);
    const float d = (mx - mn) / 31.0f;
    const float id = inverseOrZero(d);
    storeU16(dst + offsetof(BlockQ5_1, d), floatToHalf(d));
    storeU16(dst + offsetof(BlockQ5_1, m), floatToHalf(mn));
    int q[kQ5_1BlockSize];
    for (int j = 0; j < kQ5_1BlockSize; ++j)
      q[j] = truncClamp((src[j] - mn) * id + 0.5f, 31);
    packQ5(q, dst + offsetof(BlockQ5_1, qh), dst + offsetof(BlockQ5_1, qs));
  }
}

} // namespace llmc::detail
