//===- Checksum.cpp - checksum64: fast non-cryptographic hash --------------===//
// Guards artifact manifests and tensors against corruption and truncation.
// Four independent 64-bit lanes each absorb one 8-byte word per round
// (multiply, xor, rotate, multiply), so the multiply latency of one lane
// overlaps the others and the hash runs at memory speed. Lanes are merged and
// the result goes through a final avalanche so every input bit affects every
// output bit. Words are read little endian so results match across hosts.
//===----------------------------------------------------------------------===//
#include "llmc/artifact.h"

#include <cstring>

namespace llmc {
namespace {

constexpr uint64_t kM1 = 0x9E3779B97F4A7C15ull; // 2^64 / golden ratio
constexpr uint64_t kM2 = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t kM3 = 0x94D049BB133111EBull;
constexpr uint64_t kM4 = 0xBF58476D1CE4E5B9ull;

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

inline uint64_t load64(const uint8_t *p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}

inline uint64_t absorb(uint64_t acc, uint64_t word) {
  acc ^= word * kM2;
  acc = rotl(acc, 29);
  return acc * kM1;
}

inline uint64_t avalanche(uint64_t h) {
  h ^= h >> 31;
  h *= kM3;
  h ^= h >> 29;
  h *= kM4;
  h ^= h >> 32;
  return h;
}

} // namespace

uint64_t checksum64(const void *data, size_t n, uint64_t seed) {
  const uint8_t *p = static_cast<const uint8_t *>(data);
  const uint8_t *end = p + n;
  uint64_t h = seed ^ (uint64_t(n) * kM3);

  if (n >= 32) {
    uint64_t a = seed + kM1, b = seed ^ kM2, c = seed - kM3, d = rotl(seed, 17) ^ kM4;
    const uint8_t *stop = p + (n & ~size_t(31));
    for (; p < stop; p += 32) {
      a = absorb(a, load64(p));
      b = absorb(b, load64(p + 8));
      c = absorb(c, load64(p + 16));
      d = absorb(d, load64(p + 24));
    }
    h = absorb(h, avalanche(a));
    h = absorb(h, avalanche(b) + 1);
    h = absorb(h, avalanche(c) + 2);
    h = absorb(h, avalanche(d) + 3);
  }
  for (; p + 8 <= end; p += 8)
    h = absorb(h, load64(p));
  if (p < end) {
    uint64_t tail = 0;
    for (int shift = 0; p < end; ++p, shift += 8)
      tail |= uint64_t(*p) << shift;
    h = absorb(h ^ 0xA5, tail);
  }
  return avalanche(h);
}

} // namespace llmc
