//===- SpecDrafterTest.cpp - Drafters that read the final hidden state ----===//
// spec::generate hands a needsHidden() drafter the final hidden state of the
// position whose logits chose the context's last token (the prompt's last
// row, then the row of the last kept token of each verification pass), and
// the output stays plain greedy decoding whatever is drafted.
//===----------------------------------------------------------------------===//
#include "TinyModel.h"
#include "llmc/speculative.h"

#include <gtest/gtest.h>

namespace {

/// Proposes plain greedy decoding's next tokens on calls 0, 3, 6, ..., wrong
/// tokens after the first on calls 1, 4, ... (so passes keep all, some or
/// none) and nothing on calls 2, 5, ... (a plain step), recording what it was
/// given.
class RecordingDrafter final : public spec::Drafter {
public:
  explicit RecordingDrafter(std::vector<int32_t> greedy) : greedy_(std::move(greedy)) {}
  std::vector<int32_t> draft(const std::vector<int32_t> &context, int max_draft,
                             const float *hidden) override {
    contexts.push_back(context);
    hiddens.emplace_back(hidden, hidden + kD);
    std::vector<int32_t> d;
    const size_t at = context.size(); // greedy_ holds prompt + continuation
    for (int k = 0; k < max_draft && at + size_t(k) < greedy_.size() && calls % 3 != 2; ++k) {
      const int32_t right = greedy_[at + size_t(k)];
      d.push_back(calls % 3 == 0 || k == 0 ? right : int32_t((right + 1) % kV));
    }
    ++calls;
    return d;
  }
  bool needsHidden() const override { return true; }
  const char *name() const override { return "recording"; }

  std::vector<std::vector<int32_t>> contexts;
  std::vector<std::vector<float>> hiddens;
  int calls = 0;

private:
  std::vector<int32_t> greedy_;
};

TEST(SpecDrafter, SeesTheHiddenRowThatChoseTheLastToken) {
  TinyModel m(Variant{});
  std::unique_ptr<Artifact> art = m.artifact();
  ExecutorOptions o;
  o.threads = 1;
  o.keep_hidden = true;
  const std::vector<int32_t> prompt = {1, 7, 3, 9, 4};
  const int64_t n = 24;
  // Plain greedy decoding, one token per step.
  Executor plain(*art, o);
  std::vector<int32_t> greedy = prompt;
  std::vector<float> logits = plain.forward(prompt);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t t = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    greedy.push_back(t);
    logits = plain.forward({t});
  }
  Executor ex(*art, o);
  RecordingDrafter drafter(greedy);
  Sampler sampler(SamplerOptions{});
  spec::SpecStats stats;
  std::vector<int32_t> out;
  spec::SpecOptions opts;
  opts.max_draft = 3;
  spec::generate(ex, drafter, prompt, ex.forward(prompt), n, {}, opts, sampler,
                 [&](int32_t t) {
                   out.push_back(t);
                   return true;
                 },
                 stats);
  EXPECT_EQ(out, std::vector<int32_t>(greedy.begin() + long(prompt.size()), greedy.end()));
  EXPECT_GT(stats.accepted, 0);
  EXPECT_LT(stats.accepted, stats.drafted);
  ASSERT_FALSE(drafter.contexts.empty());
  // Each call's hidden: the state after context[:-1], recomputed from scratch.
  Executor check(*art, o);
  for (size_t c = 0; c < drafter.contexts.size(); ++c) {
    const std::vector<int32_t> &ctx = drafter.contexts[c];
    ASSERT_GE(ctx.size(), prompt.size() + 1);
    check.reset();
    (void)check.forward(std::vector<int32_t>(ctx.begin(), ctx.end() - 1));
    const std::vector<float> &h = check.hidden();
    ASSERT_EQ(h.size(), (ctx.size() - 1) * size_t(kD));
    double worst = 0;
    for (int64_t i = 0; i < kD; ++i)
      worst = std::max(worst, std::fabs(double(h[h.size() - size_t(kD) + size_t(i)]) -
                                        double(drafter.hiddens[c][size_t(i)])));
    EXPECT_LT(worst, 1e-4) << "call " << c << " (context of " << ctx.size() << " tokens)";
  }
}

TEST(SpecDrafter, RefusesAnExecutorWithoutHiddenStates) {
  TinyModel m(Variant{});
  std::unique_ptr<Artifact> art = m.artifact();
  Executor ex(*art, {1, 0});
  RecordingDrafter drafter({});
  Sampler sampler(SamplerOptions{});
  spec::SpecStats stats;
  EXPECT_THROW(spec::generate(ex, drafter, {1, 2}, ex.forward({1, 2}), 4, {}, spec::SpecOptions{},
                              sampler, [](int32_t) { return true; }, stats),
               std::runtime_error);
}

} // namespace
