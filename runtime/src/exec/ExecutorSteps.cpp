//===- ExecutorSteps.cpp - Run an Executor's program: steps and blocks -----===//
// forward() runs the nodes in order over [T, width] activations (or the
// kernel plan, when it runs). An optional hook sees the input of every
// linear projection (calibration), and a forward can stop after a given
// block (attrs.block); blockInput() and forwardBlock() run the program
// block by block.
//===----------------------------------------------------------------------===//
#include "ExecutorImpl.h"

#include "Matmul.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace llmc {

using exec::Node;
using exec::Op;

void Executor::Impl::runAttention(const Node &n) {
  const std::vector<float> &xv = vals[size_t(n.in[0])];
  const int64_t T = valRows[size_t(n.in[0])], D = n.inWidth;
  const int64_t H = n.att.heads, hd = n.att.head_dim, KV = n.att.kv_heads;
  const int64_t qd = H * hd, kvd = KV * hd;
  sq.resize(size_t(T * qd));
  sk.resize(size_t(T * kvd));
  sv.resize(size_t(T * kvd));
  satt.resize(size_t(T * qd));
  const MatmulJob qkv[3] = {
      {&n.a, sq.data(), qd, n.qBias.empty() ? nullptr : n.qBias.data()},
      {&n.b, sk.data(), kvd, n.kBias.empty() ? nullptr : n.kBias.data()},
      {&n.c, sv.data(), kvd, n.vBias.empty() ? nullptr : n.vBias.data()}};
  observe(n, 0, xv.data(), T, D);
  matmulMany(pool, qkv, 3, xv.data(), T, D); // one parallel loop for all three

  kv::LayerCache &kc = caches[size_t(n.cache)];
  const int64_t p0 = pos;
  pool.parallelFor(0, T, 0, [&](int64_t lo, int64_t hi) {
    std::vector<float> cs(static_cast<size_t>(hd));
    for (int64_t t = lo; t < hi; ++t) {
      ops::applyRope(sq.data() + t * qd, H, hd, p0 + t, n.invFreq, n.rope, cs.data());
      ops::applyRope(sk.data() + t * kvd, KV, hd, p0 + t, n.invFreq, n.rope, cs.data());
    }
  });
  kc.append(sk.data(), sv.data(), T, kvd, p0);
  kc.attend(pool, sq.data(), T, satt.data());
  kc.afterStep(sq.data(), T, p0);
  observe(n, 1, satt.data(), T, qd);
  std::vector<float> &out = value(n.out, T, n.width);
  matmul(pool, n.d, satt.data(), T, qd, out.data(), n.width);
}

void Executor::Impl::runMlp(const Node &n) {
  const std::vector<float> &xv = vals[size_t(n.in[0])];
  const int64_t T = valRows[size_t(n.in[0])], D = n.inWidth, F = n.ffn;
  sg.resize(size_t(T * F));
  su.resize(size_t(T * F));
  // Gate and up in one loop; each row block gets its activation right away.
  const MatmulJob gateUp[2] = {{&n.a, sg.data(), F, nullptr}, {&n.b, su.data(), F, nullptr}};
  const RowEpilogue activate = [&](int64_t r0, int64_t nr) {
    for (int64_t t = 0; t < T; ++t)
      ops::gatedActivation(n.act, sg.data() + t * F + r0, su.data() + t * F + r0, nr);
  };
  observe(n, 0, xv.data(), T, D);
  matmulMany(pool, gateUp, 2, xv.data(), T, D, &activate);
  observe(n, 1, sg.data(), T, F);
  std::vector<float> &out = value(n.out, T, n.width);
  matmul(pool, n.c, sg.data(), T, F, out.data(), n.width);
}

