//===- KvQuant.cpp - PolyKV storage of cache entries ----------------------===//
#include "KvQuant.h"

#include "llmc/dtype.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define LLMC_KV_AVX2 1
#endif

namespace llmc::kv {

namespace {
constexpr float kLevels[8] = {-2.1519f, -1.3439f, -0.7560f, -0.2451f,
                              0.2451f,  0.7560f,  1.3439f,  2.1519f};
constexpr float kThresholds[7] = {-1.7480f, -1.0500f, -0.5006f, 0.0f, 0.5006f, 1.0500f, 1.7480f};

float loadHalf(const uint8_t *p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return llmc::halfToFloat(h);
}
void putHalf(uint8_t *p, float f) {
  uint16_t h = llmc::floatToHalf(f);
  std::memcpy(p, &h, 2);
}
} // namespace

int lloydMax3Index(float z) {
  int i = 0;
  while (i < 7 && z > kThresholds[i])
    ++i;
  return i;
}
float lloydMax3Level(int index) { return kLevels[index]; }

void fwht(float *x, int64_t n) {
  for (int64_t len = 1; len < n; len <<= 1)
    for (int64_t i = 0; i < n; i += 2 * len)
      for (int64_t j = i; j < i + len; ++j) {
        float a = x[j], b = x[j + len];
        x[j] = a + b;
        x[j + len] = a - b;
      }
}

PolyKV::PolyKV(int64_t head_dim, uint64_t seed) : hd(head_dim) {
  if (hd <= 0 || (hd & (hd - 1)) != 0 || hd % 32 != 0)
    throw std::runtime_error("kv_quant polykv needs a head_dim that is a power of two and a "
                             "multiple of 32 (got " + std::to_string(hd) + ")");
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  signs.resize(static_cast<size_t>(hd));
  for (float &s : signs)
    s = (rng() & 1) ? 1.0f : -1.0f;
}

void PolyKV::encodeKey(const float *k, uint8_t *dst) const {
  for (int64_t b = 0; b < hd / 32; ++b) {
    const float *x = k + b * 32;
    float amax = 0;
    for (int i = 0; i < 32; ++i)
      amax = std::max(amax, std::fabs(x[i]));
    float scale = amax / 127.0f;
    putHalf(dst + hd + 2 * b, scale);
    float stored = loadHalf(dst + hd + 2 * b);
    float inv = stored > 0 ? 1.0f / stored : 0.0f;
    for (int i = 0; i < 32; ++i) {
      int q = int(std::lround(x[i] * inv));
      dst[b * 32 + i] = uint8_t(int8_t(std::clamp(q, -127, 127)));
    }
  }
}

float PolyKV::dotKeyScalar(const float *q, const uint8_t *key) const {
  float total = 0;
  for (int64_t b = 0; b < hd / 32; ++b) {
    const int8_t *c = reinterpret_cast<const int8_t *>(key + b * 32);
    const float *qb = q + b * 32;
    float s = 0;
    for (int i = 0; i < 32; ++i)
      s += qb[i] * float(c[i]);
    total += s * loadHalf(key + hd + 2 * b);
  }
  return total;
}

float PolyKV::dotKey(const float *q, const uint8_t *key) const {
#ifdef LLMC_KV_AVX2
  __m256 total = _mm256_setzero_ps();
  for (int64_t b = 0; b < hd / 32; ++b) {
    const uint8_t *c = key + b * 32;
    const float *qb = q + b * 32;
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < 32; i += 8) {
      __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i *>(c + i));
      __m256 codes = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
      acc = _mm256_fmadd_ps(codes, _mm256_loadu_ps(qb + i), acc);
    }
    total = _mm256_fmadd_ps(acc, _mm256_set1_ps(loadHalf(key + hd + 2 * b)), total);
  }
  __m128 lo = _mm256_castps256_ps128(total), hi = _mm256_extractf128_ps(total, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_hadd_ps(lo, lo);
  lo = _mm_hadd_ps(lo, lo);
  return _mm_cvtss_f32(lo);
#else
  return dotKeyScalar(q, key);
#endif
}

