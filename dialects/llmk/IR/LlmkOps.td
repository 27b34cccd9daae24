//===- LlmkOps.td - llmk dialect operations ----------------*- tablegen -*-===//
#ifndef LLMK_OPS_TD
#define LLMK_OPS_TD

include "dialects/llmk/IR/LlmkDialect.td"
include "dialects/llmk/IR/LlmkAttrs.td"
include "dialects/llm/IR/LlmTypes.td"
include "dialects/llm/IR/LlmEnums.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Llmk_Weight : RankedTensorOf<[F32, F16, BF16, Llm_QuantType]>;
def Llmk_Activation : 2DTensorOf<[F32]>;

def Llmk_EmbedOp : Llmk_Op<"embed", [Pure]> {
  let summary = "Rows of the embedding table for the step's token ids";
  let arguments = (ins 1DTensorOf<[I32]>:$tokens, Llmk_Weight:$table);
  let results = (outs Llmk_Activation:$result);
  let assemblyFormat = "$tokens `,` $table attr-dict `:` functional-type(operands, results)";
}

def Llmk_NormMatmulOp : Llmk_Op<"norm_matmul", [Pure, AttrSizedOperandSegments]> {
  let summary = "Optional RMSNorm, then x * [W0; W1; ...]^T into one output";
  let description = [{
    With `norm` (and `eps`) the input rows are RMS-normalised and scaled by
    `norm` first (computed once per row, never stored). The products with
    every weight share that input and write side by side, so the result
    width is the sum of the weights' rows: q, k and v of an attention layer
    are one kernel with one [T, q + k + v] output.
  }];
  let arguments = (ins Llmk_Activation:$x, Optional<Llmk_Weight>:$norm,
                       Variadic<Llmk_Weight>:$weights, OptionalAttr<F64Attr>:$eps,
                       OptionalAttr<Llmk_WeightLayoutArray>:$layouts,
                       OptionalAttr<Llmk_ActivationPrecisionAttr>:$activations);
  let results = (outs Llmk_Activation:$result);
  let assemblyFormat = [{
    $x (`norm` `(` $norm^ `)`)? `,` $weights attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Llmk_NormGatedMatmulOp : Llmk_Op<"norm_gated_matmul", [Pure]> {
  let summary = "Optional RMSNorm, then act(x * gate^T) * (x * up^T) (SwiGLU / GeGLU)";
  let description = [{
    gate and up share the (normalised) input; each block of output rows gets
    its activation product as soon as both products have it, so neither
    product is stored.
  }];
  let arguments = (ins Llmk_Activation:$x, Optional<Llmk_Weight>:$norm, Llmk_Weight:$gate,
                       Llmk_Weight:$up, OptionalAttr<F64Attr>:$eps, Llm_ActivationFnAttr:$activation,
                       OptionalAttr<Llmk_WeightLayoutArray>:$layouts,
                       OptionalAttr<Llmk_ActivationPrecisionAttr>:$activations);
  let results = (outs Llmk_Activation:$result);
  let assemblyFormat = [{
    $x (`norm` `(` $norm^ `)`)? `,` $gate `,` $up attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Llmk_MatmulAddOp : Llmk_Op<"matmul_add", [Pure]> {
  let summary = "residual + x * W^T (the residual add inside the projection)";
  let description = [{
    The output projection of attention or the MLP's down projection, whose
    result is added to the residual stream as it is written. The buffer
    planner lets the result take the residual's slot when this is the
    residual's last use (in place).
  }];
  let arguments = (ins Llmk_Activation:$x, Llmk_Weight:$weight, Llmk_Activation:$residual,
                       OptionalAttr<Llmk_WeightLayoutArray>:$layouts,
                       OptionalAttr<Llmk_ActivationPrecisionAttr>:$activations);
  let results = (outs Llmk_Activation:$result);
  let assemblyFormat = "$x `,` $weight `,` $residual attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Llmk_NormMoeOp : Llmk_Op<"norm_moe", [Pure, AttrSizedOperandSegments]> {
  let summary = "Optional RMSNorm, top-k routing, the routed gated-MLP experts, optional residual";
  let description = [{
    The kernel form of llm.moe (its `top_k`, `activation`, `renormalize`,
    `gating`, `expert_energy` and `energy_threshold` mean the same): `router`
    [E, D] scores the (normalised) rows of x; each row runs only its routed
    experts (adaptive activation may run fewer than top_k), expert e being
    down[e](act(gate[e] x) * up[e] x) with gate/up [E, F, D] and down
    [E, D, F], and their weighted sum is the result, added to `residual`
    when the MoE's output fed the residual add (which disappears). Rows
    reach an expert only when routed to it: nothing runs densely.
    `layouts` (llmk-select-kernels) has one entry per weight (router, gate,
    up, down); an expert tensor in rows8 is packed slab by slab.
  }];
  let arguments = (ins Llmk_Activation:$x, Optional<Llmk_Weight>:$norm, Llmk_Weight:$router,
                       Llmk_Weight:$gate, Llmk_Weight:$up, Llmk_Weight:$down,
                       Optional<Llmk_Activation>:$residual, OptionalAttr<F64Attr>:$eps,
                       I64Attr:$top_k, Llm_ActivationFnAttr:$activation,
                       DefaultValuedAttr<BoolAttr, "true">:$renormalize,
                       DefaultValuedAttr<Llm_MoEGatingAttr, "::llmc::llm::MoEGating::Softmax">:$gating,
                       OptionalAttr<DenseF32ArrayAttr>:$expert_energy,
                       DefaultValuedAttr<F64Attr, "0.0">:$energy_threshold,
                       OptionalAttr<Llmk_WeightLayoutArray>:$layouts,
                       OptionalAttr<Llmk_ActivationPrecisionAttr>:$activations);
  let results = (outs Llmk_Activation:$result);
  let assemblyFormat = [{
    $x (`norm` `(` $norm^ `)`)? `,` $router `,` $gate `,` $up `,` $down
    (`residual` `(` $residual^ `)`)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Llmk_RopeKvAppendOp : Llmk_Op<"rope_kv_append"> {
  let summary = "RoPE on q and k, append k and v to the layer's KV cache, return q";
  let description = [{
    `qkv` is [T, (heads + 2 * kv_heads) * head_dim]: q, then k, then v.
    q and k are rotated at positions pos..pos+T-1 (`rope_style` as in
    llm.attention); k and v go into KV-cache slot `layer`; the result is the
    rotated q [T, heads * head_dim]. Writes the cache: not Pure.
  }];
  let arguments = (ins Llmk_Activation:$qkv, I64Attr:$layer, I64Attr:$num_heads,
                       I64Attr:$num_kv_heads, I64Attr:$head_dim, F64Attr:$rope_theta,
                       Llm_RopeStyleAttr:$rope_style);
  let results = (outs Llmk_Activation:$result);
  let assemblyFormat = "$qkv attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Llmk_AttendOp : Llmk_Op<"attend"> {
  let summary = "Attention of the step's queries over KV-cache slot `layer`";
  let description = [{
    Causal (unless `causal` is false) GQA attention of q [T, heads *
    head_dim] over the entries of the layer's cache, which the cache's
    `kv_policy` (copied from llm.attention) may have compacted per KV head.
    Reads and updates the cache's policy state: not Pure.
  }];
  let arguments = (ins Llmk_Activation:$q, I64Attr:$layer, I64Attr:$num_heads,
                       I64Attr:$num_kv_heads, I64Attr:$head_dim,
                       DefaultValuedAttr<BoolAttr, "true">:$causal,
                       OptionalAttr<DictionaryAttr>:$kv_policy);
  let results = (outs Llmk_Activation:$result);
  let assemblyFormat = "$q attr-dict `:` functional-type(operands, results)";
}

def Llmk_RMSNormOp : Llmk_Op<"rms_norm", [Pure]> {
  let summary = "RMSNorm that no consumer could absorb";
  let arguments = (ins Llmk_Activation:$x, Llmk_Weight:$weight, F64Attr:$eps);
  let results = (outs Llmk_Activation:$result);
  let assemblyFormat = "$x `,` $weight attr-dict `:` functional-type(operands, results)";
}

def Llmk_AddOp : Llmk_Op<"add", [Pure]> {
  let summary = "Element-wise sum that no producer could absorb";
  let arguments = (ins Llmk_Activation:$lhs, Llmk_Activation:$rhs);
  let results = (outs Llmk_Activation:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
}

#endif // LLMK_OPS_TD