void Executor::Impl::runMoe(const Node &n) {
  const std::vector<float> &xv = vals[size_t(n.in[0])];
  const int64_t T = valRows[size_t(n.in[0])], D = n.inWidth, F = n.ffn, E = n.moe.experts;
  const int64_t Dout = n.width;
  slogits.resize(size_t(T * E));
  observe(n, 0, xv.data(), T, D);
  matmul(pool, n.a, xv.data(), T, D, slogits.data(), E);

  std::vector<std::vector<std::pair<int64_t, float>>> routed(static_cast<size_t>(E));
  ops::RouteScratch scratch;
  std::vector<std::pair<int64_t, float>> chosen;
  for (int64_t t = 0; t < T; ++t) {
    ops::routeToken(n.moe, slogits.data() + t * E, scratch, chosen);
    for (const auto &[e, w] : chosen)
      routed[size_t(e)].push_back({t, w});
  }

  smoe.assign(size_t(T * Dout), 0.0f);
  for (int64_t e = 0; e < E; ++e) {
    const auto &list = routed[size_t(e)];
    if (list.empty())
      continue;
    const int64_t Te = int64_t(list.size());
    sx.resize(size_t(Te * D));
    for (int64_t i = 0; i < Te; ++i)
      std::copy(xv.data() + list[size_t(i)].first * D, xv.data() + (list[size_t(i)].first + 1) * D,
                sx.data() + i * D);
    sg.resize(size_t(Te * F));
    su.resize(size_t(Te * F));
    sy.resize(size_t(Te * Dout));
    const WeightMatrix *w = &n.experts[size_t(3 * e)]; // gate, up, down
    observe(n, 1, sx.data(), Te, D, e);
    matmul(pool, w[0], sx.data(), Te, D, sg.data(), F);
    matmul(pool, w[1], sx.data(), Te, D, su.data(), F);
    ops::gatedActivation(n.act, sg.data(), su.data(), Te * F);
    observe(n, 2, sg.data(), Te, F, e);
    matmul(pool, w[2], sg.data(), Te, F, sy.data(), Dout);
    for (int64_t i = 0; i < Te; ++i) {
      float wt = list[size_t(i)].second;
      float *o = smoe.data() + list[size_t(i)].first * Dout;
      const float *y = sy.data() + i * Dout;
      for (int64_t k = 0; k < Dout; ++k)
        o[k] += wt * y[k];
    }
  }
  std::vector<float> &out = value(n.out, T, Dout); // may alias the input: written last
  std::copy(smoe.begin(), smoe.end(), out.begin());
}

void Executor::Impl::run(const Node &n, const std::vector<int32_t> &tokens, bool allLogits) {
  switch (n.op) {
  case Op::Embed: {
    const int64_t T = int64_t(tokens.size());
    std::vector<float> &out = value(n.out, T, n.width);
    for (int64_t t = 0; t < T; ++t)
      loadRow(n.a, tokens[size_t(t)], out.data() + t * n.width);
    return;
  }
  case Op::RmsNorm:
  case Op::LayerNorm: {
    const int64_t R = valRows[size_t(n.in[0])];
    const float *x = vals[size_t(n.in[0])].data();
    std::vector<float> &out = value(n.out, R, n.width);
    if (n.op == Op::RmsNorm)
      ops::rmsNorm(x, n.vec0.data(), out.data(), R, n.width, n.eps);
    else
      ops::layerNorm(x, n.vec0.data(), n.vec1.empty() ? nullptr : n.vec1.data(), out.data(), R,
                     n.width, n.eps);
    return;
  }
  case Op::Add: {
    const int64_t R = valRows[size_t(n.in[0])];
    if (valRows[size_t(n.in[1])] != R)
      throw std::runtime_error(n.desc + ": inputs have different numbers of rows");
    // Copy inputs first: the output may alias an input id.
    sx.assign(vals[size_t(n.in[0])].begin(), vals[size_t(n.in[0])].end());
    const std::vector<float> &b = vals[size_t(n.in[1])];
    for (size_t i = 0; i < sx.size(); ++i)
      sx[i] += b[i];
    std::vector<float> &out = value(n.out, R, n.width);
    std::copy(sx.begin(), sx.end(), out.begin());
    return;
  }
  case Op::Attention:
    runAttention(n);
    return;
  case Op::Mlp:
    runMlp(n);
    return;
  case Op::Moe:
    runMoe(n);
    return;
  case Op::LmHead: {
    const int64_t R = valRows[size_t(n.in[0])];
    const bool lastOnly = !allLogits && n.out == output;
    const int64_t rows = lastOnly ? std::min<int64_t>(R, 1) : R;
    if (keepHidden && n.out == output)
      hidden.assign(vals[size_t(n.in[0])].begin(), vals[size_t(n.in[0])].begin() + R * n.inWidth);
    sx.assign(vals[size_t(n.in[0])].begin() + (R - rows) * n.inWidth, vals[size_t(n.in[0])].end());
    std::vector<float> &out = value(n.out, rows, n.width);
    matmul(pool, n.a, sx.data(), rows, n.inWidth, out.data(), n.width);
    return;
  }
  }
}

