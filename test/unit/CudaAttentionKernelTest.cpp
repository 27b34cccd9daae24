//===- CudaAttentionKernelTest.cpp - CUDA embedding, RoPE + KV, attention -===//
// The generated CUDA kernels of the attention half and the embedding
// lookup, run on the host by emulation (CudaEmulation.h) against
// double-precision references written here: the embedding rows against
// dequantizeRow; RoPE (both styles) and the append to a paged f16 cache
// whose block table is shuffled, for two sequences in one launch; split-KV
// flash decoding plus its merge against softmax attention over the same
// f16 keys and values, for rows of two sequences at different positions,
// with splits that end inside, at and past a row's own position.
//===----------------------------------------------------------------------===//
#include "codegen/cuda/CudaKernelSource.h"
#include "CudaAttentionHoles.h"
#include "CudaEmulatedObject.h"
#include "GeneratedObject.h"
#include "llmc/dtype.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

using namespace llmc;
using namespace llmc::codegen;

namespace {

using CuRopeFn = void (*)(const float *qkv, long long ldqkv, int T, const int *pos,
                        const int *slot, const int *rowSeq, float *q, long long ldq,
                        unsigned short *kpool, unsigned short *vpool, const int *blockTable,
                        int maxBlocks);
using CuAttendFn = void (*)(const float *q, long long ldq, int T, const int *pos,
                          const int *rowSeq, const int *hole, const unsigned short *kpool,
                          const unsigned short *vpool, const int *blockTable, int maxBlocks,
                          int nSplits, int splitLen, float *part);
using CuCombineFn = void (*)(const float *part, int T, int nSplits, float *out, long long ldo);
using CuEmbedFn = void (*)(const unsigned char *table, long long rowStride, long long vocab,
                         const int *tokens, int T, float *out, long long ldo);

using Emulated = cgtest::EmulatedCuda;

void load(Emulated &e, const std::string &source) { cgtest::loadEmulatedCuda(e, source); }

const std::vector<CudaAttentionSpec> kShapes = {
    {9, 3, 64, 100000.0, RopeStyle::Half},         // SmolLM2-135M
    {4, 4, 32, 10000.0, RopeStyle::Interleaved},   // no GQA
    {8, 1, 128, 500000.0, RopeStyle::Half},        // one KV head, wide heads
};

/// A paged cache for `seqs` sequences of up to maxBlocks blocks each, the
/// blocks handed out in a shuffled order.
struct PagedCache {
  int maxBlocks = 0;
  std::vector<int> table;
  std::vector<unsigned short> k, v;
  PagedCache(const CudaAttentionSpec &s, int seqs, int maxBlocks_, std::mt19937 &rng)
      : maxBlocks(maxBlocks_) {
    table.resize(size_t(seqs * maxBlocks));
    for (size_t i = 0; i < table.size(); ++i)
      table[i] = int(i);
    std::shuffle(table.begin(), table.end(), rng);
    const size_t n = table.size() * size_t(s.kvHeads * kCudaKvBlock * s.headDim);
    k.assign(n, 0x7e00); // NaN: a read of a slot never written shows
    v.assign(n, 0x7e00);
  }
  size_t at(const CudaAttentionSpec &s, int seq, int pos, int64_t kh, int64_t d) const {
    const int64_t blk = table[size_t(seq * maxBlocks + pos / kCudaKvBlock)];
    return size_t(((blk * s.kvHeads + kh) * kCudaKvBlock + pos % kCudaKvBlock) * s.headDim + d);
  }
};

std::vector<float> randoms(std::mt19937 &rng, size_t n, float sd) {
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(n);
  for (float &x : v)
    x = nd(rng);
  return v;
}

/// x rotated as the CPU engine does (ops::applyRope), in double.
void ropeRef(const CudaAttentionSpec &s, const float *x, int pos, double *out) {
  const int64_t half = s.headDim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double a = double(pos) * std::pow(s.theta, -2.0 * double(i) / double(s.headDim));
    const int64_t ia = s.style == RopeStyle::Interleaved ? 2 * i : i;
    const int64_t ib = s.style == RopeStyle::Interleaved ? 2 * i + 1 : i + half;
    out[ia] = x[ia] * std::cos(a) - x[ib] * std::sin(a);
    out[ib] = x[ia] * std::sin(a) + x[ib] * std::cos(a);
  }
}

} // namespace

