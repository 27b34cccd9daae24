//===- KvTreeTest.cpp - Draft trees over a layer cache --------------------===//
// LayerCache::attendTree against plain decoding: every row of a branching
// draft tree gets bit for bit the output that appending its path one entry
// at a time and attending with the decode kernel gives (contiguous f32, and
// paged on f32, f16 and Q8 pools; with an attention window), and
// keepTreePath leaves exactly that path's entries and positions. Refusals:
// a policy that is not the full one, a row whose parent is not earlier.
//===----------------------------------------------------------------------===//
#include "../../runtime/src/exec/ThreadPool.h"
#include "../../runtime/src/kv/KvBlockPool.h"
#include "../../runtime/src/kv/KvCache.h"
#include "codegen/cpu/CpuKernelSource.h"
#include "codegen/cpu/CpuOpKernels.h"
#include "GeneratedObject.h"
#include "Gaussian.h"
#include "llmc/kv_row_type.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <random>

using namespace llmc;
using llmc::kv::KvBlockPool;
using llmc::kv::LayerCache;
using llmc::kv::Policy;
using Spec = codegen::OpKernelSpec;

namespace {

constexpr int64_t kH = 6, kKV = 2, kHd = 32, kGroup = kH / kKV;

using llmc::testutil::gaussian;

/// The group kernels (contiguous, and over f32, f16 and Q8 row addresses)
/// for kGroup x kHd, built for this CPU once.
const codegen::AttendKernels &kernels() {
  static cgtest::GeneratedObject obj;
  static codegen::AttendKernels k = [] {
    std::vector<Spec> specs;
    for (Spec::Kind kind : {Spec::Kind::AttendF32Group, Spec::Kind::AttendF32RowsGroup,
                            Spec::Kind::AttendF16RowsGroup, Spec::Kind::AttendQ8RowsGroup}) {
      Spec s;
      s.kind = kind;
      s.heads = kGroup;
      s.headDim = kHd;
      specs.push_back(s);
    }
    cgtest::loadGenerated(obj, codegen::kernelSource({}, specs), codegen::hostIsa());
    codegen::AttendKernels g;
    g.group = obj.fn<codegen::AttendGroupFn>(specs[0].symbol());
    g.rowsGroup = obj.fn<codegen::AttendRowsGroupFn>(specs[1].symbol());
    g.rowsGroupF16 = obj.fn<codegen::AttendRowsGroupF16Fn>(specs[2].symbol());
    g.rowsGroupQ8 = obj.fn<codegen::AttendRowsGroupQ8Fn>(specs[3].symbol());
    return g;
  }();
  return k;
}

LayerCache makeCache(int64_t window, const std::shared_ptr<KvBlockPool> &pool,
                     const Policy &policy = Policy()) {
  LayerCache c(policy, 0, kH, kKV, kHd, window, 8, [](int64_t, float *) {});
  if (pool)
    c.usePool(pool);
  return c;
}

// A tree of 9 rows after the prefix: row 0, its children 1 2 3, then 4 5
// under 1, 6 under 3, 7 under 4, 8 under 6 (depths 0 1 1 1 2 2 2 3 3).
const std::vector<int32_t> kParent = {-1, 0, 0, 0, 1, 1, 3, 4, 6};

std::vector<int32_t> pathTo(int32_t row) {
  std::vector<int32_t> p;
  for (; row >= 0; row = kParent[size_t(row)])
    p.insert(p.begin(), row);
  return p;
}

} // namespace

