//===- KvBlockPool.h - Fixed-size KV blocks from one pool -------*- C++ -*-===//
// The paged KV cache's storage. A block holds the keys and then the values
// of `block_entries` consecutive entries of one KV head of one layer (rows
// of head_dim elements: f32, IEEE f16 to halve the bytes attention reads
// per step, or Q8 codes and scales for about a quarter; the pool's element
// type, one for all its blocks; llmc/kv_row_type.h has the row layouts). Every
// sequence of a batcher draws its blocks from one pool; a head's cache is a BlockTable (block ids in entry order). Blocks
// are reference counted: copying a table (a snapshot, a shared prompt
// prefix) shares its blocks, and a write to a shared block copies it first
// (copy on write), so sharing never changes another sequence's entries.
// Blocks come in slabs allocated on first use, up to max_blocks; released
// blocks go back to a free list and are reused.
//
// Prefix sharing: after a prompt has been fed under the full cache, the
// blocks of its complete leading blocks are published under the tokens they
// hold (a chain, block by block, compared token for token, not by hash
// alone). A later prompt that starts with the same tokens adopts them
// (referencing them, no copy) and skips their prefill. Published blocks stay
// cached after their sequences end, and are given back, least recently used
// leaf first, when the pool has no free block left.
//
// Thread safety: every member may be called from any thread (one mutex);
// keys()/values() of a block the caller holds need no lock.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/kv_row_type.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace llmc::kv {

struct KvPoolStats {
  int64_t capacity_blocks = 0; // the pool's limit
  int64_t used_blocks = 0;     // referenced by a sequence (or a snapshot)
  int64_t cached_blocks = 0;   // referenced by the prefix cache only (reclaimable)
  int64_t block_bytes = 0;
  int64_t block_entries = 0;
  int64_t prefix_entries = 0;    // published prompt blocks (chains of blocks)
  int64_t prefix_hit_tokens = 0; // prompt tokens served from the prefix cache so far
};

class KvBlockPool {
public:
  /// Throws std::invalid_argument for sizes < 1, and for Q8 rows whose
  /// head_dim is not a multiple of kKvQ8Group.
  KvBlockPool(int64_t block_entries, int64_t head_dim, int64_t max_blocks,
              KvRowType element = KvRowType::F32);
  KvBlockPool(const KvBlockPool &) = delete;
  KvBlockPool &operator=(const KvBlockPool &) = delete;

  int64_t blockEntries() const { return B_; }
  int64_t headDim() const { return hd_; }
  KvRowType element() const { return element_; }
  /// Bytes of one key or value row.
  int64_t rowBytes() const { return kvRowBytes(element_, hd_); }
  /// Bytes of one block (keys and values).
  int64_t blockBytes() const { return 2 * B_ * rowBytes(); }
  int64_t capacityBlocks() const { return maxBlocks_; }

  /// A block with one reference. When none is free, the least recently
  /// used cached prefix block nobody else holds is reclaimed; throws
  /// std::runtime_error when the pool is exhausted.
  int32_t allocate();
  void retain(int32_t id);
  void release(int32_t id);
  /// Whether more than one holder references the block.
  bool shared(int32_t id) const;
  /// Rows [block_entries, head_dim] of the block's keys / values, as
  /// bytes (any element type: a Q8 pool's rows are read this way), as f32
  /// (an f32 pool only) or as f16 bits (an f16 pool only).
  unsigned char *keyBytes(int32_t id) const { return slot(id); }
  unsigned char *valueBytes(int32_t id) const { return slot(id) + B_ * rowBytes(); }
  float *keys(int32_t id) const { return reinterpret_cast<float *>(keyBytes(id)); }
  float *values(int32_t id) const { return reinterpret_cast<float *>(valueBytes(id)); }
  uint16_t *keysF16(int32_t id) const { return reinterpret_cast<uint16_t *>(keyBytes(id)); }
  uint16_t *valuesF16(int32_t id) const { return reinterpret_cast<uint16_t *>(valueBytes(id)); }

