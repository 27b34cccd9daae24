//===- batcher.h - Continuous batching of generation requests -*- C++ -*-===//
// Runs many generation requests on one Executor: every step is one
// Executor::forwardBatch over the running sequences, each decoding one
// token, plus chunks of the prompts of sequences still in prefill, up to a
// token budget per step (chunked prefill mixed into decode steps).
// Sequences join between steps while fewer than max_batch run, and leave
// when they finish (length, a stop token, the context) or are cancelled,
// freeing their caches. Each sequence keeps its own KV caches under the
// artifact's KV policies and its own sampler, so its tokens are those of
// the same request run alone (greedy: equal up to float re-association of
// a step's rows, which the int8 and f32 kernels do not do).
//
// Thread safety: submit, cancel and stats may be called from any thread;
// step and waitForWork from one engine thread. Callbacks run on the engine
// thread, outside the lock (they may call cancel or submit).
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/executor.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace llmc {

struct GenerationRequest {
  std::vector<int32_t> prompt; // token ids, at least one
  int64_t max_tokens = 16;     // tokens to generate, at least one
  SamplerOptions sampling;
  std::vector<int32_t> stop_tokens; // end the generation (not reported)
};

enum class FinishReason { Length, Stop, Context, Cancelled, Error };
const char *finishReasonName(FinishReason r);

struct GenerationEvents {
  /// Each generated token, in order.
  std::function<void(int32_t token)> on_token;
  /// Once, at the end; `error` is set for FinishReason::Error.
  std::function<void(FinishReason reason, const std::string &error)> on_finish;
};

struct BatcherOptions {
  int max_batch = 16;          // sequences running at once
  int64_t step_tokens = 256;   // tokens per step (decode tokens first, then prompt chunks)
  int64_t max_queue = 64;      // waiting requests; submit refuses more
  /// > 0: a request is admitted only while the KV bytes reserved by the
  /// running ones plus its own, (prompt + max_tokens) x
  /// Executor::kvBytesPerPosition(), fit; submit refuses a request that
  /// could never fit.
  int64_t kv_pool_bytes = 0;
  /// Paged KV (Executor::usePagedKv): sequences draw KV blocks of
  /// kv_block_tokens entries from one pool of kv_pool_bytes (0: room for
  /// max_batch sequences of the whole context, allocated as used), and a
  /// request's reservation is its worst case in whole blocks. False keeps
  /// each sequence's caches in its own vectors.
  bool paged_kv = true;
  int64_t kv_block_tokens = 16;
  /// The pool's row type (paged_kv only): f16 halves the bytes per entry.
  KvRowType kv_row_type = KvRowType::F32;
  /// Under the full cache, prompts beginning with the same complete blocks
  /// share them (copy-free) and skip their prefill.
  bool prefix_sharing = true;
};

struct BatcherStats {
  int running = 0, waiting = 0;
  int64_t steps = 0, prompt_tokens = 0, generated_tokens = 0, finished = 0;
  int last_batch = 0;        // sequences in the last step
  int peak_batch = 0;        // most sequences in one step so far
  int64_t kv_bytes = 0;      // KV bytes the running sequences hold
  int64_t kv_reserved = 0;   // KV bytes reserved for them (with kv_pool_bytes)
  KvPoolInfo pool;           // the paged pool (zero without one)
  int64_t prefix_hit_tokens = 0; // prompt tokens taken from shared blocks, not prefilled
};

class Batcher {
public:
  Batcher(Executor &exec, BatcherOptions opts);
  ~Batcher();

  /// Queues a request; returns its id (> 0), or 0 when the queue is full.
  /// Throws std::invalid_argument for an empty prompt, max_tokens < 1, a
  /// token id outside the vocabulary, a prompt that does not leave room
  /// for one generated token in the context, or one larger than the KV pool.
  int64_t submit(GenerationRequest request, GenerationEvents events);
  /// Ends request `id` (waiting or running) with FinishReason::Cancelled at
  /// the next step; unknown or finished ids are ignored.
  void cancel(int64_t id);
  /// Runs one step (admitting waiting requests first); false when there
  /// was nothing to run.
  bool step();
  /// Blocks until a request is waiting or running, or `timeout` passes;
  /// returns whether there is work.
  bool waitForWork(std::chrono::milliseconds timeout);
  /// Wakes waitForWork (e.g. at shutdown).
  void notify();
  BatcherStats stats() const;
  const BatcherOptions &options() const { return opts_; }
  /// KV bytes a request of `positions` positions reserves (its worst case:
  /// whole blocks when paged).
  int64_t reserveBytes(int64_t positions) const;

private:
  struct Sequence;
  void admit();
  /// The entries of the next step, and the sequence of each.
  void plan(std::vector<Sequence *> &order, std::vector<BatchEntry> &entries);
  /// Advances each entry's prompt, samples the next token of those whose
  /// prompt is complete (a decode step, or a prompt's last chunk), and
  /// finishes the sequences that end.
  void afterStep(const std::vector<Sequence *> &order, const std::vector<float> &logits);
  void finish(Sequence &s, FinishReason r, const std::string &error = {});

  Executor &exec_;
  BatcherOptions opts_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;
  std::vector<int64_t> cancelled_;
  int64_t nextId_ = 1;
  int64_t reserved_ = 0; // KV bytes reserved by running sequences
  int64_t blockBytes_ = 0; // a paged block's bytes
  BatcherStats stats_;
};

} // namespace llmc
