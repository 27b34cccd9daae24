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

#endif // LLMC_PASSES_QUANT_TD
