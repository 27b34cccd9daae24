// Every option error names the option and what is allowed, and fails the
// pass before any op is changed. The module is kv-policy.mlir's (3 layers).
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy)' 2>&1 | FileCheck %s --check-prefix=NOMETHOD
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=quest budget=0.1})' 2>&1 | FileCheck %s --check-prefix=METHOD
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=snapkv})' 2>&1 | FileCheck %s --check-prefix=NOBUDGET
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=snapkv budget=0})' 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=snapkv budget=1.5})' 2>&1 | FileCheck %s --check-prefix=RATIO
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=snapkv budget=150%})' 2>&1 | FileCheck %s --check-prefix=PERCENT
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=snapkv budget=10})' 2>&1 | FileCheck %s --check-prefix=TOKENS
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=snapkv budget=lots})' 2>&1 | FileCheck %s --check-prefix=TEXT
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=full budget=0.5})' 2>&1 | FileCheck %s --check-prefix=FULL
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=snapkv budget=0.1 window=0})' 2>&1 | FileCheck %s --check-prefix=WINDOW
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=snapkv budget=0.1 sink=-1})' 2>&1 | FileCheck %s --check-prefix=SINK
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=h2o budget=0.1 refresh=0})' 2>&1 | FileCheck %s --check-prefix=REFRESH
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=snapkv budget=0.1 pool=4})' 2>&1 | FileCheck %s --check-prefix=POOL
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=snapkv budget=0.1 mode=lazy})' 2>&1 | FileCheck %s --check-prefix=MODE
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=inertiakv budget=0.1 mode=prefill})' 2>&1 | FileCheck %s --check-prefix=INERTIA
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=h2o budget=0.1 score-every=4})' 2>&1 | FileCheck %s --check-prefix=LAZYH2O
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=inertiakv budget=0.1 score-every=0})' 2>&1 | FileCheck %s --check-prefix=LAZYZERO
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=inertiakv budget=0.1 window=8 score-every=16})' 2>&1 | FileCheck %s --check-prefix=LAZYWIN
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=rdkv budget=0.1 kv-quant=polykv})' 2>&1 | FileCheck %s --check-prefix=RDKV
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=rdkv budget=0.1 mode=both})' 2>&1 | FileCheck %s --check-prefix=RDKVMODE
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=snapkv budget=0.1 kv-quant=int4})' 2>&1 | FileCheck %s --check-prefix=KVQUANT
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=snapkv budget=0.1 layers=depthkv})' 2>&1 | FileCheck %s --check-prefix=DEPTH
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=depthkv budget=0.1})' 2>&1 | FileCheck %s --check-prefix=DEPTHM
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=snapkv budget=0.1 layers=steps})' 2>&1 | FileCheck %s --check-prefix=LAYERS
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=depthkv budget=0.1 layers=pyramid})' 2>&1 | FileCheck %s --check-prefix=DEPTHPYR
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=pyramidkv budget=0.1 layers=depthkv})' 2>&1 | FileCheck %s --check-prefix=PYRDEPTH
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=snapkv budget=0.1 calib-context=512})' 2>&1 | FileCheck %s --check-prefix=CALIBOPT
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=depthkv budget=0.1 calib-score=0})' 2>&1 | FileCheck %s --check-prefix=CALIBSCORE
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=depthkv budget=0.1 calib-context=64})' 2>&1 | FileCheck %s --check-prefix=CALIBCTX
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=depthkv budget=1000})' 2>&1 | FileCheck %s --check-prefix=CALIBBUDGET
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=pyramidkv budget=0.1 layers=uniform})' 2>&1 | FileCheck %s --check-prefix=PYRUNI
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=full layers=pyramid})' 2>&1 | FileCheck %s --check-prefix=FULLPYR
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=snapkv budget=0.1 heads=calibrated})' 2>&1 | FileCheck %s --check-prefix=HEADS
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=restkv budget=0.1 layers=depthkv heads=calibrated})' 2>&1 | FileCheck %s --check-prefix=HEADSDEPTH
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=snapkv budget=0.1 heads=greedy})' 2>&1 | FileCheck %s --check-prefix=HEADSNAME
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=full heads=calibrated})' 2>&1 | FileCheck %s --check-prefix=HEADSFULL
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=laprox budget=0.1 heads=calibrated})' 2>&1 | FileCheck %s --check-prefix=HEADSLAPROX
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=rdkv budget=0.1 heads=calibrated})' 2>&1 | FileCheck %s --check-prefix=HEADSRDKV
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=snapkv budget=0.1 heads=calibrated head-metric=mse})' 2>&1 | FileCheck %s --check-prefix=HEADMETRIC
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=snapkv budget=0.1 head-metric=kl})' 2>&1 | FileCheck %s --check-prefix=HEADMETRICUNI
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=snapkv budget=0.03 heads=calibrated})' 2>&1 | FileCheck %s --check-prefix=HEADSWINDOW
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=h2o budget=600 heads=calibrated calib-context=512 calib-score=16})' 2>&1 | FileCheck %s --check-prefix=HEADSBUDGET
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=snapkv budget=0.1 heads=calibrated calib-score=0})' 2>&1 | FileCheck %s --check-prefix=CALIBSCORE
// RUN: not llmc-opt %S/kv-policy.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=snapkv budget=0.1 only-layers=1,3})' 2>&1 | FileCheck %s --check-prefix=ONLY --implicit-check-not=kv_policy
// Module-shape errors: no attention at all; pyramid needs layers 0..L-1.
// RUN: llmc-opt %s -split-input-file -verify-diagnostics --pass-pipeline='builtin.module(llm-kv-policy{method=pyramidkv budget=0.1})'

