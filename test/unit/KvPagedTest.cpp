//===- KvPagedTest.cpp - The paged KV cache: block pool, tables, prefixes -===//
// The block pool's reference counts, free list and limit; copy on write of
// shared blocks; the prefix cache's chains (exact tokens, longest match,
// least-recently-used reclaim of blocks only the cache holds); a paged
// layer cache against the same cache in contiguous vectors under the full
// cache and under compacting policies (same entries, same attention, blocks
// given back); and the batcher with prefix sharing: later prompts with a
// shared prefix skip its prefill and still decode the tokens they decode
// alone, and every block returns to the pool.
//===----------------------------------------------------------------------===//
#include "../../runtime/src/exec/ThreadPool.h"
#include "../../runtime/src/kv/KvBlockPool.h"
#include "../../runtime/src/kv/KvCache.h"
#include "../../runtime/src/kernels/kv_q8_row.h"
#include "llmc/kv_row_type.h"
#include "llmc/batcher.h"
#include "llmc/dtype.h"
#include "llmc/executor.h"
#include "TinyModel.h"
#include "Gaussian.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

using llmc::kv::BlockTable;
using llmc::kv::KvBlockPool;
using llmc::kv::LayerCache;
using llmc::kv::Method;
using llmc::kv::Policy;

using llmc::testutil::gaussian;

TEST(KvBlockPool, CountsReferencesAndReusesFreedBlocks) {
  KvBlockPool pool(4, 8, 3);
  EXPECT_EQ(pool.blockBytes(), 2 * 4 * 8 * 4);
  const int32_t a = pool.allocate(), b = pool.allocate(), c = pool.allocate();
  EXPECT_NE(a, b);
  EXPECT_NE(b, c);
  EXPECT_THROW(pool.allocate(), std::runtime_error); // all three in use
  pool.retain(b);
  EXPECT_TRUE(pool.shared(b));
  pool.release(b);
  EXPECT_FALSE(pool.shared(b));
  EXPECT_EQ(pool.stats().used_blocks, 3);
  pool.release(b);
  EXPECT_EQ(pool.stats().used_blocks, 2);
  EXPECT_EQ(pool.allocate(), b); // the freed block comes back
  EXPECT_THROW(KvBlockPool(0, 8, 1), std::invalid_argument);
}

TEST(KvBlockPool, CopyOnWriteKeepsSharedBlocksIntact) {
  auto pool = std::make_shared<KvBlockPool>(2, 4, 8);
  BlockTable t(pool);
  t.grow();
  std::fill_n(pool->keys(t.id(0)), 2 * 2 * 4, 1.0f);
  BlockTable copy(t); // shares the block
  EXPECT_EQ(copy.id(0), t.id(0));
  EXPECT_TRUE(pool->shared(t.id(0)));
  const int32_t before = t.id(0), mine = copy.writable(0);
  EXPECT_NE(mine, before); // copied before the write
  EXPECT_EQ(pool->keys(mine)[3], 1.0f);
  pool->keys(mine)[3] = 5.0f;
  EXPECT_EQ(pool->keys(before)[3], 1.0f);
  EXPECT_EQ(t.writable(0), before); // no longer shared: written in place
  EXPECT_EQ(pool->stats().used_blocks, 2);
  copy.clear();
  t.truncate(0);
  EXPECT_EQ(pool->stats().used_blocks, 0);
}

