//===- CalibrationTest.cpp - The Executor's linear-input hook ----------------===//
// What layer-sequential calibration relies on: the hook sees, for the block
// it selects, the input of every projection (q/k/v share one call; o gets
// the attention output; gate/up the MLP input; down act(gate)*up), with the
// node's block and weight names; stop_after_block ends the forward right
// after that block (empty result, nothing later observed); a GPTQ Hessian
// accumulated from the hook has the right size and token count.
//===----------------------------------------------------------------------===//
#include "QuantTinyModel.h"
#include "compiler/quant/Gptq.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace llmc;
using M = llmc::quanttest::TinyQuantModel;

namespace {

struct Seen {
  int64_t block;
  std::vector<std::string> roles, weights;
  int64_t rows, cols;
  std::vector<float> x;
};

TEST(Calibration, HookSeesEveryLinearInputOfTheSelectedBlock) {
  M m;
  auto art = m.artifact();
  std::vector<Seen> seen;
  ExecutorOptions o;
  o.threads = 1;
  o.hook_block = 1;
  o.linear_input_hook = [&](const LinearInput &in) {
    seen.push_back({in.block, *in.roles, *in.weights, in.rows, in.cols,
                    std::vector<float>(in.x, in.x + in.rows * in.cols)});
  };
  Executor ex(*art, o);
  std::vector<float> logits = ex.forward({1, 2, 3, 4, 5}, true);
  EXPECT_EQ(int64_t(logits.size()), 5 * M::V);
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[0].roles, (std::vector<std::string>{"q", "k", "v"}));
  EXPECT_EQ(seen[0].weights, (std::vector<std::string>{"blk.1.attn_q.weight", "blk.1.attn_k.weight",
                                                        "blk.1.attn_v.weight"}));
  EXPECT_EQ(seen[1].roles, (std::vector<std::string>{"o"}));
  EXPECT_EQ(seen[1].cols, M::H * M::HD);
  EXPECT_EQ(seen[2].roles, (std::vector<std::string>{"gate", "up"}));
  EXPECT_EQ(seen[3].roles, (std::vector<std::string>{"down"}));
  EXPECT_EQ(seen[3].cols, M::F);
  for (const Seen &s : seen) {
    EXPECT_EQ(s.block, 1);
    EXPECT_EQ(s.rows, 5);
  }
  // q/k/v's input is the attention norm's output: RMS of x/gain is 1.
  const std::vector<float> &g = m.w.at("blk.1.attn_norm.weight");
  for (int64_t t = 0; t < 5; ++t) {
    double ss = 0;
    for (int64_t c = 0; c < M::D; ++c) {
      double v = seen[0].x[size_t(t * M::D + c)] / g[size_t(c)];
      ss += v * v;
    }
    EXPECT_NEAR(std::sqrt(ss / M::D), 1.0, 1e-3);
  }
  // down's input is silu(gate x) * (up x) with x = the gate/up input.
  const std::vector<float> &wg = m.w.at("blk.1.ffn_gate.weight"), &wu = m.w.at("blk.1.ffn_up.weight");
  for (int64_t t = 0; t < 5; ++t)
    for (int64_t f = 0; f < M::F; f += 7) {
      double a = 0, b = 0;
      for (int64_t c = 0; c < M::D; ++c) {
        a += double(wg[size_t(f * M::D + c)]) * seen[2].x[size_t(t * M::D + c)];
        b += double(wu[size_t(f * M::D + c)]) * seen[2].x[size_t(t * M::D + c)];
      }
      double h = a / (1 + std::exp(-a)) * b;
      EXPECT_NEAR(seen[3].x[size_t(t * M::F + f)], h, 1e-4 * std::max(1.0, std::fabs(h)));
    }
}

TEST(Calibration, StopAfterBlockEndsTheForward) {
  M m;
  auto art = m.artifact();
  int calls = 0, otherBlocks = 0;
  ExecutorOptions o;
  o.threads = 1;
  o.stop_after_block = 0;
  o.linear_input_hook = [&](const LinearInput &in) {
    ++calls;
    otherBlocks += in.block != 0;
  };
  Executor ex(*art, o);
  EXPECT_TRUE(ex.forward({3, 4, 5}).empty());
  EXPECT_EQ(calls, 4);      // block 0's four sites, nothing after
  EXPECT_EQ(otherBlocks, 0);
  ex.reset();
  quant::HessianAccumulator h(M::D);
  ExecutorOptions o2;
  o2.threads = 1;
  o2.hook_block = 0;
  o2.stop_after_block = 0;
  o2.linear_input_hook = [&](const LinearInput &in) {
    if (in.roles->front() == "q")
      h.add(in.x, in.rows);
  };
  Executor ex2(*art, o2);
  ex2.forward({1, 2, 3, 4});
  ex2.reset();
  ex2.forward({5, 6});
  EXPECT_EQ(h.tokens(), 6);
  EXPECT_GT(h.hessian().trace(), 0.0);

  ExecutorOptions bad;
  bad.stop_after_block = 7;
  Executor ex3(*art, bad);
  EXPECT_THROW(ex3.forward({1}), std::runtime_error);
}

} // namespace

/// forwardFrom(b, the input rows of block b) gives exactly the logits of a
/// full forward (what --target-bpw's probes resume on), for every block;
/// blockOfWeight names each projection's block.
TEST(Calibration, ForwardFromABlockGivesTheFullForwardsLogits) {
  M m;
  auto art = m.artifact();
  ExecutorOptions o;
  o.threads = 2;
  Executor ex(*art, o);
  const std::vector<int32_t> tokens = {3, 1, 4, 1, 5, 9};
  const std::vector<float> full = ex.forward(tokens, true);
  ex.reset();
  const std::vector<float> fullLast = ex.forward(tokens); // the last row alone
  EXPECT_EQ(ex.blockOfWeight("blk.0.attn_q.weight"), 0);
  EXPECT_EQ(ex.blockOfWeight("blk.1.ffn_down.weight"), 1);
  EXPECT_EQ(ex.blockOfWeight("token_embd.weight"), -1);
  EXPECT_EQ(ex.blockOfWeight("no.such.weight"), -1);
  std::vector<float> rows;
  for (int64_t b = 0; ex.blockOfWeight("blk." + std::to_string(b) + ".attn_q.weight") == b; ++b) {
    ex.reset();
    rows = b == 0 ? ex.blockInput(tokens, 0) : ex.forwardBlock(b - 1, rows);
    ex.reset();
    EXPECT_EQ(ex.forwardFrom(b, rows, true), full) << "resumed at block " << b;
    ex.reset();
    EXPECT_EQ(ex.forwardFrom(b, rows), fullLast) << "resumed at block " << b;
  }
  ex.reset();
  EXPECT_THROW(ex.forwardFrom(0, std::vector<float>(M::D + 1, 0.0f)), std::runtime_error);
  EXPECT_THROW(ex.forwardFrom(7, rows), std::runtime_error);
}
