//===- Passes.td - Structural pruning passes --------------*- tablegen -*-===//
#ifndef LLMC_PASSES_PRUNE_TD
#define LLMC_PASSES_PRUNE_TD

include "mlir/Pass/PassBase.td"

def PruneDepthPass : Pass<"llm-prune-depth", "mlir::ModuleOp"> {
  let summary = "Remove whole decoder blocks (llm.layer ops and their weights)";
  let description = [{
    Scores every `llm.layer` with `method` and removes `drop` blocks (or
    `ratio` of them, rounded), never the first `keep-first` or the last
    `keep-last`. Users of a removed block read its input instead; the blocks
    that follow are renumbered (the layer index, the attention op's KV-cache
    slot `layer`, and weight names `blk.N.`), and the model's config gets
    the new `num_layers` and `kept_layers` (each block's index in the
    original model), so the artifact, its manifest and the KV cache have
    fewer layers, not masked ones. The numerics are in
    compiler/prune/DepthScores.h.

    - `wrp` (forward-free, no data; our reading of the WRP abstract): the
      attention output and MLP down projections' rotation-invariant
      signatures (`signature`: `gram`, W W^T; `row-energy`, its diagonal)
      compared across blocks, weighted by the relative write scale
      (exponent `gamma`); the removable blocks are cut into contiguous
      groups of similar blocks and each group keeps its least redundant
      block.
    - `magnitude` (forward-free): mean per-matrix RMS of the block's
      weights; the lowest go.
    - `block-influence` (ShortGPT): 1 - mean cos(x_l, x_{l+1}) of the
      residual stream over calibration text; the lowest go.
    - `angular` (Gromov et al.): mean arccos(cos(x_l, x_{l+n})) / pi over
      calibration text for every run of n = drop consecutive blocks; the
      closest run goes.
    The activation methods run the model as it stands in the pipeline on
    the first `calib-tokens` tokens of `calib` (default
    data/calib/default.txt; a `.ids` file holds token ids) in sequences of
    `calib-seq`; they need the weights of llmc compile.

    `repair` (our reading of the linear-replacement repairs of the
    depth-pruning literature): for every removed run a..b that follows a
    kept block a-1, a d x d map on block a-1's MLP output is fitted in
    closed form on calibration text (`calib`, `calib-tokens`, `calib-seq`;
    ridge towards the identity with weight `repair-lambda` x the mean
    eigenvalue) so that block a-1's output approximates the stream that
    left block b in the unpruned model, and folded into its down
    projection (stored f32). The stream error of the cut with and without
    it is printed and reported.

    `layers=a,b,...` removes exactly those blocks (scores are still
    reported when a method is given). Every block's score and the chosen
    set are printed as progress lines (dropped with -q); `report=FILE`
    writes them as JSON; `dry-run` reports without changing the blocks (it
    leaves the choice on the model as `llm.depth_choice`, which
    `llm-spec-attach{method=self}` takes as the blocks its drafter skips). All
    options are checked before anything runs. A model with a KV policy
    already attached is refused (its per-layer budgets would be stale):
    prune first.

    ```mlir
    // llm-prune-depth{layers=1}: the second block is gone, the third is now block 1.
    %2 = llm.layer 0 (%1 : tensor<?x64xf32>) { ... }
    %3 = llm.layer 1 (%2 : tensor<?x64xf32>) { ... llm.weight "blk.1.attn_q.weight" ...
           llm.attention ... {layer = 1 : i64, ...} ... }
    ```
  }];
  let options = [
    Option<"method", "method", "std::string", "\"\"",
           "wrp, magnitude, block-influence or angular (required unless layers= is given)">,
    Option<"drop", "drop", "int64_t", "0", "blocks to remove">,
    Option<"ratio", "ratio", "double", "0.0", "share of the blocks to remove, in (0, 1) (instead of drop)">,
    Option<"keepFirst", "keep-first", "int64_t", "1", "first blocks never removed">,
    Option<"keepLast", "keep-last", "int64_t", "1", "last blocks never removed">,
    ListOption<"layers", "layers", "int64_t", "remove exactly these blocks">,
    Option<"dryRun", "dry-run", "bool", "false", "report the scores and the choice; change nothing">,
    Option<"report", "report", "std::string", "\"\"", "write the scores and the choice to this JSON file">,
    Option<"signature", "signature", "std::string", "\"gram\"", "wrp: gram or row-energy">,
    Option<"gamma", "gamma", "double", "1.0", "wrp: exponent of the inverse write scale (>= 0)">,
    Option<"calib", "calib", "std::string", "\"\"",
           "block-influence, angular, repair: calibration text or a .ids file (default: data/calib/default.txt)">,
    Option<"calibTokens", "calib-tokens", "int64_t", "4096", "block-influence, angular, repair: calibration tokens">,
    Option<"calibSeq", "calib-seq", "int64_t", "512", "block-influence, angular, repair: tokens per calibration sequence">,
    Option<"repair", "repair", "bool", "false", "fit and fold a least-squares map into the down projection before each removed run">,
    Option<"repairLambda", "repair-lambda", "double", "0.1", "repair: ridge weight towards the identity (> 0)">,
  ];
}

