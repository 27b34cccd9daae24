//===- CudaPolyKvKernelTest.cpp - CUDA kernels over PolyKV cache entries --===//
// The PolyKV kernels of the attention half (CudaAttentionSource.h), run on
// the host by emulation (CudaEmulation.h) against the CPU engine's codec
// (runtime/src/kv/KvQuant.h): RoPE + append encodes each key and value as
// PolyKV::encodeKey/encodeValue does, into a shuffled paged cache for two
// sequences in one launch; split-KV flash decoding over encoded entries
// plus the merge that rotates back equals softmax attention over the
// decoded keys and values (what the CPU engine attends over), holes and
// split lengths as in the f16 kernels' test.
//===----------------------------------------------------------------------===//
#include "codegen/cuda/CudaKernelSource.h"
#include "CudaAttentionHoles.h"
#include "CudaEmulatedObject.h"
#include "llmc/dtype.h"
#include "runtime/src/kv/KvQuant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

using namespace llmc;
using namespace llmc::codegen;

namespace {

using uc = unsigned char;
using CuPkvRopeFn = void (*)(const float *qkv, long long ldqkv, int T, const int *pos,
                             const int *slot, const int *rowSeq, float *q, long long ldq,
                             uc *kpool, uc *vpool, const int *blockTable, int maxBlocks,
                             const float *signs);
using CuPkvAttendFn = void (*)(const float *q, long long ldq, int T, const int *pos,
                               const int *rowSeq, const int *hole, const uc *kpool,
                               const uc *vpool, const int *blockTable, int maxBlocks,
                               int nSplits, int splitLen, float *part);
using CuPkvCombineFn = void (*)(const float *part, int T, int nSplits, float *out,
                                long long ldo, const float *signs);

std::vector<CudaAttentionSpec> polyKvShapes() {
  std::vector<CudaAttentionSpec> s = {
      {9, 3, 64, 100000.0, RopeStyle::Half},       // SmolLM2-135M
      {4, 4, 32, 10000.0, RopeStyle::Interleaved}, // no GQA
      {8, 1, 128, 500000.0, RopeStyle::Half},      // one KV head, wide heads
  };
  for (CudaAttentionSpec &a : s)
    a.polyKv = true;
  return s;
}

/// A paged PolyKV cache for `seqs` sequences of maxBlocks blocks each, the
/// blocks handed out in a shuffled order; unwritten bytes are 0xA5.
struct PolyCache {
  int maxBlocks = 0;
  int64_t kb = 0, vb = 0;
  std::vector<int> table;
  std::vector<uc> k, v;
  PolyCache(const CudaAttentionSpec &s, const kv::PolyKV &codec, int seqs, int maxBlocks_,
            std::mt19937 &rng)
      : maxBlocks(maxBlocks_), kb(codec.keyBytes()), vb(codec.valueBytes()) {
    table.resize(size_t(seqs * maxBlocks));
    for (size_t i = 0; i < table.size(); ++i)
      table[i] = int(i);
    std::shuffle(table.begin(), table.end(), rng);
    const size_t rows = table.size() * size_t(s.kvHeads * kCudaKvBlock);
    k.assign(rows * size_t(kb), 0xA5);
    v.assign(rows * size_t(vb), 0xA5);
  }
  size_t row(const CudaAttentionSpec &s, int seq, int pos, int64_t kh) const {
    const int64_t blk = table[size_t(seq * maxBlocks + pos / kCudaKvBlock)];
    return size_t((blk * s.kvHeads + kh) * kCudaKvBlock + pos % kCudaKvBlock);
  }
  uc *key(const CudaAttentionSpec &s, int seq, int pos, int64_t kh) {
    return k.data() + row(s, seq, pos, kh) * size_t(kb);
  }
  uc *value(const CudaAttentionSpec &s, int seq, int pos, int64_t kh) {
    return v.data() + row(s, seq, pos, kh) * size_t(vb);
  }
};

std::vector<float> randoms(std::mt19937 &rng, size_t n, float sd) {
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(n);
  for (float &x : v)
    x = nd(rng);
  return v;
}

/// x rotated by RoPE at pos (double angles, as the kernels and the CPU), in float.
std::vector<float> rope(const CudaAttentionSpec &s, const float *x, int pos) {
  const int64_t half = s.headDim / 2;
  std::vector<float> out(static_cast<size_t>(s.headDim));
  for (int64_t i = 0; i < half; ++i) {
    const double a = double(pos) * std::pow(s.theta, -2.0 * double(i) / double(s.headDim));
    const int64_t ia = s.style == RopeStyle::Interleaved ? 2 * i : i;
    const int64_t ib = s.style == RopeStyle::Interleaved ? 2 * i + 1 : i + half;
    out[size_t(ia)] = float(x[ia] * std::cos(a) - x[ib] * std::sin(a));
    out[size_t(ib)] = float(x[ia] * std::sin(a) + x[ib] * std::cos(a));
  }
  return out;
}

uint16_t halfAt(const uc *p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

} // namespace

TEST(CudaKernels, EmulatedPolyKvRopeEncodesEntriesAsTheCpu) {
  const std::vector<CudaAttentionSpec> shapes = polyKvShapes();
  cgtest::EmulatedCuda e;
  cgtest::loadEmulatedCuda(e, cudaKernelSource({}, {}, {}, shapes));
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  std::mt19937 rng(23);
  // Sequence 1 at 17, 18, 19 (a block boundary inside), sequence 0 at 40,
  // written at slots behind their positions (as after an eviction).
  const std::vector<int> pos = {17, 18, 19, 40}, seq = {1, 1, 1, 0}, slot = {15, 16, 17, 9};
  for (const CudaAttentionSpec &s : shapes) {
    auto kernel = e.obj.fn<CuPkvRopeFn>(s.polyKvRopeSymbol());
    ASSERT_NE(kernel, nullptr) << s.polyKvRopeSymbol();
    const kv::PolyKV codec(s.headDim, 1234 + uint64_t(s.headDim));
    const int64_t H = s.heads, KV = s.kvHeads, hd = s.headDim;
    PolyCache cache(s, codec, 2, 4, rng);
    const int T = int(pos.size());
    const int64_t ldqkv = (H + 2 * KV) * hd + 3, ldq = H * hd + 1;
    const std::vector<float> qkv = randoms(rng, size_t(T * ldqkv), 1.0f);
    std::vector<float> q(size_t(T * ldq), -5.0f);
    // Two warps a block: a warp encodes more than one KV head when KV > 2.
    cgtest::runKernelReplay(e.emu, unsigned(T), 64, [&] {
      kernel(qkv.data(), ldqkv, T, pos.data(), slot.data(), seq.data(), q.data(), ldq,
             cache.k.data(), cache.v.data(), cache.table.data(), cache.maxBlocks,
             codec.signs.data());
    });
    const std::string what = s.polyKvRopeSymbol();
    int64_t codes = 0, codesOff = 0;
    std::vector<uc> key(size_t(codec.keyBytes())), val(size_t(codec.valueBytes()));
    for (int t = 0; t < T; ++t) {
      const float *row = qkv.data() + t * ldqkv;
      for (int64_t h = 0; h < H; ++h) { // queries as the f16 kernel's
        const std::vector<float> want = rope(s, row + h * hd, pos[size_t(t)]);
        for (int64_t d = 0; d < hd; ++d)
          ASSERT_NEAR(q[size_t(t * ldq + h * hd + d)], want[size_t(d)],
                      2e-6 * (1 + std::fabs(want[size_t(d)])))
              << what << " q row " << t << " head " << h << " dim " << d;
      }
      for (int64_t kh = 0; kh < KV; ++kh) {
        // Values: the kernel reads the same floats as the CPU: bit for bit.
        codec.encodeValue(row + (H + KV + kh) * hd, val.data());
        const uc *got = cache.value(s, seq[size_t(t)], slot[size_t(t)], kh);
        for (size_t b = 0; b < val.size(); ++b)
          ASSERT_EQ(int(got[b]), int(val[b])) << what << " value row " << t << " head " << kh
                                              << " byte " << b;
        // Keys: rotated in float on both sides (an ulp apart at most), so a
        // code may round the other way: scales within an f16 ulp, codes
        // within 1, nearly all equal.
        const std::vector<float> k = rope(s, row + (H + kh) * hd, pos[size_t(t)]);
        codec.encodeKey(k.data(), key.data());
        const uc *gk = cache.key(s, seq[size_t(t)], slot[size_t(t)], kh);
        for (int64_t b = 0; b < hd / 32; ++b)
          ASSERT_LE(std::abs(int(halfAt(gk + hd + 2 * b)) - int(halfAt(key.data() + hd + 2 * b))),
                    1)
              << what << " key scale row " << t << " head " << kh << " block " << b;
        for (int64_t d = 0; d < hd; ++d) {
          const int a = int8_t(gk[d]), b = int8_t(key[size_t(d)]);
          ASSERT_LE(std::abs(a - b), 1) << what << " key code row " << t << " dim " << d;
          ++codes;
          codesOff += a != b;
        }
      }
    }
    printf("%s: %lld of %lld codes differ\n", what.c_str(), (long long)codesOff, (long long)codes);
    EXPECT_LE(codesOff * 100, codes) << what << ": " << codesOff << " of " << codes
                                     << " key codes differ from the CPU's";
    // Nothing else of the caches was written: every other row is untouched.
    auto untouchedRows = [](const std::vector<uc> &pool, int64_t bytes) {
      int64_t n = 0;
      for (size_t r = 0; r < pool.size(); r += size_t(bytes))
        n += std::all_of(pool.begin() + long(r), pool.begin() + long(r + size_t(bytes)),
                         [](uc b) { return b == 0xA5; });
      return n;
    };
    const int64_t rows = int64_t(cache.table.size()) * KV * kCudaKvBlock;
    EXPECT_EQ(untouchedRows(cache.k, cache.kb), rows - T * KV) << what;
    EXPECT_EQ(untouchedRows(cache.v, cache.vb), rows - T * KV) << what;
  }
}

TEST(CudaKernels, EmulatedPolyKvAttentionMatchesAttentionOverDecodedEntries) {
  const std::vector<CudaAttentionSpec> shapes = polyKvShapes();
  cgtest::EmulatedCuda e;
  cgtest::loadEmulatedCuda(e, cudaKernelSource({}, {}, {}, shapes));
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  std::mt19937 rng(29);
  for (const CudaAttentionSpec &s : shapes) {
    auto attend = e.obj.fn<CuPkvAttendFn>(s.polyKvAttendSymbol());
    auto combine = e.obj.fn<CuPkvCombineFn>(s.polyKvCombineSymbol());
    ASSERT_TRUE(attend && combine) << s.polyKvAttendSymbol();
    const kv::PolyKV codec(s.headDim, 77 + uint64_t(s.heads));
    const int64_t H = s.heads, KV = s.kvHeads, hd = s.headDim, G = H / KV;
    PolyCache cache(s, codec, 2, 4, rng);
    const int lens[2] = {37, 50};
    // The decoded entries, [seq][pos][kh][hd]: what the CPU engine attends over.
    std::vector<float> dk(size_t(2 * 64 * KV * hd)), dv(dk.size());
    auto at = [&](int q, int p, int64_t kh) { return size_t(((q * 64 + p) * KV + kh) * hd); };
    for (int q = 0; q < 2; ++q)
      for (int p = 0; p < lens[q]; ++p)
        for (int64_t kh = 0; kh < KV; ++kh) {
          const std::vector<float> k = randoms(rng, size_t(hd), 2.0f), v = randoms(rng, size_t(hd), 1.0f);
          codec.encodeKey(k.data(), cache.key(s, q, p, kh));
          codec.encodeValue(v.data(), cache.value(s, q, p, kh));
          codec.decodeKey(cache.key(s, q, p, kh), dk.data() + at(q, p, kh));
          codec.decodeValue(cache.value(s, q, p, kh), dv.data() + at(q, p, kh));
        }
    const std::vector<int> pos = {47, 48, 49, 36}, seq = {1, 1, 1, 0};
    const int T = int(pos.size());
    const int64_t ldq = H * hd + 2, ldo = H * hd + 1;
    const std::vector<float> qv = randoms(rng, size_t(T * ldq), 1.0f);
    const cgtest::TestHoles holeSet(KV);
    const std::vector<int> &hole = holeSet.lohi;
    auto inHole = [&](int q, int64_t kh, int p) { return holeSet.contains(q, kh, p); };
    const std::pair<int, int> splitCases[] = {{20, 4}, {4, 3}};
    for (bool holes : {false, true})
      for (auto [splitLen, nSplits] : splitCases) {
        std::vector<float> part(size_t(T * H * nSplits * s.partFloats()), -8.0f);
        std::vector<float> out(size_t(T * ldo), -4.0f);
        cgtest::runKernelReplay(e.emu, unsigned(T * KV * nSplits), 32, [&] {
          attend(qv.data(), ldq, T, pos.data(), seq.data(), holes ? hole.data() : nullptr,
                 cache.k.data(), cache.v.data(), cache.table.data(), cache.maxBlocks, nSplits,
                 splitLen, part.data());
        });
        cgtest::runKernelReplay(e.emu, unsigned(T * H), 32, [&] {
          combine(part.data(), T, nSplits, out.data(), ldo, codec.signs.data());
        });
        const std::string what = s.polyKvAttendSymbol() + (holes ? " with holes" : "") +
                                 " splits of " + std::to_string(splitLen);
        for (int t = 0; t < T; ++t)
          for (int64_t h = 0; h < H; ++h) {
            const int q0 = seq[size_t(t)];
            const int64_t kh = h / G;
            std::vector<double> w(size_t(pos[size_t(t)] + 1), 0.0);
            double mx = -1e300, sum = 0;
            for (int p = 0; p <= pos[size_t(t)]; ++p) {
              if (holes && inHole(q0, kh, p))
                continue;
              double dot = 0;
              for (int64_t d = 0; d < hd; ++d)
                dot += double(qv[size_t(t * ldq + h * hd + d)]) * dk[at(q0, p, kh) + size_t(d)];
              w[size_t(p)] = dot / std::sqrt(double(hd));
              mx = std::max(mx, w[size_t(p)]);
            }
            for (int p = 0; p <= pos[size_t(t)]; ++p)
              sum += w[size_t(p)] = holes && inHole(q0, kh, p) ? 0.0 : std::exp(w[size_t(p)] - mx);
            for (int64_t d = 0; d < hd; ++d) {
              double want = 0;
              for (int p = 0; p <= pos[size_t(t)]; ++p)
                want += w[size_t(p)] / sum * dv[at(q0, p, kh) + size_t(d)];
              ASSERT_NEAR(out[size_t(t * ldo + h * hd + d)], want, 2e-5 * (1 + std::fabs(want)))
                  << what << " row " << t << " head " << h << " dim " << d;
            }
            ASSERT_EQ(out[size_t(t * ldo + H * hd)], -4.0f) << what; // nothing past the row
          }
      }
  }
}

TEST(CudaKernels, PolyKvKernelsNeedAPowerOfTwoHeadSize) {
  CudaAttentionSpec s{4, 2, 96, 10000.0, RopeStyle::Half};
  EXPECT_TRUE(canGenerateCudaAttention(s));
  std::string why;
  EXPECT_FALSE(canGenerateCudaPolyKv(s, &why));
  EXPECT_NE(why.find("power-of-two"), std::string::npos) << why;
  s.polyKv = true;
  EXPECT_THROW(cudaAttentionSource(s), std::invalid_argument);
}
