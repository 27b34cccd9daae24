//===- QuantizeOsaq.cpp - llm-quantize method=osaq, one block -------------===//
// Per site: the stable null space of its split-A/B Hessians (once, shared by
// q/k/v and by gate/up), one stderr line with its spectrum; per weight:
// absorption (compiler/quant/Osaq.h) then GPTQ against the site's full
// Hessian, slab by slab for 3-D expert tensors (experts without tokens fall
// back to RTN). The manifest records method "osaq", the null-space rank and
// the relative output change of ΔW on split B.
//===----------------------------------------------------------------------===//
#include "passes/quant/QuantizeOsaq.h"
#include "passes/quant/QuantizeContext.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"
#include <algorithm>
#include <chrono>
#include <cmath>

namespace llmc::quant {

void OsaqSplitCollector::operator()(const LinearInput &in) {
  auto key = std::make_tuple(in.node, in.roles->front(), in.expert);
  auto &slot = splits_[key];
  if (!slot)
    slot = std::make_unique<Split>(in.cols);
  if (slot->a.cols() != in.cols)
    return; // a site never changes width; ignore anything inconsistent
  for (int64_t r = 0; r < in.rows;) {
    const int64_t t = slot->seen + r, span = t / kSpan;
    const int64_t len = std::min(in.rows - r, (span + 1) * kSpan - t);
    (span % 2 == 0 ? slot->a : slot->b).add(in.x + r * in.cols, len);
    r += len;
  }
  slot->seen += in.rows;
}

const OsaqSplitCollector::Split *OsaqSplitCollector::find(const CalibrationSite &site) const {
  if (site.roles.empty())
    return nullptr;
  auto it = splits_.find(std::make_tuple(site.node, site.roles.front(), site.expert));
  return it == splits_.end() ? nullptr : it->second.get();
}

namespace {

struct SiteState {
  Eigen::MatrixXd h, hB;
  OsaqNullSpace ns;
};

std::string joined(const std::vector<std::string> &v) {
  std::string s;
  for (const auto &x : v)
    s += (s.empty() ? "" : ",") + x;
  return s;
}

} // namespace

void osaqBlock(QuantizeContext &ctx, std::vector<std::unique_ptr<CalibrationSite>> &sites,
               const OsaqSplitCollector &splits, const OsaqOptions &opts,
               const GptqOptions &gptq, int64_t block) {
  // weight name -> expert (-1 for 2-D) -> its site's state
  std::vector<std::unique_ptr<SiteState>> states;
  std::map<std::string, std::map<int64_t, const SiteState *>> byWeight;
  std::vector<std::string> order;
  for (auto &s : sites) {
    if (!s->hessian || s->hessian->tokens() == 0)
      continue;
    if (!llvm::any_of(s->weights, [&](const std::string &w) { return ctx.pending(w); }))
      continue;
    auto st = std::make_unique<SiteState>();
    st->h = s->hessian->hessian();
    const OsaqSplitCollector::Split *sp = splits.find(*s);
    // With fewer split-A tokens than inputs, H_A is singular for lack of
    // data: most of its "null space" is unseen, not flat, directions.
    const bool enough = sp && double(sp->a.tokens()) >= opts.minTokensPerInput * double(s->cols);
    if (sp && sp->a.tokens() > 0 && sp->b.tokens() > 0 && enough) {
      st->hB = sp->b.hessian();
      st->ns = osaqNullSpace(sp->a.hessian(), st->hB, opts);
    } else {
      st->hB = st->h; // one split only: nothing can be confirmed, r = 0
      st->ns.basis.resize(s->cols, 0);
    }
    if (s->expert < 0 && enough) {
      ProgressLog os(ctx.module());
      os << llvm::format(
          "[llmc] osaq block %lld %-16s n=%-5lld tokens A/B %lld/%lld: eig(H_A)/mean diag "
          "min %.2e p1 %.2e p10 %.2e p50 %.2e; null candidates %lld, stable rank %lld",
          (long long)block, joined(s->roles).c_str(), (long long)s->cols,
          (long long)(sp ? sp->a.tokens() : 0), (long long)(sp ? sp->b.tokens() : 0),
          st->ns.relMin, st->ns.relP1, st->ns.relP10, st->ns.relP50,
          (long long)st->ns.candidates, (long long)st->ns.rank());
      // Candidates / stable directions at other thresholds, to choose osaq-eps.
      os << "; candidates/stable at eps";
      for (size_t d = 0; d < st->ns.kDecadeEps.size(); ++d)
        os << llvm::format(" %.0e: %lld/%lld", st->ns.kDecadeEps[d],
                           (long long)st->ns.candidatesAt[d], (long long)st->ns.stableAt[d]);
      os << "\n";
    }
    if (s->expert < 0 && !enough)
      ProgressLog(ctx.module()) << llvm::format("[llmc] osaq block %lld %s: split A has fewer than %.2f x %lld "
                                   "tokens, null space not trusted (r = 0, plain GPTQ)\n",
                                   (long long)block, joined(s->roles).c_str(),
                                   opts.minTokensPerInput, (long long)s->cols);
    for (const std::string &w : s->weights) {
      if (!ctx.pending(w))
        continue;
      if (!byWeight.count(w))
        order.push_back(w);
      byWeight[w][s->expert] = st.get();
    }
    states.push_back(std::move(st));
  }

  GptqOptions g = gptq;
  g.grid = ctx.spec();
  for (const std::string &name : order) {
    const auto &byExpert = byWeight[name];
    double changeB = 0, rangeBefore = 0, rangeAfter = 0, minStep = 1;
    int64_t maxRank = 0, candidates = 0, solved = 0;
    auto slab = [&](int64_t expert, const float *w, int64_t rows, int64_t cols)
        -> std::optional<std::pair<QuantizedMatrix, const Eigen::MatrixXd *>> {
      auto it = byExpert.find(expert);
      if (it == byExpert.end())
        return std::nullopt;
      const SiteState &st = *it->second;
      OsaqResult res = osaqQuantize(w, rows, cols, st.h, st.ns, st.hB, opts, g);
      maxRank = std::max(maxRank, res.rank);
      candidates = std::max(candidates, st.ns.candidates);
      changeB = std::max(changeB, res.absorbed.relChangeB);
      minStep = std::min(minStep, res.absorbed.step);
      rangeBefore += res.absorbed.rangeBefore;
      rangeAfter += res.absorbed.rangeAfter;
      ++solved;
      return std::make_pair(std::move(res.quantized), &st.h);
    };
    ctx.quantizeSlabs(name, "osaq", slab,
                      {{"act_order", g.actOrder},
                       {"static_groups", g.staticGroups},
                       {"damp", g.damp},
                       {"osaq_eps", opts.eps},
                       {"osaq_temp", opts.temp}},
                      [&](nlohmann::json &extra) {
                        extra["osaq_rank"] = maxRank;
                        extra["osaq_null_candidates"] = candidates;
                        extra["osaq_rel_change_b"] = changeB;
                        if (solved > 0) {
                          extra["osaq_range_before"] = rangeBefore / double(solved);
                          extra["osaq_range_after"] = rangeAfter / double(solved);
                        }
                      });
    // What the absorption did to this weight (nothing to say with r = 0).
    if (maxRank > 0 && rangeBefore > 0)
      ProgressLog(ctx.module()) << llvm::format(
          "[llmc] osaq %-28s r=%-3lld group range %.4g -> %.4g (%+.2f%%), step %.3g, "
          "output change on split B %.2e\n",
          name.c_str(), (long long)maxRank, rangeBefore / double(solved),
          rangeAfter / double(solved), 100.0 * (rangeAfter / rangeBefore - 1.0), minStep, changeB);
  }
}

} // namespace llmc::quant
