//===- LlmDialect.td - The llm dialect ---------------------*- tablegen -*-===//
#ifndef LLM_DIALECT_TD
#define LLM_DIALECT_TD

include "mlir/IR/OpBase.td"

def Llm_Dialect : Dialect {
  let name = "llm";
  let summary = "Decoder-only transformer models at the level optimization passes work on";
  let description = [{
    A model is an `llm.model` holding embedding, decoder layers (`llm.layer`)
    and the LM head. Weights are `llm.weight` ops: named, typed references into
    an external weight store (never dense attributes), so importing a model
    costs nothing per weight byte. A weight's element type is f32, f16, bf16 or
    a block-quantized `!llm.quant<...>` format described by its parameters, so
    a pass can introduce a new format without touching any op.
  }];
  let cppNamespace = "::llmc::llm";
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
  let extraClassDeclaration = [{ void registerTypes(); }];
}

class Llm_Op<string mnemonic, list<Trait> traits = []>
    : Op<Llm_Dialect, mnemonic, traits>;

#endif // LLM_DIALECT_TD
