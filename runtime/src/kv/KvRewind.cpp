//===- KvRewind.cpp - Dropping a layer cache's newest entries -------------===//
// What speculative decoding needs from a KV cache: verification steps that
// the policies take as decode steps, and dropping the rejected drafts'
// entries (and their window queries) afterwards, exactly.
//===----------------------------------------------------------------------===//
#include "KvCache.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

namespace llmc::kv {

void LayerCache::setStepKind(StepKind kind) {
  if (kind == StepKind::Verification && !rewindable())
    throw std::runtime_error("kv cache of layer " + std::to_string(layer_) +
                             ": a verification step needs a KV policy that decoding leaves alone");
  stepKind_ = kind;
}

void LayerCache::trimWindow(int64_t keep) {
  const int64_t extra = int64_t(winPos_.size()) - std::max<int64_t>(0, keep);
  if (extra <= 0)
    return;
  winQ_.erase(winQ_.begin(), winQ_.begin() + extra * H_ * hd_);
  winPos_.erase(winPos_.begin(), winPos_.begin() + extra);
}

void LayerCache::moveEntry(HeadCache &c, int64_t from, int64_t to) {
  if (from == to)
    return;
  if (paged()) {
    const int32_t id = c.paged.writable(size_t(to / blockEntries_));
    const int64_t row = (to % blockEntries_) * pool_->rowBytes();
    std::memcpy(pool_->keyBytes(id) + row, pagedKey(c, from), size_t(pool_->rowBytes()));
    std::memcpy(pool_->valueBytes(id) + row, pagedValue(c, from), size_t(pool_->rowBytes()));
  } else if (quantized()) {
    const int64_t kb = poly_.keyBytes(), vb = poly_.valueBytes();
    std::copy_n(c.kq.data() + from * kb, kb, c.kq.data() + to * kb);
    std::copy_n(c.vq.data() + from * vb, vb, c.vq.data() + to * vb);
  } else {
    std::copy_n(c.k.data() + from * hd_, hd_, c.k.data() + to * hd_);
    std::copy_n(c.v.data() + from * hd_, hd_, c.v.data() + to * hd_);
  }
  c.pos[size_t(to)] = c.pos[size_t(from)];
  if (!c.acc.empty())
    c.acc[size_t(to)] = c.acc[size_t(from)];
}

void LayerCache::truncateEntries(HeadCache &c, int64_t n) {
  c.pos.resize(size_t(n));
  if (!c.acc.empty())
    c.acc.resize(size_t(n));
  if (paged()) {
    c.paged.truncate(size_t((n + blockEntries_ - 1) / blockEntries_));
  } else if (quantized()) {
    c.kq.resize(size_t(n * poly_.keyBytes()));
    c.vq.resize(size_t(n * poly_.valueBytes()));
  } else {
    c.k.resize(size_t(n * hd_));
    c.v.resize(size_t(n * hd_));
  }
  c.n = n;
}

void LayerCache::dropFrom(int64_t pos) {
  if (!rewindable())
    throw std::runtime_error("kv cache of layer " + std::to_string(layer_) +
                             ": its KV policy keeps state besides the entries, so the newest "
                             "entries cannot be dropped (speculative decoding needs the full "
                             "policy or one that compresses prompts only and keeps no running "
                             "statistics)");
  if (pos < rewindFloor_)
    throw std::runtime_error("kv cache of layer " + std::to_string(layer_) +
                             ": cannot drop positions before " + std::to_string(rewindFloor_) +
                             " (the prompt its KV policy compressed)");
  if (!policy_.full() && !heads_.empty()) // each dropped position was a decode step
    for (int64_t j = heads_[0].n; j > 0 && heads_[0].pos[size_t(j - 1)] >= pos; --j)
      --steps_;
  for (HeadCache &c : heads_) {
    int64_t n = c.n;
    while (n > 0 && c.pos[size_t(n - 1)] >= pos)
      --n;
    if (n != c.n)
      truncateEntries(c, n);
  }
  size_t w = winPos_.size(); // the window queries of the dropped positions
  while (w > 0 && winPos_[w - 1] >= pos)
    --w;
  winPos_.resize(w);
  winQ_.resize(w * size_t(H_ * hd_));
  trimWindow(policy_.window);
  updateMeter();
}

} // namespace llmc::kv
