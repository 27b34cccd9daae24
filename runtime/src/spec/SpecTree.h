//===- SpecTree.h - Speculative decoding over draft trees -------*- C++ -*-===//
#pragma once
#include "llmc/speculative.h"

#include <algorithm>

namespace llmc::spec {

/// What the chain's and the tree's generation loops share: the tokens
/// emitted so far, each appended to the context as it goes out.
struct Emission {
  int64_t n; // tokens wanted
  const std::vector<int32_t> &stops;
  const std::function<bool(int32_t)> &emit;
  std::vector<int32_t> &context;
  int64_t emitted = 0;
  /// Emits t: false (nothing emitted) for a stop token or when emit refuses.
  bool take(int32_t t) {
    if (std::find(stops.begin(), stops.end(), t) != stops.end() || !emit(t))
      return false;
    ++emitted;
    context.push_back(t);
    return true;
  }
  bool more() const { return emitted < n; }
  /// Draft tokens worth scoring: past the tokens still wanted or the
  /// context's room they are not.
  int64_t room(const Executor &exec) const {
    return std::min(n - emitted, exec.maxContext() - exec.pos() - 1);
  }
};

/// The hidden row (of the executor's last step) whose logits chose the
/// first token: the prompt's last; -1 when the drafter reads no hidden
/// state. std::runtime_error when it does and the executor keeps none
/// (Speculative.cpp).
int64_t promptHiddenRow(const Executor &exec, const Drafter &drafter);

/// generate() with a branching drafter's trees, each verified in one
/// target pass with tree attention (Executor::verifyTree); the executor
/// must be treeVerifiable() (SpecTree.cpp).
int64_t generateTree(Executor &exec, Drafter &drafter, std::vector<int32_t> context,
                     std::vector<float> logits, int64_t n, const std::vector<int32_t> &stops,
                     const SpecOptions &opts, Sampler &sampler,
                     const std::function<bool(int32_t)> &emit, SpecStats &stats);

} // namespace llmc::spec
