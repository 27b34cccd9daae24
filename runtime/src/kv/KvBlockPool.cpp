//===- KvBlockPool.cpp - Fixed-size KV blocks from one pool ---------------===//
#include "KvBlockPool.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

namespace llmc::kv {

KvBlockPool::KvBlockPool(int64_t block_entries, int64_t head_dim, int64_t max_blocks,
                         KvRowType element)
    : B_(block_entries), hd_(head_dim), maxBlocks_(max_blocks), element_(element) {
  if (B_ < 1 || hd_ < 1 || maxBlocks_ < 1)
    throw std::invalid_argument("kv pool: block entries, head_dim and blocks must be >= 1");
  if (element_ == KvRowType::Q8 && hd_ % kKvQ8Group != 0)
    throw std::invalid_argument("kv pool: q8_0 rows need a head_dim that is a multiple of " +
                                std::to_string(kKvQ8Group) + ", not " + std::to_string(hd_));
  if (maxBlocks_ > int64_t(std::numeric_limits<int32_t>::max()))
    throw std::invalid_argument("kv pool: more than 2^31 blocks");
  slabs_.resize(size_t((maxBlocks_ + kSlabBlocks - 1) / kSlabBlocks));
  refs_.assign(size_t(maxBlocks_), 0);
  indexed_.assign(size_t(maxBlocks_), 0);
}

int32_t KvBlockPool::takeFreeLocked() {
  if (!free_.empty()) {
    const int32_t id = free_.back();
    free_.pop_back();
    return id;
  }
  if (made_ < maxBlocks_) {
    const size_t slab = size_t(made_ / kSlabBlocks);
    if (!slabs_[slab]) // uninitialised: pages are committed as blocks are written
      slabs_[slab].reset(new unsigned char[size_t(kSlabBlocks * blockBytes())]);
    return int32_t(made_++);
  }
  return -1;
}

int32_t KvBlockPool::allocate() {
  std::lock_guard<std::mutex> lock(mu_);
  int32_t id = takeFreeLocked();
  while (id < 0 && reclaimOneLocked())
    id = takeFreeLocked();
  if (id < 0)
    throw std::runtime_error("kv pool exhausted: all " + std::to_string(maxBlocks_) +
                             " blocks of " + std::to_string(blockBytes()) + " bytes are in use");
  refs_[size_t(id)] = 1;
  ++used_;
  return id;
}

void KvBlockPool::retainLocked(int32_t id) {
  int32_t &r = refs_[size_t(id)];
  if (r <= 0)
    throw std::logic_error("kv pool: retain of a free block");
  if (++r == 2 && indexed_[size_t(id)])
    --cachedOnly_;
}

void KvBlockPool::releaseLocked(int32_t id) {
  int32_t &r = refs_[size_t(id)];
  if (r <= 0)
    throw std::logic_error("kv pool: release of a free block");
  if (--r == 0) {
    if (indexed_[size_t(id)]) { // the cache's own reference went: it no longer holds it
      indexed_[size_t(id)] = 0;
      --cachedOnly_;
    }
    --used_;
    free_.push_back(id);
  } else if (r == 1 && indexed_[size_t(id)]) {
    ++cachedOnly_;
  }
}

void KvBlockPool::retain(int32_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  retainLocked(id);
}

void KvBlockPool::release(int32_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  releaseLocked(id);
}

bool KvBlockPool::shared(int32_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return refs_[size_t(id)] > 1;
}

uint64_t KvBlockPool::hashTokens(const int32_t *t, int64_t n) {
  uint64_t h = 1469598103934665603ull; // FNV-1a over the token ids' bytes
  for (int64_t i = 0; i < n; ++i)
    for (int s = 0; s < 32; s += 8) {
      h ^= (uint32_t(t[i]) >> s) & 0xffu;
      h *= 1099511628211ull;
    }
  return h;
}

int64_t KvBlockPool::matchPrefix(const int32_t *tokens, int64_t max_blocks, int64_t width,
                                 std::vector<int32_t> &blocks) {
  std::lock_guard<std::mutex> lock(mu_);
  if (width != width_)
    return 0;
  int64_t parent = -1, matched = 0;
  ++clock_;
  for (; matched < max_blocks; ++matched) {
    const int32_t *t = tokens + matched * B_;
    auto it = children_.find({parent, hashTokens(t, B_)});
    if (it == children_.end())
      break;
    PrefixEntry &e = entries_.at(it->second);
    if (!std::equal(e.tokens.begin(), e.tokens.end(), t))
      break; // a hash collision: not the same tokens
    for (int32_t id : e.blocks) {
      retainLocked(id);
      blocks.push_back(id);
    }
    e.lastUse = clock_;
    parent = it->second;
  }
  hitTokens_ += matched * B_;
  return matched;
}

void KvBlockPool::publishPrefix(const int32_t *tokens, int64_t n_blocks, int64_t width,
                                const std::vector<int32_t> &blocks) {
  if (int64_t(blocks.size()) < n_blocks * width)
    throw std::logic_error("kv pool: publishPrefix given too few blocks");
  std::lock_guard<std::mutex> lock(mu_);
  if (width_ != width) {
    if (!entries_.empty())
      return; // another layout's prefixes are cached: leave them
    width_ = width;
  }
  int64_t parent = -1;
  ++clock_;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const int32_t *t = tokens + b * B_;
    const auto key = std::make_pair(parent, hashTokens(t, B_));
    auto it = children_.find(key);
    if (it != children_.end()) {
      PrefixEntry &e = entries_.at(it->second);
      if (!std::equal(e.tokens.begin(), e.tokens.end(), t))
        return; // a collision: the chain cannot continue under this key
      e.lastUse = clock_;
      parent = it->second;
      continue;
    }
    PrefixEntry e;
    e.parent = parent;
    e.tokens.assign(t, t + B_);
    e.blocks.assign(blocks.begin() + b * width, blocks.begin() + (b + 1) * width);
    e.lastUse = clock_;
    for (int32_t id : e.blocks) {
      if (indexed_[size_t(id)])
        return; // already cached under another chain (cannot happen for f32 prompts)
    }
    for (int32_t id : e.blocks) {
      retainLocked(id);
      indexed_[size_t(id)] = 1;
      if (refs_[size_t(id)] == 1)
        ++cachedOnly_;
    }
    if (parent >= 0)
      ++entries_.at(parent).children;
    const int64_t id = nextEntry_++;
    entries_.emplace(id, std::move(e));
    children_.emplace(key, id);
    parent = id;
  }
}

