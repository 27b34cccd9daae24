//===- Passes.td - Lowering llm to kernel level ------------*- tablegen -*-===//
#ifndef LLMC_PASSES_LOWERING_TD
#define LLMC_PASSES_LOWERING_TD

include "mlir/Pass/PassBase.td"

def LowerToKernelsPass : Pass<"llm-lower-to-kernels", "mlir::ModuleOp"> {
  let summary = "Rewrite llm ops into llmk kernels, with the fusions made explicit";
  let description = [{
    Flattens every `llm.layer` and replaces the llm ops of the model by the
    kernels the runtime runs:

    - `llm.rms_norm` feeding `llm.attention`, `llm.mlp` or `llm.lm_head` is
      fused into that consumer's projection (`norm(...)` operand); a norm
      with other users stays as `llmk.rms_norm`.
    - `llm.attention` becomes `llmk.norm_matmul` (q, k, v as one product),
      `llmk.rope_kv_append` and `llmk.attend`, and its output projection
      `llmk.matmul_add` when its one user is an `llm.add` (the residual add
      is absorbed), else a plain `llmk.norm_matmul`.
    - `llm.mlp` becomes `llmk.norm_gated_matmul` (gate, up and the SwiGLU /
      GeGLU product) and a down projection absorbed into the residual add
      the same way.
    - `llm.moe` becomes `llmk.norm_moe` (the norm before it and the residual
      add after it absorbed the same way): routing and only the routed
      experts' products, in one kernel.
    - `llm.lm_head` becomes `llmk.norm_matmul` (with the final norm).
    - `llm.embed` and any remaining `llm.add` map one to one.

    Ops with no kernel yet (`llm.layer_norm`, attention with q/k/v biases)
    make the pass fail with an error naming the op: the
    compiler then keeps such a model on the reference executor.

    ```mlir
    %n = llm.rms_norm %x, %w {eps = 1.0e-05 : f64} : ...
    %a = llm.attention %n, %wq, %wk, %wv, %wo {layer = 0 : i64, ...} : ...
    %r = llm.add %x, %a : tensor<?x64xf32>
    // becomes
    %qkv = llmk.norm_matmul %x norm(%w), %wq, %wk, %wv {eps = 1.0e-05 : f64} : ...
    %q = llmk.rope_kv_append %qkv {layer = 0 : i64, ...} : ...
    %o = llmk.attend %q {layer = 0 : i64, ...} : ...
    %r = llmk.matmul_add %o, %wo, %x : ...
    ```
  }];
  let dependentDialects = ["::llmc::llmk::LlmkDialect"];
}

def PlanBuffersPass : Pass<"llmk-plan-buffers", "mlir::ModuleOp"> {
  let summary = "Place every kernel activation in one arena (static buffer plan)";
  let description = [{
    Walks the flat llmk ops of each `llm.model` in order, computes each
    activation's live range (definition to last use) and gives it the
    lowest `arena_offset` (floats per token) that overlaps no value live at
    the same time. `llmk.matmul_add` and `llmk.norm_moe` take their
    residual's slot when it is the residual's last use, so the residual
    stream is updated in place.
    The value returned by `llm.return` (the logits) gets no slot: the
    runtime writes it to the caller's buffer. The arena size goes on the
    model as `llmk.arena_floats_per_token`; a step of T tokens uses T times
    that many floats, allocated once for the largest step.
  }];
}

def SelectKernelsPass : Pass<"llmk-select-kernels", "mlir::ModuleOp"> {
  let summary = "Choose each product's weight layouts and activation precision for the target";
  let description = [{
    The compiler's kernel decision, made once and written on every
    `llmk.norm_matmul`, `llmk.norm_gated_matmul`, `llmk.matmul_add` and
    `llmk.norm_moe` (router, gate, up, down; an expert tensor by its slabs;
    the router always row-major with f32 activations, since int8 rounding
    of its input flips the choice between near-tied experts):

    - `layouts`: per weight operand, `rows8` when the target's int8 kernels
      read the format in the eight-row interleaved layout (Q4_0, Q4_1, Q8_0
      and the grouped integers that map onto them exactly; Q5_0/Q5_1 when
      generated kernels are built, which have rows8 kernels for them) and
      the matrix is whole groups of 8 rows of 32-weight blocks; else
      `row_major`. The artifact writer stores rows8 weights packed (the
      runtime maps them and repacks nothing).
    - `activations`: `int8` when some weight of the op has an int8 dot
      product (its input is quantized once per 32-value block), else `f32`.

    `target` names the target description (`x86-64`: every level the
    artifact carries objects for shares these layouts).

    ```mlir
    %qkv = llmk.norm_matmul %x norm(%n), %wq, %wk, %wv {activations = #llmk<activations int8>,
        eps = 1.0e-05 : f64, layouts = [#llmk<layout rows8>, #llmk<layout rows8>, #llmk<layout rows8>]} : ...
    ```
  }];
  let options = [
    Option<"target", "target", "std::string", "\"x86-64\"", "target description (x86-64)">,
  ];
}

#endif // LLMC_PASSES_LOWERING_TD
