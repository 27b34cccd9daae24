//===- QuantizeQtea.cpp - llm-quantize method=qtea -------------------------===//
// Every pending weight read by a calibration site of the block is quantized
// with QTEA (compiler/quant/Qtea.h) against that site's Hessian; a 3-D
// expert tensor slab by slab, the side data of each slab back to back. An
// expert that saw no calibration token, and every weight no site reads
// (embedding, LM head: qteaRemaining), uses H = I: the same algorithm with
// no error feedback (group fit, column rescale, salient residuals by
// max |w|). The output error against the site's Hessian is reported like
// GPTQ's ("out_rel_err").
//===----------------------------------------------------------------------===//
#include "compiler/quant/Qtea.h"
#include "passes/quant/FamilyMethods.h"

#include <chrono>
#include <cmath>
#include <map>
#include <stdexcept>

namespace llmc::quant {
namespace {

using Hessians = std::map<int64_t, Eigen::MatrixXd>; // expert (-1: 2-D) -> H

void quantizeQtea(QuantizeContext &ctx, const std::string &name, const Hessians &hs,
                  const QteaPassOptions &po) {
  auto t0 = std::chrono::steady_clock::now();
  const auto spec = qteaSpec(ctx.format());
  if (!spec)
    throw std::runtime_error("qtea: the pass's format is not a qtea type");
  FloatWeight w = ctx.load(name);
  const bool slabs = w.shape.size() == 3;
  const int64_t experts = slabs ? w.shape[0] : 1, slabRows = w.rows / experts;
  const std::string where =
      "weight '" + name + "' (" + shapeText(w.shape) + ")";
  if (slabRows % qtea::kQuadRows != 0)
    throw std::runtime_error("qtea: " + where + " has " + std::to_string(slabRows) +
                             " rows per matrix, not a multiple of 4 (the 1:4 salient residual "
                             "pattern); keep it in another format with override=" + name +
                             ":8");
  QteaOptions o;
  o.group = spec->group;
  o.salientPct = spec->salientPct;
  o.deadzone = po.deadzone;
  o.decay = po.decay;
  o.damp = po.damp;

  std::vector<uint8_t> bytes, aux;
  std::vector<float> back;
  back.reserve(w.data.size());
  double errSum = 0, refSum = 0, proxy = 0;
  int retries = 0, identity = 0;
  bool allBk = true, diagFallback = false;
  const Eigen::MatrixXd eye = hs.size() == size_t(experts)
                                  ? Eigen::MatrixXd()
                                  : Eigen::MatrixXd::Identity(w.cols, w.cols);
  for (int64_t e = 0; e < experts; ++e) {
    const float *ws = w.data.data() + e * slabRows * w.cols;
    auto it = hs.find(slabs ? e : -1);
    const Eigen::MatrixXd *H = it == hs.end() ? nullptr : &it->second;
    QteaResult r;
    try {
      r = qteaQuantize(ws, slabRows, w.cols, H ? *H : eye, o);
    } catch (const std::exception &ex) {
      throw std::runtime_error(where + (slabs ? " expert " + std::to_string(e) : std::string()) +
                               ": " + ex.what());
    }
    if (H) {
      const OutputErrorTerms t = sampledOutputError(ws, r.dequantized.data(), slabRows, w.cols, *H);
      errSum += t.err;
      refSum += t.ref;
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
  }
  nlohmann::json extra = {
      {"bits", 1.6}, // storage bits per ternary code (five per byte); see "bpw" for the total
      {"salient_pct", spec->salientPct},
      {"salient_cols", qtea::salientCount(w.cols, spec->salientPct)},
      {"deadzone", po.deadzone},
      {"decay", po.decay},
      {"damp", po.damp},
      {"order", allBk ? "salient+bunch-kaufman" : "salient+saliency"},
      {"hessian", identity == 0 ? "calibration" : identity == experts ? "identity" : "mixed"},
      {"proxy_loss", proxy},
      {"damp_retries", retries},
  };
  if (diagFallback)
    extra["chol_fallback"] = "diagonal";
  if (refSum > 0)
    extra["out_rel_err"] = std::sqrt(errSum / refSum);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ctx.writeFormatted(name, w, back, std::move(bytes), std::move(aux), "qtea", secs,
                     std::move(extra));
}

} // namespace

void qteaBlock(QuantizeContext &ctx, std::vector<std::unique_ptr<CalibrationSite>> &sites,
               const QteaPassOptions &o, int64_t /*block*/) {
  WeightHessians hw = hessiansByWeight(sites, [&](const std::string &w) { return ctx.pending(w); });
  for (const std::string &name : hw.order)
    quantizeQtea(ctx, name, hw.byWeight[name], o);
}

void qteaRemaining(QuantizeContext &ctx, const QteaPassOptions &o) {
  const std::vector<std::string> names(ctx.targets().begin(), ctx.targets().end());
  for (const std::string &name : names)
    if (ctx.pending(name))
      quantizeQtea(ctx, name, Hessians{}, o);
}

} // namespace llmc::quant
