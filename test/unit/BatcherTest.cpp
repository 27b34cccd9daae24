//===- BatcherTest.cpp - forwardBatch and the continuous batcher ---------===//
// On the tiny random decoder (TinyModel.h, reference engine): a batched
// step of several sequences gives each the logits it gets alone; the
// batcher's greedy tokens equal a plain decode loop for every request
// whatever the batch size and step budget; requests wait when the batch is
// full, a full queue refuses, cancel ends a request, stop tokens and the
// context end one, and bad requests are refused before they run.
// (The kernel engine's batched plan is tested end to end on real models:
// test/e2e/test_batch_generate.py.)
//===----------------------------------------------------------------------===//
#include "llmc/batcher.h"
#include "llmc/executor.h"
#include "TinyModel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>

namespace {

int32_t argmax(const float *l) { return int32_t(std::max_element(l, l + kV) - l); }

/// Greedy tokens of one request, decoded alone.
std::vector<int32_t> greedyAlone(const Artifact &art, const std::vector<int32_t> &prompt,
                                 int64_t n, const std::vector<int32_t> &stops = {}) {
  Executor e(art, ExecutorOptions{1, 0});
  std::vector<float> l = e.forward(prompt);
  std::vector<int32_t> out;
  for (int64_t i = 0; i < n; ++i) {
    int32_t t = argmax(l.data());
    if (std::find(stops.begin(), stops.end(), t) != stops.end())
      break;
    out.push_back(t);
    if (i + 1 < n)
      l = e.forward({t});
  }
  return out;
}

struct Outcome {
  std::vector<int32_t> tokens;
  FinishReason why = FinishReason::Error;
  int finishes = 0;
};

GenerationEvents recordInto(Outcome &o) {
  GenerationEvents ev;
  ev.on_token = [&o](int32_t t) { o.tokens.push_back(t); };
  ev.on_finish = [&o](FinishReason r, const std::string &) {
    o.why = r;
    ++o.finishes;
  };
  return ev;
}

} // namespace

// Three sequences at different positions in one step (a prompt chunk, a
// decode token, a first prompt) get the logits they get one at a time.
TEST(Batch, ForwardBatchMatchesSequencesAlone) {
  TinyModel m({});
  auto art = m.artifact();
  Executor batched(*art, ExecutorOptions{2, 0});
  auto a = batched.newSequence(), b = batched.newSequence(), c = batched.newSequence();
  Executor ea(*art, ExecutorOptions{1, 0}), eb(*art, ExecutorOptions{1, 0}),
      ec(*art, ExecutorOptions{1, 0});
  const std::vector<int32_t> pa = promptOf(7, 1), pb = promptOf(3, 2), pc = promptOf(5, 3);
  std::vector<float> got = batched.forwardBatch({{a.get(), pa}, {b.get(), pb}});
  ea.forward(pa);
  eb.forward(pb);
  got = batched.forwardBatch({{b.get(), {4}}, {c.get(), pc}, {a.get(), {9, 1}}});
  ASSERT_EQ(got.size(), size_t(3 * kV));
  const std::vector<float> wantB = eb.forward({4}), wantC = ec.forward(pc),
                           wantA = ea.forward({9, 1});
  for (int64_t k = 0; k < kV; ++k) {
    EXPECT_NEAR(got[size_t(k)], wantB[size_t(k)], 1e-5) << k;
    EXPECT_NEAR(got[size_t(kV + k)], wantC[size_t(k)], 1e-5) << k;
    EXPECT_NEAR(got[size_t(2 * kV + k)], wantA[size_t(k)], 1e-5) << k;
  }
  EXPECT_EQ(a->pos(), 9);
  EXPECT_EQ(b->pos(), 4);
  EXPECT_EQ(c->pos(), 5);
  EXPECT_EQ(a->kvEntries(), ea.kvCacheEntries());
  EXPECT_GT(a->kvBytes(), 0);
  EXPECT_EQ(batched.kvCacheEntries(), 0); // the executor's own caches are untouched

  // Refused before anything runs: a sequence twice, another executor's, too long.
  EXPECT_THROW(batched.forwardBatch({{a.get(), {1}}, {a.get(), {2}}}), std::runtime_error);
  auto foreign = ea.newSequence();
  EXPECT_THROW(batched.forwardBatch({{foreign.get(), {1}}}), std::runtime_error);
  EXPECT_THROW(batched.forwardBatch({{b.get(), {1}}, {c.get(), {kV}}}), std::runtime_error);
  EXPECT_EQ(b->pos(), 4);
}

