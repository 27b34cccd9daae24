//===- Passes.td - Weight quantization passes -------------*- tablegen -*-===//
#ifndef LLMC_PASSES_QUANT_TD
#define LLMC_PASSES_QUANT_TD

include "mlir/Pass/PassBase.td"

def QuantizeRTNPass : Pass<"llm-quantize-rtn", "mlir::ModuleOp"> {
  let summary = "Round-to-nearest weight quantization into block formats";
  let description = [{
    Rewrites the element type of every matrix weight (attention and MLP
    projections, experts, embedding and LM head; never norms or biases) to a
    block-quantized format, rounding each weight to the nearest level of its
    group's grid, and, inside a compile, rewrites the weight's bytes in the
    store. `bits`/`group`/`sym` select the format: 8/32/sym = q8_0,
    4/32/sym = q4_0, 4/32/asym = q4_1, 5/32/sym = q5_0, 5/32/asym = q5_1.
    `skip` lists weight-name globs to leave as they are (e.g.
    `token_embd.weight`). Requests no format can hold, and weights whose rows
    are not whole groups, fail naming the weight.

    ```mlir
    %w = llm.weight "blk.0.attn_q.weight" : tensor<64x64xf32>
    // llm-quantize-rtn{bits=4 group=32 sym=false}:
    %w = llm.weight "blk.0.attn_q.weight" : tensor<64x64x!llm.quant<"q4_1", block = 32, bytes = 20>>
    ```
  }];
  let options = [
    Option<"bits", "bits", "int64_t", "4", "bits per weight code (4, 5 or 8)">,
    Option<"group", "group", "int64_t", "32", "weights per scale (32)">,
    Option<"sym", "sym", "bool", "true", "symmetric grid (no zero point)">,
    ListOption<"skip", "skip", "std::string", "weight-name globs to keep unquantized">,
  ];
}

