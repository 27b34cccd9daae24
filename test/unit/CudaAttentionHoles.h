//===- CudaAttentionHoles.h - KV holes for the attention kernel tests -*- C++ -*-===//
// The holes a KV policy leaves in two sequences' caches ([lo, hi) of slots
// per (sequence, KV head), as the attention kernels take them), shared by
// the f16 and PolyKV attention tests: every head has one but sequence 0's
// head 0.
//===----------------------------------------------------------------------===//
#pragma once
#include <cstdint>
#include <vector>

namespace llmc::cgtest {

struct TestHoles {
  int64_t kvHeads = 0;
  std::vector<int> lohi; // [sequence][kvHead][2]
  explicit TestHoles(int64_t kv) : kvHeads(kv), lohi(size_t(2 * kv * 2)) {
    for (int q = 0; q < 2; ++q)
      for (int64_t kh = 0; kh < kv; ++kh) {
        const bool none = q == 0 && kh == 0;
        lohi[size_t((q * kv + kh) * 2)] = none ? 0 : int(3 + 5 * kh + q);
        lohi[size_t((q * kv + kh) * 2 + 1)] = none ? 0 : int(20 + 4 * kh + 9 * q);
      }
  }
  bool contains(int q, int64_t kh, int p) const {
    return p >= lohi[size_t((q * kvHeads + kh) * 2)] && p < lohi[size_t((q * kvHeads + kh) * 2 + 1)];
  }
};

} // namespace llmc::cgtest
