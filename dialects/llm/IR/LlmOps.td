//===- LlmOps.td - llm dialect operations ------------------*- tablegen -*-===//
#ifndef LLM_OPS_TD
#define LLM_OPS_TD

include "dialects/llm/IR/LlmDialect.td"
include "dialects/llm/IR/LlmTypes.td"
include "dialects/llm/IR/LlmEnums.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/OpAsmInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/RegionKindInterface.td"

// A stored weight: a ranked tensor of f32, f16, bf16 or a quantized format.
def Llm_Weight : RankedTensorOf<[F32, F16, BF16, Llm_QuantType]>;
// Activations are f32 [tokens, features] with a dynamic token count.
def Llm_Activation : 2DTensorOf<[F32]>;
def Llm_Tokens : 1DTensorOf<[I32]>;

//===----------------------------------------------------------------------===//
// Structure
//===----------------------------------------------------------------------===//

def Llm_ModelOp : Llm_Op<"model", [Symbol, IsolatedFromAbove, NoTerminator]> {
  let summary = "A decoder-only language model";
  let description = [{
    The body takes the token ids of one step (`tensor<?xi32>`) and ends with
    `llm.return` of the logits. `config` records the architecture summary
    (hidden_size, vocab_size, context_length, ...); passes that change the
    architecture keep it up to date. When the IR carries the model,
    `tokenizer` holds the tokenizer (its JSON form as `i8` bytes), `source`
    where the model came from (format, path, size, provenance notes) and
    `passes` every pass run on it so far, in order, with all its options
    (appended by llmc compile and llmc-opt alike).

    ```mlir
    llm.model @smollm2 config {architecture = "llama", hidden_size = 576 : i64} {
    ^bb0(%tokens: tensor<?xi32>):
      ...
      llm.return %logits : tensor<?x49152xf32>
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, DictionaryAttr:$config,
                       OptionalAttr<ElementsAttr>:$tokenizer,
                       OptionalAttr<DictionaryAttr>:$source,
                       OptionalAttr<StrArrayAttr>:$passes);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$sym_name `config` $config attr-dict-with-keyword $body";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    mlir::Block &getBodyBlock() { return getBody().front(); }
    mlir::Value getTokens() { return getBodyBlock().getArgument(0); }
  }];
}

def Llm_ReturnOp : Llm_Op<"return", [HasParent<"ModelOp">]> {
  let summary = "The logits a model returns";
  let arguments = (ins Llm_Activation:$logits);
  let assemblyFormat = "$logits attr-dict `:` type($logits)";
}

def Llm_LayerOp : Llm_Op<"layer", [SingleBlock,
    AllTypesMatch<["input", "result"]>]> {
  let summary = "One decoder layer: the residual stream in, the residual stream out";
  let description = [{
    Groups the ops of decoder layer `index`. The block argument is the
    incoming residual stream; `llm.yield` gives the outgoing one. Depth
    pruning removes a whole `llm.layer`, its users then read its input.

    ```mlir
    %h1 = llm.layer 0 (%h0 : tensor<?x576xf32>) {
    ^bb0(%x: tensor<?x576xf32>):
      ...
      llm.yield %y : tensor<?x576xf32>
    }
    ```
  }];
  let arguments = (ins I64Attr:$index, Llm_Activation:$input);
  let results = (outs Llm_Activation:$result);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$index ` ` `(` $input `:` type($input) `)` attr-dict-with-keyword $body";
  let hasVerifier = 1;
  let skipDefaultBuilders = 1;
  let builders = [OpBuilder<(ins "int64_t":$index, "mlir::Value":$input)>];
}

def Llm_YieldOp : Llm_Op<"yield", [Pure, Terminator, HasParent<"LayerOp">]> {
  let summary = "The residual stream a layer produces";
  let arguments = (ins Llm_Activation:$value);
  let assemblyFormat = "$value attr-dict `:` type($value)";
}

//===----------------------------------------------------------------------===//
// Weights
//===----------------------------------------------------------------------===//

def Llm_WeightOp : Llm_Op<"weight", [Pure]> {
  let summary = "A named weight and, when the IR owns the model, its bytes";
  let description = [{
    Names a tensor of the model. Element types: f32, f16, bf16 or
    `!llm.quant<...>`.

    When the IR carries the model (every `llmc compile`, and `llmc import
    --emit-resources`), `value` holds the weight's stored bytes as a 1-D
    `i8` elements attribute: a `dense_resource` blob (mmap-backed when read
    from bytecode or imported from a model file; nothing is copied) or, in
    hand-written tests, a `dense<...>` literal of the weight's own element
    type. Formats with side data keep it in `aux`; `transform` records what
    produced the bytes (method, bits, error), copied to the artifact's
    manifest. Passes read and rewrite weights only through these attributes.
    Without `value` the IR describes shapes and types only (what the
    importers' and type-level lit tests check).

    ```mlir
    %wq = llm.weight "blk.0.attn_q.weight" {value = dense_resource<blk.0.attn_q.weight> : tensor<207360xi8>}
        : tensor<576x576x!llm.quant<"q4_1", block = 32, bytes = 20>>
    ```
  }];
  let arguments = (ins StrAttr:$name, OptionalAttr<ElementsAttr>:$value,
                       OptionalAttr<ElementsAttr>:$aux, OptionalAttr<DictionaryAttr>:$transform);
  let results = (outs Llm_Weight:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Compute
//===----------------------------------------------------------------------===//

def Llm_EmbedOp : Llm_Op<"embed", [Pure]> {
  let summary = "Token embedding lookup";
  let description = [{
    `%h = llm.embed %tokens, %table : tensor<?xi32>, tensor<512x64xf32> -> tensor<?x64xf32>`
  }];
  let arguments = (ins Llm_Tokens:$tokens, Llm_Weight:$table);
  let results = (outs Llm_Activation:$result);
  let assemblyFormat = "$tokens `,` $table attr-dict `:` type($tokens) `,` type($table) `->` type($result)";
  let hasVerifier = 1;
}

def Llm_RMSNormOp : Llm_Op<"rms_norm", [Pure, AllTypesMatch<["x", "result"]>]> {
  let summary = "RMS normalization: x / sqrt(mean(x^2) + eps) * weight";
  let arguments = (ins Llm_Activation:$x, Llm_Weight:$weight, F64Attr:$eps);
  let results = (outs Llm_Activation:$result);
  let assemblyFormat = "$x `,` $weight attr-dict `:` type($x) `,` type($weight)";
  let hasVerifier = 1;
}

def Llm_LayerNormOp : Llm_Op<"layer_norm", [Pure, AllTypesMatch<["x", "result"]>]> {
  let summary = "Layer normalization with a weight and an optional bias";
  let arguments = (ins Llm_Activation:$x, Llm_Weight:$weight, Optional<Llm_Weight>:$bias, F64Attr:$eps);
  let results = (outs Llm_Activation:$result);
  let assemblyFormat = "$x `,` $weight (`,` $bias^)? attr-dict `:` type($x) `,` type($weight) (`,` type($bias)^)?";
  let hasVerifier = 1;
}

def Llm_AddOp : Llm_Op<"add", [Pure, Commutative, AllTypesMatch<["lhs", "rhs", "result"]>]> {
  let summary = "Residual addition";
  let arguments = (ins Llm_Activation:$lhs, Llm_Activation:$rhs);
  let results = (outs Llm_Activation:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

def Llm_AttentionOp : Llm_Op<"attention", [AttrSizedOperandSegments,
    AllTypesMatch<["x", "result"]>]> {
  let summary = "Causal self-attention with projections, RoPE and a KV cache";
  let description = [{
    Projects `x` [T, D] to queries (num_heads × head_dim), keys and values
    (num_kv_heads × head_dim; MHA when equal, GQA when fewer, MQA when one),
    adds the optional q/k/v biases, rotates q and k with RoPE (`rope_style`
    "interleaved": pairs (2i, 2i+1), the GGUF/Meta order; "half": pairs
    (i, i + head_dim/2), the Hugging Face order) at base `rope_theta`, attends
    causally over the layer's KV cache (slot `layer`) and projects back with
    `wo`. `head_dim` is independent of D. `kv_policy` is the slot a KV-cache
    policy pass fills; absent means the full cache.

    ```mlir
    %a = llm.attention %x, %wq, %wk, %wv, %wo {layer = 0 : i64, num_heads = 9 : i64,
           num_kv_heads = 3 : i64, head_dim = 64 : i64, rope_theta = 1.0e+05 : f64,
           rope_style = #llm<rope_style interleaved>} : (tensor<?x576xf32>, ...) -> tensor<?x576xf32>
    ```
  }];
  let arguments = (ins Llm_Activation:$x, Llm_Weight:$wq, Llm_Weight:$wk,
                       Llm_Weight:$wv, Llm_Weight:$wo,
                       Optional<Llm_Weight>:$bq, Optional<Llm_Weight>:$bk,
                       Optional<Llm_Weight>:$bv,
                       I64Attr:$layer, I64Attr:$num_heads, I64Attr:$num_kv_heads,
                       I64Attr:$head_dim, F64Attr:$rope_theta, Llm_RopeStyleAttr:$rope_style,
                       DefaultValuedAttr<BoolAttr, "true">:$causal,
                       OptionalAttr<DictionaryAttr>:$kv_policy);
  let results = (outs Llm_Activation:$result);
  let assemblyFormat = [{
    $x `,` $wq `,` $wk `,` $wv `,` $wo (`bias` `(` $bq^ `,` $bk `,` $bv `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Llm_MLPOp : Llm_Op<"mlp", [Pure, AllTypesMatch<["x", "result"]>]> {
  let summary = "Gated MLP: down(act(gate(x)) * up(x))";
  let arguments = (ins Llm_Activation:$x, Llm_Weight:$gate, Llm_Weight:$up,
                       Llm_Weight:$down, Llm_ActivationFnAttr:$activation);
  let results = (outs Llm_Activation:$result);
  let assemblyFormat = "$x `,` $gate `,` $up `,` $down attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Llm_MoEOp : Llm_Op<"moe", [Pure, AllTypesMatch<["x", "result"]>]> {
  let summary = "Mixture of gated-MLP experts with a top-k router";
  let description = [{
    `router` [E, D] scores experts; softmax over all E, keep the `top_k`
    largest; with `renormalize` (Mixtral) their weights are divided by their
    sum. Expert e computes down[e](act(gate[e] x) * up[e] x) with stacked
    weights gate/up [E, F, D] and down [E, D, F].

    `gating`: `softmax` (the default: each routed expert's output is scaled
    by its softmax weight as above) or `unit` (MoEfied dense MLPs, whose
    experts are slices of one MLP: the router only selects, every routed
    expert's output is added with weight 1, `renormalize` is ignored).

    Adaptive activation (llm-prune-experts adaptive-energy=τ): with
    `energy_threshold` τ in (0, 1] and `expert_energy` ν (one mean output
    norm per expert, from calibration), each token runs only the smallest
    prefix of its top-k experts, ordered by predicted energy, whose energy
    reaches τ of the top-k's: g_e ν_e with softmax gating (the gates then
    renormalized over the experts that run with `renormalize`); with unit
    gating the router's output max(r_e, 0), which llm-moefy fits to the
    token's output norm of expert e.
  }];
  let arguments = (ins Llm_Activation:$x, Llm_Weight:$router, Llm_Weight:$gate,
                       Llm_Weight:$up, Llm_Weight:$down, I64Attr:$top_k,
                       Llm_ActivationFnAttr:$activation, DefaultValuedAttr<BoolAttr, "true">:$renormalize,
                       DefaultValuedAttr<Llm_MoEGatingAttr, "::llmc::llm::MoEGating::Softmax">:$gating,
                       OptionalAttr<DenseF32ArrayAttr>:$expert_energy,
                       DefaultValuedAttr<F64Attr, "0.0">:$energy_threshold);
  let results = (outs Llm_Activation:$result);
  let assemblyFormat = "$x `,` $router `,` $gate `,` $up `,` $down attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Llm_LMHeadOp : Llm_Op<"lm_head", [Pure]> {
  let summary = "Output projection to vocabulary logits (tied or untied)";
  let description = [{
    With tied embeddings `weight` is the same `llm.weight` as the embedding table.
  }];
  let arguments = (ins Llm_Activation:$x, Llm_Weight:$weight);
  let results = (outs Llm_Activation:$result);
  let assemblyFormat = "$x `,` $weight attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Speculative decoding
//===----------------------------------------------------------------------===//

def Llm_SpeculateOp : Llm_Op<"speculate", [AttrSizedOperandSegments, HasParent<"ModelOp">]> {
  let summary = "Draft machinery for lossless speculative decoding";
  let description = [{
    Attached by `llm-spec-attach`: how the runtime drafts the next tokens
    that one target pass then verifies (greedy: exact match; sampling: the
    lossless rejection rule), carried into the artifact's manifest
    ("speculation") and shown by `llmc inspect`. Not a compute op of the
    step: it has no result and the logits do not depend on it (it is never
    erased as dead code: it has effects).

    `ngram`: prompt lookup, no weights (`ngram` = the longest context
    suffix matched).

    `medusa`: `heads` holds K maps [K, D, 2D] and `bias` [K, D] over the
    final hidden state `hidden` (the LM head's input, after the final
    norm) and a token embedding: head k maps [h_t; e(x_{t+k})] (x_{t+k}:
    the token the model chose after h_t for k = 1, head k-1's draft after
    that) to a prediction of h_{t+k}, which the model's own LM head,
    restricted to the rows `draft_vocab` lists (sorted token ids), turns
    into a draft of token t+k+1. `fit` records how the heads were fitted
    (calibration, ridge, held-out agreement per head).

    `self`: self-speculation, no weights: the drafter is the model's own
    kernel plan without the blocks `skip_blocks` lists (ascending block
    indices of this model; chosen by llm-prune-depth's scores), sharing
    every weight, with its own KV cache.

    `tree_nodes` (medusa only; 0: chains): the runtime drafts trees of up
    to this many tokens (the heads' likeliest continuations, `max_draft`
    deep at most) and verifies each in one pass with tree attention.

    ```mlir
    llm.speculate medusa (%hn : tensor<?x576xf32>) heads(%w, %b : tensor<4x576x1152xf32>, tensor<4x576xf32>) {draft_vocab = array<i32: 0, 1, 5>, max_draft = 4 : i64}
    llm.speculate self {max_draft = 4 : i64, skip_blocks = array<i64: 4, 8, 13, 15>}
    ```
  }];
  let arguments = (ins Llm_SpecMethodAttr:$method, Optional<Llm_Activation>:$hidden,
                       Optional<Llm_Weight>:$heads, Optional<Llm_Weight>:$bias,
                       DefaultValuedAttr<I64Attr, "4">:$max_draft,
                       DefaultValuedAttr<I64Attr, "3">:$ngram,
                       OptionalAttr<DenseI32ArrayAttr>:$draft_vocab,
                       OptionalAttr<DictionaryAttr>:$fit,
                       OptionalAttr<DenseI64ArrayAttr>:$skip_blocks,
                       DefaultValuedAttr<I64Attr, "0">:$tree_nodes);
  let assemblyFormat = [{
    $method (`(` $hidden^ `:` type($hidden) `)`)?
    (`heads` `(` $heads^ `,` $bias `:` type($heads) `,` type($bias) `)`)? attr-dict
  }];
  let hasVerifier = 1;
}

#endif // LLM_OPS_TD
