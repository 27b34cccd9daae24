//===- LlmTypes.td - llm dialect types ---------------------*- tablegen -*-===//
#ifndef LLM_TYPES_TD
#define LLM_TYPES_TD

include "mlir/IR/AttrTypeBase.td"
include "dialects/llm/IR/LlmDialect.td"

def Llm_QuantType : TypeDef<Llm_Dialect, "Quant"> {
  let mnemonic = "quant";
  let summary = "A block-quantized weight element type";
  let description = [{
    `block` consecutive elements of a row (the innermost dimension) are stored
    together in `bytes` bytes, in the layout named by `format` (e.g. the GGUF
    formats "q8_0", "q4_1", "q4_k"). A tensor of this element type must have
    an innermost dimension that is a multiple of `block`.

    ```mlir
    tensor<576x576x!llm.quant<"q4_1", block = 32, bytes = 20>>
    ```
  }];
  let parameters = (ins StringRefParameter<"storage format name">:$format,
                        "int64_t":$blockSize, "int64_t":$blockBytes);
  let assemblyFormat = "`<` $format `,` `block` `=` $blockSize `,` `bytes` `=` $blockBytes `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Bits per stored weight, e.g. 5.0 for q4_1.
    double getBitsPerWeight() const { return 8.0 * getBlockBytes() / getBlockSize(); }
  }];
}

#endif // LLM_TYPES_TD
