//===- RepairSpans.cpp - Least-squares repair after a depth cut ----------===//
#include "passes/prune/RepairSpans.h"
#include "compiler/weights/InMemoryModel.h"
#include "llmc/executor.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cstring>
#include <map>
#include <stdexcept>

namespace llmc::prune {
namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// The normal equations of one span, summed over calibration tokens.
struct SpanSums {
  Eigen::MatrixXd mtm, mtd; // M^T M, M^T (Y - R)
  double dd = 0, cut = 0, energy = 0; // |Y - R|^2, |Y - S|^2, |Y|^2
};

RowMatrix downWeight(const WeightStore &store, const std::string &name, int64_t width) {
  const WeightStore::Entry *e = store.find(name);
  if (!e || e->shape.size() != 2 || e->shape[0] != width)
    throw std::runtime_error("repair: " + name + " is not a [" + std::to_string(width) +
                             ", n] down projection");
  RowMatrix w(e->shape[0], e->shape[1]);
  WeightStore::dequantizeRows(*e, 0, e->shape[0], w.data());
  return w;
}

/// The hook's capture: each selected block's down-projection input.
struct DownInputs {
  std::map<int64_t, std::vector<float>> x;
  std::map<int64_t, std::string> weight;
  std::map<int64_t, int64_t> cols;
};

void accumulate(const SpanRepair &s, const std::vector<std::vector<float>> &states,
                const DownInputs &in, const RowMatrix &w, int64_t T, int64_t d, SpanSums &sum) {
  const auto &x = in.x.at(s.before);
  const Eigen::Map<const RowMatrix> X(x.data(), T, in.cols.at(s.before));
  const RowMatrix M = X * w.transpose(); // [T, d]: the MLP's write
  const Eigen::Map<const RowMatrix> S(states[size_t(s.before + 1)].data(), T, d);
  const Eigen::Map<const RowMatrix> Y(states[size_t(s.last + 1)].data(), T, d);
  const RowMatrix D = Y - (S - M); // what the MLP write should have been
  const Eigen::MatrixXd Md = M.cast<double>(), Dd = D.cast<double>();
  sum.mtm.noalias() += Md.transpose() * Md;
  sum.mtd.noalias() += Md.transpose() * Dd;
  sum.dd += Dd.squaredNorm();
  sum.cut += (Y - S).cast<double>().squaredNorm();
  sum.energy += Y.cast<double>().squaredNorm();
}

} // namespace

std::vector<SpanRepair> repairableSpans(const std::vector<int64_t> &removed) {
  std::vector<SpanRepair> out;
  for (size_t i = 0; i < removed.size();) {
    size_t j = i;
    while (j + 1 < removed.size() && removed[j + 1] == removed[j] + 1)
      ++j;
    if (removed[i] > 0) {
      SpanRepair s;
      s.before = removed[i] - 1;
      s.first = removed[i];
      s.last = removed[j];
      out.push_back(s);
    }
    i = j + 1;
  }
  return out;
}

void repairSpans(mlir::ModuleOp module, WeightStore &store, int64_t blocks,
                 std::vector<SpanRepair> &spans, const std::string &calibPath, int64_t tokens,
                 int64_t seqLen, double lambda, CalibrationUse &use) {
  if (spans.empty())
    return;
  const std::vector<int32_t> ids = calibrationIds(store, calibPath, tokens, use);
  std::unique_ptr<Artifact> art = buildInMemoryArtifact(module, store);
  DownInputs in;
  std::map<int64_t, bool> wanted;
  for (const SpanRepair &s : spans)
    wanted[s.before] = true;
  ExecutorOptions o;
  o.engine = Engine::Reference; // block-by-block runs, the hook
  o.max_context = std::min<int64_t>(seqLen, int64_t(ids.size()));
  o.linear_input_hook = [&](const LinearInput &li) {
    if (!wanted.count(li.block) || !li.roles ||
        std::find(li.roles->begin(), li.roles->end(), "down") == li.roles->end())
      return;
    if (li.expert >= 0)
      throw std::runtime_error("repair: block " + std::to_string(li.block) +
                               " is a mixture of experts (not supported)");
    in.x[li.block].assign(li.x, li.x + li.rows * li.cols);
    in.cols[li.block] = li.cols;
    in.weight[li.block] = (*li.weights)[0];
  };
  Executor ex(*art, o);
  std::vector<SpanSums> sums(spans.size());
  std::vector<RowMatrix> weights(spans.size());
  std::vector<std::vector<float>> states(size_t(blocks + 1));
  int64_t d = 0;
  for (size_t at = 0; at < ids.size(); at += size_t(seqLen)) {
    const std::vector<int32_t> seq(ids.begin() + long(at),
                                   ids.begin() + long(std::min(ids.size(), at + size_t(seqLen))));
    const int64_t T = int64_t(seq.size());
    ex.reset();
    states[0] = ex.blockInput(seq, 0);
    d = int64_t(states[0].size()) / T;
    in.x.clear();
    for (int64_t l = 0; l < blocks; ++l) {
      ex.reset(); // each block's cache starts at position 0
      states[size_t(l + 1)] = ex.forwardBlock(l, states[size_t(l)]);
    }
    for (size_t k = 0; k < spans.size(); ++k) {
      SpanRepair &s = spans[k];
      if (!in.x.count(s.before))
        throw std::runtime_error("repair: block " + std::to_string(s.before) +
                                 " has no down projection");
      if (weights[k].size() == 0) {
        s.weight = in.weight.at(s.before);
        weights[k] = downWeight(store, s.weight, d);
        sums[k].mtm = Eigen::MatrixXd::Zero(d, d);
        sums[k].mtd = Eigen::MatrixXd::Zero(d, d);
      }
      accumulate(s, states, in, weights[k], T, d, sums[k]);
    }
    use.tokens += T;
    ++use.sequences;
  }
  for (size_t k = 0; k < spans.size(); ++k) {
    SpanSums &m = sums[k];
    const double mu = lambda * std::max(m.mtm.trace() / double(d), 1e-30);
    const Eigen::MatrixXd I = Eigen::MatrixXd::Identity(d, d);
    const Eigen::MatrixXd T = (m.mtm + mu * I).ldlt().solve(m.mtd + mu * I);
    const double fit = (T.transpose() * m.mtm * T).trace() - 2.0 * (T.transpose() * m.mtd).trace() +
                       m.dd;
    spans[k].errorCut = m.energy > 0 ? m.cut / m.energy : 0;
    spans[k].errorRepaired = m.energy > 0 ? std::max(fit, 0.0) / m.energy : 0;
    const RowMatrix folded = T.transpose().cast<float>() * weights[k]; // W' = T^T W
    std::vector<uint8_t> bytes(size_t(folded.size()) * sizeof(float));
    std::memcpy(bytes.data(), folded.data(), bytes.size());
    const WeightStore::Entry *e = store.find(spans[k].weight);
    nlohmann::json info = {{"transform", "prune-depth repair"},
                           {"removed", {spans[k].first, spans[k].last}},
                           {"from", std::string(dtypeName(e->dtype))},
                           {"lambda", lambda},
                           {"calibration_tokens", use.tokens}};
    store.replace(spans[k].weight, DType::F32, e->shape, std::move(bytes), info);
  }
}

} // namespace llmc::prune
