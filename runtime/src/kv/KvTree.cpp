//===- KvTree.cpp - Draft trees over one layer's KV cache -----------------===//
// Tree verification (speculative decoding): the rows of a draft tree are
// appended after the cache's entries in row order (parents before their
// children), each at the position of its depth. Row t attends to the
// earlier entries and to the rows on its own path from row 0, nothing
// else; those are the entries plain decoding of that path would hold, in
// the same order, so the generated kernel over their addresses gives plain
// decoding's output bit for bit. After the verdict, keepTreePath keeps the
// accepted path as consecutive entries and drops the rest.
//===----------------------------------------------------------------------===//
#include "KvCache.h"

#include "../exec/ThreadPool.h"

#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>

namespace llmc::kv {

namespace {

/// The entries row t of a tree sees: every entry before the tree (from
/// `first`), then the tree rows on its path from row 0 (base: the tree's
/// first entry) at positions >= lowest, in entry order.
void visibleEntries(int64_t first, int64_t base, int64_t t, const int32_t *parent,
                    const std::vector<int32_t> &pos, int32_t lowest, std::vector<int64_t> &out) {
  out.clear();
  for (int64_t j = first; j < base; ++j)
    out.push_back(j);
  const size_t mark = out.size();
  for (int64_t r = t; r >= 0; r = parent[r])
    if (pos[size_t(base + r)] >= lowest)
      out.push_back(base + r);
  std::reverse(out.begin() + std::ptrdiff_t(mark), out.end());
}

} // namespace

void LayerCache::attendTree(ThreadPool &pool, const float *q, int64_t T, const int32_t *parent,
                            float *out, const codegen::AttendKernels &gen) const {
  if (!treeVerifiable())
    throw std::runtime_error("kv cache of layer " + std::to_string(layer_) +
                             ": draft trees need the full KV policy over f32 or paged entries");
  if (!treeVerifiable(gen))
    throw std::runtime_error("kv cache of layer " + std::to_string(layer_) +
                             ": draft trees need the generated attention kernel over row "
                             "addresses for its entries");
  const KvRowType type = rowType();
  for (int64_t t = 1; t < T; ++t)
    if (parent[t] < 0 || parent[t] >= t)
      throw std::runtime_error("draft tree: row " + std::to_string(t) +
                               " must follow an earlier row");
  const int64_t qd = H_ * hd_;
  pool.parallelFor(0, KV_ * T, 0, [&](int64_t lo, int64_t hi) {
    thread_local std::vector<float> w;
    thread_local std::vector<int64_t> idx;
    thread_local std::vector<const void *> kp, vp;
    for (int64_t item = lo; item < hi; ++item) {
      const int64_t g = item / T, t = item % T;
      const HeadCache &c = heads_[size_t(g)];
      const int64_t base = c.n - T;
      // The attention window (if any) of this row's position.
      int64_t first = 0;
      int32_t lowest = INT32_MIN;
      if (windowLimit_ > 0) {
        lowest = c.pos[size_t(base + t)] - int32_t(windowLimit_) + 1;
        first = std::lower_bound(c.pos.begin(), c.pos.begin() + base, lowest) - c.pos.begin();
      }
      visibleEntries(first, base, t, parent, c.pos, lowest, idx);
      const int64_t n = int64_t(idx.size());
      kp.resize(size_t(n));
      vp.resize(size_t(n));
      for (int64_t i = 0; i < n; ++i) {
        const int64_t j = idx[size_t(i)];
        if (paged()) {
          kp[size_t(i)] = pagedKey(c, j);
          vp[size_t(i)] = pagedValue(c, j);
        } else {
          kp[size_t(i)] = c.k.data() + j * hd_;
          vp[size_t(i)] = c.v.data() + j * hd_;
        }
      }
      w.resize(size_t(group_ * n));
      const float *qg = q + t * qd + g * group_ * hd_;
      float *og = out + t * qd + g * group_ * hd_;
      if (type == KvRowType::F16)
        gen.rowsGroupF16(qg, reinterpret_cast<const uint16_t *const *>(kp.data()),
                         reinterpret_cast<const uint16_t *const *>(vp.data()), n, w.data(), n,
                         og);
      else if (type == KvRowType::Q8)
        gen.rowsGroupQ8(qg, reinterpret_cast<const uint8_t *const *>(kp.data()),
                        reinterpret_cast<const uint8_t *const *>(vp.data()), n, w.data(), n, og);
      else
        gen.rowsGroup(qg, reinterpret_cast<const float *const *>(kp.data()),
                      reinterpret_cast<const float *const *>(vp.data()), n, w.data(), n, og);
    }
  });
}

bool LayerCache::treeVerifiable(const codegen::AttendKernels &gen) const {
  if (!treeVerifiable())
    return false;
  switch (rowType()) {
  case KvRowType::F16:
    return gen.rowsGroupF16 != nullptr;
  case KvRowType::Q8:
    return gen.rowsGroupQ8 != nullptr;
  case KvRowType::F32:
    return gen.rowsGroup != nullptr;
  }
  return false;
}

void LayerCache::keepTreePath(int64_t T, const std::vector<int32_t> &path) {
  if (!treeVerifiable())
    throw std::runtime_error("kv cache of layer " + std::to_string(layer_) +
                             ": draft trees need the full KV policy over f32 or paged entries");
  for (size_t i = 0; i < path.size(); ++i)
    if (path[i] < 0 || path[i] >= T || (i > 0 && path[i] <= path[i - 1]))
      throw std::runtime_error("draft tree: the kept path must be ascending rows of the tree");
  for (HeadCache &c : heads_) {
    if (c.n < T)
      throw std::runtime_error("draft tree: the cache holds fewer entries than the tree");
    const int64_t base = c.n - T, m = int64_t(path.size());
    // Row path[i] >= i moves down to row i: sources are never overwritten
    // before they are read.
    for (int64_t i = 0; i < m; ++i)
      moveEntry(c, base + path[size_t(i)], base + i);
    truncateEntries(c, base + m);
  }
  updateMeter();
}

} // namespace llmc::kv
