//===- SpeculationOptions.cpp - --speculate and its flags -----------------===//
#include "SpeculationOptions.h"
#include "Commands.h"

#include <map>
#include <stdexcept>

namespace llmc::tool {

void addSpeculationOptions(CLI::App *cmd, SpeculationChoice &c) {
  cmd->add_option("--speculate", c.speculate,
                  "speculative decoding, lossless (greedy: the same tokens as without; "
                  "sampling: the same distribution): 'ngram' drafts by prompt lookup, "
                  "'medusa' by the heads llm-spec-attach compiled into the artifact, 'hybrid' by "
                  "prompt lookup where a suffix of 2+ tokens recurs and the heads elsewhere, "
                  "'draft' by the smaller model --draft-model names, 'self' by the model "
                  "without the blocks llm-spec-attach{method=self} chose, 'auto' by the "
                  "artifact's drafter; verified in one target pass each")
      ->transform(CLI::Transformer(std::map<std::string, SpecChoice>{{"none", SpecChoice::None},
                                                                     {"ngram", SpecChoice::Ngram},
                                                                     {"medusa", SpecChoice::Medusa},
                                                                     {"hybrid", SpecChoice::Hybrid},
                                                                     {"draft", SpecChoice::Draft},
                                                                     {"self", SpecChoice::Self},
                                                                     {"auto", SpecChoice::Auto}})
                      .description("one of: none, ngram, medusa, hybrid, draft, self, auto"));
  cmd->add_option("--draft", c.draft,
                  "draft tokens per target pass at most (--speculate; default: the artifact's "
                  "max_draft, else 4)")
      ->check(CLI::Range(1, 16));
  cmd->add_option("--tree", c.tree,
                  "--speculate ngram, medusa or hybrid: draft a tree of up to this many tokens "
                  "(prompt lookup: the continuations of every earlier occurrence of the "
                  "context's suffix; Medusa: the heads' likeliest continuations; --draft deep at "
                  "most) and verify it in one "
                  "target pass with tree attention (0: a chain; default: the artifact's "
                  "tree_nodes, else 0; needs the full KV policy over f32 or paged entries and "
                  "the generated kernels, a chain otherwise)")
      ->check(CLI::Range(0, 64));
  cmd->add_option("--min-confidence", c.minConfidence,
                  "--speculate medusa or draft: stop drafting at the first draft with a lower "
                  "probability (default: the artifact's, fitted by llm-spec-attach)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--ngram", c.spec.max_n, "longest context suffix prompt lookup matches")
      ->check(CLI::Range(1, 8));
  cmd->add_option("--draft-model", c.draftModel,
                  "--speculate draft: the draft model, an .llmc artifact (or a source model "
                  "llmc compiles) with the target's vocabulary, e.g. a smaller model of the "
                  "family or the target after llm-prune-depth; its own KV cache, full");
  cmd->add_option("--draft-mask", c.draftMask,
                  "--speculate draft: PARD-style parallel drafting, all drafts in one "
                  "draft-model pass over the context and this many - 1 mask tokens: the id of "
                  "the mask token the draft model was trained with (PARD); without it the "
                  "draft model drafts one token per step")
      ->check(CLI::NonNegativeNumber);
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
    choice = c->method == SpecMethod::Medusa ? SpecChoice::Medusa
             : c->method == SpecMethod::Self ? SpecChoice::Self
                                             : SpecChoice::Ngram;
  }
  opts = spec;
  opts.max_draft = draft > 0 ? draft : (c ? c->max_draft : 4);
  opts.tree_nodes = tree >= 0 ? tree : (c ? c->tree_nodes : 0);
  if (c && c->method == SpecMethod::Ngram && speculate == SpecChoice::Auto)
    opts.max_n = c->ngram;
  if ((choice == SpecChoice::Draft) != !draftModel.empty())
    throw std::runtime_error(choice == SpecChoice::Draft
                                 ? "--speculate draft needs --draft-model"
                                 : "--draft-model applies to --speculate draft");
  if (draftMask >= 0 && choice != SpecChoice::Draft)
    throw std::runtime_error("--draft-mask applies to --speculate draft");
  if (tree > 0 && (choice == SpecChoice::Draft || choice == SpecChoice::Self))
    throw std::runtime_error("--tree applies to prompt lookup and Medusa heads (--speculate "
                             "ngram, medusa, hybrid, or auto), not to draft models");
  if (choice == SpecChoice::Draft) {
    return std::make_unique<spec::ModelDrafter>(
        loadModelOrArtifact(draftModel, "", "", /*quiet=*/true, /*verifyWeights=*/false),
        draftOptions,
        exec.vocabSize(), draftMask, std::max(0.0, minConfidence));
  }
  if (choice == SpecChoice::Self) {
    if (!c || c->method != SpecMethod::Self)
      throw std::runtime_error("--speculate self: the artifact has no self-speculation drafter "
                               "(attach one with --pipeline='llm-prune-depth{method=angular "
                               "drop=4 dry-run=true},llm-spec-attach{method=self}')");
    return std::make_unique<spec::ModelDrafter>(art, c->skip_blocks, draftOptions,
                                                std::max(0.0, minConfidence));
  }
  if (choice == SpecChoice::Medusa)
    return std::make_unique<spec::MedusaDrafter>(art, exec, minConfidence);
  if (choice == SpecChoice::Hybrid)
    return std::make_unique<spec::HybridDrafter>(
        opts.max_n, std::max(2, opts.min_n),
        std::make_unique<spec::MedusaDrafter>(art, exec, minConfidence));
  return std::make_unique<spec::NgramDrafter>(opts.max_n, opts.min_n);
}

} // namespace llmc::tool