std::vector<float> Executor::forward(const std::vector<int32_t> &tokens, bool all_logits) {
  Impl &m = *impl;
  m.checkTokens(tokens, m.pos); // all of them, before any chunk runs
  const int64_t n = int64_t(tokens.size());
  const int64_t chunk = m.chunkFor(n);
  if (chunk >= n)
    return m.step(tokens, all_logits);
  std::vector<float> out;
  for (int64_t c0 = 0; c0 < n;) {
    // A one-token step would be taken for a decode step: a remainder of
    // one joins the chunk before it.
    const int64_t len = n - c0 == chunk + 1 ? chunk + 1 : std::min(chunk, n - c0);
    const std::vector<int32_t> part(tokens.begin() + c0, tokens.begin() + c0 + len);
    std::vector<float> logits = m.step(part, all_logits);
    c0 += len;
    if (all_logits)
      out.insert(out.end(), logits.begin(), logits.end());
    else if (c0 >= n)
      out = std::move(logits);
  }
  return out;
}

void Executor::Impl::checkTokens(const std::vector<int32_t> &tokens, int64_t pos) const {
  const Impl &m = *this;
  const int64_t n = int64_t(tokens.size());
  if (n == 0)
    throw std::runtime_error("Executor::forward: no tokens given");
  if (pos + n > m.maxCtx)
    throw std::runtime_error("Executor::forward: positions " + std::to_string(pos) + ".." +
                             std::to_string(pos + n - 1) + " exceed the maximum context of " +
                             std::to_string(m.maxCtx) + " tokens");
  for (const Node &node : m.nodes)
    if (node.op == Op::Embed)
      for (int32_t id : tokens)
        if (id < 0 || id >= node.a.rows)
          throw std::runtime_error("Executor::forward: token id " + std::to_string(id) +
                                   " is out of range [0, " + std::to_string(node.a.rows) + ")");
}

std::vector<float> Executor::Impl::step(const std::vector<int32_t> &tokens, bool all_logits) {
  Impl &m = *this;
  const int64_t n = int64_t(tokens.size());
  if (m.treeRows)
    throw std::runtime_error("Executor: a draft tree awaits acceptTreePath");
  if (m.plan) {
    m.plan->run(m.pool, m.caches, tokens, m.pos, all_logits, m.planLogits,
                m.keepHidden ? &m.hidden : nullptr);
    m.pos += n;
    return m.planLogits;
  }
  size_t end = m.nodes.size();
  if (m.stopAfterBlock >= 0) {
    end = 0;
    for (size_t i = 0; i < m.nodes.size(); ++i)
      if (m.nodes[i].block == m.stopAfterBlock)
        end = i + 1;
    if (end == 0)
      throw std::runtime_error("Executor::forward: stop_after_block " +
                               std::to_string(m.stopAfterBlock) + " names no block of " +
                               m.art.path());
  }
  for (size_t i = 0; i < end; ++i)
    m.run(m.nodes[i], tokens, all_logits);
  m.pos += n;
  if (end < m.nodes.size())
    return {};
  const std::vector<float> &out = m.vals[size_t(m.output)];
  const int64_t w = m.widths[size_t(m.output)], rows = m.valRows[size_t(m.output)];
  if (all_logits)
    return std::vector<float>(out.begin(), out.begin() + rows * w);
  return std::vector<float>(out.begin() + (rows - 1) * w, out.begin() + rows * w);
}

Executor::Impl::BlockSpan Executor::Impl::blockSpan(int64_t block) const {
  BlockSpan s;
  bool found = false;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].block != block)
      continue;
    if (found && i != s.last)
      throw std::runtime_error("block " + std::to_string(block) + " of " + art.path() +
                               " is not contiguous in the program");
    if (!found)
      s.first = i;
    found = true;
    s.last = i + 1;
  }
  if (!found)
    throw std::runtime_error("no block " + std::to_string(block) + " in " + art.path());
  auto inside = [&](int value) {
    for (size_t i = s.first; i < s.last; ++i)
      if (nodes[i].out == value)
        return true;
    return false;
  };
  for (size_t i = s.first; i < s.last; ++i)
    for (int v : nodes[i].in)
      if (!inside(v) && v != s.input) {
        if (s.input >= 0)
          throw std::runtime_error("block " + std::to_string(block) + " has several inputs");
        s.input = v;
      }
  for (size_t i = s.last; i < nodes.size(); ++i)
    for (int v : nodes[i].in)
      if (inside(v) && v != s.output) {
        if (s.output >= 0)
          throw std::runtime_error("block " + std::to_string(block) + " has several outputs");
        s.output = v;
      }
  if (s.output < 0 && inside(output))
    s.output = output;
  if (s.input < 0 || s.output < 0)
    throw std::runtime_error("block " + std::to_string(block) + " has no input or output");
  return s;
}

