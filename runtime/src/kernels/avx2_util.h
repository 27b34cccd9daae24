//===- avx2_util.h - Small AVX2 helpers shared by the dot kernels -*- C++ -*-===//
// Loads of fp16 scales and packed block bytes, nibble and 5th-bit
// expansion to bytes, horizontal sums and software prefetch. Internal to
// the runtime's kernel files compiled with AVX2 + FMA + F16C; each includer
// wraps the include in the same feature test.
//===----------------------------------------------------------------------===//
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace llmc::kernels::avx2 {

#define LLMC_FORCE __attribute__((always_inline))
#define LLMC_INLINE inline LLMC_FORCE

LLMC_INLINE float halfAt(const uint8_t *p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return _cvtsh_ss(v);
}

LLMC_INLINE uint32_t u32At(const uint8_t *p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

LLMC_INLINE float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

LLMC_INLINE __m256i loadBytes32(const uint8_t *p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p));
}

/// 16 packed bytes -> 32 nibbles: bytes 0..15 the low nibbles, 16..31 the high.
LLMC_INLINE __m256i nibbles32(const uint8_t *qs) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i *>(qs));
  const __m128i m = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
}

/// Bit j of qh -> byte j = 0x10 (or 0), j < 32.
LLMC_INLINE __m256i fifthBits32(uint32_t qh) {
  const __m256i idx = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, //
                                       2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201ULL));
  __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(int(qh)), idx);
  v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
  return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

/// 32 signed bytes -> 4 x 8 floats, in element order.
LLMC_INLINE void toFloats(__m256i b, __m256 f[4]) {
  const __m128i lo = _mm256_castsi256_si128(b), hi = _mm256_extracti128_si256(b, 1);
  f[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo));
  f[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)));
  f[2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi));
  f[3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)));
}

/// Software prefetch of the weights 2 KiB ahead: the row stream is
/// sequential, but the hardware prefetcher alone leaves one core short of
/// DRAM bandwidth. One hint per 64-byte line of [p, p + bytes).
LLMC_INLINE void prefetchAhead(const uint8_t *p, int64_t bytes) {
  for (int64_t off = 0; off < bytes; off += 64)
    _mm_prefetch(reinterpret_cast<const char *>(p + 2048 + off), _MM_HINT_T0);
}

/// {h[0], h[1] if both, 0, 0} as floats from fp16 at p: one load, one convert.
LLMC_INLINE __m128 halfPair(const uint8_t *p, bool both) {
  uint32_t v;
  if (both) {
    std::memcpy(&v, p, 4);
  } else {
    uint16_t h;
    std::memcpy(&h, p, 2);
    v = h;
  }
  return _mm_cvtph_ps(_mm_cvtsi32_si128(int(v)));
}

} // namespace llmc::kernels::avx2
