// RUN: llmc-opt %s --pass-pipeline='builtin.module(llm-quantize{method=hbq bits=4 group=64})' | FileCheck %s --check-prefix=A
// RUN: llmc-opt %s --pass-pipeline='builtin.module(llm-quantize{method=hbq bits=4 group=128 hbq-table=int skip=token_embd.weight})' | FileCheck %s --check-prefix=E
// RUN: llmc-opt %s --pass-pipeline='builtin.module(llm-quantize{method=hbq bits=2 group=32 hbq-table=fp10})' | FileCheck %s --check-prefix=T2
// RUN: llmc-opt %s --pass-pipeline='builtin.module(llm-quantize{method=hbq bits=3 group=64 hbq-table=fp1 override=blk.0.ffn_down.weight:4:32})' | FileCheck %s --check-prefix=OV
// RUN: not llmc-opt %s --pass-pipeline='builtin.module(llm-quantize{method=hbq bits=4 group=48})' 2>&1 | FileCheck %s --check-prefix=BLOCK
// RUN: not llmc-opt %s --pass-pipeline='builtin.module(llm-quantize{method=hbq bits=4 group=96})' 2>&1 | FileCheck %s --check-prefix=WIDTH
// RUN: not llmc-opt %s --pass-pipeline='builtin.module(llm-quantize{method=hbq bits=4 group=64 hbq-table=fp2})' 2>&1 | FileCheck %s --check-prefix=TABLE
// RUN: not llmc-opt %s --pass-pipeline='builtin.module(llm-quantize{method=hbq bits=5 group=64})' 2>&1 | FileCheck %s --check-prefix=BITS

// Under llmc-opt method=hbq only retypes matrix weights to hbq<bits>_b<group>
// (3 + group*bits/8 bytes per L1 block); norms keep their type, skipped
// names stay, override grids are grouped integers.
// A-LABEL: llm.model @m
// A:   llm.weight "token_embd.weight" : tensor<64x128x!llm.quant<"hbq4_b64", block = 64, bytes = 35>>
// A:   llm.weight "blk.0.attn_norm.weight" : tensor<128xf32>
// A:   llm.weight "blk.0.ffn_gate.weight" : tensor<256x128x!llm.quant<"hbq4_b64", block = 64, bytes = 35>>
// A:   llm.weight "blk.0.ffn_down.weight" : tensor<128x256x!llm.quant<"hbq4_b64", block = 64, bytes = 35>>

// E:   llm.weight "token_embd.weight" : tensor<64x128xf32>
// E:   llm.weight "blk.0.ffn_gate.weight" : tensor<256x128x!llm.quant<"hbq4_b128", block = 128, bytes = 67>>
// E:   llm.weight "blk.0.ffn_down.weight" : tensor<128x256x!llm.quant<"hbq4_b128", block = 128, bytes = 67>>

// T2:  llm.weight "blk.0.ffn_up.weight" : tensor<256x128x!llm.quant<"hbq2_b32", block = 32, bytes = 11>>

// OV:  llm.weight "blk.0.ffn_gate.weight" : tensor<256x128x!llm.quant<"hbq3_b64", block = 64, bytes = 27>>
// OV:  llm.weight "blk.0.ffn_down.weight" : tensor<128x256x!llm.quant<"gq4a_g32", block = 32, bytes = 20>>

// BLOCK: llm-quantize: method=hbq bits=4 group=48: hbq type: block size 48 (must be a multiple of 32 in [32, 4096])
// WIDTH: llm-quantize: weight 'token_embd.weight' has rows of 128 weights, not a multiple of the group size 96
// TABLE: llm-quantize: hbq-table must be mix, fp1, fp10 or int, not 'fp2'
// BITS: llm-quantize: method=hbq bits=5 group=64: hbq type: 5-bit elements (2..4 supported)
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