TEST(KvBlockPool, PrefixChainsMatchExactTokensAndReclaimLeastRecentlyUsed) {
  KvBlockPool pool(2, 4, 8); // blocks of 2 tokens; 2 tables per block of tokens
  const std::vector<int32_t> toks = {1, 2, 3, 4, 5, 6};
  std::vector<int32_t> held;
  for (int i = 0; i < 6; ++i)
    held.push_back(pool.allocate());
  pool.publishPrefix(toks.data(), 3, 2, held);
  for (int32_t id : held) // the sequence ends: the cache alone holds them
    pool.release(id);
  EXPECT_EQ(pool.stats().cached_blocks, 6);
  EXPECT_EQ(pool.stats().used_blocks, 0);

  std::vector<int32_t> got;
  const std::vector<int32_t> other = {1, 2, 3, 4, 9, 9};
  EXPECT_EQ(pool.matchPrefix(other.data(), 3, 2, got), 2); // diverges in block 3
  EXPECT_EQ(got, std::vector<int32_t>(held.begin(), held.begin() + 4));
  EXPECT_EQ(pool.stats().used_blocks, 4);
  std::vector<int32_t> none;
  EXPECT_EQ(pool.matchPrefix(toks.data(), 1, 3, none), 0); // another width
  const std::vector<int32_t> first = {1, 7};
  EXPECT_EQ(pool.matchPrefix(first.data(), 1, 2, none), 0);
  std::vector<int32_t> capped;
  EXPECT_EQ(pool.matchPrefix(toks.data(), 1, 2, capped), 1); // at most max_blocks
  for (int32_t id : capped)
    pool.release(id);

  // 8 blocks: 2 never made, then only the leaf's 2 cached blocks can be
  // reclaimed (the first two chain blocks are held by `got`).
  EXPECT_GE(pool.allocate(), 0);
  EXPECT_GE(pool.allocate(), 0);
  const int32_t reclaimed = pool.allocate();
  EXPECT_TRUE(reclaimed == held[4] || reclaimed == held[5]);
  EXPECT_EQ(pool.stats().prefix_entries, 2);
  EXPECT_GE(pool.allocate(), 0);
  EXPECT_THROW(pool.allocate(), std::runtime_error); // the rest are in use
  for (int32_t id : got)
    pool.release(id);
  EXPECT_GE(pool.allocate(), 0); // the middle entry, now a leaf nobody holds
  pool.clearPrefixes();
  EXPECT_EQ(pool.stats().prefix_entries, 0);
  EXPECT_EQ(pool.stats().cached_blocks, 0);
}

namespace {
struct Layer {
  int64_t H = 4, KV = 2, hd = 8;
  LayerCache make(const Policy &p) const {
    return LayerCache(p, 0, H, KV, hd, 0, 8, [&](int64_t r, float *dst) {
      for (int64_t c = 0; c < H * hd; ++c)
        dst[c] = float((r * 7 + c) % 5) - 2.0f;
    });
  }
};

Policy policyOf(Method m, int64_t budget, int64_t window, llmc::kv::Hook mode) {
  Policy p;
  p.method = m;
  p.name = "test";
  p.budget_tokens = budget;
  p.window = window;
  p.sink = 2;
  p.pool = 1;
  p.refresh = 3;
  p.mode = mode;
  return p;
}
} // namespace

// A prompt of 37 tokens then 20 decode steps through a paged cache (blocks
// of 5) and a contiguous one: the same entries, the same attention (up to
// float re-association of the value sums), and a compacting policy gives its
// blocks back to the pool.
TEST(KvPaged, LayerCacheMatchesContiguousUnderEveryStorageUse) {
  using llmc::kv::Hook;
  for (const Policy &p :
       {Policy(), policyOf(Method::Streaming, 12, 4, Hook::Both),
        policyOf(Method::SnapKV, 14, 4, Hook::Both), policyOf(Method::H2O, 10, 4, Hook::Both),
        policyOf(Method::RestKV, 12, 4, Hook::Prefill)}) {
    Layer L;
    llmc::ThreadPool threads(2);
    auto pool = std::make_shared<KvBlockPool>(5, L.hd, 200);
    LayerCache flat = L.make(p), paged = L.make(p);
    paged.usePool(pool);
    ASSERT_TRUE(paged.paged());
    const int64_t T = 37, qd = L.H * L.hd, kd = L.KV * L.hd;
    std::vector<float> q = gaussian(size_t(T * qd), 1), k = gaussian(size_t(T * kd), 2),
                       v = gaussian(size_t(T * kd), 3);
    std::vector<float> o1(q.size()), o2(q.size());
    for (LayerCache *c : {&flat, &paged}) {
      c->append(k.data(), v.data(), T, kd, 0);
      c->attend(threads, q.data(), T, c == &flat ? o1.data() : o2.data());
      c->afterStep(q.data(), T, 0);
    }
    for (size_t i = 0; i < o1.size(); ++i)
      ASSERT_NEAR(o1[i], o2[i], 1e-5) << "prompt, policy " << int(p.method);
    for (int step = 0; step < 20; ++step) {
      std::vector<float> q1 = gaussian(size_t(qd), 10 + step), k1 = gaussian(size_t(kd), 40 + step),
                         v1 = gaussian(size_t(kd), 70 + step), a(static_cast<size_t>(qd)),
                         b(static_cast<size_t>(qd));
      for (LayerCache *c : {&flat, &paged}) {
        c->append(k1.data(), v1.data(), 1, kd, T + step);
        c->attend(threads, q1.data(), 1, c == &flat ? a.data() : b.data());
        c->afterStep(q1.data(), 1, T + step);
      }
      for (int64_t g = 0; g < L.KV; ++g)
        ASSERT_EQ(flat.head(g).pos, paged.head(g).pos) << "step " << step;
      for (size_t i = 0; i < a.size(); ++i)
        ASSERT_NEAR(a[i], b[i], 1e-5) << "step " << step << ", policy " << int(p.method);
    }
    int64_t blocks = 0;
    for (int64_t g = 0; g < L.KV; ++g) {
      EXPECT_TRUE(flat.head(g).paged.size() == 0);
      EXPECT_EQ(int64_t(paged.head(g).paged.size()), (paged.headEntries(g) + 4) / 5);
      blocks += int64_t(paged.head(g).paged.size());
    }
    EXPECT_EQ(pool->stats().used_blocks, blocks); // compaction gave the rest back
    if (!p.full()) {
      EXPECT_LT(blocks, 2 * (T + 20 + 4) / 5);
    }
    paged.reset();
    EXPECT_EQ(pool->stats().used_blocks, 0);
  }
}

