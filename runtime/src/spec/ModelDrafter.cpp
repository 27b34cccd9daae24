//===- ModelDrafter.cpp - Drafts from a smaller model -----------------------===//
#include "llmc/speculative.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace llmc::spec {
namespace {

/// The arg max of a logits row, or -1 when its softmax probability is
/// below `floor` (the softmax is computed only for a positive floor).
int32_t best(const float *row, int64_t vocab, double floor) {
  const int64_t b = std::max_element(row, row + vocab) - row;
  if (floor <= 0)
    return int32_t(b);
  double z = 0;
  for (int64_t i = 0; i < vocab; ++i)
    z += std::exp(double(row[i]) - double(row[b]));
  return 1.0 / z < floor ? -1 : int32_t(b);
}

} // namespace

ModelDrafter::ModelDrafter(std::unique_ptr<Artifact> draftModel, ExecutorOptions opts,
                           int64_t targetVocab, int32_t mask, double min_confidence)
    : owned_(std::move(draftModel)), art_(owned_.get()), mask_(mask),
      minConfidence_(min_confidence) {
  opts.keep_hidden = false;
  opts.prefill_chunk = 0;
  exec_ = std::make_unique<Executor>(*art_, opts);
  check("the draft model", targetVocab);
  if (mask_ >= targetVocab)
    throw std::runtime_error("the draft mask token " + std::to_string(mask_) +
                             " is outside the vocabulary of " + std::to_string(targetVocab));
}

ModelDrafter::ModelDrafter(const Artifact &target, const std::vector<int64_t> &skip,
                           ExecutorOptions opts, double min_confidence)
    : art_(&target), self_(true), mask_(-1), minConfidence_(min_confidence) {
  if (skip.empty())
    throw std::runtime_error("self-speculation needs the blocks its drafter skips");
  opts.keep_hidden = false;
  opts.prefill_chunk = 0;
  opts.skip_blocks = skip;
  exec_ = std::make_unique<Executor>(*art_, opts);
  check("the self-speculation drafter", -1);
}

void ModelDrafter::check(const std::string &what, int64_t targetVocab) {
  if (targetVocab >= 0 && exec_->vocabSize() != targetVocab)
    throw std::runtime_error(art_->path() + ": the draft model's vocabulary has " +
                             std::to_string(exec_->vocabSize()) + " tokens, the target's " +
                             std::to_string(targetVocab) + ": drafts must be the target's tokens");
  if (!exec_->rewindable())
    throw std::runtime_error(art_->path() + ": " + what + "'s KV policy cannot drop rejected "
                             "drafts (compile the draft model without one)");
}

ModelDrafter::~ModelDrafter() = default;

/// Rewinds the draft model to the longest prefix its cache shares with
/// `context` (at least one token short, so the last one's logits come
/// back), feeds the rest followed by `extra` mask tokens, and returns the
/// logits of the last context token and of each mask ([1 + extra, vocab]).
std::vector<float> ModelDrafter::catchUp(const std::vector<int32_t> &context, size_t extra) {
  size_t common = size_t(std::mismatch(fed_.begin(), fed_.end(), context.begin(),
                                       context.begin() + std::min(fed_.size(), context.size()))
                             .first -
                         fed_.begin());
  common = std::min(common, context.size() - 1);
  if (int64_t(common) < exec_->pos())
    exec_->rewind(int64_t(common));
  fed_.resize(common);
  std::vector<int32_t> step(context.begin() + int64_t(common), context.end());
  const size_t real = step.size();
  step.insert(step.end(), extra, mask_);
  std::vector<float> logits = exec_->forward(step, extra > 0);
  fed_.insert(fed_.end(), context.begin() + int64_t(common), context.end());
  const int64_t vocab = exec_->vocabSize();
  if (extra == 0)
    return logits;
  exec_->rewind(int64_t(fed_.size())); // the masks are not context
  return std::vector<float>(logits.begin() + int64_t(real - 1) * vocab, logits.end());
}

std::vector<int32_t> ModelDrafter::draft(const std::vector<int32_t> &context, int max_draft,
                                         const float *) {
  if (context.empty() || max_draft <= 0)
    return {};
  const int64_t vocab = exec_->vocabSize();
  const int64_t room = exec_->maxContext() - int64_t(context.size()) - 1;
  max_draft = int(std::min<int64_t>(max_draft, room));
  if (max_draft <= 0)
    return {};
  std::vector<int32_t> out;
  if (mask_ >= 0) {
    const std::vector<float> rows = catchUp(context, size_t(max_draft - 1));
    for (int i = 0; i < max_draft; ++i) {
      const int32_t token = best(rows.data() + int64_t(i) * vocab, vocab, minConfidence_);
      if (token < 0)
        break;
      out.push_back(token);
    }
    return out;
  }
  std::vector<float> row = catchUp(context, 0);
  for (int i = 0; i < max_draft; ++i) {
    const int32_t token = best(row.data(), vocab, minConfidence_);
    if (token < 0)
      break;
    out.push_back(token);
    if (i + 1 == max_draft)
      break; // the last draft need not be fed
    row = exec_->forward({token});
    fed_.push_back(token);
  }
  return out;
}

} // namespace llmc::spec