TEST(CudaKernels, EmulatedEmbeddingGivesTheDequantizedRows) {
  std::vector<CudaMatvecSpec> specs;
  for (DType t : {DType::F32, DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_1})
    for (int64_t c : {64, 576})
      specs.push_back({t, c});
  Emulated e;
  load(e, cudaKernelSource({}, {}, specs));
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  std::mt19937 rng(3);
  const int64_t vocab = 6;
  const std::vector<int> tokens = {3, 0, 6, 5, -1};
  for (const CudaMatvecSpec &s : specs) {
    auto kernel = e.obj.fn<CuEmbedFn>(s.embedSymbol());
    ASSERT_NE(kernel, nullptr) << s.embedSymbol();
    const int64_t stride = rowBytes(s.dtype, s.cols);
    std::vector<unsigned char> table(size_t(vocab * stride));
    for (int64_t r = 0; r < vocab; ++r)
      quantizeRowRef(s.dtype, randoms(rng, size_t(s.cols), 1.0f).data(),
                     table.data() + r * stride, s.cols);
    const int T = int(tokens.size());
    const int64_t ldo = s.cols + 5;
    std::vector<float> out(size_t(T * ldo), -9.0f), row(size_t(s.cols));
    cgtest::runKernel(e.emu.set, unsigned(T), 32, [&] {
      kernel(table.data(), stride, vocab, tokens.data(), T, out.data(), ldo);
    });
    for (int t = 0; t < T; ++t) {
      const bool inTable = tokens[size_t(t)] >= 0 && tokens[size_t(t)] < vocab;
      if (inTable)
        dequantizeRow(s.dtype, table.data() + tokens[size_t(t)] * stride, row.data(), s.cols);
      for (int64_t c = 0; c < s.cols; ++c)
        ASSERT_EQ(out[size_t(t * ldo + c)], inTable ? row[size_t(c)] : 0.0f)
            << s.embedSymbol() << " token " << tokens[size_t(t)] << " col " << c;
      ASSERT_EQ(out[size_t(t * ldo + s.cols)], -9.0f) << s.embedSymbol(); // nothing past the row
    }
  }
}

TEST(CudaKernels, EmulatedRopeAppendsToThePagedF16Cache) {
  Emulated e;
  load(e, cudaKernelSource({}, {}, {}, kShapes));
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  std::mt19937 rng(11);
  // Rows: sequence 1 at 17, 18, 19 (a block boundary inside), sequence 0 at
  // 40; their cache slots are the positions (slot null), or fall behind
  // them as after a KV policy's eviction (15, 16, 17 and 9).
  const std::vector<int> pos = {17, 18, 19, 40}, seq = {1, 1, 1, 0}, evicted = {15, 16, 17, 9};
  for (const CudaAttentionSpec &s : kShapes)
    for (const std::vector<int> *slots : {static_cast<const std::vector<int> *>(nullptr), &evicted}) {
      auto kernel = e.obj.fn<CuRopeFn>(s.ropeSymbol());
      ASSERT_NE(kernel, nullptr) << s.ropeSymbol();
      const int64_t H = s.heads, KV = s.kvHeads, hd = s.headDim;
      PagedCache cache(s, 2, 4, rng);
      const int T = int(pos.size());
      const std::vector<int> &at = slots ? *slots : pos;
      const int64_t ldqkv = (H + 2 * KV) * hd + 3, ldq = H * hd + 1;
      const std::vector<float> qkv = randoms(rng, size_t(T * ldqkv), 1.0f);
      std::vector<float> q(size_t(T * ldq), -5.0f);
      cgtest::runKernel(e.emu.set, unsigned(T), 64, [&] {
        kernel(qkv.data(), ldqkv, T, pos.data(), slots ? slots->data() : nullptr, seq.data(),
               q.data(), ldq, cache.k.data(), cache.v.data(), cache.table.data(),
               cache.maxBlocks);
      });
      const std::string what = s.ropeSymbol() + (slots ? " (slots behind positions)" : "");
      std::vector<double> ref(static_cast<size_t>(hd));
      size_t written = 0;
      for (int t = 0; t < T; ++t) {
        const float *row = qkv.data() + t * ldqkv;
        const int p = pos[size_t(t)], sl = at[size_t(t)], q0 = seq[size_t(t)];
        for (int64_t h = 0; h < H + KV; ++h) {
          ropeRef(s, row + h * hd, p, ref.data()); // rotated by the position, whatever the slot
          for (int64_t d = 0; d < hd; ++d) {
            const double want = ref[size_t(d)];
            if (h < H) {
              ASSERT_NEAR(q[size_t(t * ldq + h * hd + d)], want, 2e-6 * (1 + std::fabs(want)))
                  << what << " q row " << t << " head " << h << " dim " << d;
            } else {
              const float got = halfToFloat(cache.k[cache.at(s, q0, sl, h - H, d)]);
              ASSERT_NEAR(got, want, 1e-3 * (1 + std::fabs(want)))
                  << what << " k row " << t << " head " << h - H << " dim " << d;
            }
          }
        }
        for (int64_t i = 0; i < KV * hd; ++i)
          ASSERT_EQ(cache.v[cache.at(s, q0, sl, i / hd, i % hd)],
                    floatToHalf(row[(H + KV) * hd + i]))
              << what << " v row " << t << " element " << i;
        ASSERT_EQ(q[size_t(t * ldq + H * hd)], -5.0f); // nothing past the row's q
        written += size_t(KV * hd);
      }
      // Nothing else of the caches was written.
      const size_t untouched = size_t(std::count(cache.v.begin(), cache.v.end(), 0x7e00));
      EXPECT_EQ(untouched + written, cache.v.size()) << what;
    }
}

