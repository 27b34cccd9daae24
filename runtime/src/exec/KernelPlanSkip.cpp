//===- KernelPlanSkip.cpp - A kernel plan without some of its blocks -------===//
// Self-speculation drafts with the target's own plan minus some blocks
// (ExecutorOptions::skip_blocks): the residual stream passes a skipped
// block unchanged, as if the block were removed, but no weight is copied
// and the target's artifact is not touched.
//===----------------------------------------------------------------------===//
#include "KernelPlan.h"

#include <algorithm>
#include <map>
#include <regex>
#include <stdexcept>
#include <string>

namespace llmc {
namespace {

/// The block a step belongs to: its attrs' layer, else the N of the first
/// "blk.N." weight or norm it reads; -1 for steps of no block (the
/// embedding, the final norm and LM head).
int64_t blockOf(const nlohmann::json &step) {
  if (step.contains("attrs") && step["attrs"].contains("layer") &&
      step["attrs"]["layer"].is_number_integer())
    return step["attrs"]["layer"].get<int64_t>();
  static const std::regex blk(R"(^blk\.(\d+)\.)");
  std::vector<std::string> names;
  if (step.contains("norm") && step["norm"].is_string())
    names.push_back(step["norm"].get<std::string>());
  if (step.contains("weights") && step["weights"].is_array())
    for (const nlohmann::json &w : step["weights"])
      if (w.is_string())
        names.push_back(w.get<std::string>());
  for (const std::string &n : names) {
    std::smatch m;
    if (std::regex_search(n, m, blk) && m[1].length() < 10)
      return std::stoll(m[1].str());
  }
  return -1;
}

bool isSlot(const nlohmann::json &v) {
  return v.is_array() && v.size() == 2 && v[0].is_number_integer() && v[1].is_number_integer();
}

} // namespace

nlohmann::json planWithoutBlocks(const nlohmann::json &plan, const std::vector<int64_t> &skip) {
  const char *ctx = "skip_blocks";
  if (!plan.contains("steps") || !plan["steps"].is_array())
    throw std::runtime_error(std::string(ctx) + ": the kernel plan has no steps");
  const nlohmann::json &steps = plan["steps"];
  std::map<int64_t, std::pair<size_t, size_t>> range; // block -> [first, last] step
  for (size_t i = 0; i < steps.size(); ++i) {
    const int64_t b = blockOf(steps[i]);
    if (b < 0)
      continue;
    auto it = range.find(b);
    if (it == range.end())
      range[b] = {i, i};
    else if (it->second.second + 1 != i)
      throw std::runtime_error(std::string(ctx) + ": the steps of block " + std::to_string(b) +
                               " are not consecutive in the kernel plan");
    else
      it->second.second = i;
  }
  std::vector<bool> drop(steps.size(), false);
  for (int64_t b : skip) {
    auto it = range.find(b);
    if (it == range.end())
      throw std::runtime_error(std::string(ctx) + ": the kernel plan has no block " +
                               std::to_string(b) + " (it has " + std::to_string(range.size()) +
                               ")");
    // The block must add into the residual stream and write nothing else a
    // later step reads: its last step is a product added to its own input
    // slot, and so is every step of it that writes that slot.
    const nlohmann::json &last = steps[it->second.second];
    if (last.value("kernel", "") != "matmul_add" || !last.contains("in") ||
        last["in"].size() != 2 || !isSlot(last["out"]) || last["in"][1] != last["out"])
      throw std::runtime_error(std::string(ctx) + ": block " + std::to_string(b) +
                               " does not end by adding into the residual stream");
    const nlohmann::json &residual = last["out"];
    for (size_t i = it->second.first; i <= it->second.second; ++i) {
      const nlohmann::json &s = steps[i];
      if (s.contains("out") && s["out"] == residual &&
          !(s.value("kernel", "") == "matmul_add" && s["in"].size() == 2 &&
            s["in"][1] == residual))
        throw std::runtime_error(std::string(ctx) + ": block " + std::to_string(b) +
                                 " overwrites the residual stream");
      drop[i] = true;
    }
  }
  if (!range.empty() && std::all_of(range.begin(), range.end(), [&](const auto &r) {
        return drop[r.second.first];
      }))
    throw std::runtime_error(std::string(ctx) + ": every block would be skipped");
  nlohmann::json out = plan;
  out["steps"] = nlohmann::json::array();
  for (size_t i = 0; i < steps.size(); ++i)
    if (!drop[i])
      out["steps"].push_back(steps[i]);
  return out;
}

} // namespace llmc