void PolyKV::decodeKey(const uint8_t *key, float *dst) const {
  for (int64_t b = 0; b < hd / 32; ++b) {
    float scale = loadHalf(key + hd + 2 * b);
    const int8_t *c = reinterpret_cast<const int8_t *>(key + b * 32);
    for (int i = 0; i < 32; ++i)
      dst[b * 32 + i] = scale * float(c[i]);
  }
}

void PolyKV::encodeValue(const float *v, uint8_t *dst) const {
  double n2 = 0;
  for (int64_t i = 0; i < hd; ++i)
    n2 += double(v[i]) * v[i];
  float norm = float(std::sqrt(n2));
  putHalf(dst, norm);
  uint8_t *codes = dst + 2;
  std::fill(codes, codes + (hd * 3 + 7) / 8, uint8_t(0));
  std::vector<float> y(static_cast<size_t>(hd));
  float inv = norm > 0 ? 1.0f / norm : 0.0f;
  for (int64_t i = 0; i < hd; ++i)
    y[size_t(i)] = v[i] * inv * signs[size_t(i)];
  fwht(y.data(), hd); // H D u; z = sqrt(d) * (H D u / sqrt(d)) = H D u
  for (int64_t i = 0; i < hd; ++i) {
    unsigned idx = unsigned(lloydMax3Index(y[size_t(i)]));
    int64_t bit = i * 3;
    codes[bit / 8] |= uint8_t(idx << (bit % 8));
    if (bit % 8 > 5)
      codes[bit / 8 + 1] |= uint8_t(idx >> (8 - bit % 8));
  }
}

void PolyKV::accumulateValueScalar(const uint8_t *val, float w, float *acc) const {
  const float f = w * loadHalf(val) / float(hd);
  const uint8_t *codes = val + 2;
  for (int64_t i = 0; i < hd; ++i) {
    int64_t bit = i * 3;
    unsigned bits = codes[bit / 8] >> (bit % 8);
    if (bit % 8 > 5)
      bits |= unsigned(codes[bit / 8 + 1]) << (8 - bit % 8);
    acc[i] += f * kLevels[bits & 7u];
  }
}

void PolyKV::accumulateValue(const uint8_t *val, float w, float *acc) const {
#ifdef LLMC_KV_AVX2
  // Eight 3-bit codes are 3 bytes: shift each lane to its code, look the
  // level up with a permute, scale and accumulate.
  const __m256 f = _mm256_set1_ps(w * loadHalf(val) / float(hd));
  const __m256 levels = _mm256_loadu_ps(kLevels);
  const __m256i shifts = _mm256_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21);
  const __m256i seven = _mm256_set1_epi32(7);
  const uint8_t *codes = val + 2;
  for (int64_t i = 0; i < hd; i += 8) {
    const uint8_t *c = codes + (i / 8) * 3;
    const uint32_t word = uint32_t(c[0]) | uint32_t(c[1]) << 8 | uint32_t(c[2]) << 16;
    __m256i idx = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(int(word)), shifts), seven);
    __m256 lv = _mm256_permutevar8x32_ps(levels, idx);
    _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(f, lv, _mm256_loadu_ps(acc + i)));
  }
#else
  accumulateValueScalar(val, w, acc);
#endif
}

void PolyKV::rotateBack(float *acc) const {
  // u = D H^T z / d with H symmetric; accumulateValue already divided by d.
  fwht(acc, hd);
  for (int64_t i = 0; i < hd; ++i)
    acc[i] *= signs[size_t(i)];
}

void PolyKV::decodeValue(const uint8_t *val, float *dst) const {
  std::fill(dst, dst + hd, 0.0f);
  accumulateValue(val, 1.0f, dst);
  rotateBack(dst);
}

} // namespace llmc::kv