def MoefyPass : Pass<"llm-moefy", "mlir::ModuleOp"> {
  let summary = "Cut every dense gated MLP into experts behind a fitted router (MoEfication)";
  let description = [{
    Replaces each `llm.mlp` by an `llm.moe` with `experts` experts of F /
    experts neurons each (F must divide) and `gating = unit`: the router
    picks `top-k` experts per token and their outputs are added with weight
    1, so with top-k = experts the layer is the dense MLP exactly. The
    numerics are in compiler/prune/Moefication.h.

    - `clustering=coactivation` (default): balanced spherical k-means of the
      neurons' |activation| over calibration tokens (neurons that fire
      together share an expert); `weights`: of their gate and up rows.
    - The router [experts, D] is a ridge regression (`ridge` x the mean
      diagonal of X^T X) from the MLP's input to each expert's output norm
      on the calibration tokens.
    Calibration: the first `calib-tokens` tokens of `calib` (default
    data/calib/default.txt; a `.ids` file holds token ids) in sequences of
    `calib-seq`, run through the dense model once. Each block's router
    recall (share of the true top-k experts by output norm that the router
    picks) and the relative error of its top-k output on the calibration
    tokens are printed (dropped with -q) and written to `report=FILE`.
    Expert weights are stored f32 (the dense weights dequantized and
    regrouped; quantize afterwards). Weight names follow GGUF's MoE names:
    `blk.N.ffn_gate_inp.weight` (router), `blk.N.ffn_{gate,up,down}_exps.weight`.

    ```mlir
    // llm-moefy{experts=4 top-k=2} on an MLP of 128 neurons:
    %m = llm.moe %x, %router, %g, %u, %d {activation = #llm<activation silu>,
           gating = #llm<moe_gating unit>, renormalize = false, top_k = 2 : i64}
         : (tensor<?x64xf32>, tensor<4x64xf32>, tensor<4x32x64xf32>,
            tensor<4x32x64xf32>, tensor<4x64x32xf32>) -> tensor<?x64xf32>
    ```
  }];
  let options = [
    Option<"experts", "experts", "int64_t", "0", "experts per MLP (>= 2, divides the MLP width)">,
    Option<"topK", "top-k", "int64_t", "0", "experts each token runs (1..experts)">,
    Option<"clustering", "clustering", "std::string", "\"coactivation\"", "coactivation or weights">,
    Option<"iters", "iters", "int64_t", "20", "k-means rounds (>= 1)">,
    Option<"seed", "seed", "int64_t", "0", "k-means start">,
    Option<"ridge", "ridge", "double", "0.001", "router ridge weight (> 0)">,
    Option<"calib", "calib", "std::string", "\"\"", "calibration text or a .ids file (default: data/calib/default.txt)">,
    Option<"calibTokens", "calib-tokens", "int64_t", "4096", "calibration tokens">,
    Option<"calibSeq", "calib-seq", "int64_t", "512", "tokens per calibration sequence">,
    Option<"report", "report", "std::string", "\"\"", "write each block's router recall and error to this JSON file">,
  ];
}

