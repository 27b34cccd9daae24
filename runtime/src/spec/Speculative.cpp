//===- Speculative.cpp - Prompt-lookup drafts, greedy verification --------===//
#include "llmc/speculative.h"
#include "SpecTree.h"

#include "llmc/artifact.h"
#include "../exec/Matmul.h"
#include "../exec/WeightMatrix.h"
#include "llmc/dtype.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace llmc::spec {

std::vector<int32_t> ngramDraft(const std::vector<int32_t> &context, int max_draft, int max_n,
                                int min_n) {
  const int64_t L = int64_t(context.size());
  if (max_draft <= 0 || min_n <= 0)
    return {};
  for (int64_t n = std::min<int64_t>(max_n, L - 1); n >= min_n; --n) {
    // The latest start s < L - n whose n tokens equal the last n.
    for (int64_t s = L - n - 1; s >= 0; --s) {
      if (!std::equal(context.begin() + s, context.begin() + s + n, context.end() - n))
        continue;
      const int64_t from = s + n, to = std::min<int64_t>(L, from + max_draft);
      return std::vector<int32_t>(context.begin() + from, context.begin() + to);
    }
  }
  return {};
}

bool verifyDraft(Sampler &sampler, const float *row, int64_t vocab, int32_t d, int32_t &next) {
  if (verifyCandidates(sampler, row, vocab, &d, 1, next) < 0)
    return false;
  next = d;
  return true;
}

std::optional<SpecConfig> specConfigOf(const Artifact &art) {
  const nlohmann::json &m = art.manifest();
  if (!m.contains("speculation"))
    return std::nullopt;
  const nlohmann::json &s = m["speculation"];
  auto bad = [&](const std::string &why) {
    return std::runtime_error(art.path() + ": manifest 'speculation': " + why);
  };
  if (!s.is_object() || !s.contains("method") || !s["method"].is_string())
    throw bad("must be an object with a string 'method'");
  std::optional<SpecMethod> method = parseSpecMethod(s["method"].get<std::string>());
  if (!method)
    throw bad("unknown method '" + s["method"].get<std::string>() + "'");
  SpecConfig c;
  c.method = *method;
  auto integer = [&](const char *key, int64_t lo, int64_t hi, int64_t dflt) {
    if (!s.contains(key))
      return dflt;
    if (!s[key].is_number_integer() || s[key].get<int64_t>() < lo || s[key].get<int64_t>() > hi)
      throw bad(std::string("'") + key + "' must be an integer in [" + std::to_string(lo) + ", " +
                std::to_string(hi) + "]");
    return s[key].get<int64_t>();
  };
  c.max_draft = int(integer("max_draft", 1, 64, 4));
  c.ngram = int(integer("ngram", 1, 16, 3));
  c.heads = integer("heads", 0, 64, 0);
  c.tree_nodes = int(integer("tree_nodes", 0, 64, 0));
  if (c.method == SpecMethod::Medusa && c.heads < 1)
    throw bad("method 'medusa' needs 'heads' >= 1");
  if (c.method == SpecMethod::Self) {
    if (!s.contains("skip_blocks") || !s["skip_blocks"].is_array() || s["skip_blocks"].empty() ||
        s["skip_blocks"].size() > 4096)
      throw bad("method 'self' needs a non-empty 'skip_blocks' array");
    for (const nlohmann::json &b : s["skip_blocks"]) {
      if (!b.is_number_integer() || b.get<int64_t>() < 0 || b.get<int64_t>() >= 4096 ||
          (!c.skip_blocks.empty() && b.get<int64_t>() <= c.skip_blocks.back()))
        throw bad("'skip_blocks' must be ascending block indices");
      c.skip_blocks.push_back(b.get<int64_t>());
    }
  }
  return c;
}