int64_t Executor::Impl::setBlockInput(const BlockSpan &span, const std::vector<float> &hidden,
                                      const char *who) {
  const int64_t w = widths[size_t(span.input)];
  if (hidden.empty() || int64_t(hidden.size()) % w != 0)
    throw std::runtime_error(std::string(who) + ": " + std::to_string(hidden.size()) +
                             " values are not whole rows of width " + std::to_string(w));
  const int64_t T = int64_t(hidden.size()) / w;
  if (pos + T > maxCtx)
    throw std::runtime_error(std::string(who) + ": positions beyond the maximum context of " +
                             std::to_string(maxCtx));
  std::vector<float> &in = value(span.input, T, w);
  std::copy(hidden.begin(), hidden.end(), in.begin());
  return T;
}

std::vector<float> Executor::blockInput(const std::vector<int32_t> &tokens, int64_t block) {
  Impl &m = *impl;
  if (tokens.empty() || int64_t(tokens.size()) > m.maxCtx)
    throw std::runtime_error("Executor::blockInput: " + std::to_string(tokens.size()) +
                             " tokens (1.." + std::to_string(m.maxCtx) + " allowed)");
  const Impl::BlockSpan span = m.blockSpan(block);
  for (size_t i = 0; i < span.first; ++i) {
    if (m.nodes[i].op == Op::Attention)
      throw std::runtime_error("Executor::blockInput: attention before block " +
                               std::to_string(block) + " (use forwardBlock block by block)");
    if (m.nodes[i].op == Op::Embed)
      for (int32_t id : tokens)
        if (id < 0 || id >= m.nodes[i].a.rows)
          throw std::runtime_error("Executor::blockInput: token id " + std::to_string(id) +
                                   " is out of range");
    m.run(m.nodes[i], tokens, false);
  }
  const int64_t rows = m.valRows[size_t(span.input)], w = m.widths[size_t(span.input)];
  const std::vector<float> &v = m.vals[size_t(span.input)];
  return std::vector<float>(v.begin(), v.begin() + rows * w);
}

std::vector<float> Executor::forwardBlock(int64_t block, const std::vector<float> &hidden) {
  Impl &m = *impl;
  const Impl::BlockSpan span = m.blockSpan(block);
  const int64_t T = m.setBlockInput(span, hidden, "Executor::forwardBlock");
  static const std::vector<int32_t> noTokens;
  for (size_t i = span.first; i < span.last; ++i)
    m.run(m.nodes[i], noTokens, true);
  m.pos += T;
  const int64_t rows = m.valRows[size_t(span.output)], ow = m.widths[size_t(span.output)];
  const std::vector<float> &v = m.vals[size_t(span.output)];
  return std::vector<float>(v.begin(), v.begin() + rows * ow);
}

std::vector<float> Executor::forwardFrom(int64_t block, const std::vector<float> &hidden,
                                         bool all_logits) {
  Impl &m = *impl;
  if (m.plan || m.treeRows)
    throw std::runtime_error("Executor::forwardFrom: the artifact runs a kernel plan (or a draft "
                             "tree awaits acceptTreePath); resuming runs the program's nodes");
  const Impl::BlockSpan span = m.blockSpan(block);
  for (size_t i = span.first; i < m.nodes.size(); ++i)
    for (int v : m.nodes[i].in) {
      bool later = v == span.input;
      for (size_t j = span.first; j < i && !later; ++j)
        later = m.nodes[j].out == v;
      if (!later)
        throw std::runtime_error("Executor::forwardFrom: " + m.nodes[i].desc +
                                 " reads a value from before block " + std::to_string(block));
    }
  const int64_t T = m.setBlockInput(span, hidden, "Executor::forwardFrom");
  static const std::vector<int32_t> noTokens;
  for (size_t i = span.first; i < m.nodes.size(); ++i)
    m.run(m.nodes[i], noTokens, all_logits);
  m.pos += T;
  const std::vector<float> &out = m.vals[size_t(m.output)];
  const int64_t ow = m.widths[size_t(m.output)], rows = m.valRows[size_t(m.output)];
  if (all_logits)
    return std::vector<float>(out.begin(), out.begin() + rows * ow);
  return std::vector<float>(out.begin() + (rows - 1) * ow, out.begin() + rows * ow);
}

int64_t Executor::blockOfWeight(const std::string &name) const {
  for (const exec::Node &n : impl->nodes)
    for (const exec::Node::Site &s : n.sites)
      if (std::find(s.weights.begin(), s.weights.end(), name) != s.weights.end())
        return n.block;
  return -1;
}

} // namespace llmc