// Ten requests through batches of 1, 3 and 10 with tight and loose step
// budgets, paged (the default) and contiguous: every request's tokens are
// those of a plain decode loop.
TEST(Batch, BatcherGreedyEqualsAlone) {
  TinyModel m({});
  auto art = m.artifact();
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 10; ++i)
    prompts.push_back(promptOf(1 + (i * 7) % 19, uint32_t(100 + i)));
  std::vector<std::vector<int32_t>> want;
  for (size_t i = 0; i < prompts.size(); ++i)
    want.push_back(greedyAlone(*art, prompts[i], 5 + int64_t(i)));
  for (auto [maxBatch, stepTokens] : {std::pair{1, 2}, {3, 6}, {10, 11}, {10, 64}, {-10, 11}}) {
    Executor exec(*art, ExecutorOptions{2, 0});
    BatcherOptions bo{std::abs(maxBatch), stepTokens, 64};
    bo.paged_kv = maxBatch > 0; // -10: contiguous caches, not pool blocks
    Batcher batcher(exec, bo);
    std::vector<Outcome> got(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      GenerationRequest r{prompts[i], 5 + int64_t(i), {}, {}};
      EXPECT_GT(batcher.submit(r, recordInto(got[i])), 0);
    }
    int steps = 0, widest = 0;
    while (batcher.step()) {
      ++steps;
      widest = std::max(widest, batcher.stats().last_batch);
      ASSERT_LT(steps, 1000);
    }
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(got[i].tokens, want[i]) << "request " << i << ", max_batch " << maxBatch
                                        << ", step_tokens " << stepTokens;
      EXPECT_EQ(got[i].why, FinishReason::Length);
      EXPECT_EQ(got[i].finishes, 1);
    }
    const BatcherStats st = batcher.stats();
    EXPECT_EQ(st.finished, 10);
    EXPECT_EQ(st.running, 0);
    EXPECT_EQ(st.waiting, 0);
    EXPECT_LE(widest, std::abs(maxBatch));
    EXPECT_EQ(st.pool.capacity_blocks > 0, maxBatch > 0);
    EXPECT_EQ(st.generated_tokens, 5 * 10 + 45);
  }
}

// A request hears it finished only after its sequence left the batch and
// gave its pool blocks back: a server's client that reads /metrics after its
// answer must see them free.
TEST(Batch, FinishIsToldOnceTheBlocksAreBack) {
  TinyModel m({});
  auto art = m.artifact();
  Executor exec(*art, ExecutorOptions{1, 0});
  Batcher batcher(exec, BatcherOptions{2, 16, 8});
  std::vector<BatcherStats> seen;
  for (int i = 0; i < 2; ++i) {
    GenerationEvents ev;
    ev.on_finish = [&](FinishReason, const std::string &) { seen.push_back(batcher.stats()); };
    GenerationRequest r{promptOf(20 + 3 * i, uint32_t(7 + i)), 3 + i, {}, {}};
    ASSERT_GT(batcher.submit(r, ev), 0);
  }
  for (int steps = 0; batcher.step(); ++steps)
    ASSERT_LT(steps, 100);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_GT(seen[0].pool.capacity_blocks, 0);
  EXPECT_EQ(seen[0].running, 1); // the longer request still runs
  EXPECT_EQ(seen[0].finished, 1);
  EXPECT_EQ(seen[1].running, 0);
  EXPECT_EQ(seen[1].pool.used_blocks, 0);
  EXPECT_LT(seen[0].pool.used_blocks, seen[0].pool.capacity_blocks);
}

