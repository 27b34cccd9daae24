//===- QuantizeAaac.cpp - llm-quantize method=aaac -------------------------===//
// Every pending weight read by a calibration site of the block is quantized
// with AAAC (compiler/quant/Aaac.h), the site's Hessian diagonal being the
// channel energies h; a 3-D expert tensor slab by slab (an expert that saw
// no calibration token, and every weight no site reads, uses h = 1). The
// codebooks of each slab go to the weight's side data, back to back. The
// output error against the site's full Hessian is reported like GPTQ's.
//===----------------------------------------------------------------------===//
#include "compiler/quant/Aaac.h"
#include "passes/quant/FamilyMethods.h"
#include "llmc/format/aaac.h"

#include <chrono>
#include <cmath>
#include <map>
#include <stdexcept>

namespace llmc::quant {
namespace {

using Hessians = std::map<int64_t, Eigen::MatrixXd>; // expert (-1: 2-D) -> H

void quantizeAaac(QuantizeContext &ctx, const std::string &name, const Hessians &hs,
                  const AaacPassOptions &po) {
  auto t0 = std::chrono::steady_clock::now();
  const auto spec = aaacSpec(ctx.format());
  if (!spec)
    throw std::runtime_error("aaac: the pass's format is not an aaac type");
  FloatWeight w = ctx.load(name);
  const bool slabs = w.shape.size() == 3;
  const int64_t experts = slabs ? w.shape[0] : 1, slabRows = w.rows / experts;
  AaacOptions o;
  o.bits = spec->bits;
  o.group = spec->group;
  o.iters = po.iters;

  std::vector<uint8_t> bytes, aux;
  std::vector<float> back;
  back.reserve(w.data.size());
  double errSum = 0, refSum = 0, init = 0, fin = 0, shareB = 0, used = 0;
  int maxIters = 0;
  for (int64_t e = 0; e < experts; ++e) {
    const float *ws = w.data.data() + e * slabRows * w.cols;
    auto it = hs.find(slabs ? e : -1);
    const Eigen::MatrixXd *H = it == hs.end() ? nullptr : &it->second;
    std::vector<double> h;
    if (H) {
      h.resize(size_t(w.cols));
      for (int64_t j = 0; j < w.cols; ++j)
        h[size_t(j)] = (*H)(j, j);
    }
    AaacMatrix m;
    try {
      m = aaacQuantize(ws, slabRows, w.cols, H ? h.data() : nullptr, o);
    } catch (const std::exception &ex) {
      throw std::runtime_error("weight '" + name + "'" +
                               (slabs ? " expert " + std::to_string(e) : std::string()) + ": " +
                               ex.what());
    }
    std::vector<float> deq = m.dequantized();
    if (H) {
      const OutputErrorTerms t = sampledOutputError(ws, deq.data(), slabRows, w.cols, *H);
      errSum += t.err;
      refSum += t.ref;
    }
    std::vector<uint8_t> rows = m.pack(), books = m.packCodebooks();
    bytes.insert(bytes.end(), rows.begin(), rows.end());
    aux.insert(aux.end(), books.begin(), books.end());
    back.insert(back.end(), deq.begin(), deq.end());
    init += m.initialError / double(experts);
    fin += m.finalError / double(experts);
    shareB += m.shareB / double(experts);
    used += m.entriesUsed / double(experts);
    maxIters = std::max(maxIters, m.iters);
  }
  nlohmann::json extra = {{"iters", maxIters},
                          {"iters_max", po.iters},
                          {"codebook_b_share", shareB},
                          {"codebook_entries_used", used},
                          {"weighted_err_initial", std::sqrt(init)},
                          {"weighted_err", std::sqrt(fin)},
                          {"activation_weighted", !hs.empty()}};
  if (refSum > 0)
    extra["out_rel_err"] = std::sqrt(errSum / refSum);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ctx.writeFormatted(name, w, back, std::move(bytes), std::move(aux), "aaac", secs,
                     std::move(extra));
}

} // namespace

void aaacBlock(QuantizeContext &ctx, std::vector<std::unique_ptr<CalibrationSite>> &sites,
               const AaacPassOptions &o, int64_t) {
  WeightHessians hw = hessiansByWeight(sites, [&](const std::string &w) { return ctx.pending(w); });
  for (const std::string &name : hw.order)
    quantizeAaac(ctx, name, hw.byWeight[name], o);
}

void aaacRemaining(QuantizeContext &ctx, const AaacPassOptions &o) {
  std::vector<std::string> rest;
  for (const std::string &name : ctx.targets())
    if (ctx.pending(name))
      rest.push_back(name);
  for (const std::string &name : rest)
    quantizeAaac(ctx, name, {}, o);
}

} // namespace llmc::quant
