//===- QuantizeOsaq.h - llm-quantize method=osaq, one block -----*- C++ -*-===//
// OSAQ needs two calibration splits per input site: split A finds the
// Hessian null space, split B confirms it and bounds the output change.
// Split choice: each site's token stream (the rows its hook calls deliver,
// in order) is cut into spans of 32 tokens; even spans go to A, odd spans to
// B. This works with a single calibration sequence (calib-tokens <=
// calib-seq) and keeps neighbouring, strongly correlated tokens together.
// GPTQ itself then uses the Hessian of all tokens (the SiteCollector's).
//===----------------------------------------------------------------------===//
#pragma once
#include "compiler/quant/Osaq.h"
#include "passes/quant/CalibrationSites.h"
#include <map>
#include <memory>
#include <string>
#include <tuple>

namespace llmc::quant {

/// Split-A / split-B Hessians per input site, keyed like SiteCollector.
class OsaqSplitCollector {
public:
  static constexpr int64_t kSpan = 32;
  struct Split {
    explicit Split(int64_t cols) : a(cols), b(cols) {}
    HessianAccumulator a, b;
    int64_t seen = 0; // tokens so far (their span decides the split)
  };
  void operator()(const LinearInput &in);
  const Split *find(const CalibrationSite &site) const;

private:
  std::map<std::tuple<int, std::string, int64_t>, std::unique_ptr<Split>> splits_;
};

class QuantizeContext;
/// OSAQ (null-space absorption, then GPTQ against the full Hessian) for every
/// pending weight the block's sites read.
void osaqBlock(QuantizeContext &ctx, std::vector<std::unique_ptr<CalibrationSite>> &sites,
               const OsaqSplitCollector &splits, const OsaqOptions &opts,
               const GptqOptions &gptq, int64_t block);

} // namespace llmc::quant
