//===- DepthScores.h - Which decoder blocks depth pruning removes -*- C++ -*-===//
// The numerics of llm-prune-depth, plain C++ with Eigen (no MLIR, so unit
// tests link it alone). Every method scores blocks and picks k to remove
// among the removable range [first, last) (keep-first / keep-last protect
// the ends):
//  - magnitude (forward-free): the block's mean per-parameter RMS weight;
//    the k lowest go.
//  - WRP (forward-free, our reading of its abstract; see
//    ../shared/methods/depth_pruning.md): each block's residual-stream
//    writers W_O [D, H*hd] and W_D [D, F] (rows: residual dims, the one
//    basis layers share) give rotation-invariant signatures, the Gram
//    matrices W W^T (or, cheaper, the row energies diag(W W^T)); the
//    CKA-style cosine of signatures gives S(l, m) = (S_A + S_M) / 2. The
//    relative write scale s_l = (|W_O|_F + |W_D|_F) / mean over blocks.
//    [first, last) is cut into (last - first - k) contiguous groups that
//    maximize the sum of their mean within-group similarity (dynamic
//    programming; a single block's group scores 0). In a group, a block's
//    redundancy is R_l = mean_{m in group, m != l} S(l, m) * s_l^-gamma;
//    each group keeps its least redundant block and loses the others.
//  - Block Influence (ShortGPT, activations): BI_l = 1 - mean over tokens
//    of cos(x_l, x_{l+1}), x_l the residual stream entering block l; the k
//    lowest go.
//  - angular distance (Gromov et al., activations): for runs of n = k
//    consecutive blocks, d_l = mean over tokens of arccos(cos(x_l,
//    x_{l+n})) / pi; the run with the smallest d goes.
//===----------------------------------------------------------------------===//
#pragma once
#include <Eigen/Dense>
#include <cstdint>
#include <vector>

namespace llmc::prune {

/// A block's writers into the residual stream, f32, rows = residual dims:
/// the attention output projection and the MLP down projection (a MoE
/// block: one per expert, their signatures summed).
struct BlockWriters {
  Eigen::MatrixXf wo;
  std::vector<Eigen::MatrixXf> wd;
};

enum class Signature { Gram, RowEnergy };

struct WrpAnalysis {
  Eigen::MatrixXd similarity; // S(l, m), L x L, symmetric, S(l, l) = 1
  std::vector<double> scale;  // s_l, mean 1
};

/// Pairwise similarity and relative scale of every block. Throws
/// std::invalid_argument when blocks disagree on D or are fewer than 1.
WrpAnalysis analyzeWrp(const std::vector<BlockWriters> &blocks, Signature signature);

/// [first, last) cut into `groups` contiguous segments (1 <= groups <=
/// last - first) maximizing the sum over segments of the mean similarity
/// of their distinct pairs (0 for one block). Returns each segment's
/// first block, ascending (the first is `first`).
std::vector<int64_t> segmentBlocks(const Eigen::MatrixXd &similarity, int64_t first,
                                   int64_t last, int64_t groups);

struct WrpChoice {
  std::vector<int64_t> removed;    // ascending
  std::vector<int64_t> groupStart; // the segments of [first, last)
  std::vector<double> redundancy;  // R_l per block (0 outside [first, last) and for singletons)
};

/// WRP's choice of k blocks in [first, last) (0 <= k < last - first).
WrpChoice chooseWrp(const WrpAnalysis &a, int64_t first, int64_t last, int64_t k, double gamma);

/// The k blocks in [first, last) with the lowest scores (ties: the lower
/// index first), ascending.
std::vector<int64_t> lowestScores(const std::vector<double> &score, int64_t first, int64_t last,
                                  int64_t k);

/// Cosines between residual streams over calibration tokens: the means
/// Block Influence (x_l, x_{l+1}) and angular distance (x_l, x_{l+span})
/// need, accumulated one sequence at a time.
class ResidualCosines {
public:
  ResidualCosines(int64_t blocks, int64_t span);
  /// `states`: blocks + 1 residual streams of one sequence, x_0 (block 0's
  /// input) to x_L (the last block's output), each [tokens, width]
  /// row-major. Throws std::invalid_argument on a size mismatch.
  void add(const std::vector<std::vector<float>> &states, int64_t tokens, int64_t width);
  int64_t tokens() const { return tokens_; }
  /// BI_l for every block.
  std::vector<double> blockInfluence() const;
  /// d_l for every run start l in [0, blocks - span] (blocks - span + 1 values).
  std::vector<double> angularDistance() const;

private:
  int64_t blocks_, span_, tokens_ = 0;
  std::vector<double> nextCos_, spanAngle_;
};

/// The run start in [first, last - n] with the smallest distance (n
/// blocks from there removed); -1 when no run fits.
int64_t bestRun(const std::vector<double> &distance, int64_t first, int64_t last, int64_t n);

} // namespace llmc::prune