  /// The longest published chain of complete blocks that `tokens` starts
  /// with, at most max_blocks long: for each matched block b, `width` block
  /// ids (one per layer cache and KV head, in publishing order) are
  /// appended to `blocks`, each retained for the caller. Returns the number
  /// of blocks matched (0 when `width` differs from what was published).
  int64_t matchPrefix(const int32_t *tokens, int64_t max_blocks, int64_t width,
                      std::vector<int32_t> &blocks);
  /// Publishes the first n_blocks complete blocks of `tokens`; blocks[b *
  /// width + i] is block b of table i. Already published blocks are kept
  /// (the first publisher's); new ones are retained by the cache.
  void publishPrefix(const int32_t *tokens, int64_t n_blocks, int64_t width,
                     const std::vector<int32_t> &blocks);
  /// Drops every cached prefix (blocks still held by sequences stay).
  void clearPrefixes();
  KvPoolStats stats() const;

private:
  struct PrefixEntry {
    int64_t parent = -1;
    std::vector<int32_t> tokens; // the block's tokens
    std::vector<int32_t> blocks; // `width` ids
    int64_t children = 0;
    uint64_t lastUse = 0;
  };
  unsigned char *slot(int32_t id) const {
    const int64_t i = int64_t(id);
    return slabs_[size_t(i / kSlabBlocks)].get() + (i % kSlabBlocks) * blockBytes();
  }
  int32_t takeFreeLocked();
  bool reclaimOneLocked();
  void retainLocked(int32_t id);
  void releaseLocked(int32_t id);
  void removeEntryLocked(int64_t entry);
  static uint64_t hashTokens(const int32_t *t, int64_t n);

  static constexpr int64_t kSlabBlocks = 64;
  const int64_t B_, hd_, maxBlocks_;
  const KvRowType element_;
  mutable std::mutex mu_;
  // Slabs hold f32 or f16 rows; operator new[] aligns them for either.
  std::vector<std::unique_ptr<unsigned char[]>> slabs_; // sized up front; filled on demand
  std::vector<int32_t> refs_;                   // per block
  std::vector<char> indexed_;                   // per block: the prefix cache holds it
  std::vector<int32_t> free_;
  int64_t made_ = 0;      // blocks handed out of slabs so far
  int64_t used_ = 0;      // blocks with refs > 0
  int64_t cachedOnly_ = 0; // indexed blocks whose only reference is the cache's
  // (parent entry, hash of the block's tokens) -> entry id
  std::map<std::pair<int64_t, uint64_t>, int64_t> children_;
  std::unordered_map<int64_t, PrefixEntry> entries_;
  int64_t nextEntry_ = 0, width_ = -1, hitTokens_ = 0;
  uint64_t clock_ = 0;
};

/// One KV head's blocks, in entry order; copies share blocks (retained),
/// destruction releases them.
class BlockTable {
public:
  BlockTable() = default;
  explicit BlockTable(std::shared_ptr<KvBlockPool> pool) : pool_(std::move(pool)) {}
  BlockTable(const BlockTable &o);
  BlockTable &operator=(const BlockTable &o);
  BlockTable(BlockTable &&o) noexcept = default;
  BlockTable &operator=(BlockTable &&o) noexcept;
  ~BlockTable() { clear(); }

  KvBlockPool *pool() const { return pool_.get(); }
  const std::shared_ptr<KvBlockPool> &poolPtr() const { return pool_; }
  size_t size() const { return ids_.size(); }
  int32_t id(size_t i) const { return ids_[i]; }
  const std::vector<int32_t> &ids() const { return ids_; }
  /// Appends a fresh block.
  void grow();
  /// Appends a block the caller already retained (prefix adoption).
  void adopt(int32_t id) { ids_.push_back(id); }
  /// Block i, copied first if shared, so that writing to it is private.
  int32_t writable(size_t i);
  /// Keeps the first n blocks, releasing the rest.
  void truncate(size_t n);
  void clear() { truncate(0); }

private:
  std::shared_ptr<KvBlockPool> pool_;
  std::vector<int32_t> ids_;
};

} // namespace llmc::kv
