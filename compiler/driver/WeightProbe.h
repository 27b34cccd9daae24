//===- WeightProbe.h - KL divergence of one weight's replacement -*- C++ -*-===//
// The measurement behind --target-bpw's sensitivities: a compiled model
// (the source with no pipeline) is run once on a few tokens for reference
// log-probabilities; each probe swaps one weight for other bytes (a storage
// type without side data, e.g. the weight rounded to 3 bits), runs
// the model again from an empty cache and returns the mean KL divergence
// of the reference from it over every position. Each probe opens a fresh
// artifact (the runtime's Artifact is immutable) over the weights where
// they lie (Artifact::fromViews: only the probed weight's new bytes are
// copied), so its cost is an executor's set-up plus one forward; for a
// weight inside a block the forward resumes at that block from the
// reference's input rows to it (Executor::forwardFrom: the same values,
// half the work on average), when a resumed reference run reproduced the
// reference logits bit for bit.
//===----------------------------------------------------------------------===//
#pragma once
#include "compiler/driver/Compile.h"
#include "llmc/executor.h"
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace llmc {

class WeightProbe {
public:
  /// Runs the reference forward on `tokens` (keeping the input every
  /// linear projection outside MoE experts sees); throws std::runtime_error
  /// if the model cannot run. threads: executor threads (0: all cores).
  WeightProbe(const CompiledModel &ref, std::vector<int32_t> tokens, int threads = 0);

  /// Mean KL(reference || model with weight `name` stored as `dtype`
  /// `bytes`) per position. Throws std::runtime_error naming the weight if
  /// it is not in the model or the bytes do not fit its shape.
  double kld(const std::string &name, DType dtype, const std::vector<uint8_t> &bytes);

  /// The input [tokens, cols] weight `name` multiplied in the reference
  /// forward, or nullptr (embedding tables, MoE experts, unknown names).
  const std::vector<float> *input(const std::string &name) const;

  int64_t tokens() const { return int64_t(tokens_.size()); }
  double buildSeconds() const { return buildSeconds_; }
  double forwardSeconds() const { return forwardSeconds_; }

private:
  /// An artifact over `tensors` and an executor over it for the
  /// probe's tokens (`o` with the probe's threads and context).
  struct Model {
    std::unique_ptr<Artifact> art;
    std::unique_ptr<Executor> ex; // reads *art
  };
  Model open(std::vector<TensorView> tensors, ExecutorOptions o) const;
  /// The model with `tensors` on the tokens: from the start (block < 0) or
  /// resumed at `block` from blockInputs_[block].
  std::vector<float> run(std::vector<TensorView> tensors, ExecutorOptions o, int64_t block = -1);
  /// blockInputs_ and blockOf_ from the reference weights; left empty when a
  /// resumed run does not give `logits` exactly.
  void prepareResume(const std::vector<float> &logits);

  std::vector<int32_t> tokens_;
  std::vector<TensorView> base_; // the source's tensors, data 64-byte aligned
  std::vector<std::shared_ptr<uint8_t>> held_; // 64-byte-aligned copies of the source's unaligned tensors
  nlohmann::json manifest_;
  int threads_;
  int64_t vocab_ = 0;
  std::vector<double> refP_;           // reference probabilities [tokens, vocab]
  std::vector<double> refNegEntropy_; // sum p log p per position
  std::map<std::string, std::shared_ptr<const std::vector<float>>> inputs_;
  std::vector<std::vector<float>> blockInputs_; // reference input rows of each block
  std::map<std::string, int64_t> blockOf_;      // weight -> its block (weights inside blocks)
  double buildSeconds_ = 0, forwardSeconds_ = 0;
};

} // namespace llmc
