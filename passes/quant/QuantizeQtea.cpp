//===- QuantizeQtea.cpp - llm-quantize method=qtea -------------------------===//
// Every pending weight read by a calibration site of the block is quantized
// with QTEA (compiler/quant/Qtea.h) against that site's Hessian; a 3-D
// expert tensor slab by slab, the side data of each slab back to back. An
// expert that saw no calibration token, and every weight no site reads
// (embedding, LM head: qteaRemaining), uses H = I: the same algorithm with
// no error feedback (group fit, column rescale, salient residuals by
// max |w|). The output error against the site's Hessian is reported like
// GPTQ's ("out_rel_err"). The slabs of a block's weights run on the
// machine's cores, one slab per thread (the same bits on any number).
//===----------------------------------------------------------------------===//
#include "compiler/quant/ParallelFor.h"
#include "compiler/quant/Qtea.h"
#include "passes/quant/FamilyMethods.h"

#include <chrono>
#include <cmath>
#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <stdexcept>

namespace llmc::quant {
namespace {

using Hessians = std::map<int64_t, Eigen::MatrixXd>; // expert (-1: 2-D) -> H

QteaOptions qteaOptions(const QuantizeContext &ctx, const QteaPassOptions &po) {
  const auto spec = qteaSpec(ctx.format());
  if (!spec)
    throw std::runtime_error("qtea: the pass's format is not a qtea type");
  QteaOptions o;
  o.group = spec->group;
  o.salientPct = spec->salientPct;
  o.deadzone = po.deadzone;
  o.decay = po.decay;
  o.damp = po.damp;
  return o;
}

/// One weight loaded for QTEA, its slabs (one per expert of a 3-D tensor).
struct QteaWeight {
  std::string name, where;
  FloatWeight w;
  const Hessians *hs;
  int64_t experts, slabRows;
};

/// One slab's result, or the message of its failure.
struct QteaSlab {
  QteaResult r;
  std::optional<OutputErrorTerms> terms;
  std::string error;
  double seconds = 0;
};

QteaWeight loadQteaWeight(QuantizeContext &ctx, const std::string &name, const Hessians *hs) {
  QteaWeight q{name, "", ctx.load(name), hs, 1, 0};
  const bool slabs = q.w.shape.size() == 3;
  q.experts = slabs ? q.w.shape[0] : 1;
  q.slabRows = q.w.rows / q.experts;
  q.where = "weight '" + name + "' (" + shapeText(q.w.shape) + ")";
  if (q.slabRows % qtea::kQuadRows != 0)
    throw std::runtime_error("qtea: " + q.where + " has " + std::to_string(q.slabRows) +
                             " rows per matrix, not a multiple of 4 (the 1:4 salient residual "
                             "pattern); keep it in another format with override=" + name +
                             ":8");
  return q;
}

QteaSlab quantizeQteaSlab(const QteaWeight &q, int64_t e, const QteaOptions &o) {
  auto t0 = std::chrono::steady_clock::now();
  QteaSlab out;
  const bool slabs = q.w.shape.size() == 3;
  const float *ws = q.w.data.data() + e * q.slabRows * q.w.cols;
  auto it = q.hs->find(slabs ? e : -1);
  const Eigen::MatrixXd *H = it == q.hs->end() ? nullptr : &it->second;
  try {
    const Eigen::MatrixXd eye = H ? Eigen::MatrixXd() : Eigen::MatrixXd::Identity(q.w.cols, q.w.cols);
    out.r = qteaQuantize(ws, q.slabRows, q.w.cols, H ? *H : eye, o);
    if (H)
      out.terms = sampledOutputError(ws, out.r.dequantized.data(), q.slabRows, q.w.cols, *H);
  } catch (const std::exception &ex) {
    out.error = q.where + (slabs ? " expert " + std::to_string(e) : std::string()) + ": " + ex.what();
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

void writeQteaWeight(QuantizeContext &ctx, const QteaWeight &q, std::vector<QteaSlab> slabs,
                     const QteaPassOptions &po) {
  const auto spec = qteaSpec(ctx.format());
  std::vector<uint8_t> bytes, aux;
  std::vector<float> back;
  back.reserve(q.w.data.size());
  double errSum = 0, refSum = 0, proxy = 0, secs = 0; // secs: the slabs' own time
  int retries = 0, identity = 0;
  bool allBk = true, diagFallback = false;
  for (QteaSlab &s : slabs) {
    if (!s.error.empty())
      throw std::runtime_error(s.error);
    QteaResult &r = s.r;
    if (s.terms) {
      errSum += s.terms->err;
      refSum += s.terms->ref;
    } else {
      ++identity;
    }
    std::vector<uint8_t> rows = qtea::packRows(r.matrix), side = qtea::packAux(r.matrix);
    bytes.insert(bytes.end(), rows.begin(), rows.end());
    aux.insert(aux.end(), side.begin(), side.end());
    back.insert(back.end(), r.dequantized.begin(), r.dequantized.end());
    proxy += r.proxyLoss;
    retries = std::max(retries, r.dampRetries);
    allBk = allBk && r.bunchKaufman;
    diagFallback = diagFallback || r.diagonalFallback;
    secs += s.seconds;
  }
  nlohmann::json extra = {
      {"bits", 1.6}, // storage bits per ternary code (five per byte); see "bpw" for the total
      {"salient_pct", spec->salientPct},
      {"salient_cols", qtea::salientCount(q.w.cols, spec->salientPct)},
      {"deadzone", po.deadzone},
      {"decay", po.decay},
      {"damp", po.damp},
      {"order", allBk ? "salient+bunch-kaufman" : "salient+saliency"},
      {"hessian", identity == 0 ? "calibration" : identity == q.experts ? "identity" : "mixed"},
      {"proxy_loss", proxy},
      {"damp_retries", retries},
  };
  if (diagFallback)
    extra["chol_fallback"] = "diagonal";
  if (refSum > 0)
    extra["out_rel_err"] = std::sqrt(errSum / refSum);
  ctx.writeFormatted(q.name, q.w, back, std::move(bytes), std::move(aux), "qtea", secs,
                     std::move(extra));
}

/// QTEA for `names` (each with its Hessians by expert; none: H = I): the
/// weights loaded in ctx.loadBatchEnd's batches, their slabs quantized on
/// the machine's cores (each slab on one thread: the same bits on any
/// number), then written in order.
void quantizeQteaWeights(QuantizeContext &ctx, const std::vector<std::string> &names,
                         const std::vector<const Hessians *> &hessians, const QteaPassOptions &po) {
  const QteaOptions o = qteaOptions(ctx, po);
  for (size_t first = 0; first < names.size();) {
    const size_t last = ctx.loadBatchEnd(names, first);
    std::vector<QteaWeight> loaded;
    for (size_t i = first; i < last; ++i)
      loaded.push_back(loadQteaWeight(ctx, names[i], hessians[i]));
    std::vector<std::pair<size_t, int64_t>> jobs; // (weight, expert)
    for (size_t i = 0; i < loaded.size(); ++i)
      for (int64_t e = 0; e < loaded[i].experts; ++e)
        jobs.emplace_back(i, e);
    // Costliest first (the cols^3 factor and the rows x cols^2 sweep), so
    // that a block's wide ffn_down does not start last on an idle core.
    auto cost = [&](size_t j) {
      const FloatWeight &w = loaded[jobs[j].first].w;
      const double c = double(w.cols);
      return c * c * (c + double(loaded[jobs[j].first].slabRows));
    };
    std::vector<size_t> byCost(jobs.size());
    std::iota(byCost.begin(), byCost.end(), size_t(0));
    std::stable_sort(byCost.begin(), byCost.end(),
                     [&](size_t a, size_t b) { return cost(a) > cost(b); });
    std::vector<QteaSlab> results(jobs.size());
    parallelIndices(int64_t(jobs.size()), 0, [&](int64_t k) {
      const size_t j = byCost[size_t(k)];
      results[j] = quantizeQteaSlab(loaded[jobs[j].first], jobs[j].second, o);
    });
    size_t j = 0;
    for (size_t i = 0; i < loaded.size(); ++i) {
      std::vector<QteaSlab> slabs;
      for (; j < jobs.size() && jobs[j].first == i; ++j)
        slabs.push_back(std::move(results[j]));
      writeQteaWeight(ctx, loaded[i], std::move(slabs), po);
    }
    first = last;
  }
}

} // namespace

void qteaBlock(QuantizeContext &ctx, std::vector<std::unique_ptr<CalibrationSite>> &sites,
               const QteaPassOptions &o, int64_t /*block*/) {
  WeightHessians hw = hessiansByWeight(sites, [&](const std::string &w) { return ctx.pending(w); });
  std::vector<const Hessians *> hs;
  for (const std::string &name : hw.order)
    hs.push_back(&hw.byWeight[name]);
  quantizeQteaWeights(ctx, hw.order, hs, o);
}

void qteaRemaining(QuantizeContext &ctx, const QteaPassOptions &o) {
  static const Hessians none;
  std::vector<std::string> names;
  for (const std::string &name : ctx.targets())
    if (ctx.pending(name))
      names.push_back(name);
  quantizeQteaWeights(ctx, names, std::vector<const Hessians *>(names.size(), &none), o);
}

} // namespace llmc::quant
