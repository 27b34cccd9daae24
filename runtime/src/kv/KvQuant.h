//===- KvQuant.h - PolyKV storage of cache entries -------------*- C++ -*-===//
// Keys: int8 codes in blocks of 32 with one fp16 scale (absmax / 127) per
// block, the q8_0 layout. Values: the vector's norm (fp16), then the unit
// vector rotated by y = H_d D u / sqrt(d) (H_d the Walsh-Hadamard transform,
// D seeded random signs), so that z = sqrt(d) y is ~N(0, 1) per coordinate,
// each coordinate stored as the 3-bit index of the nearest Lloyd-Max
// centroid for N(0, 1). Attention reads both in this form: q . k from the
// codes, and the weighted sum of values in the rotated domain, rotated back
// once per query head (rotate()). head_dim must be a power of two and a
// multiple of 32.
//===----------------------------------------------------------------------===//
#pragma once
#include <cstdint>
#include <vector>

namespace llmc::kv {

struct PolyKV {
  int64_t hd = 0;
  std::vector<float> signs; // D, +-1 per coordinate
  PolyKV() = default;
  PolyKV(int64_t head_dim, uint64_t seed);

  /// Bytes of a stored key and value row at head size head_dim.
  static int64_t keyBytesFor(int64_t head_dim) { return head_dim + 2 * (head_dim / 32); }
  static int64_t valueBytesFor(int64_t head_dim) { return 2 + (head_dim * 3 + 7) / 8; }
  int64_t keyBytes() const { return keyBytesFor(hd); }
  int64_t valueBytes() const { return valueBytesFor(hd); }

  void encodeKey(const float *k, uint8_t *dst) const;
  /// q . k for a stored key.
  float dotKey(const float *q, const uint8_t *key) const;
  void decodeKey(const uint8_t *key, float *dst) const;
  /// Portable forms of dotKey / accumulateValue (the AVX2 ones are checked
  /// against them).
  float dotKeyScalar(const float *q, const uint8_t *key) const;
  void accumulateValueScalar(const uint8_t *val, float w, float *acc) const;

  void encodeValue(const float *v, uint8_t *dst) const;
  /// acc += w * (n * c / d), the value in the rotated domain, pre-scaled.
  void accumulateValue(const uint8_t *val, float w, float *acc) const;
  /// Turn a rotated-domain accumulation into the output: out = D H acc.
  void rotateBack(float *acc) const;
  void decodeValue(const uint8_t *val, float *dst) const;
};

/// In-place unnormalized fast Walsh-Hadamard transform (n a power of two).
void fwht(float *x, int64_t n);

/// Index of the nearest 3-bit Lloyd-Max centroid of N(0, 1), and the centroid.
int lloydMax3Index(float z);
float lloydMax3Level(int index);

} // namespace llmc::kv
