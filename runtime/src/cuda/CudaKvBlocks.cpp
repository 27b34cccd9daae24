//===- CudaKvBlocks.cpp - The GPU engine's KV block pool ------------------===//
// Sequences draw KV blocks from one pool as their caches grow and give
// them back when a KV policy shrinks a cache or the sequence resets, so
// the pool can be smaller than every sequence's whole context and a
// policy's evictions make room for other sequences (see KvBlocks in
// CudaEngineImpl.h). The kernels already read each row's block through
// the block table; this file keeps that table.
//===----------------------------------------------------------------------===//
#include "CudaEngineImpl.h"

#include <algorithm>

namespace llmc::cuda {

using namespace cudaengine;

namespace {
/// Blocks that hold `slots` entries.
int64_t blocksOf(int64_t slots) { return (slots + kKvBlock - 1) / kKvBlock; }
} // namespace

void CudaEngine::Impl::buildBlockPool(int64_t blockBytes) {
  const int64_t whole = maxSeqs * maxBlocks; // every sequence's whole context
  int64_t pool = whole;
  if (opts.kv_pool_bytes > 0) {
    pool = std::min(whole, opts.kv_pool_bytes / std::max<int64_t>(blockBytes, 1));
    if (pool < 1)
      throw std::runtime_error("cuda engine: a KV pool of " +
                               std::to_string(opts.kv_pool_bytes) + " bytes holds no block of " +
                               std::to_string(blockBytes) + " bytes (" +
                               std::to_string(kKvBlock) + " positions in every layer)");
  }
  blocks.pool = pool + 1; // + the scratch block
  if ((maxSeqs + 1) * maxBlocks > INT32_MAX || blocks.pool > INT32_MAX)
    throw std::runtime_error("cuda engine: too many KV blocks for the sequences and context");
  blocks.table.assign(size_t((maxSeqs + 1) * maxBlocks), 0);
  blocks.free.clear();
  for (int64_t b = blocks.pool - 1; b >= 1; --b) // block 1 drawn first
    blocks.free.push_back(int32_t(b));
  blocks.mapped.assign(size_t(maxSeqs), 0);
  blocks.used = blocks.peak = 0;
  blockTable = dev->alloc(blocks.table.size() * 4);
  dev->upload(blockTable, blocks.table.data(), blocks.table.size() * 4);
  stats.kv_pool_blocks = pool;
}

int64_t CudaEngine::Impl::slotsHeld(int64_t seq) const {
  if (!kv || !kv->any())
    return seqPos[size_t(seq)];
  int64_t most = 0;
  for (int c = 0; c < int(kv->caches()); ++c)
    most = std::max(most, kv->slots(c, seq));
  return most;
}

void CudaEngine::Impl::ensureBlocks(const std::vector<std::pair<int64_t, int64_t>> &need) {
  int64_t more = 0;
  for (const auto &[seq, slots] : need)
    more += std::max<int64_t>(0, blocksOf(slots) - blocks.mapped[size_t(seq)]);
  if (more > int64_t(blocks.free.size()))
    throw std::runtime_error(
        "cuda engine: the KV pool is full: the step needs " + std::to_string(more) +
        " more blocks of " + std::to_string(kKvBlock) + " positions and " +
        std::to_string(blocks.free.size()) + " of " + std::to_string(blocks.pool - 1) +
        " are free (a larger --kv-pool, fewer sequences or a KV policy make room)");
  for (const auto &[seq, slots] : need) {
    int64_t &mapped = blocks.mapped[size_t(seq)];
    for (const int64_t want = blocksOf(slots); mapped < want; ++mapped) {
      blocks.table[size_t(seq * maxBlocks + mapped)] = blocks.free.back();
      blocks.free.pop_back();
      ++blocks.used;
      blocks.dirty = true;
    }
  }
  blocks.peak = std::max(blocks.peak, blocks.used);
  stats.kv_blocks_peak = blocks.peak;
}

void CudaEngine::Impl::trimBlocks(int64_t seq) {
  int64_t &mapped = blocks.mapped[size_t(seq)];
  const int64_t keep = blocksOf(slotsHeld(seq));
  for (; mapped > keep; --mapped) {
    int32_t &entry = blocks.table[size_t(seq * maxBlocks + mapped - 1)];
    blocks.free.push_back(entry);
    entry = 0;
    --blocks.used;
    blocks.dirty = true;
  }
}

} // namespace llmc::cuda
