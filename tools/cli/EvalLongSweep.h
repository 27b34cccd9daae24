//===- EvalLongSweep.h - Several KV policies on one prefill -----*- C++ -*-===//
// `llmc eval-long MODEL --policies FILE`: FILE lists llm-kv-policy option
// strings, one per line ("method=snapkv budget=0.1"; '#' starts a comment).
// Each is resolved into per-layer kv_policy objects by running the pass on
// MODEL in memory; the harness then prefills every prompt ONCE with the full
// cache (recording what policies need), and for each policy restores that
// cache, applies the policy (Executor::setKvPolicies) and decodes, so all
// policies see identical prompts at the cost of one prefill.
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/artifact.h"

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace llmc::tool {

struct SweepPolicy {
  std::string options;                         // the line, as written
  std::map<int64_t, nlohmann::json> byLayer;   // kv_policy per attention layer
};

/// Parse FILE and resolve every line against `model` (a source model: the
/// pass runs on its IR). Throws std::runtime_error naming the line.
std::vector<SweepPolicy> readSweepPolicies(const std::string &file, const std::string &model,
                                           const std::string &tokenizer);

/// The attention layers' kv_policy objects of an artifact's program.
std::map<int64_t, nlohmann::json> programPolicies(const Artifact &art);

} // namespace llmc::tool