MedusaDrafter::MedusaDrafter(const Artifact &art, Executor &exec, double min_confidence)
    : exec_(exec) {
  std::optional<SpecConfig> c = specConfigOf(art);
  if (!c || c->method != SpecMethod::Medusa)
    throw std::runtime_error(art.path() + " has no Medusa heads (compile it with "
                             "--pipeline='llm-spec-attach{method=medusa}')");
  const nlohmann::json &s = art.manifest()["speculation"];
  const nlohmann::json &w = s.contains("weights") ? s["weights"] : nlohmann::json();
  if (!w.is_object() || !w.contains("heads") || !w["heads"].is_string() ||
      !w.contains("bias") || !w["bias"].is_string())
    throw std::runtime_error(art.path() + ": speculation.weights must name 'heads' and 'bias'");
  heads_ = c->heads;
  width_ = exec.hiddenSize();
  auto tensor = [&](const std::string &name, std::vector<int64_t> shape) {
    const TensorView *t = art.tensor(name);
    if (!t)
      throw std::runtime_error(art.path() + ": no tensor '" + name + "' (Medusa heads)");
    if (t->dtype != DType::F32 || t->shape != shape ||
        t->nbytes != t->numElements() * int64_t(sizeof(float)))
      throw std::runtime_error(art.path() + ": Medusa tensor '" + name +
                               "' is not f32 of the heads' shape");
    return static_cast<const float *>(t->data);
  };
  w_ = tensor(w["heads"].get<std::string>(), {heads_, width_, 2 * width_});
  b_ = tensor(w["bias"].get<std::string>(), {heads_, width_});
  const nlohmann::json &v = s.contains("draft_vocab") ? s["draft_vocab"] : nlohmann::json();
  if (!v.is_array() || v.empty())
    throw std::runtime_error(art.path() + ": speculation.draft_vocab must list token ids");
  for (const nlohmann::json &id : v) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() >= exec.vocabSize() ||
        (!vocab_.empty() && id.get<int64_t>() <= vocab_.back()))
      throw std::runtime_error(art.path() + ": speculation.draft_vocab must be increasing token "
                               "ids of the vocabulary");
    vocab_.push_back(int32_t(id.get<int64_t>()));
  }
  minConfidence_ = min_confidence;
  if (minConfidence_ < 0) {
    minConfidence_ = 0;
    if (s.contains("min_confidence")) {
      if (!s["min_confidence"].is_number() || !(s["min_confidence"].get<double>() >= 0) ||
          s["min_confidence"].get<double>() > 1)
        throw std::runtime_error(art.path() + ": speculation.min_confidence must be in [0, 1]");
      minConfidence_ = s["min_confidence"].get<double>();
    }
  }
  vocabRows_.resize(vocab_.size() * size_t(width_));
  for (size_t i = 0; i < vocab_.size(); ++i)
    exec.lmHeadRow(vocab_[i], vocabRows_.data() + i * size_t(width_));
  if (width_ % 32 != 0)
    return;
  headRowBytes_ = rowBytes(DType::Q8_0, 2 * width_);
  vocabRowBytes_ = rowBytes(DType::Q8_0, width_);
  headsQ8_.resize(size_t(heads_ * width_ * headRowBytes_));
  for (int64_t r = 0; r < heads_ * width_; ++r)
    quantizeRowRef(DType::Q8_0, w_ + r * 2 * width_, headsQ8_.data() + r * headRowBytes_,
                   2 * width_);
  vocabQ8_.resize(vocab_.size() * size_t(vocabRowBytes_));
  for (size_t i = 0; i < vocab_.size(); ++i)
    quantizeRowRef(DType::Q8_0, vocabRows_.data() + i * size_t(width_),
                   vocabQ8_.data() + i * size_t(vocabRowBytes_), width_);
  std::vector<float>().swap(vocabRows_);
}

void MedusaDrafter::headLogits(int64_t h, const float *hidden, const int32_t *fed,
                               int64_t rows) {
  const int64_t D = width_, V = int64_t(vocab_.size());
  in_.resize(size_t(rows * 2 * D));
  y_.resize(size_t(rows * D));
  logits_.resize(size_t(rows * V));
  for (int64_t i = 0; i < rows; ++i) {
    std::copy(hidden, hidden + D, in_.begin() + i * 2 * D);
    exec_.embeddingRow(fed[i], in_.data() + i * 2 * D + D);
  }
  const bool q8 = !headsQ8_.empty();
  WeightMatrix head, lm;
  if (q8) {
    head = {headsQ8_.data() + h * D * headRowBytes_, DType::Q8_0, D, 2 * D, headRowBytes_};
    lm = {vocabQ8_.data(), DType::Q8_0, V, D, vocabRowBytes_};
  } else {
    head = {reinterpret_cast<const uint8_t *>(w_ + h * D * 2 * D), DType::F32, D, 2 * D,
            int64_t(2 * D * sizeof(float))};
    lm = {reinterpret_cast<const uint8_t *>(vocabRows_.data()), DType::F32, V, D,
          int64_t(D * sizeof(float))};
  }
  MatmulPaths paths;
  paths.int8 = q8;
  const MatmulJob toY{&head, y_.data(), D, b_ + h * D};
  matmulMany(exec_.threadPool(), &toY, 1, in_.data(), rows, 2 * D, nullptr, paths);
  const MatmulJob toLogits{&lm, logits_.data(), V, nullptr};
  matmulMany(exec_.threadPool(), &toLogits, 1, y_.data(), rows, D, nullptr, paths);
}

std::vector<int32_t> MedusaDrafter::draft(const std::vector<int32_t> &context, int max_draft,
                                          const float *hidden) {
  const int64_t k = std::min<int64_t>(heads_, max_draft);
  if (k <= 0 || !hidden || context.empty())
    return {};
  std::vector<int32_t> out;
  int32_t fed = context.back(); // the token the model chose after `hidden`
  for (int64_t h = 0; h < k; ++h) {
    headLogits(h, hidden, &fed, 1);
    const int64_t best = std::max_element(logits_.begin(), logits_.end()) - logits_.begin();
    if (minConfidence_ > 0) { // the draft's softmax probability
      double z = 0;
      for (float l : logits_)
        z += std::exp(double(l) - double(logits_[size_t(best)]));
      if (1.0 / z < minConfidence_)
        break;
    }
    fed = vocab_[size_t(best)];
    out.push_back(fed);
  }
  return out;
}

