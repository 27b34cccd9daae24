//===- ExecutorBatchEngine.cpp - The CPU executor under the batcher -------===//
#include "llmc/batch_engine.h"

#include <stdexcept>

namespace llmc {
namespace {

struct ExecutorSequence final : EngineSequence {
  std::unique_ptr<SequenceKv> kv;
  explicit ExecutorSequence(std::unique_ptr<SequenceKv> k) : kv(std::move(k)) {}
  int64_t pos() const override { return kv->pos(); }
  int64_t kvBytes() const override { return kv->kvBytes(); }
};

class ExecutorBatchEngine final : public BatchEngine {
public:
  explicit ExecutorBatchEngine(Executor &exec) : exec_(exec) {}

  std::string name() const override { return exec_.engineName(); }
  int64_t vocabSize() const override { return exec_.vocabSize(); }
  int64_t maxContext() const override { return exec_.maxContext(); }
  bool chunkablePrefill() const override { return exec_.chunkablePrefill(); }
  int64_t kvBytesPerPosition() const override { return exec_.kvBytesPerPosition(); }

  void configure(const BatcherOptions &opts) override {
    paged_ = opts.paged_kv;
    if (!opts.paged_kv) {
      if (opts.kv_row_type != KvRowType::F32)
        throw std::invalid_argument(std::string("batcher: ") + kvRowTypeName(opts.kv_row_type) +
                                    " KV rows need the paged KV cache");
      return;
    }
    if (opts.kv_block_tokens < 1 || opts.kv_block_tokens > 4096)
      throw std::invalid_argument("batcher: kv_block_tokens must be in [1, 4096]");
    blockTokens_ = opts.kv_block_tokens;
    // K and V rows of one table (kvBytesPerPosition counts f32 rows).
    const int64_t headDim =
        exec_.kvBytesPerPosition() / exec_.kvTablesPerSequence() / 2 / int64_t(sizeof(float));
    blockBytes_ = blockTokens_ * 2 * kvRowBytes(opts.kv_row_type, headDim);
    const int64_t perSequence =
        exec_.kvTablesPerSequence() * ((exec_.maxContext() + blockTokens_ - 1) / blockTokens_);
    PagedKvOptions p;
    p.block_tokens = blockTokens_;
    p.pool_blocks = opts.kv_pool_bytes > 0 ? opts.kv_pool_bytes / blockBytes_
                                           : perSequence * opts.max_batch;
    if (p.pool_blocks < 1)
      throw std::invalid_argument("batcher: a KV pool of " + std::to_string(opts.kv_pool_bytes) +
                                  " bytes holds no block of " + std::to_string(blockBytes_));
    p.prefix_sharing = opts.prefix_sharing;
    p.row_type = opts.kv_row_type;
    exec_.usePagedKv(p);
  }

  int64_t reserveBytes(int64_t positions) const override {
    if (!paged_)
      return positions * exec_.kvBytesPerPosition();
    return exec_.kvTablesPerSequence() * ((positions + blockTokens_ - 1) / blockTokens_) *
           blockBytes_;
  }

  std::unique_ptr<EngineSequence> newSequence(const std::vector<int32_t> &prompt) override {
    return std::make_unique<ExecutorSequence>(exec_.newSequence(prompt));
  }

  std::vector<float> forwardBatch(const std::vector<EngineEntry> &entries) override {
    std::vector<BatchEntry> batch;
    batch.reserve(entries.size());
    for (const EngineEntry &e : entries)
      batch.push_back({static_cast<ExecutorSequence *>(e.sequence)->kv.get(), e.tokens});
    return exec_.forwardBatch(batch);
  }

  void publishPrompt(const EngineSequence &seq, const std::vector<int32_t> &prompt) override {
    exec_.publishPrompt(*static_cast<const ExecutorSequence &>(seq).kv, prompt);
  }

  KvPoolInfo kvPoolInfo() const override { return exec_.kvPoolInfo(); }

private:
  Executor &exec_;
  bool paged_ = false;
  int64_t blockTokens_ = 16, blockBytes_ = 0;
};

} // namespace

std::unique_ptr<BatchEngine> makeExecutorBatchEngine(Executor &exec) {
  return std::make_unique<ExecutorBatchEngine>(exec);
}

} // namespace llmc
