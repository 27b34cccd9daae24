//===- WeightProbe.cpp - KL divergence of one weight's replacement -------===//
#include "compiler/driver/WeightProbe.h"
#include "llmc/executor.h"
#include "llmc/metrics.h"
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace llmc {
namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

/// A copy of n bytes at a 64-byte boundary, the alignment an artifact gives
/// its tensors.
std::shared_ptr<uint8_t> alignedCopy(const void *data, size_t n) {
  const size_t size = (std::max<size_t>(n, 1) + 63) / 64 * 64;
  std::shared_ptr<uint8_t> p(static_cast<uint8_t *>(std::aligned_alloc(64, size)), std::free);
  if (!p)
    throw std::bad_alloc();
  std::memcpy(p.get(), data, n);
  return p;
}
} // namespace

WeightProbe::WeightProbe(const CompiledModel &ref, std::vector<int32_t> tokens, int threads)
    : tokens_(std::move(tokens)), threads_(threads) {
  if (tokens_.empty())
    throw std::runtime_error("WeightProbe: no tokens to run");
  manifest_["config"] = ref.manifest.at("config");
  manifest_["program"] = ref.manifest.at("program");
  base_.reserve(ref.tensors.size());
  for (const ArtifactWriter::Tensor &t : ref.tensors) {
    const void *data = t.data;
    if (reinterpret_cast<uintptr_t>(data) % 64 != 0) {
      held_.push_back(alignedCopy(data, size_t(t.nbytes)));
      data = held_.back().get();
    }
    base_.push_back(TensorView{t.name, t.dtype, t.shape, data, t.nbytes});
  }
  ExecutorOptions o;
  o.linear_input_hook = [&](const LinearInput &in) {
    if (in.expert >= 0)
      return;
    auto x = std::make_shared<const std::vector<float>>(in.x, in.x + in.rows * in.cols);
    for (const std::string &w : *in.weights)
      inputs_[w] = x;
  };
  std::vector<float> logits = run(base_, o);
  prepareResume(logits);
  vocab_ = int64_t(logits.size()) / int64_t(tokens_.size());
  refP_.resize(logits.size());
  refNegEntropy_.assign(tokens_.size(), 0.0);
  std::vector<double> lp(static_cast<size_t>(vocab_));
  for (size_t r = 0; r < tokens_.size(); ++r) {
    metrics::logSoftmax(&logits[r * size_t(vocab_)], vocab_, lp.data());
    for (int64_t i = 0; i < vocab_; ++i) {
      const double p = std::exp(lp[size_t(i)]);
      refP_[r * size_t(vocab_) + size_t(i)] = p;
      if (p > 0)
        refNegEntropy_[r] += p * lp[size_t(i)];
    }
  }
}

double WeightProbe::kld(const std::string &name, DType dtype, const std::vector<uint8_t> &bytes) {
  std::vector<TensorView> tensors = base_;
  std::shared_ptr<uint8_t> replacement; // the probe's bytes, held for the run
  bool found = false;
  for (TensorView &t : tensors)
    if (t.name == name) {
      int64_t n = 1;
      for (int64_t d : t.shape)
        n *= d;
      const int64_t cols = t.shape.empty() ? 1 : t.shape.back();
      if (int64_t(bytes.size()) != n / cols * rowBytes(dtype, cols))
        throw std::runtime_error("WeightProbe: " + std::to_string(bytes.size()) +
                                 " bytes do not hold weight '" + name + "' as " +
                                 std::string(dtypeName(dtype)));
      t.dtype = dtype;
      t.nbytes = int64_t(bytes.size());
      replacement = alignedCopy(bytes.data(), bytes.size());
      t.data = replacement.get();
      found = true;
    }
  if (!found)
    throw std::runtime_error("WeightProbe: no weight '" + name + "' in the model");
  auto at = blockOf_.find(name);
  std::vector<float> logits = run(std::move(tensors), {}, at == blockOf_.end() ? -1 : at->second);
  // KL(p || q) = sum p log p - sum p x + logsumexp(x) for q = softmax(x):
  // one exp per logit (metrics::klDivergence's value, without re-deriving p).
  double sum = 0;
  for (size_t r = 0; r < tokens_.size(); ++r) {
    const float *x = &logits[r * size_t(vocab_)];
    const double *p = &refP_[r * size_t(vocab_)];
    double mx = -std::numeric_limits<double>::infinity(), px = 0;
    for (int64_t i = 0; i < vocab_; ++i)
      mx = std::max(mx, double(x[i]));
    if (!std::isfinite(mx))
      return std::numeric_limits<double>::quiet_NaN();
    double z = 0;
    for (int64_t i = 0; i < vocab_; ++i) {
      z += std::exp(double(x[i]) - mx);
      if (p[i] > 0)
        px += p[i] * double(x[i]);
    }
    sum += std::max(0.0, refNegEntropy_[r] - px + mx + std::log(z));
  }
  return sum / double(tokens_.size());
}

const std::vector<float> *WeightProbe::input(const std::string &name) const {
  auto it = inputs_.find(name);
  return it == inputs_.end() ? nullptr : it->second.get();
}

WeightProbe::Model WeightProbe::open(std::vector<TensorView> tensors, ExecutorOptions o) const {
  Model m;
  m.art = Artifact::fromViews(manifest_, std::move(tensors), "<weight probe>");
  o.threads = threads_;
  o.max_context = int64_t(tokens_.size());
  m.ex = std::make_unique<Executor>(*m.art, o);
  return m;
}

void WeightProbe::prepareResume(const std::vector<float> &logits) {
  const Model m = open(base_, {});
  Executor &ex = *m.ex;
  std::map<std::string, int64_t> blockOf;
  int64_t blocks = 0;
  for (const TensorView &t : base_) {
    const int64_t b = ex.blockOfWeight(t.name);
    if (b >= 0) {
      blockOf[t.name] = b;
      blocks = std::max(blocks, b + 1);
    }
  }
  std::vector<std::vector<float>> inputs;
  try {
    for (int64_t b = 0; b < blocks; ++b) {
      ex.reset();
      inputs.push_back(b == 0 ? ex.blockInput(tokens_, 0) : ex.forwardBlock(b - 1, inputs.back()));
    }
    for (int64_t b : {int64_t(0), blocks - 1}) {
      if (b < 0)
        break;
      ex.reset();
      if (ex.forwardFrom(b, inputs[size_t(b)], /*all_logits=*/true) != logits)
        return; // resuming would not reproduce a full run: every probe runs it all
    }
  } catch (const std::runtime_error &) {
    return; // a program the blocks cannot be resumed in (e.g. attention before block 0)
  }
  blockInputs_ = std::move(inputs);
  blockOf_ = std::move(blockOf);
}

std::vector<float> WeightProbe::run(std::vector<TensorView> tensors, ExecutorOptions o,
                                    int64_t block) {
  const auto t0 = Clock::now();
  const Model m = open(std::move(tensors), std::move(o));
  Executor &ex = *m.ex;
  buildSeconds_ += since(t0);
  const auto t1 = Clock::now();
  std::vector<float> logits = block < 0
                                 ? ex.forward(tokens_, /*all_logits=*/true)
                                 : ex.forwardFrom(block, blockInputs_[size_t(block)], true);
  forwardSeconds_ += since(t1);
  return logits;
}

} // namespace llmc
