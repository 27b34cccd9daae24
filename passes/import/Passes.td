//===- Passes.td - Import passes ---------------------------*- tablegen -*-===//
#ifndef LLMC_PASSES_IMPORT_TD
#define LLMC_PASSES_IMPORT_TD

include "mlir/Pass/PassBase.td"

def RaiseOnnxPass : Pass<"llm-raise-onnx", "mlir::ModuleOp"> {
  let summary = "Raise an ONNX graph in generic form (onnx.* ops) into an llm.model";
  let description = [{
    The module holds an ONNX decoder graph as `llmc import model.onnx
    --onnx-generic` writes it: one unregistered `onnx.<Op>` operation per
    node (its ONNX inputs and outputs by name in `onnx.inputs` and
    `onnx.outputs`, its attributes as `a.<name>`), `onnx.Input` for the
    graph's inputs and `onnx.Constant` for every initializer and Constant
    (`value`: the bytes as a dense_resource blob; `onnx.type`, the ONNX
    element type; `onnx.shape`). The pass recognises the decoder (RMSNorm,
    attention with GQA and RoPE, gated MLP or Mixtral MoE, the head; the
    patterns are those of compiler/import/onnx) and replaces the graph by
    the `llm.model` the ONNX reader gives for the same file, owning its
    weights. Anything the logits depend on that no pattern accounts for is
    an error naming the ONNX node. Parse the input with
    --allow-unregistered-dialect.
  }];
}

#endif