// A paged cache on an f16 (or q8_0) pool holds each entry rounded to f16
// (coded as q8_0: int8 codes, an f16 scale per 32) and otherwise behaves as
// the f32 cache given the rounded (decoded) rows: same kept positions under
// compacting policies (whose scores read the rows decoded), same attention
// up to float re-association, copy on write of its smaller blocks. Fails if
// compaction moves f32-sized rows or if the library's attention reads the
// rows as f32 (both checked for f16). head_dim 32 for q8_0's groups.
TEST(KvPaged, HalfAndQ8RowPoolsEqualF32CacheOfRoundedRows) {
  using llmc::KvRowType;
  using llmc::kv::Hook;
  for (KvRowType type : {KvRowType::F16, KvRowType::Q8})
    for (const Policy &p : {Policy(), policyOf(Method::SnapKV, 14, 4, Hook::Both),
                            policyOf(Method::H2O, 10, 4, Hook::Both)}) {
      Layer L;
      L.hd = type == KvRowType::Q8 ? 32 : 8;
      llmc::ThreadPool threads(2);
      auto pool = std::make_shared<KvBlockPool>(5, L.hd, 200, type);
      EXPECT_EQ(pool->blockBytes(),
                2 * 5 * (type == KvRowType::F16 ? L.hd * 2 : L.hd + 2 * (L.hd / 32)));
      LayerCache flat = L.make(p), small = L.make(p);
      small.usePool(pool);
      ASSERT_EQ(small.rowType(), type);
      const int64_t qd = L.H * L.hd, kd = L.KV * L.hd;
      auto rounded = [&](std::vector<float> v) {
        if (type == KvRowType::F16) {
          for (float &x : v)
            x = llmc::halfToFloat(llmc::floatToHalf(x));
          return v;
        }
        std::vector<uint8_t> row(size_t(pool->rowBytes()));
        for (size_t r = 0; r < v.size(); r += size_t(L.hd)) {
          llmc::kernels::q8Row(v.data() + r, L.hd, row.data());
          llmc::kernels::floatRowQ8(row.data(), L.hd, v.data() + r);
        }
        return v;
      };
      for (int step = 0; step < 30; ++step) {
        const int64_t T = step == 0 ? 23 : 1, p0 = step == 0 ? 0 : 22 + step;
        std::vector<float> q = gaussian(size_t(T * qd), 100 + step),
                           k = gaussian(size_t(T * kd), 200 + step),
                           v = gaussian(size_t(T * kd), 300 + step);
        const std::vector<float> kr = rounded(k), vr = rounded(v);
        ASSERT_NE(kr, k); // the rows do get rounded
        std::vector<float> a(q.size()), b(q.size());
        flat.append(kr.data(), vr.data(), T, kd, p0);
        small.append(k.data(), v.data(), T, kd, p0);
        flat.attend(threads, q.data(), T, a.data());
        small.attend(threads, q.data(), T, b.data());
        flat.afterStep(q.data(), T, p0);
        small.afterStep(q.data(), T, p0);
        for (int64_t g = 0; g < L.KV; ++g)
          ASSERT_EQ(flat.head(g).pos, small.head(g).pos) << "step " << step;
        for (size_t i = 0; i < a.size(); ++i)
          ASSERT_NEAR(a[i], b[i], 1e-5) << "step " << step << ", policy " << int(p.method)
                                        << ", " << llmc::kvRowTypeName(type);
      }
      // Copy on write of a shared block copies all of it.
      BlockTable copy(small.head(0).paged);
      const int32_t before = copy.id(0), mine = copy.writable(0);
      ASSERT_NE(mine, before);
      EXPECT_TRUE(std::equal(pool->keyBytes(before), pool->keyBytes(before) + pool->blockBytes(),
                             pool->keyBytes(mine)));
      copy.clear();
      small.reset();
      EXPECT_EQ(pool->stats().used_blocks, 0);
    }
}

