//===- KernelPlanTree.cpp - RoPE + KV append, draft-tree steps ------------===//
// rope_kv_append: RoPE on a step's Q and K rows at their positions (pos +
// row, or pos + depth for the rows of a draft tree), then K and V into the
// layer's cache; and the draft tree a step may carry (PlanSegment::parent):
// checked, and its rows' depths, before the step runs.
//===----------------------------------------------------------------------===//
#include "KernelPlan.h"

#include "Ops.h"
#include "ThreadPool.h"

#include <stdexcept>
#include <string>

namespace llmc {

void PlanEngine::beginTree(const std::vector<PlanSegment> &segments, int64_t R) {
  treeParent_ = nullptr;
  const int64_t S = int64_t(segments.size());
  for (const PlanSegment &g : segments)
    if (g.parent && S > 1)
      throw std::runtime_error("kernel plan: a draft tree is the only sequence of its step");
  if (segments[0].parent) {
    const int32_t *parent = segments[0].parent;
    treeDepth_.assign(size_t(R), 0);
    for (int64_t t = 1; t < R; ++t) {
      if (parent[t] < 0 || parent[t] >= t)
        throw std::runtime_error("kernel plan: draft tree row " + std::to_string(t) +
                                 " must follow an earlier row");
      treeDepth_[size_t(t)] = treeDepth_[size_t(parent[t])] + 1;
    }
    treeParent_ = parent;
  }
}

void PlanEngine::runRopeKvAppend(ThreadPool &pool, kv::LayerCache &cache, const PlanStep &s,
                                 int64_t pos, const StepIO &io) {
  const int64_t T = io.rows;
  const int64_t hd = s.headDim, qd = s.heads * hd, kvd = s.kvHeads * hd;
  const int64_t Win = s.in[0].width;
  const float *qkv = io.in(s, 0);
  float *out = io.out;
  float *kv = kv_.data() + io.first * 2 * kvd; // sized by runBatch: a row per step row
  const int32_t *depth = treeParent_ ? treeDepth_.data() + io.first : nullptr;
  // Row t's position: pos + t, or pos + its depth in a draft tree.
  auto at = [&](int64_t t) { return pos + (depth ? depth[t] : t); };
  pool.parallelFor(0, T, 0, [&](int64_t lo, int64_t hi) {
    if (s.genRope && !depth) {
      s.genRope(qkv + lo * Win, Win, out + lo * qd, kv + lo * 2 * kvd, hi - lo, pos + lo);
      return;
    }
    if (s.genRope) { // a tree's rows one at a time, each at its own position
      for (int64_t t = lo; t < hi; ++t)
        s.genRope(qkv + t * Win, Win, out + t * qd, kv + t * 2 * kvd, 1, at(t));
      return;
    }
    std::vector<float> cs(static_cast<size_t>(hd));
    for (int64_t t = lo; t < hi; ++t) {
      const float *src = qkv + t * Win;
      float *q = out + t * qd, *k = kv + t * 2 * kvd;
      std::copy(src, src + qd, q);
      std::copy(src + qd, src + qd + 2 * kvd, k);
      ops::applyRope(q, s.heads, hd, at(t), s.invFreq, s.rope, cs.data());
      ops::applyRope(k, s.kvHeads, hd, at(t), s.invFreq, s.rope, cs.data());
    }
  });
  cache.append(kv, kv + kvd, T, 2 * kvd, pos, depth);
}

} // namespace llmc