namespace {
/// An engine whose sequences claim to start at `start` (a stale GPU slot,
/// a prefix-sharing bug), with logits that always pick token 1.
struct StartsAtEngine : BatchEngine {
  struct Seq : EngineSequence {
    int64_t p;
    explicit Seq(int64_t p) : p(p) {}
    int64_t pos() const override { return p; }
    int64_t kvBytes() const override { return 0; }
  };
  int64_t start;
  explicit StartsAtEngine(int64_t start) : start(start) {}
  std::string name() const override { return "fake"; }
  int64_t vocabSize() const override { return 4; }
  int64_t maxContext() const override { return 64; }
  bool chunkablePrefill() const override { return true; }
  void configure(const BatcherOptions &) override {}
  int64_t reserveBytes(int64_t) const override { return 0; }
  int64_t kvBytesPerPosition() const override { return 0; }
  std::unique_ptr<EngineSequence> newSequence(const std::vector<int32_t> &) override {
    return std::make_unique<Seq>(start);
  }
  std::vector<float> forwardBatch(const std::vector<EngineEntry> &entries) override {
    std::vector<float> out(entries.size() * 4, 0.0f);
    for (size_t i = 0; i < entries.size(); ++i) {
      static_cast<Seq *>(entries[i].sequence)->p += int64_t(entries[i].tokens.size());
      out[i * 4 + 1] = 1.0f;
    }
    return out;
  }
  void publishPrompt(const EngineSequence &, const std::vector<int32_t> &) override {}
  KvPoolInfo kvPoolInfo() const override { return {}; }
};
} // namespace

// A new sequence that already holds the whole prompt (or more) has nothing
// left to run for the first token's logits: the request ends with an error
// naming the positions, not a crash; one that starts inside the prompt runs.
TEST(Batch, EngineSequencePastThePromptIsAnError) {
  for (int64_t start : {0, 2, 3, 5}) {
    StartsAtEngine engine(start);
    Batcher batcher(engine, BatcherOptions{2, 16, 8});
    Outcome got;
    std::string error;
    GenerationEvents ev = recordInto(got);
    ev.on_finish = [&](FinishReason r, const std::string &e) {
      got.why = r;
      error = e;
      ++got.finishes;
    };
    ASSERT_GT(batcher.submit(GenerationRequest{{1, 2, 3}, 2, {}, {}}, ev), 0);
    for (int steps = 0; batcher.step(); ++steps)
      ASSERT_LT(steps, 20);
    EXPECT_EQ(got.finishes, 1) << start;
    if (start < 3) {
      EXPECT_EQ(got.why, FinishReason::Length) << start;
      EXPECT_EQ(got.tokens, (std::vector<int32_t>{1, 1})) << start;
    } else {
      EXPECT_EQ(got.why, FinishReason::Error) << start;
      EXPECT_NE(error.find("starts at position " + std::to_string(start)), std::string::npos)
          << error;
    }
  }
}

