//===- KvPolicy.h - A layer's KV-cache policy, as the artifact records it -*- C++ -*-===//
// The `kv_policy` object the llm-kv-policy pass attaches to an attention
// node (docs/design.md, "KV-cache policies"), parsed and checked once when
// the executor is built. The runtime owns what the policy means: which
// entries a layer keeps after the prompt (prefill), which it evicts while
// generating (decode), and how kept entries are stored (kv_quant).
//===----------------------------------------------------------------------===//
#pragma once
#include "llmc/ir_enums.h"
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace llmc::kv {

// The policies (Full: keep everything; Streaming: sinks + most recent; H2O:
// cumulative attention + recent; SnapKV: window-query attention, pooled;
// PyramidKV: SnapKV scoring, budgets decreasing with depth; DepthKV: SnapKV
// scoring, calibrated per-layer budgets; RestKV: exact output change of
// removing a token, EMA over the window; LaProx: output-aware column-row
// importance across the layer's heads; CapKV: ridge leverage of whitened keys
// x window relevance; RdKV: per-entry bit widths by reverse water-filling
// (KvRdkv.h); InertiaKV: EMA of per-step attention while decoding, lazy
// refresh; Random: a seeded uniform draw over every entry), when they run
// and how entries are stored: one definition each in
// dialects/llm/IR/LlmEnums.td (llmc/ir_enums.h).
using Method = KvMethod;
using Hook = KvMode;
using KvQuant = ::llmc::KvQuant;

struct Policy {
  Method method = Method::Full;
  std::string name = "full";
  double budget = 0;         // ratio of the prompt (0: use budget_tokens); rdkv: of its fp16 bits
  int64_t budget_tokens = 0; // entries per (layer, KV head), window included
  int64_t window = 32, sink = 4;
  double layer_scale = 1.0;
  std::vector<double> head_scale; // per KV head (empty: uniform)
  Hook mode = Hook::Prefill;
  int64_t refresh = 16;
  int64_t score_every = 1; // InertiaKV-Lazy: fold attention into the EMA every this many steps
  int64_t pool = 7;
  KvQuant quant = KvQuant::None;
  uint64_t seed = 0;

  bool full() const { return method == Method::Full; }
  bool prefill() const { return !full() && mode != Hook::Decode; }
  bool decode() const { return !full() && mode != Hook::Prefill; }
  /// Methods that keep running attention statistics of every query (H2O's
  /// column sums, InertiaKV's EMA).
  bool accumulates() const { return method == Method::H2O || method == Method::InertiaKV; }
  /// Methods that score entries with the last `window` queries (SnapKV's
  /// family, ReST-KV, LaProx, CapKV, RDKV): only they keep those queries.
  bool usesWindowQueries() const {
    return method != Method::Full && method != Method::Streaming && method != Method::H2O &&
           method != Method::InertiaKV && method != Method::Random;
  }
};

/// Parse and check a node's kv_policy object; `ctx` names the node in
/// errors (std::runtime_error). kv_heads checks head_scale's length.
Policy parsePolicy(const nlohmann::json &j, const std::string &ctx, int64_t kv_heads);

/// Entries one KV head keeps out of `len` when the prompt had `prompt_len`
/// entries: window + (C - window) * layer_scale * head_scale, at least the
/// window plus one and at most len.
int64_t headBudget(const Policy &p, int64_t prompt_len, int64_t len, int64_t kv_head);

} // namespace llmc::kv