// NOMETHOD: error: llm-kv-policy: option 'method' is required (one of full, streaming, h2o, snapkv, pyramidkv, depthkv, restkv, laprox, capkv, rdkv, inertiakv or random)
// METHOD: error: llm-kv-policy: unknown method 'quest' (option 'method': one of full, streaming, h2o, snapkv, pyramidkv, depthkv, restkv, laprox, capkv, rdkv, inertiakv or random)
// NOBUDGET: error: llm-kv-policy: option 'budget' is required for method=snapkv (a ratio in (0, 1] such as 0.1 or 10%, or tokens per layer and KV head such as 512)
// ZERO: error: llm-kv-policy: option 'budget': ratio 0 is not in (0, 1]
// RATIO: error: llm-kv-policy: option 'budget': ratio 1.5 is not in (0, 1]
// PERCENT: error: llm-kv-policy: option 'budget': ratio 150% is not in (0, 1]
// TOKENS: error: llm-kv-policy: option 'budget': 10 tokens is fewer than window + sink + 1 = 37
// TEXT: error: llm-kv-policy: option 'budget': 'lots' is neither a ratio (0.1, 10%) nor a whole token count (512)
// FULL: error: llm-kv-policy: option 'budget' does not apply to method=full (it keeps every entry)
// WINDOW: error: llm-kv-policy: option 'window' must be >= 1, not 0
// SINK: error: llm-kv-policy: option 'sink' must be >= 0, not -1
// REFRESH: error: llm-kv-policy: option 'refresh' must be >= 1, not 0
// POOL: error: llm-kv-policy: option 'pool' must be odd and >= 1 (1 = no smoothing), not 4
// MODE: error: llm-kv-policy: option 'mode' must be prefill, decode or both, not 'lazy'
// INERTIA: error: llm-kv-policy: method=inertiakv evicts while decoding: option 'mode' must be decode or both, not prefill
// LAZYH2O: error: llm-kv-policy: option 'score-every' applies to method=inertiakv only (its lazy EMA refresh), not method=h2o
// LAZYZERO: error: llm-kv-policy: option 'score-every' must be >= 1, not 0
// LAZYWIN: error: llm-kv-policy: option 'score-every' (16) must not exceed 'window' (8): unscored entries must stay in the protected recent window
// RDKVMODE: error: llm-kv-policy: method=rdkv assigns bit widths once after the prompt: option 'mode' must be prefill, not both
// RDKV: error: llm-kv-policy: method=rdkv chooses its own bit widths: option 'kv-quant' must be none, not polykv
// KVQUANT: error: llm-kv-policy: option 'kv-quant' must be none or polykv, not 'int4'
// DepthKV measures the model, so under llmc-opt (no weights) it stops after
// the option checks; kv-policy-compile.mlir runs it through llmc compile.
// DEPTH: error: llm-kv-policy: layers=depthkv runs the model on calibration text to measure each layer's sensitivity: it needs the weights in the IR (llmc import --emit-resources, or llmc compile)
// DEPTHM: error: llm-kv-policy: method=depthkv runs the model on calibration text to measure each layer's sensitivity: it needs the weights in the IR (llmc import --emit-resources, or llmc compile)
// LAYERS: error: llm-kv-policy: option 'layers' must be uniform, pyramid or depthkv, not 'steps'
// DEPTHPYR: error: llm-kv-policy: method=depthkv implies layers=depthkv, not layers=pyramid (use method=snapkv for uniform budgets)
// PYRDEPTH: error: llm-kv-policy: method=pyramidkv implies layers=pyramid, not layers=depthkv (use method=depthkv for calibrated budgets)
// CALIBOPT: error: llm-kv-policy: options 'calib-text', 'calib-context' and 'calib-score' apply only to layers=depthkv (or method=depthkv) and heads=calibrated
// CALIBSCORE: error: llm-kv-policy: option 'calib-score' must be >= 1, not 0
// CALIBCTX: error: llm-kv-policy: option 'calib-context': 64 tokens leave a calibration prompt of 31 tokens before the 32 scored ones (calib-score + 1), fewer than window + sink + 1 = 37
// CALIBBUDGET: error: llm-kv-policy: option 'budget': 1000 tokens keep the whole calibration prompt of 991 tokens, so no layer could be measured (raise calib-context)
// PYRUNI: error: llm-kv-policy: method=pyramidkv implies layers=pyramid, not layers=uniform (use method=snapkv for uniform budgets)
// FULLPYR: error: llm-kv-policy: method=full keeps every entry: option 'layers' must be uniform, not pyramid
// heads=calibrated also measures the model (kv-policy-compile.mlir runs it);
// with layers=depthkv both share one calibration run, DepthKV first.
// HEADS: error: llm-kv-policy: heads=calibrated runs the model on calibration text to measure each KV head's sensitivity: it needs the weights in the IR (llmc import --emit-resources, or llmc compile)
// HEADSDEPTH: error: llm-kv-policy: layers=depthkv runs the model on calibration text to measure each layer's sensitivity: it needs the weights in the IR (llmc import --emit-resources, or llmc compile)
// HEADSNAME: error: llm-kv-policy: option 'heads' must be uniform or calibrated, not 'greedy'
// HEADSFULL: error: llm-kv-policy: method=full keeps every entry: option 'heads' must be uniform, not calibrated
// HEADSLAPROX: error: llm-kv-policy: method=laprox selects across a layer's KV heads jointly (per-head budgets only set the layer's total): option 'heads' must be uniform, not calibrated
// HEADSRDKV: error: llm-kv-policy: method=rdkv allocates bits across a layer's KV heads itself: option 'heads' must be uniform, not calibrated
// HEADMETRIC: error: llm-kv-policy: option 'head-metric' must be nll or kl, not 'mse'
// HEADMETRICUNI: error: llm-kv-policy: option 'head-metric' applies only to heads=calibrated
// HEADSWINDOW: error: llm-kv-policy: option 'budget': ratio 0.03 keeps 30 of the 991 calibration prompt tokens, no more than the window of 32, so heads=calibrated could not measure a head (raise calib-context)
// HEADSBUDGET: error: llm-kv-policy: option 'budget': 600 tokens keep the whole calibration prompt of 495 tokens, so no KV head could be measured (raise calib-context)
// only-layers is checked after walking the module, still before any change:
// the module printed with the error has no kv_policy.
// ONLY: error: llm-kv-policy: option 'only-layers': layer 3 is not an attention layer of this module (it has 3 attention layers: 0..2)

// expected-error @+1 {{llm-kv-policy: the module has no llm.attention op to attach a KV policy to}}
module {
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "token_embd.weight" : tensor<64x64xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<64x64xf32> -> tensor<?x64xf32>
  llm.return %x : tensor<?x64xf32>
}
}

// -----

module {
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
    // expected-error @+1 {{llm-kv-policy: layers=pyramid needs the attention layers numbered 0..0, found layer 4}}
    %a = llm.attention %x, %wq, %wk, %wv, %wo {layer = 4 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, rope_theta = 10000.0 : f64, rope_style = #llm<rope_style half>} : (tensor<?x64xf32>, tensor<64x64xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
    llm.yield %a : tensor<?x64xf32>
  }
  llm.return %h1 : tensor<?x64xf32>
}
}
