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
               const GptqOptions &gptq) {
  WeightHessians hw = hessiansByWeight(sites, [&](const std::string &w) { return ctx.pending(w); });
  auto &hs = hw.byWeight;
  const std::vector<std::string> &order = hw.order;
  GptqOptions o = gptq;
  o.grid = ctx.spec();
  for (const std::string &name : order) {
    const auto &byExpert = hs[name];
    ctx.quantizeSlabs(
        name, "gptq",
        [&](int64_t expert, const float *w, int64_t rows, int64_t cols)
            -> std::optional<std::pair<QuantizedMatrix, const Eigen::MatrixXd *>> {
          auto it = byExpert.find(expert);
          if (it == byExpert.end())
            return std::nullopt;
          return std::make_pair(gptqQuantize(w, rows, cols, it->second, o), &it->second);
        },
        {{"act_order", o.actOrder}, {"static_groups", o.staticGroups}, {"damp", o.damp}});
  }
}

} // namespace llmc::quant