def PruneExpertsPass : Pass<"llm-prune-experts", "mlir::ModuleOp"> {
  let summary = "Remove experts from every MoE layer (OMP-MoE and its baselines)";
  let description = [{
    Ranks each `llm.moe`'s experts with `method` on calibration text and
    keeps (1 - `ratio`) of them in all (never fewer than the layer's top k
    per layer): their router rows and stacked gate/up/down slabs stay, the
    others are deleted, and the layer keeps its routing semantics over the
    survivors. The numerics are in compiler/prune/ExpertScores.h.

    - `omp` (our reading of the OMP-MoE abstract): orthogonal matching
      pursuit over the gated expert outputs on the routed calibration
      tokens; `rescale=true` also folds each kept expert's least-squares
      weight into its down projection.
    - `frequency`: the most routed experts; `norm`: the largest mean output
      norm over their routed tokens; `greedy` (NAEE-style): backward
      elimination by re-routed reconstruction error (every expert on every
      token; the search-cost reference).
    `allocation=uniform` keeps the same count in every layer;
    `waterfill` (omp, greedy) shares the kept experts among layers by each
    layer's error curve plus `lambda` x the share of tokens whose routed set
    changes. Experts whose largest output entry exceeds `protect` x the
    layer's median (super experts) are always kept (0: off).
    `adaptive-energy=τ` (OMP-MoE†) records each kept expert's mean output
    norm ν and τ on the op: the runtime runs, per token, only the top-k
    experts whose predicted energy first reaches τ of the total (g ν with
    softmax gating; with unit gating, a MoEfied model's router output, its
    prediction of the expert's output norm for the token).
    Calibration: `calib`, `calib-tokens`, `calib-seq` as llm-moefy. Every
    layer's ranking, kept set and search time are printed (dropped with
    -q) and written to `report=FILE`; `dry-run` changes nothing.
    Quantized MoE weights with side data (aaac, qtea) are refused: prune
    before quantizing.
  }];
  let options = [
    Option<"method", "method", "std::string", "\"\"", "omp, frequency, norm or greedy">,
    Option<"ratio", "ratio", "double", "0.0", "share of the experts to remove, in (0, 1)">,
    Option<"allocation", "allocation", "std::string", "\"uniform\"", "uniform or waterfill">,
    Option<"lambda", "lambda", "double", "1.0", "waterfill: weight of the routing change (>= 0)">,
    Option<"adaptiveEnergy", "adaptive-energy", "double", "0.0", "run experts per token until this share of the predicted energy (0: off, else (0, 1])">,
    Option<"protect", "protect", "double", "0.0", "always keep experts whose max output exceeds this x the layer median (0: off)">,
    Option<"rescale", "rescale", "bool", "false", "omp: fold the least-squares weights into the kept down projections">,
    Option<"dryRun", "dry-run", "bool", "false", "report the rankings and the choice; change nothing">,
    Option<"calib", "calib", "std::string", "\"\"", "calibration text or a .ids file (default: data/calib/default.txt)">,
    Option<"calibTokens", "calib-tokens", "int64_t", "4096", "calibration tokens">,
    Option<"calibSeq", "calib-seq", "int64_t", "512", "tokens per calibration sequence">,
    Option<"report", "report", "std::string", "\"\"", "write the rankings and the choice to this JSON file">,
  ];
}

#endif // LLMC_PASSES_PRUNE_TD