TEST(CudaKernels, EmulatedFlashDecodingMatchesSoftmaxAttention) {
  Emulated e;
  load(e, cudaKernelSource({}, {}, {}, kShapes));
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  std::mt19937 rng(17);
  for (const CudaAttentionSpec &s : kShapes) {
    auto attend = e.obj.fn<CuAttendFn>(s.attendSymbol());
    auto combine = e.obj.fn<CuCombineFn>(s.combineSymbol());
    ASSERT_TRUE(attend && combine) << s.attendSymbol();
    const int64_t H = s.heads, KV = s.kvHeads, hd = s.headDim, G = H / KV;
    PagedCache cache(s, 2, 4, rng);
    const int lens[2] = {37, 50}; // positions filled per sequence
    for (int q = 0; q < 2; ++q)
      for (int p = 0; p < lens[q]; ++p)
        for (int64_t kh = 0; kh < KV; ++kh)
          for (int64_t d = 0; d < hd; ++d) {
            cache.k[cache.at(s, q, p, kh, d)] = floatToHalf(randoms(rng, 1, 2.0f)[0]);
            cache.v[cache.at(s, q, p, kh, d)] = floatToHalf(randoms(rng, 1, 1.0f)[0]);
          }
    // Rows: the last three of sequence 1 (a prefill chunk) and sequence 0's last.
    const std::vector<int> pos = {47, 48, 49, 36}, seq = {1, 1, 1, 0};
    const int T = int(pos.size());
    const int64_t ldq = H * hd + 2, ldo = H * hd + 1;
    const std::vector<float> qv = randoms(rng, size_t(T * ldq), 1.0f);
    // {splitLen, nSplits}: 3 splits of 20 (one past row 3's position), one
    // of 64, and 3 splits of at least 4 whose length the kernel stretches to
    // ceil((pos + 1) / 3) (17 and 13 positions: the runtime's fixed split
    // count at a context longer than splits x splitLen).
    const std::pair<int, int> splitCases[] = {{20, 4}, {64, 1}, {4, 3}};
    // Holes: slots a KV policy left empty on some heads ([lo, hi) per
    // (sequence, KV head); sequence 0's head 0 has none). Their entries are
    // NaN once the no-hole pass is done: a read of one shows.
    const cgtest::TestHoles holeSet(KV);
    const std::vector<int> &hole = holeSet.lohi;
    auto inHole = [&](int q, int64_t kh, int p) { return holeSet.contains(q, kh, p); };
    for (bool holes : {false, true})
    for (auto [splitLen, nSplits] : splitCases) {
      if (holes && splitLen == 20) // poison the holes once
        for (int q = 0; q < 2; ++q)
          for (int p = 0; p < lens[q]; ++p)
            for (int64_t kh = 0; kh < KV; ++kh)
              for (int64_t d = 0; d < hd && inHole(q, kh, p); ++d)
                cache.k[cache.at(s, q, p, kh, d)] = cache.v[cache.at(s, q, p, kh, d)] = 0x7e00;
      std::vector<float> part(size_t(T * H * nSplits * s.partFloats()), -8.0f);
      std::vector<float> out(size_t(T * ldo), -4.0f);
      auto runAttend = [&](const cgtest::CudaEmuEntries &emu, float *into) {
        cgtest::runKernelReplay(emu, unsigned(T * KV * nSplits), 32, [&] {
          attend(qv.data(), ldq, T, pos.data(), seq.data(), holes ? hole.data() : nullptr,
                 cache.k.data(), cache.v.data(), cache.table.data(), cache.maxBlocks, nSplits,
                 splitLen, into);
        });
      };
      runAttend(e.emu, part.data());
      { // the emulation's fibers give its replays' values, bit for bit
        std::vector<float> replayed(part.size(), -8.0f);
        runAttend(cgtest::replaysOf(e.emu), replayed.data());
        EXPECT_EQ(0, std::memcmp(part.data(), replayed.data(), part.size() * sizeof(float)))
            << s.attendSymbol() << " fibers against replays, split " << splitLen;
      }
      cgtest::runKernel(e.emu.set, unsigned(T * H), 32,
                        [&] { combine(part.data(), T, nSplits, out.data(), ldo); });
      for (int t = 0; t < T; ++t)
        for (int64_t h = 0; h < H; ++h) {
          const int64_t kh = h / G;
          std::vector<double> sc(size_t(pos[size_t(t)] + 1));
          double mx = -1e300;
          for (int p = 0; p <= pos[size_t(t)]; ++p) {
            if (holes && inHole(seq[size_t(t)], kh, p)) {
              sc[size_t(p)] = -1e300; // exp gives 0: no weight
              continue;
            }
            double dot = 0;
            for (int64_t d = 0; d < hd; ++d)
              dot += double(qv[size_t(t * ldq + h * hd + d)]) *
                     halfToFloat(cache.k[cache.at(s, seq[size_t(t)], p, kh, d)]);
            sc[size_t(p)] = dot / std::sqrt(double(hd));
            mx = std::max(mx, sc[size_t(p)]);
          }
          double sum = 0;
          for (double &x : sc)
            sum += (x = std::exp(x - mx));
          for (int64_t d = 0; d < hd; ++d) {
            double want = 0;
            for (int p = 0; p <= pos[size_t(t)]; ++p)
              if (!(holes && inHole(seq[size_t(t)], kh, p)))
                want += sc[size_t(p)] *
                        halfToFloat(cache.v[cache.at(s, seq[size_t(t)], p, kh, d)]);
            want /= sum;
            ASSERT_NEAR(out[size_t(t * ldo + h * hd + d)], want, 2e-5 * (1 + std::fabs(want)))
                << s.attendSymbol() << (holes ? " with holes" : "") << " split " << splitLen
                << " row " << t << " head " << h << " dim " << d;
          }
          ASSERT_EQ(out[size_t(t * ldo + H * hd)], -4.0f);
        }
    }
  }
}

TEST(CudaKernels, RefusesAttentionShapesWithoutKernels) {
  std::string why;
  EXPECT_FALSE(canGenerateCudaAttention({9, 2, 64, 1e4, RopeStyle::Half}, &why));
  EXPECT_FALSE(canGenerateCudaAttention({16, 1, 64, 1e4, RopeStyle::Half}, &why));
  EXPECT_NE(why.find("8 query heads"), std::string::npos) << why;
  EXPECT_FALSE(canGenerateCudaAttention({4, 4, 80, 1e4, RopeStyle::Half}, &why));
  EXPECT_FALSE(canGenerateCudaAttention({4, 4, 64, 0.0, RopeStyle::Half}, &why));
  EXPECT_THROW(cudaAttentionSource({4, 4, 48, 1e4, RopeStyle::Half}), std::invalid_argument);
  EXPECT_TRUE(canGenerateCudaAttention({9, 3, 64, 1e5, RopeStyle::Half}, &why)) << why;
}
