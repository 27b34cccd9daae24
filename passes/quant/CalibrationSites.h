//===- CalibrationSites.h - Statistics per linear input site ---*- C++ -*-===//
// One site per distinct input x of one or more linears in a block (q/k/v
// share one, gate/up share one; MoE experts get one per expert): its GPTQ
// Hessian and/or its AWQ activation sample, filled from the Executor's hook.
//===----------------------------------------------------------------------===//
#pragma once
#include "compiler/quant/Awq.h"
#include "compiler/quant/Gptq.h"
#include "llmc/executor.h"
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace llmc::quant {

struct CalibrationSite {
  int node = -1;
  int64_t expert = -1;
  std::vector<std::string> roles, weights;
  int64_t cols = 0;
  std::unique_ptr<HessianAccumulator> hessian; // GPTQ
  std::unique_ptr<ActivationSample> sample;    // AWQ
  int64_t tokens = 0;                          // rows seen through the hook

};

/// Collects sites from hook calls, in first-seen (program) order.
class SiteCollector {
public:
  SiteCollector(bool wantHessian, int64_t sampleCap)
      : wantHessian_(wantHessian), sampleCap_(sampleCap) {}

  void operator()(const LinearInput &in) {
    auto key = std::make_tuple(in.node, in.roles->front(), in.expert);
    auto it = index_.find(key);
    if (it == index_.end()) {
      auto s = std::make_unique<CalibrationSite>();
      s->node = in.node;
      s->expert = in.expert;
      s->roles = *in.roles;
      s->weights = *in.weights;
      s->cols = in.cols;
      if (wantHessian_)
        s->hessian = std::make_unique<HessianAccumulator>(in.cols);
      if (sampleCap_ > 0)
        s->sample = std::make_unique<ActivationSample>(in.cols, sampleCap_);
      it = index_.emplace(key, sites_.size()).first;
      sites_.push_back(std::move(s));
    }
    CalibrationSite &s = *sites_[it->second];
    s.tokens += in.rows;
    if (s.hessian)
      s.hessian->add(in.x, in.rows);
    if (s.sample)
      s.sample->add(in.x, in.rows);
  }

  std::vector<std::unique_ptr<CalibrationSite>> &sites() { return sites_; }

private:
  bool wantHessian_;
  int64_t sampleCap_;
  std::map<std::tuple<int, std::string, int64_t>, size_t> index_;
  std::vector<std::unique_ptr<CalibrationSite>> sites_;
};

/// The sites with a Hessian of some data that read a weight `pending`
/// accepts, and for each such weight (in first-seen, program, order) the
/// index into `used` of its site per expert (-1 for a 2-D weight).
struct SitesByWeight {
  std::vector<const CalibrationSite *> used;
  std::map<std::string, std::map<int64_t, size_t>> siteOf;
  std::vector<std::string> order;
};
template <typename Pending>
SitesByWeight sitesByWeight(const std::vector<std::unique_ptr<CalibrationSite>> &sites,
                            Pending pending) {
  SitesByWeight out;
  for (const auto &s : sites) {
    if (!s->hessian || s->hessian->tokens() == 0)
      continue;
    bool wanted = false;
    for (const std::string &w : s->weights) {
      if (!pending(w))
        continue;
      if (!out.siteOf.count(w))
        out.order.push_back(w);
      out.siteOf[w][s->expert] = out.used.size();
      wanted = true;
    }
    if (wanted)
      out.used.push_back(s.get());
  }
  return out;
}

/// The Hessians of the weights the sites read, for the weights `pending`
/// accepts: weight -> expert (-1 for a 2-D weight) -> H, and the weights in
/// first-seen (program) order. Sites without data are skipped.
struct WeightHessians {
  std::map<std::string, std::map<int64_t, Eigen::MatrixXd>> byWeight;
  std::vector<std::string> order;
};
template <typename Pending>
WeightHessians hessiansByWeight(const std::vector<std::unique_ptr<CalibrationSite>> &sites,
                                Pending pending) {
  const SitesByWeight s = sitesByWeight(sites, pending);
  std::vector<Eigen::MatrixXd> h;
  for (const CalibrationSite *site : s.used)
    h.push_back(site->hessian->hessian());
  WeightHessians out;
  out.order = s.order;
  for (const auto &[w, byExpert] : s.siteOf)
    for (const auto &[expert, i] : byExpert)
      out.byWeight[w][expert] = h[i];
  return out;
}

class QuantizeContext;
/// Quantize every pending weight the sites of one block read, with GPTQ
/// (`gptq`'s options; its grid is the context's spec).
void gptqBlock(QuantizeContext &ctx, std::vector<std::unique_ptr<CalibrationSite>> &sites,
               const GptqOptions &gptq);
/// AWQ for one block: scale search + folding, clip search, RTN.
void awqBlock(QuantizeContext &ctx, std::vector<std::unique_ptr<CalibrationSite>> &sites,
              int64_t block);

} // namespace llmc::quant
