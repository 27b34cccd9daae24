//===- CudaBatchEngine.cpp - The GPU engine under the batcher -------------===//
// A request holds one of the CudaEngine's sequences while it runs (a slot,
// returned when its EngineSequence is destroyed). A step's one-token
// entries go to decodeBatch by groups of at most kCudaMaxBatch (a captured
// graph per power-of-two bucket); longer entries (prompt chunks) go to
// forwardSequence one by one. Everything is checked before anything runs.
//===----------------------------------------------------------------------===//
#include "llmc/cuda_engine.h"

#include <algorithm>
#include <memory>
#include <stdexcept>

namespace llmc::cuda {
namespace {

constexpr int64_t kBlockTokens = 16; // the engine's KV block

/// Which of the engine's sequences are taken; shared with the sequences so
/// that one outliving the engine's adapter still returns its slot safely.
struct Slots {
  std::vector<bool> taken;
};

struct CudaSequence final : EngineSequence {
  CudaEngine &gpu;
  std::shared_ptr<Slots> slots;
  int64_t slot;
  CudaSequence(CudaEngine &g, std::shared_ptr<Slots> s, int64_t i)
      : gpu(g), slots(std::move(s)), slot(i) {}
  ~CudaSequence() override {
    try {
      gpu.resetSequence(slot); // its KV blocks back to the pool now
    } catch (...) {
      // a device error: the blocks come back when the slot is taken again
    }
    slots->taken[size_t(slot)] = false;
  }
  int64_t pos() const override { return gpu.sequencePos(slot); }
  int64_t kvBytes() const override { return roundUp(pos()) * gpu.kvBytesPerPosition(); }
  static int64_t roundUp(int64_t positions) {
    return (positions + kBlockTokens - 1) / kBlockTokens * kBlockTokens;
  }
};

class CudaBatchEngine final : public BatchEngine {
public:
  explicit CudaBatchEngine(CudaEngine &gpu)
      : gpu_(gpu), slots_(std::make_shared<Slots>()) {
    slots_->taken.assign(size_t(gpu.maxSequences()), false);
  }

  std::string name() const override { return "cuda"; }
  int64_t vocabSize() const override { return gpu_.vocabSize(); }
  int64_t maxContext() const override { return gpu_.maxContext(); }
  bool chunkablePrefill() const override { return true; }
  int64_t kvBytesPerPosition() const override { return gpu_.kvBytesPerPosition(); }

  void configure(const BatcherOptions &opts) override {
    if (opts.max_batch > gpu_.maxSequences())
      throw std::invalid_argument("batcher: max_batch " + std::to_string(opts.max_batch) +
                                  " exceeds the GPU engine's " +
                                  std::to_string(gpu_.maxSequences()) + " sequences");
  }

  int64_t reserveBytes(int64_t positions) const override {
    return CudaSequence::roundUp(positions) * gpu_.kvBytesPerPosition();
  }

  std::unique_ptr<EngineSequence> newSequence(const std::vector<int32_t> &) override {
    std::vector<bool> &taken = slots_->taken;
    const auto free = std::find(taken.begin(), taken.end(), false);
    if (free == taken.end())
      throw std::runtime_error("cuda engine: all " + std::to_string(taken.size()) +
                               " sequences are taken");
    const int64_t slot = int64_t(free - taken.begin());
    gpu_.resetSequence(slot);
    *free = true;
    return std::make_unique<CudaSequence>(gpu_, slots_, slot);
  }

  std::vector<float> forwardBatch(const std::vector<EngineEntry> &entries) override {
    check(entries);
    const int64_t vocab = gpu_.vocabSize();
    std::vector<float> out(entries.size() * size_t(vocab));
    std::vector<size_t> decodeAt;
    for (size_t i = 0; i < entries.size(); ++i)
      if (entries[i].tokens.size() == 1)
        decodeAt.push_back(i);
    for (size_t from = 0; from < decodeAt.size(); from += size_t(kCudaMaxBatch)) {
      const size_t to = std::min(decodeAt.size(), from + size_t(kCudaMaxBatch));
      std::vector<int64_t> seqs;
      std::vector<int32_t> tokens;
      for (size_t k = from; k < to; ++k) {
        seqs.push_back(slotOf(entries[decodeAt[k]]));
        tokens.push_back(entries[decodeAt[k]].tokens[0]);
      }
      const std::vector<float> logits = gpu_.decodeBatch(seqs, tokens);
      for (size_t k = from; k < to; ++k)
        std::copy_n(logits.begin() + std::ptrdiff_t((k - from) * size_t(vocab)), vocab,
                    out.begin() + std::ptrdiff_t(decodeAt[k] * size_t(vocab)));
    }
    for (size_t i = 0; i < entries.size(); ++i)
      if (entries[i].tokens.size() > 1) {
        const std::vector<float> last = gpu_.forwardSequence(slotOf(entries[i]), entries[i].tokens);
        std::copy(last.begin(), last.end(), out.begin() + std::ptrdiff_t(i * size_t(vocab)));
      }
    return out;
  }

  void publishPrompt(const EngineSequence &, const std::vector<int32_t> &) override {}

  KvPoolInfo kvPoolInfo() const override {
    KvPoolInfo p;
    p.block_tokens = kBlockTokens;
    p.block_bytes = kBlockTokens * gpu_.kvBytesPerPosition();
    p.capacity_blocks = gpu_.stats().kv_pool_blocks;
    p.used_blocks = gpu_.kvBlocksUsed(); // after the policies' evictions
    return p;
  }

private:
  static int64_t slotOf(const EngineEntry &e) {
    return static_cast<const CudaSequence *>(e.sequence)->slot;
  }

  /// Every entry valid (tokens in the vocabulary, room in the context, each
  /// sequence once) before anything runs.
  void check(const std::vector<EngineEntry> &entries) const {
    std::vector<bool> seen(slots_->taken.size(), false);
    for (const EngineEntry &e : entries) {
      if (!e.sequence || e.tokens.empty())
        throw std::runtime_error("cuda batch: an entry without a sequence or tokens");
      const int64_t slot = slotOf(e);
      if (slot < 0 || size_t(slot) >= seen.size() || !slots_->taken[size_t(slot)])
        throw std::runtime_error("cuda batch: a sequence this engine did not make");
      if (seen[size_t(slot)])
        throw std::runtime_error("cuda batch: sequence " + std::to_string(slot) +
                                 " twice in one step");
      seen[size_t(slot)] = true;
      for (int32_t t : e.tokens)
        if (t < 0 || t >= gpu_.vocabSize())
          throw std::runtime_error("cuda batch: token id " + std::to_string(t) +
                                   " outside [0, " + std::to_string(gpu_.vocabSize()) + ")");
      if (gpu_.sequencePos(slot) + int64_t(e.tokens.size()) > gpu_.maxContext())
        throw std::runtime_error("cuda batch: context overflow in sequence " +
                                 std::to_string(slot));
    }
  }

  CudaEngine &gpu_;
  std::shared_ptr<Slots> slots_;
};

} // namespace

std::unique_ptr<BatchEngine> makeCudaBatchEngine(CudaEngine &gpu) {
  return std::make_unique<CudaBatchEngine>(gpu);
}

} // namespace llmc::cuda
