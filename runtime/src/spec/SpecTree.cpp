//===- SpecTree.cpp - Draft trees: drafting, verification, acceptance -----===//
// A chain of drafts dies at its first wrong token; a tree keeps several
// candidates for the positions the drafter is unsure of, so the target's
// choice is more often among them. One target pass scores every node
// (Executor::verifyTree: each row sees only its own path), the verdict
// walks down from the root taking at each node the child the verification
// rule keeps, and the caches keep that path (Executor::acceptTreePath).
//===----------------------------------------------------------------------===//
#include "SpecTree.h"

#include "../kernels/attention_f32.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace llmc::spec {

namespace {
/// Candidates of one depth whose children the next head scores (one
/// product of this many rows per depth).
constexpr int kTreeExpand = 2;
} // namespace

DraftTree DraftTree::chain(const std::vector<int32_t> &tokens) {
  DraftTree t;
  t.token = tokens;
  t.parent.resize(tokens.size());
  std::iota(t.parent.begin(), t.parent.end(), -1);
  return t;
}

DraftTree ngramTree(const std::vector<int32_t> &context, int max_nodes, int max_depth, int max_n,
                    int min_n) {
  DraftTree t;
  const int64_t L = int64_t(context.size());
  if (max_nodes <= 0 || max_depth <= 0 || min_n <= 0)
    return t;
  auto full = [&] { return int64_t(t.size()) >= max_nodes; };
  auto childOf = [&](int32_t parent, int32_t token) {
    for (size_t i = 0; i < t.size(); ++i)
      if (t.parent[i] == parent && t.token[i] == token)
        return int32_t(i);
    return int32_t(-1);
  };
  for (int64_t n = std::min<int64_t>(max_n, L - 1); n >= min_n && !full(); --n)
    for (int64_t s = L - n - 1; s >= 0 && !full(); --s) {
      if (!std::equal(context.begin() + s, context.begin() + s + n, context.end() - n))
        continue;
      int32_t at = -1; // the continuation's path, merged into the tree
      for (int64_t k = s + n; k < std::min<int64_t>(L, s + n + max_depth) && !full(); ++k) {
        int32_t c = childOf(at, context[size_t(k)]);
        if (c < 0) {
          t.token.push_back(context[size_t(k)]);
          t.parent.push_back(at);
          c = int32_t(t.size() - 1);
        }
        at = c;
      }
    }
  return t;
}

int verifyCandidates(Sampler &sampler, const float *row, int64_t vocab, const int32_t *cand,
                     int m, int32_t &next) {
  // Greedy (or no finite logit, where sample() is greedy too): the
  // candidate equal to the target's choice.
  auto greedyVerdict = [&]() {
    next = sampler.sample(row, vocab);
    const int i = int(std::find(cand, cand + m, next) - cand);
    return i < m ? i : -1;
  };
  if (sampler.greedy())
    return greedyVerdict();
  thread_local std::vector<int32_t> ids;
  thread_local std::vector<double> w;
  const double total = sampler.distribution(row, vocab, ids, w);
  if (ids.empty())
    return greedyVerdict();
  auto tried = [&](int32_t id, int upTo) {
    for (int i = 0; i < upTo; ++i)
      if (cand[i] == id)
        return true;
    return false;
  };
  double rest = total; // the mass of the tokens not yet rejected
  for (int i = 0; i < m; ++i) {
    if (tried(cand[i], i))
      continue; // a repeated candidate was rejected already
    double pd = 0;
    for (size_t j = 0; j < ids.size(); ++j)
      if (ids[j] == cand[i])
        pd = w[j];
    if (sampler.uniform01() * rest < pd)
      return i;
    rest -= pd;
  }
  double r = sampler.uniform01() * rest;
  size_t last = ids.size();
  for (size_t j = 0; j < ids.size(); ++j) {
    if (w[j] <= 0 || tried(ids[j], m))
      continue;
    last = j;
    r -= w[j];
    if (r < 0) {
      next = ids[j];
      return -1;
    }
  }
  // Rounding left r >= 0: the last untried token with mass (the candidates
  // cannot have held all of it, or one would have been kept).
  next = last < ids.size() ? ids[last] : cand[0];
  return -1;
}

