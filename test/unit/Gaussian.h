//===- Gaussian.h - Seeded standard-normal vectors for tests ----*- C++ -*-===//
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace llmc::testutil {

/// n standard-normal floats from mt19937_64(seed).
inline std::vector<float> gaussian(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float &x : v)
    x = d(rng);
  return v;
}

} // namespace llmc::testutil
