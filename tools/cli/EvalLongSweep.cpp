//===- EvalLongSweep.cpp - Several KV policies on one prefill -------------===//
#include "EvalLongSweep.h"
#include "Commands.h"

#include <fstream>
#include <stdexcept>

namespace llmc::tool {

std::map<int64_t, nlohmann::json> programPolicies(const Artifact &art) {
  std::map<int64_t, nlohmann::json> out;
  for (const ProgramNode &n : art.program().nodes) {
    if (n.op != "attention" || !n.attrs.contains("layer"))
      continue;
    auto it = n.attrs.find("kv_policy");
    out[n.attrs["layer"].get<int64_t>()] = it == n.attrs.end() ? nlohmann::json() : *it;
  }
  return out;
}

std::vector<SweepPolicy> readSweepPolicies(const std::string &file, const std::string &model,
                                           const std::string &tokenizer) {
  std::ifstream in(file);
  if (!in)
    throw std::runtime_error(file + ": cannot read the policy list");
  std::vector<SweepPolicy> out;
  std::string line;
  for (int lineNo = 1; std::getline(in, line); ++lineNo) {
    if (size_t c = line.find('#'); c != std::string::npos)
      line.resize(c);
    size_t b = line.find_first_not_of(" \t\r"), e = line.find_last_not_of(" \t\r");
    if (b == std::string::npos)
      continue;
    line = line.substr(b, e - b + 1);
    SweepPolicy p;
    p.options = line;
    try {
      auto art = loadModelOrArtifact(model, "llm-kv-policy{" + line + "}", tokenizer,
                                     /*quiet=*/true);
      p.byLayer = programPolicies(*art);
    } catch (const std::exception &ex) {
      throw std::runtime_error(file + ":" + std::to_string(lineNo) + ": policy '" + line +
                               "': " + ex.what());
    }
    out.push_back(std::move(p));
  }
  if (out.empty())
    throw std::runtime_error(file + ": no policy lines");
  return out;
}

} // namespace llmc::tool
