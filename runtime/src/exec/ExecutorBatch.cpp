//===- ExecutorBatch.cpp - Forward steps over several sequences ----------===//
// A SequenceKv holds one sequence's layer caches (copies of the executor's
// fresh caches, so its KV policies are the executor's) and position.
// forwardBatch runs one step of several sequences: on the kernel engine as
// one pass of the plan (PlanEngine::runBatch: every product over all rows
// at once), on the reference engine one entry after another with the
// entry's caches swapped in.
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
  for (kv::LayerCache &c : s->caches)
    c.attachMeter(&s->meter);
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

} // namespace llmc