TEST(Batch, BatcherQueueCancelStopAndContext) {
  TinyModel m({});
  auto art = m.artifact();
  Executor exec(*art, ExecutorOptions{1, 16}); // a context of 16 tokens
  Batcher batcher(exec, {2, 8, 2});
  const std::vector<int32_t> p = promptOf(4, 9);
  Outcome o1, o2, o3, o4, o5;
  const int64_t id1 = batcher.submit({p, 100, {}, {}}, recordInto(o1)); // runs to the context
  const int64_t id2 = batcher.submit({p, 8, {}, {}}, recordInto(o2));   // cancelled while running
  EXPECT_EQ(batcher.submit({p, 8, {}, {}}, recordInto(o3)), 0);       // queue of 2 is full
  EXPECT_GT(id1, 0);
  EXPECT_GT(id2, 0);
  batcher.step(); // both admitted: the queue has room again
  const int64_t id4 = batcher.submit({p, 8, {}, {}}, recordInto(o4)); // waits: batch of 2 full
  EXPECT_GT(id4, 0);
  batcher.step();
  EXPECT_EQ(o2.tokens.size(), 2u); // one from its prompt, one decoded
  batcher.cancel(id2);
  batcher.cancel(id4); // cancelled while waiting
  const std::vector<int32_t> alone = greedyAlone(*art, p, 8);
  ASSERT_FALSE(alone.empty());
  const int64_t id5 = batcher.submit({p, 8, {}, {alone[2]}}, recordInto(o5)); // stops at its 3rd
  EXPECT_GT(id5, 0);
  while (batcher.step()) {
  }
  EXPECT_EQ(o1.why, FinishReason::Context);
  EXPECT_EQ(int64_t(p.size() + o1.tokens.size()), 16 + 1); // the last token is not fed
  EXPECT_EQ(o2.why, FinishReason::Cancelled);
  EXPECT_EQ(o2.tokens.size(), 2u); // one from its prompt, one decoded
  EXPECT_EQ(o4.why, FinishReason::Cancelled);
  EXPECT_TRUE(o4.tokens.empty());
  EXPECT_EQ(o5.why, FinishReason::Stop);
  EXPECT_EQ(o5.tokens, greedyAlone(*art, p, 8, {alone[2]}));
  EXPECT_LE(o5.tokens.size(), 2u);
  for (const Outcome *o : {&o1, &o2, &o4, &o5})
    EXPECT_EQ(o->finishes, 1);
  EXPECT_EQ(o3.finishes, 0);

  EXPECT_THROW(batcher.submit({{}, 4, {}, {}}, {}), std::invalid_argument);
  EXPECT_THROW(batcher.submit({p, 0, {}, {}}, {}), std::invalid_argument);
  EXPECT_THROW(batcher.submit({{1, int32_t(kV)}, 4, {}, {}}, {}), std::invalid_argument);
  EXPECT_THROW(batcher.submit({promptOf(16, 1), 4, {}, {}}, {}), std::invalid_argument);
  EXPECT_THROW(Batcher(exec, {4, 4, 8}), std::invalid_argument);
}

// A new sequence starts under the executor's current KV policies, also
// after they are switched (PolyKV back to f32 needs head_dim 32k: that
// switch is tested end to end in test_kv_policies.py's sweeps on SmolLM2).
TEST(Batch, NewSequencesTakeTheCurrentPolicies) {
  TinyModel m({});
  auto art = m.artifact();
  Executor exec(*art, ExecutorOptions{1, 0});
  auto policy = [](const char *quant) {
    json p = {{"method", "streaming"}, {"budget", 0.0}, {"budget_tokens", 5},
              {"window", 2},           {"sink", 2},    {"refresh", 4},
              {"pool", 1},             {"layer_scale", 1.0}, {"seed", 0},
              {"mode", "prefill"},     {"kv_quant", quant}};
    std::map<int64_t, json> by;
    for (int64_t l = 0; l < kLayers; ++l)
      by[l] = p;
    return by;
  };
  const std::vector<int32_t> prompt = promptOf(11, 5);
  exec.setKvPolicies(policy("none"), false);
  auto s1 = exec.newSequence();
  exec.forwardBatch({{s1.get(), prompt}});
  EXPECT_EQ(s1->kvEntries(), kLayers * kKV * 5);
  exec.setKvPolicies({}, false); // the full cache again
  auto s3 = exec.newSequence();
  exec.forwardBatch({{s3.get(), prompt}});
  EXPECT_EQ(s3->kvEntries(), kLayers * kKV * 11);
}
