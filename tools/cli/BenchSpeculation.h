//===- BenchSpeculation.h - llmc bench --speculate ---------------*- C++ -*-===//
// Speculative decoding against plain decoding in the same run: each
// repetition prefills the prompt (untimed), decodes n greedy tokens plainly,
// prefills again and decodes n tokens with the drafter, so the two rates
// and their ratio come from alternating runs on the same machine state.
// The two token sequences must be equal (greedy speculation is lossless);
// a difference is an error, not a slower row.
//===----------------------------------------------------------------------===//
#pragma once
#include "SpeculationOptions.h"

#include <string>
#include <vector>

namespace llmc::tool {

struct SpecBenchResult {
  std::string drafter;
  int maxDraft = 0;
  int treeNodes = 0; // --tree (0: chains)
  int64_t promptTokens = 0;
  std::vector<double> plain, speculative; // tokens/s of each repetition
  spec::SpecStats stats;                  // summed over the repetitions
};

/// Throws std::runtime_error when the speculative tokens differ from the
/// plain ones (naming the first position) or the drafter cannot be made.
SpecBenchResult measureSpeculation(Executor &exec, const Artifact &art,
                                   const SpeculationChoice &choice,
                                   const std::vector<int32_t> &prompt, int n, int reps,
                                   bool quiet);

} // namespace llmc::tool
