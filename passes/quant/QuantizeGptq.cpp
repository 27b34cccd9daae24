//===- QuantizeGptq.cpp - llm-quantize method=gptq, one block -------------===//
// Every pending weight read by a calibration site of the block is quantized
// with GPTQ against that site's Hessian; a 3-D expert tensor slab by slab
// (experts that saw no calibration tokens fall back to RTN). The Hessian's
// factor is computed once per site (q/k/v share one, gate/up another), its
// inverse on the machine's cores, then all the block's matrices are
// quantized at once, one per core: each result is computed the same way on
// any number of threads.
//===----------------------------------------------------------------------===//
#include "passes/quant/CalibrationSites.h"
#include "passes/quant/QuantizeContext.h"

namespace llmc::quant {

namespace {

/// One site's H and its GPTQ factor.
struct SiteFactor {
  Eigen::MatrixXd h;
  GptqFactor factor;
};

} // namespace

void gptqBlock(QuantizeContext &ctx, std::vector<std::unique_ptr<CalibrationSite>> &sites,
               const GptqOptions &gptq) {
  GptqOptions o = gptq;
  o.grid = ctx.spec();
  const SitesByWeight s = sitesByWeight(sites, [&](const std::string &w) { return ctx.pending(w); });
  const std::vector<const CalibrationSite *> &used = s.used;
  std::vector<SiteFactor> factors(used.size());
  for (size_t i = 0; i < used.size(); ++i) { // each factor's inverse runs on every core
    factors[i].h = used[i]->hessian->hessian();
    factors[i].factor = gptqFactor(factors[i].h, o);
  }
  ctx.quantizeSlabsParallel(
      s.order, "gptq",
      [&](const std::string &name, int64_t expert, const float *w, int64_t rows,
          int64_t cols) -> QuantizeContext::SlabResult {
        const std::map<int64_t, size_t> &bySite = s.siteOf.at(name);
        auto it = bySite.find(expert);
        if (it == bySite.end())
          return std::nullopt;
        const SiteFactor &sf = factors[it->second];
        return std::make_pair(gptqQuantize(w, rows, cols, sf.factor, o), &sf.h);
      },
      {{"act_order", o.actOrder}, {"static_groups", o.staticGroups}, {"damp", o.damp}});
}

} // namespace llmc::quant
