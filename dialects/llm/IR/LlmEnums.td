//===- LlmEnums.td - llmc's closed sets, defined once -------*- tablegen -*-===//
// Every closed set the IR, the passes and the runtime share. mlir-tblgen
// makes the dialect's enums and attributes of them (::llmc::llm); llmc-tblgen
// makes the runtime's plain C++ view of the same records
// (runtime/include/llmc/ir_enums.h, ::llmc): one definition each.
// A symbol is the C++ enumerator; the string is the spelling in IR
// attributes, pass options and artifact manifests.
#ifndef LLM_ENUMS_TD
#define LLM_ENUMS_TD

include "dialects/llm/IR/LlmDialect.td"
include "mlir/IR/EnumAttr.td"

class Llm_Enum<string name, string summary, list<I32EnumAttrCase> cases>
    : I32EnumAttr<name, summary, cases> {
  let cppNamespace = "::llmc::llm";
  let genSpecializedAttr = 0;
}

def Llm_RopeStyleEnum : Llm_Enum<"RopeStyle",
    "which dimensions RoPE rotates together: interleaved pairs (2i, 2i+1) (GGUF llama, "
    "llama2.c) or halves (i, i + d/2) (Hugging Face rotate_half)", [
  I32EnumAttrCase<"Interleaved", 0, "interleaved">,
  I32EnumAttrCase<"Half", 1, "half">]>;
def Llm_RopeStyleAttr : EnumAttr<Llm_Dialect, Llm_RopeStyleEnum, "rope_style">;

def Llm_ActivationFnEnum : Llm_Enum<"Activation", "the gated MLP's activation", [
  I32EnumAttrCase<"SiLU", 0, "silu">,
  I32EnumAttrCase<"GELU", 1, "gelu">]>;
def Llm_ActivationFnAttr : EnumAttr<Llm_Dialect, Llm_ActivationFnEnum, "activation">;

def Llm_MoEGatingEnum : Llm_Enum<"MoEGating", "how an MoE layer weights its routed experts", [
  I32EnumAttrCase<"Softmax", 0, "softmax">,
  I32EnumAttrCase<"Unit", 1, "unit">]>;
def Llm_MoEGatingAttr : EnumAttr<Llm_Dialect, Llm_MoEGatingEnum, "moe_gating">;

def Llm_ExpertPruneMethodEnum : Llm_Enum<"ExpertPruneMethod",
    "how llm-prune-experts ranks the experts of an MoE layer", [
  I32EnumAttrCase<"OMP", 0, "omp">,
  I32EnumAttrCase<"Frequency", 1, "frequency">,
  I32EnumAttrCase<"Norm", 2, "norm">,
  I32EnumAttrCase<"Greedy", 3, "greedy">]>;

def Llm_ExpertAllocationEnum : Llm_Enum<"ExpertAllocation",
    "how llm-prune-experts shares the kept experts among layers", [
  I32EnumAttrCase<"Uniform", 0, "uniform">,
  I32EnumAttrCase<"Waterfill", 1, "waterfill">]>;

def Llm_MoefyClusteringEnum : Llm_Enum<"MoefyClustering",
    "how llm-moefy groups an MLP's neurons into experts", [
  I32EnumAttrCase<"Coactivation", 0, "coactivation">,
  I32EnumAttrCase<"Weights", 1, "weights">]>;

def Llm_SpecMethodEnum : Llm_Enum<"SpecMethod",
    "how llm.speculate drafts tokens for lossless speculative decoding", [
  I32EnumAttrCase<"Ngram", 0, "ngram">,
  I32EnumAttrCase<"Medusa", 1, "medusa">,
  I32EnumAttrCase<"Self", 2, "self">]>;
def Llm_SpecMethodAttr : EnumAttr<Llm_Dialect, Llm_SpecMethodEnum, "spec_method">;

def Llm_NormKindEnum : Llm_Enum<"NormKind", "the normalization of a model", [
  I32EnumAttrCase<"RMSNorm", 0, "rms_norm">,
  I32EnumAttrCase<"LayerNorm", 1, "layer_norm">]>;

def Llm_QuantMethodEnum : Llm_Enum<"QuantMethod", "a weight quantization method of llm-quantize", [
  I32EnumAttrCase<"RTN", 0, "rtn">,
  I32EnumAttrCase<"GPTQ", 1, "gptq">,
  I32EnumAttrCase<"AWQ", 2, "awq">,
  I32EnumAttrCase<"OSAQ", 3, "osaq">,
  I32EnumAttrCase<"AAAC", 4, "aaac">,
  I32EnumAttrCase<"QTEA", 5, "qtea">,
  I32EnumAttrCase<"HBQ", 6, "hbq">]>;

def Llm_KvMethodEnum : Llm_Enum<"KvMethod", "a KV-cache policy", [
  I32EnumAttrCase<"Full", 0, "full">,
  I32EnumAttrCase<"Streaming", 1, "streaming">,
  I32EnumAttrCase<"H2O", 2, "h2o">,
  I32EnumAttrCase<"SnapKV", 3, "snapkv">,
  I32EnumAttrCase<"PyramidKV", 4, "pyramidkv">,
  I32EnumAttrCase<"DepthKV", 5, "depthkv">,
  I32EnumAttrCase<"RestKV", 6, "restkv">,
  I32EnumAttrCase<"LaProx", 7, "laprox">,
  I32EnumAttrCase<"CapKV", 8, "capkv">,
  I32EnumAttrCase<"RdKV", 9, "rdkv">,
  I32EnumAttrCase<"InertiaKV", 10, "inertiakv">,
  I32EnumAttrCase<"Random", 11, "random">]>;

def Llm_KvModeEnum : Llm_Enum<"KvMode", "when a KV-cache policy compresses", [
  I32EnumAttrCase<"Prefill", 0, "prefill">,
  I32EnumAttrCase<"Decode", 1, "decode">,
  I32EnumAttrCase<"Both", 2, "both">]>;

def Llm_KvQuantEnum : Llm_Enum<"KvQuant", "how the KV cache stores its entries", [
  I32EnumAttrCase<"None", 0, "none">,
  I32EnumAttrCase<"PolyKV", 1, "polykv">]>;

def Llm_DepthPruneMethodEnum : Llm_Enum<"DepthPruneMethod",
    "how llm-prune-depth scores decoder blocks", [
  I32EnumAttrCase<"WRP", 0, "wrp">,
  I32EnumAttrCase<"Magnitude", 1, "magnitude">,
  I32EnumAttrCase<"BlockInfluence", 2, "block-influence">,
  I32EnumAttrCase<"Angular", 3, "angular">]>;

def Llm_WrpSignatureEnum : Llm_Enum<"WrpSignature",
    "what WRP compares of two blocks' residual-stream writers", [
  I32EnumAttrCase<"Gram", 0, "gram">,
  I32EnumAttrCase<"RowEnergy", 1, "row-energy">]>;

#endif // LLM_ENUMS_TD
