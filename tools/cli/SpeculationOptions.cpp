//===- SpeculationOptions.cpp - --speculate and its flags -----------------===//
#include "SpeculationOptions.h"

#include <map>
#include <stdexcept>

namespace llmc::tool {

void addSpeculationOptions(CLI::App *cmd, SpeculationChoice &c) {
  cmd->add_option("--speculate", c.speculate,
                  "speculative decoding, lossless (greedy: the same tokens as without; "
                  "sampling: the same distribution): 'ngram' drafts by prompt lookup, "
                  "'medusa' by the heads llm-spec-attach compiled into the artifact, 'hybrid' by "
                  "prompt lookup where a suffix of 2+ tokens recurs and the heads elsewhere, "
                  "'auto' by the artifact's drafter; verified in one target pass each")
      ->transform(CLI::Transformer(std::map<std::string, SpecChoice>{{"none", SpecChoice::None},
                                                                     {"ngram", SpecChoice::Ngram},
                                                                     {"medusa", SpecChoice::Medusa},
                                                                     {"hybrid", SpecChoice::Hybrid},
                                                                     {"auto", SpecChoice::Auto}})
                      .description("one of: none, ngram, medusa, hybrid, auto"));
  cmd->add_option("--draft", c.draft,
                  "draft tokens per target pass at most (--speculate; default: the artifact's "
                  "max_draft, else 4)")
      ->check(CLI::Range(1, 16));
  cmd->add_option("--min-confidence", c.minConfidence,
                  "--speculate medusa: stop drafting at the first head whose draft has a lower "
                  "probability (default: the artifact's, fitted by llm-spec-attach)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--ngram", c.spec.max_n, "longest context suffix prompt lookup matches")
      ->check(CLI::Range(1, 8));
}

std::unique_ptr<spec::Drafter> SpeculationChoice::makeDrafter(const Artifact &art, Executor &exec,
                                                              spec::SpecOptions &opts) const {
  const std::optional<spec::SpecConfig> c = spec::specConfigOf(art);
  SpecChoice choice = speculate;
  if (choice == SpecChoice::Auto) {
    if (!c)
      throw std::runtime_error("--speculate auto: the artifact has no drafter (attach one with "
                               "--pipeline='llm-spec-attach{method=medusa}' or use "
                               "--speculate ngram)");
    choice = c->method == SpecMethod::Medusa ? SpecChoice::Medusa : SpecChoice::Ngram;
  }
  opts = spec;
  opts.max_draft = draft > 0 ? draft : (c ? c->max_draft : 4);
  if (c && c->method == SpecMethod::Ngram && speculate == SpecChoice::Auto)
    opts.max_n = c->ngram;
  if (choice == SpecChoice::Medusa)
    return std::make_unique<spec::MedusaDrafter>(art, exec, minConfidence);
  if (choice == SpecChoice::Hybrid)
    return std::make_unique<spec::HybridDrafter>(
        opts.max_n, std::max(2, opts.min_n),
        std::make_unique<spec::MedusaDrafter>(art, exec, minConfidence));
  return std::make_unique<spec::NgramDrafter>(opts.max_n, opts.min_n);
}

} // namespace llmc::tool
