//===- LlmkAttrs.td - llmk kernel-selection attributes -----*- tablegen -*-===//
// What llmk-select-kernels decides per product and the runtime executes:
// the layout each weight is stored in and the precision of the activations
// the product reads. Typed enums, one definition each.
#ifndef LLMK_ATTRS_TD
#define LLMK_ATTRS_TD

include "dialects/llmk/IR/LlmkDialect.td"
include "mlir/IR/EnumAttr.td"

def Llmk_LayoutRowMajor : I32EnumAttrCase<"row_major", 0>;
def Llmk_LayoutRows8 : I32EnumAttrCase<"rows8", 1>;
def Llmk_WeightLayout : I32EnumAttr<"WeightLayout",
    "how a weight's bytes are laid out for its kernel: row_major (as stored by the "
    "format) or rows8 (eight rows interleaved block by block, written at compile time)",
    [Llmk_LayoutRowMajor, Llmk_LayoutRows8]> {
  let cppNamespace = "::llmc::llmk";
  let genSpecializedAttr = 0;
}
def Llmk_WeightLayoutAttr : EnumAttr<Llmk_Dialect, Llmk_WeightLayout, "layout">;
def Llmk_WeightLayoutArray : TypedArrayAttrBase<Llmk_WeightLayoutAttr, "weight layouts">;

def Llmk_PrecisionF32 : I32EnumAttrCase<"f32", 0>;
def Llmk_PrecisionInt8 : I32EnumAttrCase<"int8", 1>;
def Llmk_ActivationPrecision : I32EnumAttr<"ActivationPrecision",
    "the precision of the activations a product reads: f32, or int8 (rows quantized "
    "per 32-value block, integer dot products)",
    [Llmk_PrecisionF32, Llmk_PrecisionInt8]> {
  let cppNamespace = "::llmc::llmk";
  let genSpecializedAttr = 0;
}
def Llmk_ActivationPrecisionAttr : EnumAttr<Llmk_Dialect, Llmk_ActivationPrecision, "activations">;

#endif // LLMK_ATTRS_TD
