//===- MedusaFit.cpp - Medusa heads in closed form ------------------------===//
#include "passes/spec/MedusaFit.h"

#include <Eigen/Dense>
#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>

namespace llmc::spec {
namespace {

using DMatrix = Eigen::MatrixXd;

/// Rows [h_t, e(x_{t+k}), 1] and h_{t+k} of every sequence, t + k < T.
void pairs(const std::vector<HiddenSequence> &seqs, int64_t k, DMatrix &x, DMatrix &y) {
  int64_t n = 0, D = 0;
  for (const HiddenSequence &s : seqs) {
    n += std::max<int64_t>(0, s.hidden.rows() - k);
    D = s.hidden.cols();
  }
  x.resize(n, 2 * D + 1);
  y.resize(n, D);
  int64_t r = 0;
  for (const HiddenSequence &s : seqs)
    for (int64_t t = 0; t + k < s.hidden.rows(); ++t, ++r) {
      x.row(r).head(D) = s.hidden.row(t).cast<double>();
      x.row(r).segment(D, D) = s.embedding.row(t + k).cast<double>();
      x(r, 2 * D) = 1.0;
      y.row(r) = s.hidden.row(t + k).cast<double>();
    }
}

double meanSquaredError(const DMatrix &pred, const DMatrix &y) {
  return pred.rows() ? (pred - y).squaredNorm() / double(pred.rows()) : 0.0;
}

/// Head `h` on rows [h_t, e_t]: y [n, D].
RowMatrix applyHead(const MedusaHead &h, const RowMatrix &hidden, const RowMatrix &emb) {
  const int64_t D = hidden.cols();
  RowMatrix y = hidden * h.w.leftCols(D).transpose() + emb * h.w.rightCols(D).transpose();
  y.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(h.b.data(), int64_t(h.b.size()));
  return y;
}

} // namespace

std::vector<MedusaHead> fitMedusaHeads(const std::vector<HiddenSequence> &train,
                                       const std::vector<HiddenSequence> &held, int64_t heads,
                                       double ridge) {
  std::vector<MedusaHead> out;
  for (int64_t k = 1; k <= heads; ++k) {
    DMatrix x, y, hx, hy;
    pairs(train, k, x, y);
    pairs(held, k, hx, hy);
    const int64_t D = y.cols(), F = x.cols();
    if (x.rows() < F)
      throw std::invalid_argument("head " + std::to_string(k) + ": " + std::to_string(x.rows()) +
                                  " training rows for " + std::to_string(F) +
                                  " unknowns (raise calib-tokens)");
    if (hx.rows() == 0)
      throw std::invalid_argument("head " + std::to_string(k) + ": no held-out rows (raise "
                                  "calib-tokens or holdout, or use fewer heads)");
    const DMatrix gram = x.transpose() * x;
    const DMatrix rhs = x.transpose() * y;
    const double meanEig = gram.diagonal().head(F - 1).sum() / double(F - 1);
    MedusaHead best;
    double bestMse = -1;
    for (double scale : {0.1, 1.0, 10.0}) {
      DMatrix g = gram;
      const double lambda = ridge * scale * meanEig;
      g.diagonal().head(F - 1).array() += lambda; // the bias is not shrunk
      const DMatrix a = g.ldlt().solve(rhs);     // [F, D]: y = x a
      const double mse = meanSquaredError(hx * a, hy);
      if (bestMse >= 0 && mse >= bestMse)
        continue;
      bestMse = mse;
      best.w = a.topRows(F - 1).transpose().cast<float>();
      best.b.assign(size_t(D), 0.0f);
      for (int64_t i = 0; i < D; ++i)
        best.b[size_t(i)] = float(a(F - 1, i));
      best.lambda = lambda;
    }
    best.heldMse = bestMse;
    best.heldMseCopy = meanSquaredError(hx.leftCols(D), hy);
    best.trainRows = x.rows();
    out.push_back(std::move(best));
  }
  return out;
}

std::vector<int32_t> draftVocabulary(const std::vector<HiddenSequence> &seqs, int64_t size) {
  std::map<int32_t, int64_t> count;
  for (const HiddenSequence &s : seqs)
    for (int32_t t : s.tokens)
      ++count[t];
  std::vector<std::pair<int64_t, int32_t>> byCount;
  for (const auto &[id, c] : count)
    byCount.push_back({-c, id});
  std::sort(byCount.begin(), byCount.end());
  std::vector<int32_t> ids;
  for (size_t i = 0; i < byCount.size() && int64_t(i) < size; ++i)
    ids.push_back(byCount[i].second);
  std::sort(ids.begin(), ids.end());
  return ids;
}

HeadAgreement measureAgreement(const std::vector<HiddenSequence> &held,
                               const std::vector<MedusaHead> &heads, const ArgmaxFn &model,
                               const ArgmaxFn &draft, const std::vector<int32_t> &vocab,
                               const std::function<void(int32_t, float *)> &embed) {
  const int64_t K = int64_t(heads.size());
  HeadAgreement a;
  a.top1.assign(size_t(K), 0.0);
  std::vector<double> trials(size_t(K), 0.0), hits(size_t(K), 0.0);
  int64_t covered = 0, choices = 0;
  std::vector<int32_t> choice, d;
  for (const HiddenSequence &s : held) {
    const int64_t T = s.hidden.rows(), D = s.hidden.cols(), P = T - K;
    if (P <= 0)
      continue;
    model(s.hidden.data(), T, choice); // choice[t]: the model's token t+1
    for (int32_t c : choice)
      covered += std::binary_search(vocab.begin(), vocab.end(), c);
    choices += T;
    // Teacher forced: head k on [h_t, e(x_{t+k})] against choice[t+k].
    for (int64_t k = 0; k < K; ++k) {
      RowMatrix y = applyHead(heads[size_t(k)], s.hidden.topRows(P), s.embedding.middleRows(k + 1, P));
      draft(y.data(), P, d);
      for (int64_t t = 0; t < P; ++t)
        a.top1[size_t(k)] += d[size_t(t)] == choice[size_t(t + k + 1)];
    }
    // As decoding runs: head 1 fed the model's choice, head k the draft of k-1.
    std::vector<std::vector<int32_t>> chainDraft(static_cast<size_t>(K));
    std::vector<int32_t> fed(choice.begin(), choice.begin() + P);
    RowMatrix emb(P, D);
    for (int64_t k = 0; k < K; ++k) {
      for (int64_t t = 0; t < P; ++t)
        embed(fed[size_t(t)], emb.row(t).data());
      RowMatrix y = applyHead(heads[size_t(k)], s.hidden.topRows(P), emb);
      draft(y.data(), P, chainDraft[size_t(k)]);
      fed = chainDraft[size_t(k)];
    }
    for (int64_t t = 0; t < P; ++t)
      for (int64_t k = 0; k < K; ++k) {
        // h_{t+k+1}'s context is a decode's only while the text is the model's.
        if (s.tokens[size_t(t + k + 1)] != choice[size_t(t + k)])
          break;
        trials[size_t(k)] += 1;
        if (chainDraft[size_t(k)][size_t(t)] != choice[size_t(t + k + 1)])
          break;
        hits[size_t(k)] += 1;
      }
    a.positions += P;
  }
  a.vocabCoverage = choices ? double(covered) / double(choices) : 0.0;
  a.chain.assign(size_t(K), 0.0);
  a.meanAccepted = 1.0;
  double reach = 1.0;
  for (int64_t k = 0; k < K; ++k) {
    if (a.positions)
      a.top1[size_t(k)] /= double(a.positions);
    reach *= trials[size_t(k)] > 0 ? hits[size_t(k)] / trials[size_t(k)] : 0.0;
    a.chain[size_t(k)] = reach;
    a.meanAccepted += reach;
  }
  return a;
}

} // namespace llmc::spec