def QuantizePass : Pass<"llm-quantize", "mlir::ModuleOp"> {
  let summary = "Weight quantization: RTN, GPTQ, AWQ, OSAQ (grouped integers), AAAC, QTEA, HBQ (their own formats)";
  let description = [{
    Quantizes every matrix weight (attention and MLP projections, experts,
    embedding, LM head; never norms or biases) to the grouped-integer format
    `gq<bits><s|a>_g<group>` (e.g. gq4a_g64): `bits`-bit codes, one fp16
    scale (and, asymmetric, fp16 minimum) per `group` weights of a row.

    - `method=rtn`: round to nearest, no data.
    - `method=gptq`: GPTQ (Hessian-aware rounding with error feedback).
    - `method=awq`: AWQ (activation-aware per-channel scales folded into the
      preceding norm / projection, then clip search and RTN).
    - `method=osaq`: OSAQ, our interpretation (compiler/quant/Osaq.h): the
      stable null space of each input's Hessian (eigenvalues <= `osaq-eps` *
      mean(diag H) on two calibration splits, alternate 32-token spans),
      a per-row ΔW in it that shrinks the group ranges (softmax-weighted
      least squares, temperature `osaq-temp`), folded into W, then GPTQ.
      A site whose split A has fewer than `osaq-min-tokens` x (input width)
      tokens keeps r = 0 (its H is singular for lack of data, not flat).

    - `method=aaac`: AAAC, our interpretation (compiler/quant/Aaac.h): two
      learned 2^bits-entry codebooks per matrix (activation-weighted
      k-means); each group's fp16 scale carries in its sign bit which
      codebook its codes index. Format `aaac<bits>_g<group>` (bits 2..4).
    - `method=qtea`: QTEA (compiler/quant/Qtea.h): ternary codes with a
      per-group (alpha, beta) and a per-column rescale, a GPTQ-style sweep
      with decayed error feedback, and 1:4 sparse FP8 residuals on the
      `qtea-salient` percent most salient columns. Format
      `qtea_g<group>_s<salient>`; `bits` is ignored (about 2 bits per weight).
    - `method=hbq`: HBQ (llmc/format/hbq.h, hbqQuantizeRow): data-free hierarchical
      block FP: `bits`-bit FP elements (4: E2M1), an E5M3 scale per L1
      block of `group` weights and a 2-bit significand per quarter block
      from the `hbq-table`. Format `hbq<bits>_b<group>` (group a multiple
      of 32). Like rtn, under llmc-opt it only retypes.

    Override grids of aaac, qtea and hbq runs are grouped integers with RTN.

    GPTQ, AWQ, OSAQ, AAAC and QTEA calibrate layer by layer: block l is quantized from the
    inputs its linears see when the calibration text runs through blocks
    0..l-1 already quantized. Weights outside the blocks (embedding, LM head)
    get RTN. They need the weights, so they run only inside `llmc compile`;
    under llmc-opt they fail, while `method=rtn` only retypes. A group that
    does not divide a weight's rows fails naming the weight, before anything
    is rewritten. The manifest records per tensor the method, bits, group,
    sym, calibration tokens and errors.

    `override` gives matching weights their own grid: entries
    `GLOB:bits` or `GLOB:bits:group` (sym as the pass), e.g.
    `override=token_embd.weight:8,output.weight:8:32`. The first matching
    entry wins and applies before `skip` (so `skip` only excludes weights no
    override names). A bad entry fails naming it.

    ```mlir
    %w = llm.weight "blk.0.attn_q.weight" : tensor<64x64xf32>
    // llm-quantize{method=gptq bits=4 group=64}:
    %w = llm.weight "blk.0.attn_q.weight" : tensor<64x64x!llm.quant<"gq4a_g64", block = 64, bytes = 36>>
    ```
  }];
  let options = [
    Option<"method", "method", "std::string", "\"rtn\"", "rtn, gptq, awq, osaq, aaac, qtea or hbq">,
    Option<"bits", "bits", "int64_t", "4", "bits per weight code (2..8)">,
    Option<"group", "group", "int64_t", "64", "weights per scale (a multiple of 8, 8..4096)">,
    Option<"sym", "sym", "bool", "false", "symmetric grid (no minimum)">,
    ListOption<"skip", "skip", "std::string", "weight-name globs to keep unquantized">,
    ListOption<"overrideList", "override", "std::string", "per-tensor grids GLOB:bits[:group] (first match wins; before skip)">,
    Option<"calib", "calib", "std::string", "\"\"", "calibration text file (default: data/calib/default.txt)">,
    Option<"calibTokens", "calib-tokens", "int64_t", "8192", "calibration tokens (8192: where GPTQ saturates on SmolLM2, docs/results/calibration.md)">,
    Option<"calibSeq", "calib-seq", "int64_t", "512", "tokens per calibration sequence">,
    Option<"actOrder", "act-order", "bool", "true", "GPTQ/OSAQ: quantize columns by decreasing Hessian diagonal (SmolLM2 4-bit g64, KLD prose/licences: off 0.231/0.292, on 0.145/0.185; docs/results/llmcompressor.md)">,
    Option<"staticGroups", "static-groups", "bool", "true", "GPTQ/OSAQ: group grids from the original weights, fixed before any column is rounded (with act-order: 0.141/0.178, llm-compressor's actorder=static 0.157/0.208)">,
    Option<"damp", "damp", "double", "0.01", "GPTQ: dampening, as a fraction of mean(diag H)">,
    Option<"awqSamples", "awq-samples", "int64_t", "512", "AWQ: calibration tokens kept per input for the searches">,
    Option<"osaqEps", "osaq-eps", "double", "1e-4", "OSAQ: null-space threshold, fraction of mean(diag H)">,
    Option<"osaqTemp", "osaq-temp", "double", "1.0", "OSAQ: softmax temperature, fraction of the group's max|w|">,
    Option<"osaqMaxRank", "osaq-max-rank", "int64_t", "64", "OSAQ: at most this many null-space directions">,
    Option<"osaqMinTokens", "osaq-min-tokens", "double", "1.0", "OSAQ: use a site's null space only if split A has this many tokens per input column (0: always)">,
    Option<"aaacIters", "aaac-iters", "int64_t", "15", "AAAC: codebook assignment / weighted k-means rounds">,
    Option<"qteaSalient", "qtea-salient", "int64_t", "5", "QTEA: salient columns with a sparse residual, percent of the input width (0..50)">,
    Option<"qteaDeadzone", "qtea-deadzone", "double", "0.96", "QTEA: initial dead zone, fraction of mean|w - beta|">,
    Option<"qteaDecay", "qtea-decay", "double", "1.0", "QTEA: error-feedback decay">,
    Option<"qteaDamp", "qtea-damp", "double", "0.007", "QTEA: Hessian dampening, fraction of mean(diag H)">,
    Option<"hbqTable", "hbq-table", "std::string", "\"mix\"", "HBQ: L2 scale table: mix, fp1, fp10 or int">,
  ];
}

#endif // LLMC_PASSES_QUANT_TD
