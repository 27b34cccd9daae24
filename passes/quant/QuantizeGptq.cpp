//===- QuantizeGptq.cpp - llm-quantize method=gptq, one block -------------===//
// Every pending weight read by a calibration site of the block is quantized
// with GPTQ against that site's Hessian; a 3-D expert tensor slab by slab
// (experts that saw no calibration tokens fall back to RTN).
//===----------------------------------------------------------------------===//
#include "passes/quant/CalibrationSites.h"
#include "passes/quant/QuantizeContext.h"
#include <chrono>
#include <cmath>

namespace llmc::quant {

void gptqBlock(QuantizeContext &ctx, std::vector<std::unique_ptr<CalibrationSite>> &sites,
               bool actOrder, double damp) {
  // weight name -> expert (-1 for 2-D) -> Hessian
  std::map<std::string, std::map<int64_t, Eigen::MatrixXd>> hs;
  std::vector<std::string> order;
  for (auto &s : sites) {
    if (!s->hessian || s->hessian->tokens() == 0)
      continue;
    Eigen::MatrixXd h = s->hessian->hessian();
    for (const std::string &w : s->weights) {
      if (!ctx.pending(w))
        continue;
      if (!hs.count(w))
        order.push_back(w);
      hs[w][s->expert] = h;
    }
  }
  GptqOptions o;
  o.grid = ctx.spec();
  o.actOrder = actOrder;
  o.damp = damp;
  for (const std::string &name : order) {
    auto t0 = std::chrono::steady_clock::now();
    FloatWeight w = ctx.load(name);
    const auto &byExpert = hs[name];
    const bool slabs = w.shape.size() == 3;
    const int64_t experts = slabs ? w.shape[0] : 1, slabRows = w.rows / experts;
    QuantizedMatrix q;
    q.spec = ctx.spec();
    q.rows = w.rows;
    q.cols = w.cols;
    double errSum = 0, refSum = 0;
    std::vector<float> zeros(size_t(slabRows * w.cols), 0.0f);
    for (int64_t e = 0; e < experts; ++e) {
      const float *ws = w.data.data() + e * slabRows * w.cols;
      auto it = byExpert.find(slabs ? e : -1);
      QuantizedMatrix part = it != byExpert.end()
                                 ? gptqQuantize(ws, slabRows, w.cols, it->second, o)
                                 : rtnQuantize(ws, slabRows, w.cols, ctx.spec());
      if (it != byExpert.end()) {
        std::vector<float> back = part.dequantized();
        errSum += outputError(ws, back.data(), slabRows, w.cols, it->second);
        refSum += outputError(ws, zeros.data(), slabRows, w.cols, it->second);
      }
      q.codes.insert(q.codes.end(), part.codes.begin(), part.codes.end());
      q.grids.insert(q.grids.end(), part.grids.begin(), part.grids.end());
    }
    std::vector<float> back = q.dequantized();
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    nlohmann::json extra = {{"act_order", actOrder}, {"damp", damp}};
    if (refSum > 0)
      extra["out_rel_err"] = std::sqrt(errSum / refSum);
    ctx.writeQuantized(name, w, back, q.pack(), "gptq", secs, extra);
  }
}

} // namespace llmc::quant