DraftTree MedusaDrafter::draftTree(const std::vector<int32_t> &context, int max_nodes,
                                   int max_depth, const float *hidden) {
  DraftTree tree;
  const int depthCap = int(std::min<int64_t>(heads_, max_depth));
  if (max_nodes <= 0 || depthCap <= 0 || !hidden || context.empty())
    return tree;
  // Candidates, depth by depth: head d scores the children of the few
  // likeliest candidates of depth d (all in one product: the draft
  // vocabulary's rows are read once per depth), each child keyed by the
  // log of its path's product of draft probabilities. Then the max_nodes
  // likeliest candidates of all depths form the tree: a child is never
  // likelier than its parent (ties: the shallower first), so every chosen
  // candidate's parent is chosen before it.
  struct Candidate {
    double logp;
    int32_t parent; // candidate index, -1: the context's last token
    int32_t token;
    int depth;
  };
  std::vector<Candidate> cand;
  const int64_t V = int64_t(vocab_.size());
  const size_t perNode = size_t(std::min<int64_t>(max_nodes, V));
  const size_t widest = size_t(std::min(kTreeExpand, max_nodes));
  std::vector<int32_t> frontier{-1}, fed{context.back()}, order(static_cast<size_t>(V));
  std::vector<float> shifted;
  for (int depth = 0; depth < depthCap && !frontier.empty(); ++depth) {
    headLogits(depth, hidden, fed.data(), int64_t(frontier.size()));
    const size_t first = cand.size();
    for (size_t r = 0; r < frontier.size(); ++r) {
      const float *row = logits_.data() + int64_t(r) * V;
      const float top = *std::max_element(row, row + V);
      shifted.resize(size_t(V));
      for (int64_t j = 0; j < V; ++j)
        shifted[size_t(j)] = row[j] - top;
      kernels::expRow(shifted.data(), shifted.data(), V); // the vectorized exp
      double z = 0;
      for (float e : shifted)
        z += double(e);
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + std::ptrdiff_t(perNode), order.end(),
                        [&](int32_t a, int32_t b) {
                          return row[a] > row[b] || (row[a] == row[b] && a < b);
                        });
      const double base = frontier[r] < 0 ? 0.0 : cand[size_t(frontier[r])].logp;
      for (size_t i = 0; i < perNode; ++i)
        cand.push_back({base + double(row[order[i]] - top) - std::log(z), frontier[r],
                        vocab_[size_t(order[i])], depth + 1});
    }
    // The next depth's parents: this depth's likeliest candidates.
    std::vector<int32_t> fresh(cand.size() - first);
    std::iota(fresh.begin(), fresh.end(), int32_t(first));
    const size_t keep = std::min(widest, fresh.size());
    std::partial_sort(fresh.begin(), fresh.begin() + std::ptrdiff_t(keep), fresh.end(),
                      [&](int32_t a, int32_t b) {
                        return cand[size_t(a)].logp > cand[size_t(b)].logp ||
                               (cand[size_t(a)].logp == cand[size_t(b)].logp && a < b);
                      });
    frontier.assign(fresh.begin(), fresh.begin() + std::ptrdiff_t(keep));
    fed.clear();
    for (int32_t c : frontier)
      fed.push_back(cand[size_t(c)].token);
  }
  std::vector<int32_t> best(cand.size());
  std::iota(best.begin(), best.end(), 0);
  std::sort(best.begin(), best.end(), [&](int32_t a, int32_t b) {
    const Candidate &x = cand[size_t(a)], &y = cand[size_t(b)];
    return x.logp > y.logp || (x.logp == y.logp && (x.depth < y.depth || (x.depth == y.depth && a < b)));
  });
  std::vector<int32_t> nodeOf(cand.size(), -1);
  for (int32_t c : best) {
    if (tree.size() == size_t(max_nodes) ||
        (minConfidence_ > 0 && std::exp(cand[size_t(c)].logp) < minConfidence_))
      break;
    const int32_t parent = cand[size_t(c)].parent;
    if (parent >= 0 && nodeOf[size_t(parent)] < 0)
      continue; // (its parent was not chosen: a tie the order above rules out)
    nodeOf[size_t(c)] = int32_t(tree.size());
    tree.token.push_back(cand[size_t(c)].token);
    tree.parent.push_back(parent < 0 ? -1 : nodeOf[size_t(parent)]);
  }
  return tree;
}

