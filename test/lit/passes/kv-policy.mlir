// RUN: llmc-opt %s --pass-pipeline='builtin.module(llm-kv-policy{method=snapkv budget=0.1})' | FileCheck %s --check-prefix=SNAP
// RUN: llmc-opt %s --pass-pipeline='builtin.module(llm-kv-policy{method=pyramidkv budget=25%})' | FileCheck %s --check-prefix=PYR
// RUN: llmc-opt %s --pass-pipeline='builtin.module(llm-kv-policy{method=restkv budget=512 layers=pyramid window=16 sink=0 pool=5 kv-quant=polykv seed=3})' | FileCheck %s --check-prefix=TOK
// RUN: llmc-opt %s --pass-pipeline='builtin.module(llm-kv-policy{method=h2o budget=0.5 only-layers=0,2})' | FileCheck %s --check-prefix=ONLY
// RUN: llmc-opt %s --pass-pipeline='builtin.module(llm-kv-policy{method=random budget=0.2 refresh=8})' | FileCheck %s --check-prefix=RAND
// RUN: llmc-opt %s --pass-pipeline='builtin.module(llm-kv-policy{method=random budget=0.2 refresh=8},llm-kv-policy{method=inertiakv budget=1.0 mode=both})' | FileCheck %s --check-prefix=MODE
// RUN: llmc-opt %s --pass-pipeline='builtin.module(llm-kv-policy{method=snapkv budget=0.1},llm-kv-policy{method=full only-layers=1})' | FileCheck %s --check-prefix=AGAIN
// RUN: llmc-opt %s --pass-pipeline='builtin.module(llm-kv-policy{method=inertiakv budget=0.1 score-every=8})' | FileCheck %s --check-prefix=LAZY
// The printed form parses back (the attribute survives a round trip).
// RUN: llmc-opt %s --pass-pipeline='builtin.module(llm-kv-policy{method=streaming budget=64})' | llmc-opt | FileCheck %s --check-prefix=STREAM

// Every key of the contract on every attention op (MLIR prints dictionaries
// sorted by key); a ratio budget leaves budget_tokens 0.
// SNAP-COUNT-3: llm.attention {{.+}} {head_dim = 16 : i64, kv_policy = {budget = 1.000000e-01 : f64, budget_tokens = 0 : i64, kv_quant = "none", layer_scale = 1.000000e+00 : f64, method = "snapkv", mode = "prefill", pool = 7 : i64, refresh = 16 : i64, seed = 0 : i64, sink = 4 : i64, window = 32 : i64}, layer =

// pyramidkv implies layers=pyramid: for L = 3 (beta = 20) layer_scale is
// 1.95, 1.0, 0.05 (mean 1); "25%" is the ratio 0.25.
// PYR:      kv_policy = {budget = 2.500000e-01 : f64, budget_tokens = 0 : i64, kv_quant = "none", layer_scale = 1.950000e+00 : f64, method = "pyramidkv", {{.+}}}, layer = 0
// PYR:      kv_policy = {budget = 2.500000e-01 : f64, budget_tokens = 0 : i64, kv_quant = "none", layer_scale = 1.000000e+00 : f64, method = "pyramidkv", {{.+}}}, layer = 1
// PYR:      kv_policy = {budget = 2.500000e-01 : f64, budget_tokens = 0 : i64, kv_quant = "none", layer_scale = 5.000000e-02 : f64, method = "pyramidkv", {{.+}}}, layer = 2

// An integer budget is tokens per (layer, KV head); other methods may take
// layers=pyramid; the other options are copied as given.
// TOK:      kv_policy = {budget = 0.000000e+00 : f64, budget_tokens = 512 : i64, kv_quant = "polykv", layer_scale = 1.950000e+00 : f64, method = "restkv", mode = "prefill", pool = 5 : i64, refresh = 16 : i64, seed = 3 : i64, sink = 0 : i64, window = 16 : i64}, layer = 0
// TOK:      layer_scale = 1.000000e+00 : f64, method = "restkv"{{.+}}layer = 1
// TOK:      layer_scale = 5.000000e-02 : f64, method = "restkv"{{.+}}layer = 2

// only-layers: the others get no policy (the full cache).
// ONLY:     kv_policy = {{.+}}method = "h2o"{{.+}}layer = 0
// ONLY-NOT: kv_policy
// ONLY:     {head_dim = 16 : i64, layer = 1 : i64
// ONLY-NOT: kv_policy
// ONLY:     kv_policy = {{.+}}method = "h2o"{{.+}}layer = 2