int64_t promptHiddenRow(const Executor &exec, const Drafter &drafter) {
  if (!drafter.needsHidden())
    return -1;
  const int64_t width = exec.hiddenSize();
  if (width <= 0 || exec.hidden().size() < size_t(width))
    throw std::runtime_error(std::string(drafter.name()) +
                             " draft from the final hidden state: the executor must keep it "
                             "(ExecutorOptions::keep_hidden) and have fed the prompt");
  return int64_t(exec.hidden().size()) / width - 1;
}

int64_t generate(Executor &exec, std::vector<int32_t> context, std::vector<float> logits,
                 int64_t n, const std::vector<int32_t> &stops, const SpecOptions &opts,
                 Sampler &sampler, const std::function<bool(int32_t)> &emit, SpecStats &stats) {
  NgramDrafter ngram(opts.max_n, opts.min_n);
  return generate(exec, ngram, std::move(context), std::move(logits), n, stops, opts, sampler,
                  emit, stats);
}

int64_t generate(Executor &exec, Drafter &drafter, std::vector<int32_t> context,
                 std::vector<float> logits, int64_t n, const std::vector<int32_t> &stops,
                 const SpecOptions &opts, Sampler &sampler,
                 const std::function<bool(int32_t)> &emit, SpecStats &stats) {
  if (opts.tree_nodes > 0 && drafter.branches() && exec.treeVerifiable())
    return generateTree(exec, drafter, std::move(context), std::move(logits), n, stops, opts,
                        sampler, emit, stats);
  const int64_t width = exec.hiddenSize();
  // The hidden row whose logits chose `next`: the prompt's last, then the
  // row of the last kept token of each pass.
  int64_t hiddenRow = promptHiddenRow(exec, drafter);
  auto hiddenOf = [&]() -> const float * {
    return hiddenRow >= 0 ? exec.hidden().data() + hiddenRow * width : nullptr;
  };
  if (!exec.rewindable())
    throw std::runtime_error("speculative decoding needs KV caches that can drop their newest "
                             "entries (the full KV policy, or one that compresses prompts only "
                             "and keeps no running statistics); this model's policy keeps more "
                             "state");
  const int64_t vocab = exec.vocabSize();
  auto row = [&](size_t i) { return logits.data() + int64_t(i) * vocab; };
  Emission out{n, stops, emit, context};
  int32_t next = sampler.sample(row(0), vocab);
  // Adaptive draft length: halved after a pass that kept no draft, doubled
  // after one that kept them all (between 1 and max_draft), so text the
  // context does not predict costs little more than plain decoding.
  int64_t draftLen = std::max(1, opts.max_draft);
  while (out.more()) {
    if (!out.take(next) || !out.more())
      break;
    const int64_t room = out.room(exec);
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<int32_t> draft =
        room > 0 ? drafter.draft(context, int(std::min<int64_t>(draftLen, room)), hiddenOf())
                 : std::vector<int32_t>();
    stats.draft_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const int64_t base = exec.pos(); // `next` goes here, the drafts after it
    std::vector<int32_t> step{next};
    step.insert(step.end(), draft.begin(), draft.end());
    logits = draft.empty() ? exec.forward(step) : exec.verify(step);
    if (draft.empty()) {
      next = sampler.sample(row(0), vocab);
      hiddenRow = hiddenRow >= 0 ? 0 : -1;
      continue;
    }
    ++stats.passes;
    stats.drafted += int64_t(draft.size());
    // Row i is the target's distribution after step[i]: keep draft[i]
    // while the rule accepts it; a rejection leaves the token to go on with.
    size_t kept = 0;
    bool stopped = false, rejected = false;
    for (; kept < draft.size(); ++kept) {
      int32_t instead = -1;
      if (!verifyDraft(sampler, row(kept), vocab, draft[kept], instead)) {
        next = instead;
        rejected = true;
        break;
      }
      if (!out.take(draft[kept])) {
        stopped = true;
        break;
      }
    }
    stats.accepted += int64_t(kept);
    if (stopped)
      break;
    exec.rewind(base + 1 + int64_t(kept)); // `next` and the kept drafts stay
    hiddenRow = hiddenRow >= 0 ? int64_t(kept) : -1; // row `kept` chose the new `next`
    if (!rejected) // every draft kept: the target's own token after them
      next = sampler.sample(row(kept), vocab);
    if (kept == 0)
      draftLen = std::max<int64_t>(1, draftLen / 2);
    else if (kept == draft.size())
      draftLen = std::min<int64_t>(std::max(1, opts.max_draft), draftLen * 2);
  }
  return out.emitted;
}

} // namespace llmc::spec
