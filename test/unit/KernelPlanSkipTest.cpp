//===- KernelPlanSkipTest.cpp - Self-speculation's plan without blocks ----===//
#include "runtime/src/exec/KernelPlan.h"

#include <gtest/gtest.h>

using namespace llmc;
using nlohmann::json;

namespace {

/// The steps of one block as the kernel lowering writes them: the
/// residual stream is slot [0, 8]; attention and MLP add into it.
json blockSteps(int b) {
  const std::string p = "blk." + std::to_string(b) + ".";
  return json::array(
      {{{"kernel", "norm_matmul"}, {"in", {{0, 8}}}, {"out", {8, 24}}, {"norm", p + "attn_norm.weight"},
        {"weights", {p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"}}},
       {{"kernel", "rope_kv_append"}, {"attrs", {{"layer", b}}}, {"in", {{8, 24}}}, {"out", {32, 8}}},
       {{"kernel", "attend"}, {"attrs", {{"layer", b}}}, {"in", {{32, 8}}}, {"out", {8, 8}}},
       {{"kernel", "matmul_add"}, {"in", {{8, 8}, {0, 8}}}, {"out", {0, 8}},
        {"weights", {p + "attn_output.weight"}}},
       {{"kernel", "norm_gated_matmul"}, {"in", {{0, 8}}}, {"out", {8, 32}},
        {"norm", p + "ffn_norm.weight"}, {"weights", {p + "ffn_gate.weight", p + "ffn_up.weight"}}},
       {{"kernel", "matmul_add"}, {"in", {{8, 16}, {0, 8}}}, {"out", {0, 8}},
        {"weights", {p + "ffn_down.weight"}}}});
}

json planOf(int blocks) {
  json steps = json::array();
  steps.push_back({{"kernel", "embed"}, {"out", {0, 8}}, {"weights", {"token_embd.weight"}}});
  for (int b = 0; b < blocks; ++b)
    for (const json &s : blockSteps(b))
      steps.push_back(s);
  steps.push_back({{"kernel", "norm_matmul"}, {"in", {{0, 8}}}, {"out", {-1, 16}},
                   {"norm", "output_norm.weight"}, {"weights", {"output.weight"}}});
  return {{"arena_floats_per_token", 64}, {"steps", steps}};
}

std::vector<std::string> firstWeights(const json &plan) {
  std::vector<std::string> v;
  for (const json &s : plan["steps"])
    v.push_back(s.contains("weights") ? s["weights"][0].get<std::string>()
                                      : "layer " + s["attrs"]["layer"].dump());
  return v;
}

} // namespace

TEST(KernelPlanSkip, DropsExactlyTheStepsOfTheSkippedBlocks) {
  const json plan = planOf(3);
  const json out = planWithoutBlocks(plan, {0, 2});
  EXPECT_EQ(out["arena_floats_per_token"], 64);
  const std::vector<std::string> want = {"token_embd.weight", "blk.1.attn_q.weight", "layer 1",
                                         "layer 1", "blk.1.attn_output.weight",
                                         "blk.1.ffn_gate.weight", "blk.1.ffn_down.weight",
                                         "output.weight"};
  EXPECT_EQ(firstWeights(out), want);
  EXPECT_EQ(planWithoutBlocks(plan, {}), plan);
}

TEST(KernelPlanSkip, RefusesWhatIsNotAResidualBlock) {
  const json plan = planOf(2);
  EXPECT_THROW(planWithoutBlocks(plan, {2}), std::runtime_error);    // no such block
  EXPECT_THROW(planWithoutBlocks(plan, {0, 1}), std::runtime_error); // nothing left
  json noAdd = plan;
  noAdd["steps"][6]["kernel"] = "matmul"; // block 0 ends without adding into the stream
  EXPECT_THROW(planWithoutBlocks(noAdd, {0}), std::runtime_error);
  json overwrite = plan;
  overwrite["steps"][3]["out"] = {0, 8}; // attend writes the residual stream
  try {
    planWithoutBlocks(overwrite, {0});
    ADD_FAILURE() << "a block that overwrites the residual stream was skipped";
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find("overwrites the residual stream"), std::string::npos)
        << e.what();
  }
  json split = plan; // block 1's steps between block 0's
  std::swap(split["steps"][2], split["steps"][8]);
  EXPECT_THROW(planWithoutBlocks(split, {0}), std::runtime_error);
  EXPECT_NO_THROW(planWithoutBlocks(plan, {1}));
}