// random defaults to mode=prefill like the other methods, inertiakv to
// decode; a second run replaces the first run's policy; "1.0" is the ratio 1.
// RAND-COUNT-3: kv_policy = {budget = 2.000000e-01 : f64, {{.+}}method = "random", mode = "prefill", pool = 7 : i64, refresh = 8 : i64, seed = 0 : i64
// MODE-COUNT-3: kv_policy = {budget = 1.000000e+00 : f64, budget_tokens = 0 : i64, kv_quant = "none", layer_scale = 1.000000e+00 : f64, method = "inertiakv", mode = "both", pool = 7 : i64, refresh = 16 : i64
// MODE-NOT: method = "random"

// InertiaKV-Lazy: score_every is recorded for inertiakv (only).
// LAZY-COUNT-3: method = "inertiakv", mode = "decode", pool = 7 : i64, refresh = 16 : i64, score_every = 8 : i64, seed = 0 : i64

// A second run with only-layers replaces only those layers' policies;
// method=full is recorded explicitly (budget 1).
// AGAIN:    method = "snapkv"{{.+}}layer = 0
// AGAIN:    kv_policy = {budget = 1.000000e+00 : f64, budget_tokens = 0 : i64, kv_quant = "none", layer_scale = 1.000000e+00 : f64, method = "full", {{.+}}}, layer = 1
// AGAIN:    method = "snapkv"{{.+}}layer = 2

// STREAM-COUNT-3: kv_policy = {budget = 0.000000e+00 : f64, budget_tokens = 64 : i64, {{.+}}method = "streaming", mode = "prefill"

// Three attention layers (numbered 0..2); kv-policy-invalid.mlir runs on it too.
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "token_embd.weight" : tensor<64x64xf32>
  %h0 = llm.embed %t, %e : tensor<?xi32>, tensor<64x64xf32> -> tensor<?x64xf32>
  %h1 = llm.layer 0 (%h0 : tensor<?x64xf32>) {
  ^bb0(%x: tensor<?x64xf32>):
    %wq = llm.weight "blk.0.attn_q.weight" : tensor<64x64xf32>
    %wk = llm.weight "blk.0.attn_k.weight" : tensor<32x64xf32>
    %wv = llm.weight "blk.0.attn_v.weight" : tensor<32x64xf32>
    %wo = llm.weight "blk.0.attn_output.weight" : tensor<64x64xf32>
    %a = llm.attention %x, %wq, %wk, %wv, %wo {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, rope_theta = 10000.0 : f64, rope_style = #llm<rope_style half>} : (tensor<?x64xf32>, tensor<64x64xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
    %o = llm.add %x, %a : tensor<?x64xf32>
    llm.yield %o : tensor<?x64xf32>
  }
  %h2 = llm.layer 1 (%h1 : tensor<?x64xf32>) {
  ^bb0(%x: tensor<?x64xf32>):
    %wq = llm.weight "blk.1.attn_q.weight" : tensor<64x64xf32>
    %wk = llm.weight "blk.1.attn_k.weight" : tensor<32x64xf32>
    %wv = llm.weight "blk.1.attn_v.weight" : tensor<32x64xf32>
    %wo = llm.weight "blk.1.attn_output.weight" : tensor<64x64xf32>
    %a = llm.attention %x, %wq, %wk, %wv, %wo {layer = 1 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, rope_theta = 10000.0 : f64, rope_style = #llm<rope_style half>} : (tensor<?x64xf32>, tensor<64x64xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
    %o = llm.add %x, %a : tensor<?x64xf32>
    llm.yield %o : tensor<?x64xf32>
  }
  %h3 = llm.layer 2 (%h2 : tensor<?x64xf32>) {
  ^bb0(%x: tensor<?x64xf32>):
    %wq = llm.weight "blk.2.attn_q.weight" : tensor<64x64xf32>
    %wk = llm.weight "blk.2.attn_k.weight" : tensor<32x64xf32>
    %wv = llm.weight "blk.2.attn_v.weight" : tensor<32x64xf32>
    %wo = llm.weight "blk.2.attn_output.weight" : tensor<64x64xf32>
    %a = llm.attention %x, %wq, %wk, %wv, %wo {layer = 2 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, rope_theta = 10000.0 : f64, rope_style = #llm<rope_style half>} : (tensor<?x64xf32>, tensor<64x64xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
    %o = llm.add %x, %a : tensor<?x64xf32>
    llm.yield %o : tensor<?x64xf32>
  }
  %l = llm.lm_head %h3, %e : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  llm.return %l : tensor<?x64xf32>
}