namespace {

/// The verdict on one verified tree (rows: 0 the token fed, node i row i +
/// 1): the rows kept (from 0), whether the caller must stop (a stop token
/// or emit refused), and the token to go on with.
struct TreeVerdict {
  std::vector<int32_t> path{0};
  bool stopped = false;
  int32_t next = -1;
};

TreeVerdict walkTree(const DraftTree &tree, const std::vector<float> &logits, int64_t vocab,
                     Sampler &sampler, const std::function<bool(int32_t)> &accept) {
  // Each row's children, in the drafter's order (node order keeps it).
  std::vector<std::vector<int32_t>> kids(tree.size() + 1);
  for (size_t i = 0; i < tree.size(); ++i)
    kids[size_t(tree.parent[i] + 1)].push_back(int32_t(i + 1));
  TreeVerdict v;
  std::vector<int32_t> cand;
  for (int32_t row = 0;;) {
    const float *dist = logits.data() + int64_t(row) * vocab;
    const std::vector<int32_t> &children = kids[size_t(row)];
    if (children.empty()) { // the whole path kept: the target's own token after it
      v.next = sampler.sample(dist, vocab);
      return v;
    }
    cand.clear();
    for (int32_t c : children)
      cand.push_back(tree.token[size_t(c - 1)]);
    int32_t instead = -1;
    const int k = verifyCandidates(sampler, dist, vocab, cand.data(), int(cand.size()), instead);
    if (k < 0) {
      v.next = instead;
      return v;
    }
    if (!accept(cand[size_t(k)])) {
      v.stopped = true;
      return v;
    }
    row = children[size_t(k)];
    v.path.push_back(row);
  }
}

} // namespace

int64_t generateTree(Executor &exec, Drafter &drafter, std::vector<int32_t> context,
                     std::vector<float> logits, int64_t n, const std::vector<int32_t> &stops,
                     const SpecOptions &opts, Sampler &sampler,
                     const std::function<bool(int32_t)> &emit, SpecStats &stats) {
  const int64_t width = exec.hiddenSize(), vocab = exec.vocabSize();
  // The hidden row whose logits chose `next` (as in the chain's loop).
  int64_t hiddenRow = promptHiddenRow(exec, drafter);
  Emission out{n, stops, emit, context};
  int32_t next = sampler.sample(logits.data(), vocab);
  while (out.more()) {
    if (!out.take(next) || !out.more())
      break;
    // Nodes past the room are not scored: a tree's rows take cache room
    // even where its depth is small.
    const int64_t room = out.room(exec);
    const auto t0 = std::chrono::steady_clock::now();
    const float *hidden = hiddenRow >= 0 ? exec.hidden().data() + hiddenRow * width : nullptr;
    const DraftTree tree =
        room > 0 ? drafter.draftTree(context, int(std::min<int64_t>(opts.tree_nodes, room)),
                                     int(std::min<int64_t>(std::max(1, opts.max_draft), room)),
                                     hidden)
                 : DraftTree();
    stats.draft_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::vector<int32_t> tokens{next}, parent{-1};
    for (size_t i = 0; i < tree.size(); ++i) {
      tokens.push_back(tree.token[i]);
      parent.push_back(tree.parent[i] + 1);
    }
    if (tree.size() == 0) {
      logits = exec.forward(tokens);
      next = sampler.sample(logits.data(), vocab);
      hiddenRow = hiddenRow >= 0 ? 0 : -1;
      continue;
    }
    logits = exec.verifyTree(tokens, parent);
    ++stats.passes;
    stats.drafted += int64_t(tree.size());
    for (size_t i = 0; i < tree.size(); ++i)
      if (tree.parent[i] != int32_t(i) - 1) { // not a chain: it branches
        ++stats.tree_passes;
        break;
      }
    const TreeVerdict v =
        walkTree(tree, logits, vocab, sampler, [&](int32_t t) { return out.take(t); });
    exec.acceptTreePath(v.path); // before stopping too: the executor stays usable
    stats.accepted += int64_t(v.path.size()) - 1;
    if (v.stopped)
      break;
    hiddenRow = hiddenRow >= 0 ? int64_t(v.path.back()) : -1;
    next = v.next;
  }
  return out.emitted;
}

} // namespace llmc::spec
