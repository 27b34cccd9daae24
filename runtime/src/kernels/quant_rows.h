//===- quant_rows.h - Per-format row (de)quantizers (internal) -*- C++ -*-===//
// dtype.cpp dispatches to these. `nblocks` counts whole blocks; pointers
// may be unaligned (blocks are read byte-wise).
//===----------------------------------------------------------------------===//
#pragma once
#include <cstdint>
#include <cstring>

namespace llmc::detail {

inline uint16_t loadU16(const uint8_t *p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline uint32_t loadU32(const uint8_t *p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline void storeU16(uint8_t *p, uint16_t v) { std::memcpy(p, &v, 2); }

void dequantF16(const uint8_t *src, float *dst, int64_t n);
void dequantBF16(const uint8_t *src, float *dst, int64_t n);
void dequantQ8_0(const uint8_t *src, float *dst, int64_t nblocks);
void dequantQ4_0(const uint8_t *src, float *dst, int64_t nblocks);
void dequantQ4_1(const uint8_t *src, float *dst, int64_t nblocks);
void dequantQ5_0(const uint8_t *src, float *dst, int64_t nblocks);
void dequantQ5_1(const uint8_t *src, float *dst, int64_t nblocks);
void dequantQ2_K(const uint8_t *src, float *dst, int64_t nblocks);
void dequantQ3_K(const uint8_t *src, float *dst, int64_t nblocks);
void dequantQ4_K(const uint8_t *src, float *dst, int64_t nblocks);
void dequantQ5_K(const uint8_t *src, float *dst, int64_t nblocks);
void dequantQ6_K(const uint8_t *src, float *dst, int64_t nblocks);
void dequantIq4_NL(const uint8_t *src, float *dst, int64_t nblocks);

void quantQ8_0(const float *src, uint8_t *dst, int64_t nblocks);
void quantQ4_0(const float *src, uint8_t *dst, int64_t nblocks);
void quantQ4_1(const float *src, uint8_t *dst, int64_t nblocks);
void quantQ5_0(const float *src, uint8_t *dst, int64_t nblocks);
void quantQ5_1(const float *src, uint8_t *dst, int64_t nblocks);

} // namespace llmc::detail
