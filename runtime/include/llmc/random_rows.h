//===- llmc/random_rows.h - Seeded random rows of a stored format -*- C++ -*-===//
// Rows for checking kernels (the unit tests, llmc cuda-check): random bytes
// in every field, except the fp16 scales, kept in ranges real models have.
#pragma once
#include "llmc/dtype.h"

#include <cstring>
#include <optional>
#include <random>
#include <vector>

namespace llmc {

/// Random bytes for a row of n elements of t, with sane fp16 scales (random
/// bytes in the scale fields would give inf/NaN, which no real model has).
inline std::vector<uint8_t> randomRow(DType t, int64_t n, std::mt19937 &rng) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> val(-1.0f, 1.0f);
  const DTypeInfo &info = dtypeInfo(t);
  std::vector<uint8_t> row(static_cast<size_t>(rowBytes(t, n)));
  if (t == DType::F32 || t == DType::F16 || t == DType::BF16) {
    std::vector<float> f(static_cast<size_t>(n));
    for (float &v : f)
      v = val(rng);
    quantizeRowRef(t, f.data(), row.data(), n);
    return row;
  }
  for (uint8_t &b : row)
    b = uint8_t(byte(rng));
  auto setHalf = [&](uint8_t *p, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    uint16_t h = floatToHalf(d(rng));
    std::memcpy(p, &h, 2);
  };
  for (int64_t b = 0; b < n / info.block_size; ++b) {
    uint8_t *p = row.data() + b * info.block_bytes;
    switch (t) {
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q5_0:
      setHalf(p, -0.05f, 0.05f);
      break;
    case DType::Q4_1:
    case DType::Q5_1:
      setHalf(p, 0.001f, 0.05f);
      setHalf(p + 2, -0.5f, 0.1f);
      break;
    case DType::Q4_K:
    case DType::Q5_K:
      setHalf(p, 0.0001f, 0.01f);
      setHalf(p + 2, 0.0001f, 0.01f);
      break;
    case DType::Q6_K:
      setHalf(p + 208, -0.01f, 0.01f);
      break;
    default:
      if (std::optional<GroupedIntSpec> g = groupedIntSpec(t)) {
        setHalf(p, 0.001f, 0.05f);
        if (!g->sym)
          setHalf(p + 2, -0.5f, 0.1f);
      }
      break;
    }
  }
  return row;
}

} // namespace llmc
