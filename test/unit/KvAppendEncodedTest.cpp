//===- KvAppendEncodedTest.cpp - PolyKV entries appended as stored --------===//
// LayerCache::appendEncoded (the GPU engine's shadow takes the device's
// PolyKV entries this way): bytes encoded by the layer's codec
// (LayerCache::polyKvFor) appended as they are make the same cache as the
// floats appended, entry for entry and attention for attention; a cache
// that does not store PolyKV refuses them.
//===----------------------------------------------------------------------===//
#include "runtime/src/exec/ThreadPool.h"
#include "runtime/src/kv/KvCache.h"

#include <gtest/gtest.h>

#include <random>

using namespace llmc;
using namespace llmc::kv;

namespace {

Policy streamingPolyKv() {
  Policy p;
  p.method = Method::Streaming;
  p.name = "streaming";
  p.budget_tokens = 1000;
  p.window = 4;
  p.seed = 11;
  p.quant = KvQuant::PolyKV;
  return p;
}

std::vector<float> randoms(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float &x : v)
    x = nd(rng);
  return v;
}

} // namespace

TEST(LayerCache, PolyKvEntriesAppendedEncodedEqualTheFloatsAppended) {
  const int64_t H = 4, KV = 2, hd = 64, T = 9, layer = 3;
  const Policy p = streamingPolyKv();
  LayerCache a(p, layer, H, KV, hd, 0, 0, nullptr), b(p, layer, H, KV, hd, 0, 0, nullptr);
  const std::vector<float> k = randoms(size_t(T * KV * hd), 1), v = randoms(k.size(), 2);
  a.append(k.data(), v.data(), T, KV * hd, 5);
  // The same entries through the layer's codec: [T][KV][bytes].
  const PolyKV codec = LayerCache::polyKvFor(p, layer, hd);
  std::vector<uint8_t> kb(size_t(T * KV * codec.keyBytes())), vb(size_t(T * KV * codec.valueBytes()));
  for (int64_t i = 0; i < T * KV; ++i) {
    codec.encodeKey(k.data() + i * hd, kb.data() + i * codec.keyBytes());
    codec.encodeValue(v.data() + i * hd, vb.data() + i * codec.valueBytes());
  }
  b.appendEncoded(kb.data(), vb.data(), T, 5);
  for (int64_t h = 0; h < KV; ++h) {
    EXPECT_EQ(a.head(h).n, T);
    EXPECT_EQ(b.head(h).n, T);
    EXPECT_EQ(a.head(h).kq, b.head(h).kq) << "head " << h;
    EXPECT_EQ(a.head(h).vq, b.head(h).vq) << "head " << h;
    EXPECT_EQ(a.head(h).pos, b.head(h).pos) << "head " << h;
  }
  ThreadPool pool(1);
  const std::vector<float> q = randoms(size_t(T * H * hd), 3);
  std::vector<float> oa(q.size()), ob(q.size());
  a.attend(pool, q.data(), T, oa.data());
  b.attend(pool, q.data(), T, ob.data());
  EXPECT_EQ(oa, ob);
  // A cache of f32 entries takes no encoded ones.
  Policy f32 = p;
  f32.quant = KvQuant::None;
  LayerCache c(f32, layer, H, KV, hd, 0, 0, nullptr);
  EXPECT_THROW(c.appendEncoded(kb.data(), vb.data(), T, 0), std::runtime_error);
}
