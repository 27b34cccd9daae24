//===- batcher.h - Continuous batching of generation requests -*- C++ -*-===//
// Runs many generation requests on one BatchEngine (llmc/batch_engine.h:
// the CPU executor or the GPU engine): every step is one
// BatchEngine::forwardBatch over the running sequences, each decoding one
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
#include "llmc/batch_engine.h"
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
  /// On the CPU executor (which must outlive the batcher).
  Batcher(Executor &exec, BatcherOptions opts);
  /// On any engine (which must outlive the batcher); configures it.
  Batcher(BatchEngine &engine, BatcherOptions opts);
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
  /// The engine the steps run on.
  const BatchEngine &engine() const { return engine_; }

private:
  struct Sequence;
  Batcher(std::unique_ptr<BatchEngine> owned, BatcherOptions opts);
  /// Checks the options and configures the engine.
  void start();
  void admit();
  /// The entries of the next step, and the sequence of each.
  void plan(std::vector<Sequence *> &order, std::vector<EngineEntry> &entries);
  /// Advances each entry's prompt, samples the next token of those whose
  /// prompt is complete (a decode step, or a prompt's last chunk), and
  /// finishes the sequences that end.
  void afterStep(const std::vector<Sequence *> &order, const std::vector<float> &logits);
  /// Marks `s` done; its on_finish runs (deliver) once it has left the batch.
  void finish(Sequence &s, FinishReason r, const std::string &error = {});
  void deliver(Sequence &s);

  std::unique_ptr<BatchEngine> owned_; // the executor's adapter (first constructor)
  BatchEngine &engine_;
  BatcherOptions opts_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;
  std::vector<int64_t> cancelled_;
  int64_t nextId_ = 1;
  int64_t reserved_ = 0; // KV bytes reserved by running sequences
  BatcherStats stats_;
};

} // namespace llmc
