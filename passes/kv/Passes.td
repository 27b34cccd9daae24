//===- Passes.td - KV-cache policy passes -----------------*- tablegen -*-===//
#ifndef LLMC_PASSES_KV_TD
#define LLMC_PASSES_KV_TD

include "mlir/Pass/PassBase.td"

def KvPolicyPass : Pass<"llm-kv-policy", "mlir::ModuleOp"> {
  let summary = "Attach a KV-cache compression policy (kv_policy) to llm.attention ops";
  let description = [{
    Writes the `kv_policy` dictionary that the runtime's KV-cache code
    executes onto every `llm.attention` op (or those of `only-layers`). The
    pass only records the choice; selection, eviction and cache quantization
    run at inference time. Every key of the contract is written, so the
    runtime needs no defaults: `method`, `budget`, `budget_tokens`, `window`,
    `sink`, `layer_scale`, `mode`, `refresh`, `pool`, `kv_quant`, `seed`
    (and, with heads=calibrated, `head_scale`).

    - `method`: full, streaming, h2o, snapkv, pyramidkv, restkv, laprox,
      capkv, rdkv, inertiakv, random, depthkv (required). `full` records
      the explicit choice of the whole cache and takes no budget.
    - `budget`: a ratio of the prompt's KV entries (`0.1`, `10%`: any value
      with a '.' or '%', or below 1; in (0, 1]) or a token count per
      (layer, KV head) including the window (an integer >= 1; at least
      window + sink + 1). Required unless method=full.
    - `layers`: per-layer budget multiplier `layer_scale`. `uniform`: 1;
      `pyramid`: linear in depth with mean 1, for layer l of L (beta = 20)
      (2 - 1/beta) - l * (2 - 2/beta) / (L - 1) (L = 1: 1). `pyramidkv`
      implies `pyramid`; other methods may also take it. `depthkv`:
      calibrated per layer (below); `method=depthkv` implies it and is
      SnapKV selection with those scales.
    - `heads`: per-KV-head budget multipliers `head_scale` within a layer.
      `uniform`: none written (every head keeps the layer's budget);
      `calibrated`: measured per head (below), mean 1 over the layer's KV
      heads, so a layer keeps the total `layers` gives it. Combines with
      any method that selects per head (not full; not laprox or rdkv,
      which allocate across a layer's heads themselves) and with
      layers=uniform, pyramid or depthkv.
    - DepthKV calibration (our interpretation of DepthKV; it needs the
      weights, so it runs under `llmc compile` and fails under llmc-opt).
      The first `calib-context` tokens of `calib-text` (default
      data/calib/default.txt, not the long-context evaluation text, so
      eval-long ppl stays out of sample; `$LLMC_DATA_DIR` overrides the data
      folder; a `.ids` file holds token ids for models without a tokenizer)
      are a
      prompt of calib-context - calib-score - 1 tokens, prefilled once,
      followed by `calib-score` tokens that are teacher-forced one forward
      each and scored (mean NLL). The scoring is done with the full cache
      (NLL_full) and once per attention layer l with only layer l
      compressed by SnapKV at the deployment budget (a token budget becomes
      the ratio tokens / prompt length); delta_l = max(0, NLL_l - NLL_full).
      With s_l = delta_l + eps (eps = 1e-3 * mean delta + 1e-9),
      layer_scale_l = clamp(c * s_l, 0.05, 4) where c makes the mean over
      the L layers 1 (proportional allocation, clamped and renormalized).
      Each policy also records `depthkv_delta` = delta_l. One line per
      layer goes to stderr unless the compile is quiet.
    - Per-head calibration, heads=calibrated (our interpretation of
      HeadKV / HeadWiseKV: a measured distortion per head, HeadKV-style
      shares with a floor; needs llmc compile). Same calibration run and
      options as DepthKV (one prefill shared when both are asked for). For
      each selected layer l and KV head g, the prefill is restored and
      layer l alone gets its deployment policy (this method, budget, window,
      sink, pool, mode and the layer_scale of `layers`) with head_scale 1
      for g and 1e6 for the other heads (the runtime clamps a head's budget
      to its length, so they keep everything), kv_quant none; the tail is
      scored: delta_{l,g} = max(0, NLL_{l,g} - NLL_full) (head-metric=nll)
      or the mean KL divergence of the tail's next-token distributions from
      the full-cache ones (head-metric=kl, HeadWiseKV's distortion: >= 0
      and uses the whole distribution). Per layer,
      s_g = delta_g + eps (eps = 1e-3 * the layer's mean delta + 1e-9),
      share_g = KV * s_g / sum s, head_scale_g = clamp(c * (0.8 * share_g +
      0.2), 0.05, 4) with c making the mean 1 (c = 1 unless KV > 4 lets a
      clamp bind). `head_delta` records delta_{l,g}. Cost: one probe per
      (layer, KV head), each calib-score forwards: 90 probes on
      SmolLM2-135M (30 layers x 3 KV heads), a few minutes at the defaults
      on 2 cores. The budget must leave more than `window` of the
      calibration prompt (else head_scale has no effect there). One line
      per layer goes to stderr unless the compile is quiet.
    - `mode`: prefill (compress once after each prompt), decode (evict
      during generation every `refresh` tokens when over budget) or both.
      `inertiakv` is a decode-time method: it defaults to decode and
      rejects an explicit mode=prefill. `random` keeps a seeded uniform
      draw of the entries (the recent window kept, as by the other scoring
      methods) at any mode.
    - `score-every` (inertiakv only): InertiaKV-Lazy. The attention
      statistics are gathered and folded into the EMA only at decode steps
      where the step count is a multiple of this; between those steps the
      eviction check runs on the stale scores, and entries appended since
      the last scoring step (inside the protected recent window as long as
      score-every <= window) take the step's score at the next one.
    - `pool`: odd score-smoothing kernel (1 = none) used by snapkv,
      pyramidkv, depthkv and restkv; `kv-quant=polykv` quantizes the kept
      cache (not with rdkv, which chooses its own widths); `seed` seeds
      random selection and the FWHT signs.

    L is the number of llm.attention ops in the module and a layer's index
    is the op's `layer` attribute. All options are checked before any op is
    changed. Running the pass again replaces the policy of the ops it
    selects and leaves the others as they are.

    ```mlir
    %a = llm.attention %x, %wq, %wk, %wv, %wo {layer = 0 : i64, ...} : ...
    // llm-kv-policy{method=snapkv budget=0.1}:
    %a = llm.attention %x, %wq, %wk, %wv, %wo {kv_policy = {budget = 1.000000e-01 : f64,
           budget_tokens = 0 : i64, kv_quant = "none", layer_scale = 1.000000e+00 : f64,
           method = "snapkv", mode = "prefill", pool = 7 : i64, refresh = 16 : i64,
           seed = 0 : i64, sink = 4 : i64, window = 32 : i64}, layer = 0 : i64, ...} : ...
    ```
  }];
  let options = [
    Option<"method", "method", "std::string", "\"\"",
           "full, streaming, h2o, snapkv, pyramidkv, restkv, laprox, capkv, rdkv, inertiakv, random or depthkv (required)">,
    Option<"budget", "budget", "std::string", "\"\"",
           "kept KV entries: a ratio in (0,1] (0.1, 10%) or tokens per (layer, KV head) (512); required unless method=full">,
    Option<"window", "window", "int64_t", "32", "observation window and always-kept recent tokens (>= 1)">,
    Option<"sink", "sink", "int64_t", "4", "always-kept first tokens (>= 0)">,
    Option<"layers", "layers", "std::string", "\"uniform\"",
           "per-layer budgets: uniform, pyramid or depthkv (calibrated; llmc compile only)">,
    Option<"heads", "heads", "std::string", "\"uniform\"",
           "per-head budgets: uniform or calibrated (measured per KV head; llmc compile only)">,
    Option<"headMetric", "head-metric", "std::string", "\"nll\"",
           "heads=calibrated: a head's sensitivity, nll (NLL rise) or kl (KL from the full cache)">,
    Option<"mode", "mode", "std::string", "\"prefill\"",
           "prefill, decode or both (inertiakv defaults to decode)">,
    Option<"refresh", "refresh", "int64_t", "16", "decode: re-select every this many generated tokens (>= 1)">,
    Option<"scoreEvery", "score-every", "int64_t", "1",
           "inertiakv: update the attention EMA every this many decode steps (InertiaKV-Lazy; 1 = every step)">,
    Option<"pool", "pool", "int64_t", "7", "score smoothing kernel, odd (1 = none)">,
    Option<"kvQuant", "kv-quant", "std::string", "\"none\"", "cache quantization: none or polykv">,
    Option<"seed", "seed", "int64_t", "0", "RNG seed (random selection, FWHT signs)">,
    Option<"calibText", "calib-text", "std::string", "\"\"",
           "layers=depthkv, heads=calibrated: calibration text, or token ids in a .ids file (default: data/calib/default.txt)">,
    Option<"calibContext", "calib-context", "int64_t", "1024",
           "layers=depthkv, heads=calibrated: calibration tokens in all (prompt + 1 + calib-score)">,
    Option<"calibScore", "calib-score", "int64_t", "32",
           "layers=depthkv, heads=calibrated: teacher-forced tokens scored at the end of the calibration text">,
    ListOption<"onlyLayers", "only-layers", "int64_t",
               "attention layers that get the policy (default: all)">,
  ];
}

#endif // LLMC_PASSES_KV_TD
