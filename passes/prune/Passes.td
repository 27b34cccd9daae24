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
    writes them as JSON; `dry-run` reports without changing the IR. All
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

#endif // LLMC_PASSES_PRUNE_TD