TEST(KvTree, EveryRowIsPlainDecodingOfItsPathBitForBit) {
  const codegen::AttendKernels &gen = kernels();
  ASSERT_TRUE(gen.group && gen.rowsGroup && gen.rowsGroupF16 && gen.rowsGroupQ8);
  ThreadPool threads(2);
  const int64_t P = 23, T = int64_t(kParent.size()), qd = kH * kHd, kd = kKV * kHd;
  const std::vector<float> pk = gaussian(size_t(P * kd), 1), pv = gaussian(size_t(P * kd), 2);
  const std::vector<float> tk = gaussian(size_t(T * kd), 3), tv = gaussian(size_t(T * kd), 4);
  const std::vector<float> tq = gaussian(size_t(T * qd), 5);
  std::vector<int32_t> depth(size_t(T), 0);
  for (int64_t t = 1; t < T; ++t)
    depth[size_t(t)] = depth[size_t(kParent[size_t(t)])] + 1;
  struct Storage {
    const char *name;
    std::optional<KvRowType> pool;
    int64_t window;
  };
  for (const Storage &st : {Storage{"contiguous f32", std::nullopt, 0},
                            Storage{"contiguous f32, window 8", std::nullopt, 8},
                            Storage{"contiguous f32, window 2", std::nullopt, 2},
                            Storage{"paged f32", KvRowType::F32, 0},
                            Storage{"paged f16", KvRowType::F16, 0},
                            Storage{"paged q8", KvRowType::Q8, 0}}) {
    auto pool = [&]() -> std::shared_ptr<KvBlockPool> {
      return st.pool ? std::make_shared<KvBlockPool>(4, kHd, 400, *st.pool) : nullptr;
    };
    LayerCache tree = makeCache(st.window, pool());
    ASSERT_TRUE(tree.treeVerifiable()) << st.name;
    tree.append(pk.data(), pv.data(), P, kd, 0);
    tree.append(tk.data(), tv.data(), T, kd, P, depth.data());
    std::vector<float> out(size_t(T * qd));
    tree.attendTree(threads, tq.data(), T, kParent.data(), out.data(), gen);
    for (int32_t t = 0; t < T; ++t) {
      // Plain decoding of row t's path: the prefix, then each row of the
      // path one step at a time; the last step's output is row t's.
      LayerCache plain = makeCache(st.window, pool());
      plain.append(pk.data(), pv.data(), P, kd, 0);
      std::vector<float> o(static_cast<size_t>(qd));
      const std::vector<int32_t> path = pathTo(t);
      for (size_t i = 0; i < path.size(); ++i) {
        const int32_t r = path[i];
        plain.append(tk.data() + r * kd, tv.data() + r * kd, 1, kd, P + int64_t(i));
        plain.attend(threads, tq.data() + r * qd, 1, o.data(), gen);
      }
      for (int64_t d = 0; d < qd; ++d)
        ASSERT_EQ(out[size_t(t * qd + d)], o[size_t(d)]) << st.name << ", row " << t << ", " << d;
      if (t != 8 && t != 5 && t != 0)
        continue;
      // Keeping the path of a leaf (or of row 0 alone) leaves plain's cache.
      LayerCache kept = makeCache(st.window, pool());
      kept.append(pk.data(), pv.data(), P, kd, 0);
      kept.append(tk.data(), tv.data(), T, kd, P, depth.data());
      kept.keepTreePath(T, path);
      std::vector<float> a, b;
      for (int64_t g = 0; g < kKV; ++g) {
        ASSERT_EQ(kept.head(g).pos, plain.head(g).pos) << st.name << ", leaf " << t;
        kept.keyRows(g, a);
        plain.keyRows(g, b);
        ASSERT_EQ(a, b) << st.name << ", leaf " << t;
        kept.valueRows(g, a);
        plain.valueRows(g, b);
        ASSERT_EQ(a, b) << st.name << ", leaf " << t;
      }
      // The next decode step after it is plain decoding's too.
      const std::vector<float> k1 = gaussian(size_t(kd), 6), v1 = gaussian(size_t(kd), 7),
                               q1 = gaussian(size_t(qd), 8);
      std::vector<float> x(static_cast<size_t>(qd)), y(static_cast<size_t>(qd));
      const int64_t next = P + int64_t(path.size());
      kept.append(k1.data(), v1.data(), 1, kd, next);
      plain.append(k1.data(), v1.data(), 1, kd, next);
      kept.attend(threads, q1.data(), 1, x.data(), gen);
      plain.attend(threads, q1.data(), 1, y.data(), gen);
      ASSERT_EQ(x, y) << st.name << ", after leaf " << t;
    }
  }
}

TEST(KvTree, RefusesPoliciesAndMalformedTrees) {
  const codegen::AttendKernels &gen = kernels();
  ThreadPool threads(1);
  Policy snap;
  snap.method = kv::Method::SnapKV;
  snap.name = "snapkv";
  snap.budget_tokens = 8;
  snap.window = 4;
  EXPECT_FALSE(makeCache(0, nullptr, snap).treeVerifiable());
  LayerCache c = makeCache(0, nullptr);
  const int64_t kd = kKV * kHd, qd = kH * kHd;
  const std::vector<float> k = gaussian(size_t(3 * kd), 1), q = gaussian(size_t(3 * qd), 2);
  const std::vector<int32_t> depth = {0, 1, 1};
  c.append(k.data(), k.data(), 3, kd, 0, depth.data());
  std::vector<float> out(size_t(3 * qd));
  const std::vector<int32_t> forward = {-1, 2, 0}; // row 1 after row 2
  EXPECT_THROW(c.attendTree(threads, q.data(), 3, forward.data(), out.data(), gen),
               std::runtime_error);
  EXPECT_THROW(c.attendTree(threads, q.data(), 3, std::vector<int32_t>{-1, 0, 0}.data(),
                            out.data(), codegen::AttendKernels{}),
               std::runtime_error); // no kernel over row addresses
  EXPECT_THROW(c.keepTreePath(3, {0, 2, 1}), std::runtime_error); // not ascending
  EXPECT_THROW(c.keepTreePath(3, {0, 3}), std::runtime_error);    // past the tree
  c.keepTreePath(3, {0, 2});
  EXPECT_EQ(c.head(0).pos, (std::vector<int32_t>{0, 1}));
}
