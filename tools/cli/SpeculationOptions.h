//===- SpeculationOptions.h - --speculate and its flags ---------*- C++ -*-===//
// The drafter choice `llmc run` and `llmc bench` share: --speculate,
// --draft, --min-confidence, --ngram, --draft-model, --draft-mask, and the
// drafter they make.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/artifact.h"
#include "llmc/executor.h"
#include "llmc/speculative.h"

#include <CLI/CLI.hpp>
#include <memory>

namespace llmc::tool {

/// Drafters --speculate knows (auto: the artifact's own).
enum class SpecChoice { None, Ngram, Medusa, Hybrid, Draft, Self, Auto };

struct SpeculationChoice {
  SpecChoice speculate = SpecChoice::None;
  spec::SpecOptions spec;
  int draft = 0;             // --draft (0: the artifact's max_draft, else 4)
  int tree = -1;             // --tree (< 0: the artifact's tree_nodes, else 0)
  double minConfidence = -1; // --min-confidence (< 0: the artifact's)
  std::string draftModel;    // --draft-model (--speculate draft)
  int32_t draftMask = -1;    // --draft-mask: PARD-style parallel drafting
  /// The draft model's executor options (the command's threads, engine
  /// and trust; set before makeDrafter).
  ExecutorOptions draftOptions;

  bool on() const { return speculate != SpecChoice::None; }
  /// Whether the drafter may read the final hidden state (the executor
  /// must then be made with keep_hidden).
  bool needsHidden() const {
    return speculate == SpecChoice::Medusa || speculate == SpecChoice::Hybrid ||
           speculate == SpecChoice::Auto;
  }
  /// The drafter --speculate names (auto: the artifact's), and in `opts`
  /// the draft length: --draft, else the artifact's, else 4. Throws
  /// std::runtime_error when the artifact lacks what the choice needs.
  std::unique_ptr<spec::Drafter> makeDrafter(const Artifact &art, Executor &exec,
                                             spec::SpecOptions &opts) const;
  /// A copy whose draft executor runs as the command's: `threads` and its
  /// engine flags (engine, kernels, trust).
  template <typename Engine>
  SpeculationChoice forCommand(const Engine &engine, int threads) const {
    SpeculationChoice c = *this;
    c.draftOptions.threads = threads;
    engine.apply(c.draftOptions);
    return c;
  }
};

/// --speculate, --draft, --min-confidence, --ngram, --draft-model and
/// --draft-mask on `cmd`.
void addSpeculationOptions(CLI::App *cmd, SpeculationChoice &c);

} // namespace llmc::tool
