// RUN: llmc-opt %s --pass-pipeline='builtin.module(llm-quantize)' | FileCheck %s --check-prefix=A4
// RUN: llmc-opt %s --pass-pipeline='builtin.module(llm-quantize{method=rtn bits=3 group=32 sym=true skip=token_embd.weight})' | FileCheck %s --check-prefix=S3
// RUN: llmc-opt %s --pass-pipeline='builtin.module(llm-quantize{bits=2 group=128})' | FileCheck %s --check-prefix=A2

// Under llmc-opt method=rtn retypes matrix weights to gq formats (default:
// 4-bit asymmetric, groups of 64); norms keep their type, skipped names stay.
// A4-LABEL: llm.model @m
// A4:   llm.weight "token_embd.weight" : tensor<64x128x!llm.quant<"gq4a_g64", block = 64, bytes = 36>>
// A4:   llm.weight "blk.0.attn_norm.weight" : tensor<128xf32>
// A4:   llm.weight "blk.0.ffn_gate.weight" : tensor<256x128x!llm.quant<"gq4a_g64", block = 64, bytes = 36>>
// A4:   llm.weight "blk.0.ffn_down.weight" : tensor<128x256x!llm.quant<"gq4a_g64", block = 64, bytes = 36>>

// S3:   llm.weight "token_embd.weight" : tensor<64x128xf32>
// S3:   llm.weight "blk.0.attn_norm.weight" : tensor<128xf32>
// S3:   llm.weight "blk.0.ffn_gate.weight" : tensor<256x128x!llm.quant<"gq3s_g32", block = 32, bytes = 14>>
// S3:   llm.lm_head {{.+}} : (tensor<?x128xf32>, tensor<64x128xf32>) -> tensor<?x64xf32>

// A2:   llm.weight "blk.0.ffn_down.weight" : tensor<128x256x!llm.quant<"gq2a_g128", block = 128, bytes = 36>>
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "token_embd.weight" : tensor<64x128xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<64x128xf32> -> tensor<?x128xf32>
  %h = llm.layer 0 (%x : tensor<?x128xf32>) {
  ^bb0(%a: tensor<?x128xf32>):
    %nw = llm.weight "blk.0.attn_norm.weight" : tensor<128xf32>
    %n = llm.rms_norm %a, %nw {eps = 1.0e-05 : f64} : tensor<?x128xf32>, tensor<128xf32>
    %g = llm.weight "blk.0.ffn_gate.weight" : tensor<256x128xf32>
    %u = llm.weight "blk.0.ffn_up.weight" : tensor<256x128xf32>
    %d = llm.weight "blk.0.ffn_down.weight" : tensor<128x256xf32>
    %m = llm.mlp %n, %g, %u, %d {activation = #llm<activation silu>} : (tensor<?x128xf32>, tensor<256x128xf32>, tensor<256x128xf32>, tensor<128x256xf32>) -> tensor<?x128xf32>
    %o = llm.add %a, %m : tensor<?x128xf32>
    llm.yield %o : tensor<?x128xf32>
  }
  %l = llm.lm_head %h, %e : (tensor<?x128xf32>, tensor<64x128xf32>) -> tensor<?x64xf32>
  llm.return %l : tensor<?x64xf32>
}
