//===- BenchSpeculation.cpp - llmc bench --speculate ----------------------===//
#include "BenchSpeculation.h"
#include "Commands.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>

namespace llmc::tool {

namespace {
/// n greedy tokens after the prompt, one forward each; seconds of the
/// decode (the prefill excluded) in `seconds`.
std::vector<int32_t> plainDecode(Executor &exec, const std::vector<int32_t> &prompt, int n,
                                 double &seconds) {
  exec.reset();
  std::vector<float> logits = exec.forward(prompt);
  Sampler greedy({});
  const int64_t vocab = exec.vocabSize();
  std::vector<int32_t> out;
  out.reserve(size_t(n));
  const auto t = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    out.push_back(greedy.sample(logits.data(), vocab));
    if (i + 1 < n)
      logits = exec.forward({out.back()});
  }
  seconds = secondsSince(t);
  return out;
}
} // namespace

SpecBenchResult measureSpeculation(Executor &exec, const Artifact &art,
                                   const SpeculationChoice &choice,
                                   const std::vector<int32_t> &prompt, int n, int reps,
                                   bool quiet) {
  SpecBenchResult r;
  r.promptTokens = int64_t(prompt.size());
  spec::SpecOptions opts;
  std::unique_ptr<spec::Drafter> drafter = choice.makeDrafter(art, exec, opts);
  r.drafter = drafter->name();
  r.maxDraft = opts.max_draft;
  r.treeNodes = opts.tree_nodes;
  for (int rep = 0; rep < reps; ++rep) {
    double plainS = 0;
    const std::vector<int32_t> want = plainDecode(exec, prompt, n, plainS);
    r.plain.push_back(n / std::max(plainS, 1e-9));
    exec.reset();
    std::vector<float> logits = exec.forward(prompt);
    Sampler greedy({});
    std::vector<int32_t> got;
    got.reserve(size_t(n));
    const auto t = std::chrono::steady_clock::now();
    spec::generate(exec, *drafter, prompt, std::move(logits), n, {}, opts, greedy,
                   [&](int32_t id) {
                     got.push_back(id);
                     return true;
                   },
                   r.stats);
    r.speculative.push_back(n / std::max(secondsSince(t), 1e-9));
    if (got != want) {
      size_t at = 0;
      while (at < got.size() && at < want.size() && got[at] == want[at])
        ++at;
      throw std::runtime_error("--speculate: the speculative tokens differ from plain greedy "
                               "decoding at generated token " + std::to_string(at) +
                               " (speculation must be lossless)");
    }
    if (!quiet)
      fprintf(stderr, "[llmc] speculation rep %d/%d: plain %.1f tok/s, %s %.1f tok/s\n", rep + 1,
              reps, r.plain.back(), r.drafter.c_str(), r.speculative.back());
  }
  return r;
}

} // namespace llmc::tool
