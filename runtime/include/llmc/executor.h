//===- executor.h - CPU reference executor of a Program --------*- C++ -*-===//
// Runs an artifact's Program on the CPU: batch 1, a KV cache per attention
// node, multithreaded blocked matrix products that read each weight in its
// stored type (rows are dequantized block by block into a small buffer, never
// the whole model).
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/artifact.h"
#include <cstdint>
#include <memory>
#include <vector>

namespace llmc {

class ThreadPool;

struct ExecutorOptions {
  int threads = 0;          // 0: hardware concurrency
  int64_t max_context = 0;  // 0: the model's context length, capped at 4096
};

class Executor {
public:
  /// Validates the program against the artifact's tensors (missing weight,
  /// shape mismatch) and throws std::runtime_error naming the problem.
  Executor(const Artifact &artifact, ExecutorOptions opts = {});
  ~Executor();

  /// Feed tokens at positions [pos(), pos()+n); returns logits [n, vocab]
  /// row-major when all_logits, else the last row only [vocab].
  std::vector<float> forward(const std::vector<int32_t> &tokens, bool all_logits = false);
  int64_t pos() const;
  void reset(); // clear the KV cache
  int64_t vocabSize() const;
  int64_t maxContext() const;

private:
  struct Impl;
  std::unique_ptr<Impl> impl;
};

struct SamplerOptions {
  float temperature = 0.0f; // 0: greedy
  int top_k = 0;            // 0: off
  float top_p = 1.0f;       // 1: off
  uint64_t seed = 0;
};

/// Deterministic for a given seed.
class Sampler {
public:
  explicit Sampler(SamplerOptions o);
  int32_t sample(const float *logits, int64_t vocab);

private:
  SamplerOptions opts;
  uint64_t state;
};

} // namespace llmc