// q8_0 rows: scales first, then codes; each element within half a scale
// step of its value, the group's largest coded +-127; an all-zero group
// codes to zeros with a zero scale; a NaN reads back as NaN in its group
// only; a head_dim that is not a multiple of 32 is refused by the pool.
TEST(KvPaged, Q8RowsCodeWithinHalfAStepAndKeepTheirLayout) {
  std::vector<float> x = gaussian(96, 7);
  x[5] = 40.0f;                              // group 0's maximum
  std::fill(x.begin() + 32, x.begin() + 64, 0.0f); // group 1 all zero
  std::vector<uint8_t> row(size_t(llmc::kvRowBytes(llmc::KvRowType::Q8, 96)));
  ASSERT_EQ(row.size(), 96u + 6u);
  llmc::kernels::q8Row(x.data(), 96, row.data());
  std::vector<float> back(96);
  llmc::kernels::floatRowQ8(row.data(), 96, back.data());
  for (int g = 0; g < 3; ++g) {
    uint16_t h;
    std::memcpy(&h, row.data() + 2 * g, 2);
    const float scale = llmc::halfToFloat(h);
    float amax = 0;
    for (int i = 0; i < 32; ++i)
      amax = std::max(amax, std::fabs(x[size_t(g * 32 + i)]));
    EXPECT_EQ(scale, llmc::halfToFloat(llmc::floatToHalf(amax / 127.0f))) << "group " << g;
    for (int i = 0; i < 32; ++i) {
      const size_t at = size_t(g * 32 + i);
      EXPECT_LE(std::fabs(back[at] - x[at]), 0.5f * scale * 1.0001f) << at;
      EXPECT_EQ(back[at], float(int8_t(row[6 + at])) * scale) << at;
    }
  }
  EXPECT_EQ(int8_t(row[6 + 5]), 127);
  for (int i = 32; i < 64; ++i)
    EXPECT_EQ(back[size_t(i)], 0.0f);
  x[70] = std::numeric_limits<float>::quiet_NaN();
  llmc::kernels::q8Row(x.data(), 96, row.data());
  llmc::kernels::floatRowQ8(row.data(), 96, back.data());
  EXPECT_TRUE(std::isnan(back[70]) && std::isnan(back[64]));
  EXPECT_FALSE(std::isnan(back[5]));
  EXPECT_THROW(KvBlockPool(4, 48, 8, llmc::KvRowType::Q8), std::invalid_argument);
}

