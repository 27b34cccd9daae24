//===- llmc/cuda_engine.h - An artifact's kernel plan on a GPU --*- C++ -*-===//
// Runs a compiled artifact (--target cuda or cpu,cuda) on the GPU: the
// kernel plan's steps as launches of the artifact's own CUDA kernels
// (signed, checked against their digests), weights uploaded once in their
// stored formats (row-major; the CPU's eight-row copies are unpacked on the
// way), the activations in one device arena, the KV cache paged f16 in
// device memory at fixed addresses. A decode step (one token) is captured
// into a CUDA Graph the first time and replayed after: the position it
// reads is in device memory, written before each replay, and the split-KV
// attention's grid covers the whole context, so one graph serves every
// position. Prompts run eagerly, in chunks of up to kCudaPrefillChunk
// tokens (the products by groups of up to 8 tokens). Several sequences
// (max_sequences, each with the whole context's KV blocks) decode together
// in one step (decodeBatch): the step of each power-of-two batch size up to
// kCudaMaxBatch (the bucket; padding rows go to a scratch sequence) is
// captured once into its own graph. KV policies that compress prompts run
// between steps (runtime/src/cuda/CudaKvPolicy.h); the kernels then take
// each row's cache slot beside its position.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/artifact.h"
#include "llmc/batch_engine.h"
#include "llmc/signing.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace llmc::cuda {

constexpr int64_t kCudaPrefillChunk = 256;
constexpr int64_t kCudaMaxBatch = 32;

struct CudaEngineOptions {
  int64_t max_context = 0; // 0: the model's context length, capped at 4096
  bool graphs = true;      // false: every step launched eagerly (--no-graphs)
  int64_t max_sequences = 1; // sequences with their own KV cache (1..1024)
  /// > 0: the KV block pool's bytes (blocks of 16 positions in every
  /// layer, drawn as sequences grow and given back when a KV policy
  /// shrinks a cache); 0: room for every sequence's whole context.
  int64_t kv_pool_bytes = 0;
  signing::CodeTrust trust;
};

struct CudaEngineStats {
  int64_t weight_bytes = 0, kv_bytes = 0, arena_bytes = 0;
  int64_t kv_caches = 0, polykv_caches = 0; // layer caches, those storing PolyKV entries
  int64_t graph_steps = 0, eager_steps = 0, captures = 0;
  int kernels = 0; // distinct kernels the plan launches
  /// KV policies: prompts compressed, decode-time evictions (per cache and
  /// sequence), entries evicted (all caches and KV heads).
  int64_t kv_compressions = 0, kv_decode_evictions = 0, kv_evicted = 0;
  /// The KV block pool: its blocks (of 16 positions in every layer; the
  /// scratch block not counted) and the most in use at once.
  int64_t kv_pool_blocks = 0, kv_blocks_peak = 0;
  double upload_seconds = 0;
};

class CudaEngine {
public:
  /// The engine on this machine's GPU, or nullptr with `why` when there is
  /// no usable device. std::runtime_error when the artifact cannot run on
  /// one: no CUDA kernels or none for this GPU, not signed by a trusted
  /// key, a weight or shape its kernels do not cover, a malformed plan.
  static std::unique_ptr<CudaEngine> open(const Artifact &art, const CudaEngineOptions &opts,
                                          std::string &why);
  ~CudaEngine();

  /// Feeds tokens at positions pos()..; returns the last row's logits (all
  /// rows' when all_logits, [n, vocab]). Throws on ids outside the
  /// vocabulary or a context overflow (the cache is then unchanged).
  std::vector<float> forward(const std::vector<int32_t> &tokens, bool all_logits = false);
  void reset();
  int64_t pos() const;
  /// forward() of sequence `seq` (0..maxSequences()-1; forward() is 0's).
  std::vector<float> forwardSequence(int64_t seq, const std::vector<int32_t> &tokens,
                                     bool all_logits = false);
  /// One decode step of several distinct sequences, one token each (at
  /// most kCudaMaxBatch); returns their logits [seqs, vocab] in order.
  std::vector<float> decodeBatch(const std::vector<int64_t> &seqs,
                                 const std::vector<int32_t> &tokens);
  void resetSequence(int64_t seq);
  int64_t sequencePos(int64_t seq) const;
  int64_t maxSequences() const;
  /// Bytes one position of a sequence takes in every layer's f16 KV cache.
  int64_t kvBytesPerPosition() const;
  /// KV blocks (16 positions in every layer) in use now.
  int64_t kvBlocksUsed() const;
  int64_t vocabSize() const;
  int64_t maxContext() const;
  /// "NVIDIA H200 (compute capability 9.0, image sm_90)"
  std::string deviceInfo() const;
  const CudaEngineStats &stats() const;

private:
  struct Impl;
  explicit CudaEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// The GPU engine under the continuous batcher (llmc/batcher.h): each
/// request takes one of the engine's sequences (so max_batch must not
/// exceed maxSequences()); the decode rows of a step run as decodeBatch
/// steps (one captured graph per bucket, kCudaMaxBatch rows at most each),
/// the prompt chunks as forwardSequence calls. Its KV cache is the
/// engine's: f16, blocks of 16 positions, each sequence's whole context
/// allocated up front (kv_row_type, kv_block_tokens and prefix_sharing do
/// not apply; kv_pool_bytes limits admission by each request's whole
/// blocks). `gpu` must outlive it.
std::unique_ptr<BatchEngine> makeCudaBatchEngine(CudaEngine &gpu);

} // namespace llmc::cuda
