//===- ExecutorBatch.cpp - Forward steps over several sequences ----------===//
// A SequenceKv holds one sequence's layer caches (copies of the executor's
// fresh caches, so its KV policies are the executor's) and position.
// forwardBatch runs one step of several sequences: on the kernel engine as
// one pass of the plan (PlanEngine::runBatch: every product over all rows
// at once), on the reference engine one entry after another with the
// entry's caches swapped in. With usePagedKv, new sequences keep their f32
// entries in blocks of one pool and (under the full cache) share the
// leading blocks of identical prompt prefixes.
//===----------------------------------------------------------------------===//
#include "ExecutorImpl.h"

#include <set>
#include <stdexcept>

namespace llmc {

struct SequenceKv::State {
  const void *owner = nullptr; // the Executor::Impl that made it
  std::vector<kv::LayerCache> caches;
  kv::KvMeter meter;
  int64_t pos = 0;
};

SequenceKv::SequenceKv(std::unique_ptr<State> s) : state(std::move(s)) {}
SequenceKv::~SequenceKv() = default;
int64_t SequenceKv::pos() const { return state->pos; }
int64_t SequenceKv::kvBytes() const { return state->meter.current; }
int64_t SequenceKv::kvPeakBytes() const { return state->meter.peak; }
int64_t SequenceKv::kvEntries() const {
  int64_t e = 0;
  for (const kv::LayerCache &c : state->caches)
    e += c.entries();
  return e;
}

namespace {
/// Calls f when the scope ends, however it ends.
template <class F> struct AtScopeEnd {
  F &f;
  ~AtScopeEnd() { f(); }
};
} // namespace

std::unique_ptr<SequenceKv> Executor::newSequence() const {
  auto s = std::make_unique<SequenceKv::State>();
  s->owner = impl.get();
  s->caches = impl->freshCaches;
  for (kv::LayerCache &c : s->caches) {
    if (impl->kvPool)
      c.usePool(impl->kvPool);
    c.attachMeter(&s->meter);
  }
  s->meter.resetPeak();
  return std::unique_ptr<SequenceKv>(new SequenceKv(std::move(s)));
}

std::vector<float> Executor::forwardBatch(const std::vector<BatchEntry> &entries) {
  Impl &m = *impl;
  if (entries.empty())
    throw std::runtime_error("Executor::forwardBatch: no entries given");
  if (m.hook || m.stopAfterBlock >= 0)
    throw std::runtime_error("Executor::forwardBatch: not with a linear-input hook or "
                             "stop_after_block (calibration runs one sequence)");
  std::set<const SequenceKv *> seen;
  for (const BatchEntry &e : entries) {
    if (!e.sequence || e.sequence->state->owner != &m)
      throw std::runtime_error("Executor::forwardBatch: a sequence not made by this executor");
    if (!seen.insert(e.sequence).second)
      throw std::runtime_error("Executor::forwardBatch: a sequence appears twice in one step");
    m.checkTokens(e.tokens, e.sequence->state->pos);
  }
  const int64_t vocab = vocabSize();
  std::vector<float> logits;
  if (m.plan) {
    std::vector<PlanSegment> segments;
    segments.reserve(entries.size());
    for (const BatchEntry &e : entries) {
      SequenceKv::State &s = *e.sequence->state;
      segments.push_back({&s.caches, e.tokens.data(), int64_t(e.tokens.size()), s.pos});
    }
    m.plan->runBatch(m.pool, segments, false, logits);
    for (const BatchEntry &e : entries)
      e.sequence->state->pos += int64_t(e.tokens.size());
  } else { // step() advances the position swapped in
    logits.reserve(size_t(vocab) * entries.size());
    for (const BatchEntry &e : entries) {
      SequenceKv::State &s = *e.sequence->state;
      auto swap = [&] { // the sequence's caches and position in the executor's place
        std::swap(m.caches, s.caches);
        std::swap(m.pos, s.pos);
      };
      swap();
      AtScopeEnd<decltype(swap)> putBack{swap};
      std::vector<float> l = m.step(e.tokens, false);
      logits.insert(logits.end(), l.end() - vocab, l.end());
    }
  }
  return logits;
}

void Executor::usePagedKv(const PagedKvOptions &opts) {
  Impl &m = *impl;
  if (opts.block_tokens < 1 || opts.block_tokens > 4096)
    throw std::runtime_error("paged KV: block_tokens must be in [1, 4096], not " +
                             std::to_string(opts.block_tokens));
  if (opts.pool_blocks < 1)
    throw std::runtime_error("paged KV: the pool needs at least one block");
  const int64_t hd = m.poolHeadDim("paged KV");
  if (hd < 0)
    throw std::runtime_error("paged KV: the program has no attention layer");
  m.kvPool = std::make_shared<kv::KvBlockPool>(opts.block_tokens, hd, opts.pool_blocks,
                                               opts.row_type);
  m.prefixSharing = opts.prefix_sharing;
}

bool Executor::pagedKv() const { return impl->kvPool != nullptr; }

int64_t Executor::kvTablesPerSequence() const {
  int64_t n = 0;
  for (const kv::LayerCache &c : impl->freshCaches)
    n += c.kvHeads();
  return n;
}

namespace {
/// Whether every cache of a sequence can share prompt blocks.
bool sharable(const std::vector<kv::LayerCache> &caches) {
  for (const kv::LayerCache &c : caches)
    if (!c.prefixSharable())
      return false;
  return !caches.empty();
}
} // namespace

KvPoolInfo Executor::kvPoolInfo() const {
  KvPoolInfo info;
  if (!impl->kvPool)
    return info;
  const kv::KvPoolStats s = impl->kvPool->stats();
  info.capacity_blocks = s.capacity_blocks;
  info.used_blocks = s.used_blocks;
  info.cached_blocks = s.cached_blocks;
  info.block_bytes = s.block_bytes;
  info.block_tokens = s.block_entries;
  info.prefix_entries = s.prefix_entries;
  info.prefix_hit_tokens = s.prefix_hit_tokens;
  info.prefix_sharing = impl->prefixSharing && !impl->freshCaches.empty();
  for (const kv::LayerCache &c : impl->freshCaches)
    info.prefix_sharing = info.prefix_sharing && c.sharesPrefixes();
  return info;
}

std::unique_ptr<SequenceKv> Executor::newSequence(const std::vector<int32_t> &prompt) const {
  std::unique_ptr<SequenceKv> seq = newSequence();
  SequenceKv::State &s = *seq->state;
  if (!impl->kvPool || !impl->prefixSharing || prompt.size() < 2 || !sharable(s.caches))
    return seq;
  const int64_t B = impl->kvPool->blockEntries();
  const int64_t width = kvTablesPerSequence();
  std::vector<int32_t> blocks;
  // At least the last prompt token is fed, for its logits.
  const int64_t n = impl->kvPool->matchPrefix(prompt.data(), (int64_t(prompt.size()) - 1) / B,
                                              width, blocks);
  if (n == 0)
    return seq;
  int64_t first = 0;
  for (kv::LayerCache &c : s.caches) {
    c.adoptPrefix(blocks, n, width, first);
    first += c.kvHeads();
  }
  s.pos = n * B;
  return seq;
}

void Executor::publishPrompt(const SequenceKv &seq, const std::vector<int32_t> &prompt) const {
  const SequenceKv::State &s = *seq.state;
  if (!impl->kvPool || !impl->prefixSharing || s.owner != impl.get() || !sharable(s.caches) ||
      s.pos < int64_t(prompt.size()))
    return;
  const int64_t B = impl->kvPool->blockEntries();
  const int64_t n = int64_t(prompt.size()) / B, width = kvTablesPerSequence();
  if (n == 0)
    return;
  std::vector<int32_t> blocks;
  int64_t first = 0;
  for (const kv::LayerCache &c : s.caches) {
    c.prefixBlocks(n, width, first, blocks);
    first += c.kvHeads();
  }
  impl->kvPool->publishPrefix(prompt.data(), n, width, blocks);
}

} // namespace llmc