void KvBlockPool::removeEntryLocked(int64_t entry) {
  PrefixEntry &e = entries_.at(entry);
  children_.erase({e.parent, hashTokens(e.tokens.data(), int64_t(e.tokens.size()))});
  if (e.parent >= 0)
    --entries_.at(e.parent).children;
  for (int32_t id : e.blocks) {
    if (refs_[size_t(id)] == 1) // counted as cached only until now
      --cachedOnly_;
    indexed_[size_t(id)] = 0;
    releaseLocked(id);
  }
  entries_.erase(entry);
}

bool KvBlockPool::reclaimOneLocked() {
  // The least recently used leaf whose blocks only the cache holds.
  int64_t best = -1;
  uint64_t bestUse = std::numeric_limits<uint64_t>::max();
  for (const auto &[id, e] : entries_) {
    if (e.children > 0 || e.lastUse >= bestUse)
      continue;
    bool onlyCache = true;
    for (int32_t b : e.blocks)
      onlyCache = onlyCache && refs_[size_t(b)] == 1;
    if (onlyCache) {
      best = id;
      bestUse = e.lastUse;
    }
  }
  if (best < 0)
    return false;
  removeEntryLocked(best);
  return true;
}

void KvBlockPool::clearPrefixes() {
  std::lock_guard<std::mutex> lock(mu_);
  while (!entries_.empty()) { // leaves first, so parents' child counts stay right
    int64_t leaf = -1;
    for (const auto &[id, e] : entries_)
      if (e.children == 0) {
        leaf = id;
        break;
      }
    removeEntryLocked(leaf);
  }
  width_ = -1;
}

KvPoolStats KvBlockPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  KvPoolStats s;
  s.capacity_blocks = maxBlocks_;
  s.used_blocks = used_ - cachedOnly_;
  s.cached_blocks = cachedOnly_;
  s.block_bytes = blockBytes();
  s.block_entries = B_;
  s.prefix_entries = int64_t(entries_.size());
  s.prefix_hit_tokens = hitTokens_;
  return s;
}

BlockTable::BlockTable(const BlockTable &o) : pool_(o.pool_), ids_(o.ids_) {
  for (int32_t id : ids_)
    pool_->retain(id);
}

BlockTable &BlockTable::operator=(const BlockTable &o) {
  if (this == &o)
    return *this;
  BlockTable copy(o);
  *this = std::move(copy);
  return *this;
}

BlockTable &BlockTable::operator=(BlockTable &&o) noexcept {
  if (this != &o) {
    clear();
    pool_ = std::move(o.pool_);
    ids_ = std::move(o.ids_);
    o.ids_.clear();
  }
  return *this;
}

void BlockTable::grow() { ids_.push_back(pool_->allocate()); }

int32_t BlockTable::writable(size_t i) {
  const int32_t id = ids_[i];
  if (!pool_->shared(id))
    return id;
  const int32_t fresh = pool_->allocate();
  std::memcpy(pool_->keyBytes(fresh), pool_->keyBytes(id), size_t(pool_->blockBytes()));
  pool_->release(id);
  ids_[i] = fresh;
  return fresh;
}

void BlockTable::truncate(size_t n) {
  while (ids_.size() > n) {
    pool_->release(ids_.back());
    ids_.pop_back();
  }
}

} // namespace llmc::kv