// Requests whose prompts share 24 leading tokens (6 blocks of 4): those
// admitted after the first prompt finished take its blocks instead of
// prefilling them, and every request decodes what it decodes alone.
TEST(KvPaged, BatcherSharesPromptPrefixesAndFreesEveryBlock) {
  TinyModel m({});
  auto art = m.artifact();
  const std::vector<int32_t> shared = promptOf(24, 77);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> p = shared;
    const std::vector<int32_t> tail = promptOf(1 + 3 * i, uint32_t(500 + i));
    p.insert(p.end(), tail.begin(), tail.end());
    prompts.push_back(p);
  }
  prompts.push_back(std::vector<int32_t>(shared.begin(), shared.begin() + 9)); // inside block 3
  std::vector<std::vector<int32_t>> want;
  for (const auto &p : prompts) {
    Executor alone(*art, ExecutorOptions{1, 0});
    std::vector<float> l = alone.forward(p);
    std::vector<int32_t> out;
    for (int i = 0; i < 6; ++i) {
      out.push_back(int32_t(std::max_element(l.begin(), l.end()) - l.begin()));
      l = alone.forward({out.back()});
    }
    want.push_back(out);
  }
  for (bool sharing : {true, false}) {
    Executor exec(*art, ExecutorOptions{2, 0});
    BatcherOptions bo{3, 16, 64};
    bo.kv_block_tokens = 4;
    bo.prefix_sharing = sharing;
    Batcher batcher(exec, bo);
    std::vector<std::vector<int32_t>> got(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      GenerationEvents ev;
      ev.on_token = [&got, i](int32_t t) { got[i].push_back(t); };
      batcher.submit({prompts[i], 6, {}, {}}, ev);
    }
    while (batcher.step()) {
    }
    for (size_t i = 0; i < prompts.size(); ++i)
      EXPECT_EQ(got[i], want[i]) << "request " << i << (sharing ? ", sharing" : "");
    const BatcherStats st = batcher.stats();
    int64_t total = 0;
    for (const auto &p : prompts)
      total += int64_t(p.size());
    EXPECT_EQ(st.prompt_tokens + st.prefix_hit_tokens, total);
    if (sharing) {
      // The first batch of 3 prefills the prefix; the 4 admitted later
      // share its 6 blocks (the last, 9 tokens, only 2 of them).
      EXPECT_EQ(st.prefix_hit_tokens, 3 * 24 + 8);
      EXPECT_TRUE(st.pool.prefix_sharing);
      EXPECT_GT(st.pool.cached_blocks, 0);
    } else {
      EXPECT_EQ(st.prefix_hit_tokens, 0);
      EXPECT_EQ(st.pool.cached_blocks, 0);
    }
    EXPECT_EQ(st.pool.used_blocks, 0); // every sequence's blocks are back
    EXPECT_EQ(st.pool.block_tokens, 4);
  }
}

// A pool of kv_pool_bytes admits requests by their worst case in whole
// blocks, refuses one that can never fit, and compacting policies share it.
TEST(KvPaged, PoolBoundsAdmissionInWholeBlocks) {
  TinyModel m({});
  auto art = m.artifact();
  Executor exec(*art, ExecutorOptions{1, 64});
  BatcherOptions bo{4, 32, 8};
  bo.kv_block_tokens = 8;
  const int64_t tables = exec.kvTablesPerSequence(); // 2 layers x 2 KV heads
  ASSERT_EQ(tables, kLayers * kKV);
  const int64_t blockBytes = 8 * 2 * kHd * 4;
  bo.kv_pool_bytes = tables * 6 * blockBytes; // 6 blocks per table: 48 positions
  Batcher batcher(exec, bo);
  EXPECT_EQ(batcher.reserveBytes(17), tables * 3 * blockBytes);
  EXPECT_THROW(batcher.submit({promptOf(40, 1), 9, {}, {}}, {}), std::invalid_argument);
  int finished = 0;
  GenerationEvents ev;
  ev.on_finish = [&finished](FinishReason r, const std::string &) {
    finished += r == FinishReason::Length;
  };
  for (int i = 0; i < 3; ++i) // 24 positions = 3 blocks each: two fit at once
    EXPECT_GT(batcher.submit({promptOf(12, uint32_t(i)), 12, {}, {}}, ev), 0);
  batcher.step();
  EXPECT_EQ(batcher.stats().running, 2);
  EXPECT_EQ(batcher.stats().waiting, 1);
  EXPECT_LE(batcher.stats().kv_reserved, bo.kv_pool_bytes);
  while (batcher.step()) {
  }
  EXPECT_EQ(finished, 3);
  EXPECT_EQ(batcher.stats().pool.used_blocks, 0);
}
