//===- QuantizeContext.cpp - Shared state of one llm-quantize run --------===//
#include "passes/quant/QuantizeContext.h"
#include "compiler/quant/ParallelFor.h"
#include "compiler/weights/WeightTypes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;

namespace llmc::quant {

std::string shapeText(const std::vector<int64_t> &s) {
  std::string r;
  for (size_t i = 0; i < s.size(); ++i)
    r += (i ? "x" : "") + std::to_string(s[i]);
  return r;
}

QuantizeContext::QuantizeContext(ModuleOp module, WeightStore &store, GridSpec spec,
                                 std::set<std::string> targets, int64_t calibrationTokens,
                                 std::optional<DType> format)
    : module_(module), store_(store), spec_(spec), format_(format ? *format : spec.dtype()),
      targets_(std::move(targets)),
      calibrationTokens_(calibrationTokens) {
  module.walk([&](llm::WeightOp w) { ops_[w.getName()].push_back(w); });
}

ArrayRef<llm::WeightOp> QuantizeContext::opsOf(StringRef name) const {
  auto it = ops_.find(name);
  if (it == ops_.end())
    return {};
  return it->second;
}

FloatWeight QuantizeContext::load(const std::string &name) const {
  const WeightStore::Entry *e = store_.find(name);
  if (!e)
    throw std::runtime_error("weight '" + name + "' is not in the weight store");
  FloatWeight f;
  f.shape = e->shape;
  f.cols = e->shape.empty() ? 1 : e->shape.back();
  f.rows = 1;
  for (size_t i = 0; i + 1 < e->shape.size(); ++i)
    f.rows *= e->shape[i];
  f.data.resize(size_t(f.rows * f.cols));
  WeightStore::dequantizeRows(*e, 0, f.rows, f.data.data());
  return f;
}

void QuantizeContext::retype(const std::string &name, DType t) {
  for (llm::WeightOp w : opsOf(name)) {
    auto type = cast<RankedTensorType>(w.getType());
    w.getResult().setType(RankedTensorType::get(type.getShape(),
                                                weightElementType(module_.getContext(), t)));
  }
}

void QuantizeContext::writeQuantized(const std::string &name, const FloatWeight &original,
                                     const std::vector<float> &dequantized,
                                     std::vector<uint8_t> bytes, const std::string &method,
                                     double seconds, nlohmann::json extra) {
  write(name, spec_.dtype(), original, dequantized, std::move(bytes), {}, method, seconds,
        std::move(extra));
}

void QuantizeContext::writeFormatted(const std::string &name, const FloatWeight &original,
                                     const std::vector<float> &dequantized,
                                     std::vector<uint8_t> bytes, std::vector<uint8_t> aux,
                                     const std::string &method, double seconds,
                                     nlohmann::json extra) {
  write(name, format_, original, dequantized, std::move(bytes), std::move(aux), method, seconds,
        std::move(extra));
}

void QuantizeContext::write(const std::string &name, DType t, const FloatWeight &original,
                            const std::vector<float> &dequantized, std::vector<uint8_t> bytes,
                            std::vector<uint8_t> aux, const std::string &method, double seconds,
                            nlohmann::json extra) {
  const size_t auxSize = aux.size();
  const WeightStore::Entry *e = store_.find(name);
  std::string from = e ? std::string(dtypeName(e->dtype)) : "?";
  if (e && e->info.contains("from"))
    from = e->info["from"].get<std::string>(); // a transform before us kept f32
  double relErr = relativeError(original.data.data(), dequantized.data(),
                                int64_t(original.data.size()));
  nlohmann::json info = {{"method", method},
                         {"bits", spec_.bits},
                         {"group", spec_.group},
                         {"sym", spec_.sym},
                         {"format", std::string(dtypeName(t))},
                         {"bpw", double(bytes.size() + auxSize) * 8.0 /
                                     double(original.rows * original.cols)},
                         {"from", from},
                         {"rel_rmse", relErr},
                         {"calibration_tokens", method == "rtn" ? 0 : calibrationTokens_}};
  for (auto &[k, v] : extra.items())
    info[k] = v;
  store_.replace(name, t, original.shape, std::move(bytes), info, std::move(aux));
  retype(name, t);
  done_.insert(name);
  ++quantized_;
  weightsQuantized_ += original.rows * original.cols;
  sumRelErr_ += relErr;
  sumQuantSeconds_ += seconds;
  std::string outErr;
  if (info.contains("out_rel_err"))
    outErr = llvm::formatv("  out.err {0:F4}", info["out_rel_err"].get<double>()).str();
  ProgressLog(module_) << llvm::format("[llmc] quantize %-28s %-12s %-4s %s  rel.err %.4f", name.c_str(),
                               shapeText(original.shape).c_str(), method.c_str(),
                               std::string(dtypeName(t)).c_str(), relErr)
               << outErr << llvm::format("  %.2fs\n", seconds);
}

void QuantizeContext::writeF32(const std::string &name, const std::vector<int64_t> &shape,
                               std::vector<float> values, nlohmann::json info) {
  const WeightStore::Entry *e = store_.find(name);
  if (e && !info.contains("from"))
    info["from"] = e->info.contains("from") ? e->info["from"].get<std::string>()
                                             : std::string(dtypeName(e->dtype));
  std::vector<uint8_t> bytes(values.size() * sizeof(float));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  store_.replace(name, DType::F32, shape, std::move(bytes), std::move(info));
  retype(name, DType::F32);
}

void QuantizeContext::rtnRemaining() {
  for (const std::string &name : targets_) {
    if (done_.count(name))
      continue;
    auto t0 = std::chrono::steady_clock::now();
    FloatWeight w = load(name);
    QuantizedMatrix q = rtnQuantize(w.data.data(), w.rows, w.cols, spec_);
    std::vector<float> back = q.dequantized();
    double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    writeQuantized(name, w, back, q.pack(), "rtn", secs, nlohmann::json::object());
  }
}

void QuantizeContext::summarize(const std::string &method, double seconds) const {
  ProgressLog(module_) << llvm::format(
      "[llmc] llm-quantize %s %s: %lld tensors (%.1fM weights), mean rel.err %.4f, %.1fs "
      "(%.1fs rounding)\n",
      method.c_str(), std::string(dtypeName(format_)).c_str(), (long long)quantized_,
      double(weightsQuantized_) / 1e6, quantized_ ? sumRelErr_ / double(quantized_) : 0.0,
      seconds, sumQuantSeconds_);
}

QuantizeContext::FinishedSlab QuantizeContext::finishSlab(SlabResult done, const float *w,
                                                          int64_t rows, int64_t cols) const {
  FinishedSlab f;
  f.q = done ? std::move(done->first) : rtnQuantize(w, rows, cols, spec_);
  if (done) {
    const std::vector<float> back = f.q.dequantized();
    f.terms = sampledOutputError(w, back.data(), rows, cols, *done->second);
  }
  return f;
}

void QuantizeContext::quantizeSlabs(const std::string &name, const std::string &method,
                                    const SlabQuantizer &slab, nlohmann::json extra,
                                    const std::function<void(nlohmann::json &)> &finish) {
  quantizeWeightsAtOnce(
      {name}, method,
      [&](const std::string &, int64_t expert, const float *w, int64_t rows, int64_t cols) {
        return slab(expert, w, rows, cols);
      },
      extra, /*threads=*/1, finish);
}

namespace {

/// Weights loaded as f32 at once (loadBatchEnd): 1 GiB (a block of
/// a large MoE model is then done a few weights at a time, as one weight
/// at a time was before).
constexpr int64_t kParallelLoadFloats = int64_t(1) << 28;

} // namespace

size_t QuantizeContext::loadBatchEnd(const std::vector<std::string> &names, size_t first) const {
  size_t last = first;
  for (int64_t floats = 0; last < names.size(); ++last) {
    const WeightStore::Entry *e = store_.find(names[last]);
    int64_t n = 1;
    for (int64_t d : e ? e->shape : std::vector<int64_t>{})
      n *= d;
    if (last > first && floats + n > kParallelLoadFloats)
      break;
    floats += n;
  }
  return last;
}

void QuantizeContext::quantizeSlabsParallel(const std::vector<std::string> &names,
                                            const std::string &method,
                                            const NamedSlabQuantizer &slab,
                                            const nlohmann::json &extra, int threads) {
  for (size_t first = 0; first < names.size();) {
    const size_t last = loadBatchEnd(names, first);
    quantizeWeightsAtOnce({names.begin() + long(first), names.begin() + long(last)}, method,
                          slab, extra, threads, nullptr);
    first = last;
  }
}

void QuantizeContext::quantizeWeightsAtOnce(const std::vector<std::string> &names,
                                            const std::string &method,
                                            const NamedSlabQuantizer &slab,
                                            const nlohmann::json &extra, int threads,
                                            const std::function<void(nlohmann::json &)> &finish) {
  struct Job {
    size_t weight;
    int64_t expert;
  };
  std::vector<FloatWeight> weights;
  std::vector<Job> jobs;
  for (size_t i = 0; i < names.size(); ++i) {
    weights.push_back(load(names[i]));
    const FloatWeight &w = weights.back();
    if (w.shape.size() == 3)
      for (int64_t e = 0; e < w.shape[0]; ++e)
        jobs.push_back({i, e});
    else
      jobs.push_back({i, -1});
  }
  std::vector<FinishedSlab> results(jobs.size());
  std::vector<double> seconds(jobs.size(), 0.0);
  parallelIndices(int64_t(jobs.size()), threads, [&](int64_t j) {
    auto t0 = std::chrono::steady_clock::now();
    const Job &job = jobs[size_t(j)];
    const FloatWeight &w = weights[job.weight];
    const int64_t slabRows = job.expert < 0 ? w.rows : w.rows / w.shape[0];
    const float *ws = w.data.data() + std::max<int64_t>(job.expert, 0) * slabRows * w.cols;
    results[size_t(j)] =
        finishSlab(slab(names[job.weight], job.expert, ws, slabRows, w.cols), ws, slabRows, w.cols);
    seconds[size_t(j)] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
  size_t j = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    std::vector<FinishedSlab> slabs;
    double secs = 0; // the slabs' own time, whichever threads ran them
    for (; j < jobs.size() && jobs[j].weight == i; ++j) {
      slabs.push_back(std::move(results[j]));
      secs += seconds[j];
    }
    writeSlabs(names[i], weights[i], std::move(slabs), method, secs, extra, finish);
  }
}

void QuantizeContext::writeSlabs(const std::string &name, const FloatWeight &w,
                                 std::vector<FinishedSlab> slabs, const std::string &method,
                                 double seconds, nlohmann::json extra,
                                 const std::function<void(nlohmann::json &)> &finish) {
  QuantizedMatrix q;
  q.spec = spec_;
  q.rows = w.rows;
  q.cols = w.cols;
  double errSum = 0, refSum = 0;
  for (FinishedSlab &f : slabs) {
    if (f.terms) {
      errSum += f.terms->err;
      refSum += f.terms->ref;
    }
    q.codes.insert(q.codes.end(), f.q.codes.begin(), f.q.codes.end());
    q.grids.insert(q.grids.end(), f.q.grids.begin(), f.q.grids.end());
  }
  std::vector<float> back = q.dequantized();
  if (finish)
    finish(extra);
  if (refSum > 0)
    extra["out_rel_err"] = std::sqrt(errSum / refSum);
  writeQuantized(name, w, back, q.pack(), method, seconds, std::move(extra));
}

} // namespace llmc::quant
