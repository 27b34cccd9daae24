//===- llmc/batch_engine.h - What the continuous batcher runs on -*- C++ -*-===//
// The continuous batcher (llmc/batcher.h) schedules requests; a BatchEngine
// runs its steps: the CPU executor (makeExecutorBatchEngine: one
// Executor::forwardBatch per step, a paged KV pool, prefix sharing) or the
// GPU engine (cuda::makeCudaBatchEngine: decode rows in one captured graph,
// prompt chunks per sequence). The batcher never sees which.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/executor.h"
#include "llmc/kv_row_type.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace llmc {

struct BatcherOptions {
  int max_batch = 16;          // sequences running at once
  int64_t step_tokens = 256;   // tokens per step (decode tokens first, then prompt chunks)
  int64_t max_queue = 64;      // waiting requests; submit refuses more
  /// > 0: a request is admitted only while the KV bytes reserved by the
  /// running ones plus its own (BatchEngine::reserveBytes of prompt +
  /// max_tokens positions) fit; submit refuses a request that could never
  /// fit.
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

/// One running sequence of a BatchEngine (its KV cache and position).
class EngineSequence {
public:
  virtual ~EngineSequence() = default;
  /// Tokens fed so far (the position of the next).
  virtual int64_t pos() const = 0;
  /// KV bytes it holds now.
  virtual int64_t kvBytes() const = 0;
};

/// One sequence's tokens in a step.
struct EngineEntry {
  EngineSequence *sequence = nullptr;
  std::vector<int32_t> tokens; // fed at sequence->pos()..
};

class BatchEngine {
public:
  virtual ~BatchEngine() = default;
  /// "kernels", "reference", "cuda": for logs.
  virtual std::string name() const = 0;
  virtual int64_t vocabSize() const = 0;
  virtual int64_t maxContext() const = 0;
  /// Whether prompts may be fed in several steps (not under RDKV).
  virtual bool chunkablePrefill() const = 0;
  /// Sets up the KV storage for the batcher's options, once, before any
  /// sequence; std::invalid_argument for options it cannot honour.
  virtual void configure(const BatcherOptions &opts) = 0;
  /// KV bytes a sequence of `positions` positions reserves (its worst case).
  virtual int64_t reserveBytes(int64_t positions) const = 0;
  /// KV bytes per position of a sequence (a request's size check).
  virtual int64_t kvBytesPerPosition() const = 0;
  /// A new sequence for `prompt` (pos() > 0 when it starts with shared
  /// prompt blocks; at least the last prompt token is left to feed).
  /// std::runtime_error when no sequence is free.
  virtual std::unique_ptr<EngineSequence> newSequence(const std::vector<int32_t> &prompt) = 0;
  /// One step: each entry's tokens fed to its sequence (each sequence at
  /// most once); the logits of each entry's last token, [entries, vocab].
  virtual std::vector<float> forwardBatch(const std::vector<EngineEntry> &entries) = 0;
  /// After `prompt` has been fed into `seq` (prefix sharing; may do nothing).
  virtual void publishPrompt(const EngineSequence &seq, const std::vector<int32_t> &prompt) = 0;
  /// The KV pool's state (all zero without one).
  virtual KvPoolInfo kvPoolInfo() const = 0;
};

/// The CPU executor as a BatchEngine (it must outlive the engine).
std::unique_ptr<BatchEngine> makeExecutorBatchEngine(Executor &exec);

} // namespace llmc
