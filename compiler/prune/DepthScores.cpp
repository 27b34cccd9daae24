//===- DepthScores.cpp - Block scores and choices of llm-prune-depth -----===//
#include "compiler/prune/DepthScores.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

namespace llmc::prune {
namespace {

/// One writer family's signature of a block: the Gram matrix W W^T summed
/// over its matrices, or its diagonal (row energies) as a D x 1 matrix.
Eigen::MatrixXf signatureOf(const std::vector<const Eigen::MatrixXf *> &ws, Signature sig,
                            int64_t D) {
  Eigen::MatrixXf g = Eigen::MatrixXf::Zero(D, sig == Signature::Gram ? D : 1);
  for (const Eigen::MatrixXf *w : ws) {
    if (sig == Signature::Gram)
      g.selfadjointView<Eigen::Lower>().rankUpdate(*w);
    else
      g.col(0) += w->rowwise().squaredNorm();
  }
  if (sig == Signature::Gram) // rankUpdate fills the lower triangle
    g.triangularView<Eigen::StrictlyUpper>() = g.transpose();
  return g;
}

double frobenius(const std::vector<const Eigen::MatrixXf *> &ws) {
  double s = 0;
  for (const Eigen::MatrixXf *w : ws)
    s += double(w->squaredNorm());
  return std::sqrt(s);
}

/// Cosine of two signatures in the Frobenius inner product (0 if either is 0).
double cosine(const Eigen::MatrixXf &a, const Eigen::MatrixXf &b) {
  const double na = a.norm(), nb = b.norm();
  if (na == 0 || nb == 0)
    return 0;
  return double(a.cwiseProduct(b).sum()) / (na * nb);
}

} // namespace

WrpAnalysis analyzeWrp(const std::vector<BlockWriters> &blocks, Signature sig) {
  const int64_t L = int64_t(blocks.size());
  if (L < 1)
    throw std::invalid_argument("WRP: no blocks");
  const int64_t D = blocks[0].wo.rows();
  std::vector<Eigen::MatrixXf> sigA, sigM;
  std::vector<double> writeSize(static_cast<size_t>(L));
  for (int64_t l = 0; l < L; ++l) {
    const BlockWriters &b = blocks[size_t(l)];
    if (b.wo.rows() != D || b.wd.empty())
      throw std::invalid_argument("WRP: block " + std::to_string(l) +
                                  " has no down projection or another residual width");
    std::vector<const Eigen::MatrixXf *> down;
    for (const Eigen::MatrixXf &w : b.wd) {
      if (w.rows() != D)
        throw std::invalid_argument("WRP: block " + std::to_string(l) +
                                    ": a down projection's rows are not the residual width");
      down.push_back(&w);
    }
    sigA.push_back(signatureOf({&b.wo}, sig, D));
    sigM.push_back(signatureOf(down, sig, D));
    writeSize[size_t(l)] = frobenius({&b.wo}) + frobenius(down);
  }
  WrpAnalysis a;
  a.similarity = Eigen::MatrixXd::Identity(L, L);
  for (int64_t l = 0; l < L; ++l)
    for (int64_t m = l + 1; m < L; ++m)
      a.similarity(l, m) = a.similarity(m, l) =
          0.5 * (cosine(sigA[size_t(l)], sigA[size_t(m)]) + cosine(sigM[size_t(l)], sigM[size_t(m)]));
  const double mean = std::accumulate(writeSize.begin(), writeSize.end(), 0.0) / double(L);
  for (double s : writeSize)
    a.scale.push_back(mean > 0 ? s / mean : 1.0);
  return a;
}

std::vector<int64_t> segmentBlocks(const Eigen::MatrixXd &S, int64_t first, int64_t last,
                                   int64_t groups) {
  const int64_t n = last - first;
  if (first < 0 || last > S.rows() || groups < 1 || groups > n)
    throw std::invalid_argument("segmentBlocks: " + std::to_string(groups) + " groups of [" +
                                std::to_string(first) + ", " + std::to_string(last) + ")");
  // value(i, j): mean similarity of the distinct pairs in [i, j), i < j (local indices).
  Eigen::MatrixXd value = Eigen::MatrixXd::Zero(n + 1, n + 1);
  for (int64_t i = 0; i < n; ++i) {
    double pairs = 0;
    for (int64_t j = i + 1; j < n; ++j) {
      for (int64_t a = i; a < j; ++a)
        pairs += S(first + a, first + j);
      const double count = double(j - i + 1) * double(j - i) / 2;
      value(i, j + 1) = pairs / count;
    }
  }
  const double none = -std::numeric_limits<double>::infinity();
  // best(g, j): the best sum for [0, j) in g groups; from(g, j) its last cut.
  Eigen::MatrixXd best = Eigen::MatrixXd::Constant(groups + 1, n + 1, none);
  Eigen::MatrixXi from = Eigen::MatrixXi::Zero(groups + 1, n + 1);
  best(0, 0) = 0;
  for (int64_t g = 1; g <= groups; ++g)
    for (int64_t j = g; j <= n - (groups - g); ++j)
      for (int64_t i = g - 1; i < j; ++i) {
        if (best(g - 1, i) == none)
          continue;
        const double v = best(g - 1, i) + value(i, j);
        if (v > best(g, j)) {
          best(g, j) = v;
          from(g, j) = int(i);
        }
      }
  std::vector<int64_t> starts(static_cast<size_t>(groups));
  int64_t j = n;
  for (int64_t g = groups; g >= 1; --g) {
    j = from(g, j);
    starts[size_t(g - 1)] = first + j;
  }
  return starts;
}

WrpChoice chooseWrp(const WrpAnalysis &a, int64_t first, int64_t last, int64_t k, double gamma) {
  const int64_t L = a.similarity.rows();
  if (first < 0 || last > L || k < 0 || k >= last - first)
    throw std::invalid_argument("WRP: cannot remove " + std::to_string(k) + " of blocks [" +
                                std::to_string(first) + ", " + std::to_string(last) + ")");
  WrpChoice c;
  c.redundancy.assign(size_t(L), 0.0);
  c.groupStart = segmentBlocks(a.similarity, first, last, (last - first) - k);
  for (size_t g = 0; g < c.groupStart.size(); ++g) {
    const int64_t lo = c.groupStart[g];
    const int64_t hi = g + 1 < c.groupStart.size() ? c.groupStart[g + 1] : last;
    if (hi - lo < 2)
      continue;
    int64_t keep = lo;
    for (int64_t l = lo; l < hi; ++l) {
      double s = 0;
      for (int64_t m = lo; m < hi; ++m)
        if (m != l)
          s += a.similarity(l, m);
      c.redundancy[size_t(l)] =
          s / double(hi - lo - 1) * std::pow(std::max(a.scale[size_t(l)], 1e-12), -gamma);
      if (c.redundancy[size_t(l)] < c.redundancy[size_t(keep)])
        keep = l;
    }
    for (int64_t l = lo; l < hi; ++l)
      if (l != keep)
        c.removed.push_back(l);
  }
  return c;
}

std::vector<int64_t> lowestScores(const std::vector<double> &score, int64_t first, int64_t last,
                                  int64_t k) {
  if (first < 0 || last > int64_t(score.size()) || k < 0 || k > last - first)
    throw std::invalid_argument("cannot remove " + std::to_string(k) + " of blocks [" +
                                std::to_string(first) + ", " + std::to_string(last) + ")");
  std::vector<int64_t> idx(size_t(last - first));
  std::iota(idx.begin(), idx.end(), first);
  std::stable_sort(idx.begin(), idx.end(),
                   [&](int64_t x, int64_t y) { return score[size_t(x)] < score[size_t(y)]; });
  idx.resize(size_t(k));
  std::sort(idx.begin(), idx.end());
  return idx;
}

ResidualCosines::ResidualCosines(int64_t blocks, int64_t span)
    : blocks_(blocks), span_(span), nextCos_(size_t(std::max<int64_t>(blocks, 0)), 0.0),
      spanAngle_(size_t(std::max<int64_t>(blocks - span + 1, 0)), 0.0) {
  if (blocks < 1 || span < 1 || span > blocks)
    throw std::invalid_argument("ResidualCosines: span " + std::to_string(span) + " of " +
                                std::to_string(blocks) + " blocks");
}

namespace {
double rowCosine(const float *a, const float *b, int64_t n) {
  double ab = 0, aa = 0, bb = 0;
  for (int64_t i = 0; i < n; ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  if (aa == 0 || bb == 0)
    return aa == bb ? 1.0 : 0.0;
  return std::clamp(ab / std::sqrt(aa * bb), -1.0, 1.0);
}
} // namespace

void ResidualCosines::add(const std::vector<std::vector<float>> &states, int64_t T, int64_t W) {
  if (int64_t(states.size()) != blocks_ + 1 || T < 1 || W < 1)
    throw std::invalid_argument("ResidualCosines: " + std::to_string(states.size()) +
                                " states for " + std::to_string(blocks_) + " blocks");
  for (const auto &s : states)
    if (int64_t(s.size()) != T * W)
      throw std::invalid_argument("ResidualCosines: a state is not [tokens, width]");
  const double invPi = 1.0 / std::acos(-1.0);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t l = 0; l < blocks_; ++l)
      nextCos_[size_t(l)] +=
          rowCosine(states[size_t(l)].data() + t * W, states[size_t(l + 1)].data() + t * W, W);
    for (size_t l = 0; l < spanAngle_.size(); ++l)
      spanAngle_[l] += std::acos(rowCosine(states[l].data() + t * W,
                                           states[l + size_t(span_)].data() + t * W, W)) *
                       invPi;
  }
  tokens_ += T;
}

std::vector<double> ResidualCosines::blockInfluence() const {
  std::vector<double> bi;
  for (double c : nextCos_)
    bi.push_back(tokens_ ? 1.0 - c / double(tokens_) : 0.0);
  return bi;
}

std::vector<double> ResidualCosines::angularDistance() const {
  std::vector<double> d;
  for (double a : spanAngle_)
    d.push_back(tokens_ ? a / double(tokens_) : 0.0);
  return d;
}

int64_t bestRun(const std::vector<double> &distance, int64_t first, int64_t last, int64_t n) {
  int64_t best = -1;
  for (int64_t l = first; l + n <= last && l < int64_t(distance.size()); ++l)
    if (best < 0 || distance[size_t(l)] < distance[size_t(best)])
      best = l;
  return best;
}

} // namespace llmc::prune
