//===- LlmkDialect.td - The llmk (kernel-level) dialect ----*- tablegen -*-===//
#ifndef LLMK_DIALECT_TD
#define LLMK_DIALECT_TD

include "mlir/IR/OpBase.td"

def Llmk_Dialect : Dialect {
  let name = "llmk";
  let summary = "Kernel-level form of an llm.model: one op per runtime kernel";
  let description = [{
    `llm-lower-to-kernels` rewrites the llm ops of a model into these ops,
    each of which is one kernel launch of the runtime, with the fusion
    decisions made explicit: RMSNorm inside the projections that read it
    (`llmk.norm_matmul`, `llmk.norm_gated_matmul`), q/k/v as one product
    with one output, SwiGLU as the epilogue of gate/up, RoPE together with
    the KV-cache append (`llmk.rope_kv_append`), the residual add inside the
    output projection (`llmk.matmul_add`). Dequantization is always inside
    the matrix product: a weight keeps its stored element type. Decoder
    layers are flattened; each op carries its `layer`.

    `llmk-plan-buffers` then gives every activation a slot of one arena
    (`arena_offset`, in floats per token: a value of width w lives at
    floats [offset * T, (offset + w) * T) of the arena for a step of T
    tokens) and records the arena size on the model
    (`llmk.arena_floats_per_token`); the logits stay outside it.
  }];
  let cppNamespace = "::llmc::llmk";
  let useDefaultAttributePrinterParser = 1;
}

class Llmk_Op<string mnemonic, list<Trait> traits = []>
    : Op<Llmk_Dialect, mnemonic, traits>;

#endif // LLMK_DIALECT_TD
