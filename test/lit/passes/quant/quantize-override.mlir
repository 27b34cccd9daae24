// llm-quantize override=<glob>:bits[:group]: matching weights get their own
// grid (sym as the pass); the first matching entry wins and applies before
// skip. Under llmc-opt method=rtn only retypes, so the grids show in the types.
// RUN: llmc-opt %s --pass-pipeline='builtin.module(llm-quantize{bits=4 override=token_embd.weight:8,blk.*.ffn_down.weight:3:128})' | FileCheck %s --check-prefix=OV
// RUN: llmc-opt %s --pass-pipeline='builtin.module(llm-quantize{bits=4 skip=* override=blk.0.ffn_up.weight:8:32,blk.0.ffn_*.weight:2})' | FileCheck %s --check-prefix=SKIP
// RUN: not llmc-opt %s --pass-pipeline='builtin.module(llm-quantize{override=token_embd.weight})' 2>&1 | FileCheck %s --check-prefix=NOBITS
// RUN: not llmc-opt %s --pass-pipeline='builtin.module(llm-quantize{override=token_embd.weight:four})' 2>&1 | FileCheck %s --check-prefix=NOTNUM
// RUN: not llmc-opt %s --pass-pipeline='builtin.module(llm-quantize{override=token_embd.weight:9})' 2>&1 | FileCheck %s --check-prefix=BITS
// RUN: not llmc-opt %s --pass-pipeline='builtin.module(llm-quantize{override=:4})' 2>&1 | FileCheck %s --check-prefix=EMPTY
// RUN: not llmc-opt %s --pass-pipeline='builtin.module(llm-quantize{override=blk.[.weight:4})' 2>&1 | FileCheck %s --check-prefix=BADGLOB
// RUN: not llmc-opt %s --pass-pipeline='builtin.module(llm-quantize{override=token_embd.weight:4:256})' 2>&1 | FileCheck %s --check-prefix=ROWS

// OV:   llm.weight "token_embd.weight" : tensor<64x128x!llm.quant<"gq8a_g64", block = 64, bytes = 68>>
// OV:   llm.weight "blk.0.attn_norm.weight" : tensor<128xf32>
// OV:   llm.weight "blk.0.ffn_gate.weight" : tensor<256x128x!llm.quant<"gq4a_g64", block = 64, bytes = 36>>
// OV:   llm.weight "blk.0.ffn_up.weight" : tensor<256x128x!llm.quant<"gq4a_g64", block = 64, bytes = 36>>
// OV:   llm.weight "blk.0.ffn_down.weight" : tensor<128x256x!llm.quant<"gq3a_g128", block = 128,

// skip=* keeps everything but what an override names; the first match wins.
// SKIP:   llm.weight "token_embd.weight" : tensor<64x128xf32>
// SKIP:   llm.weight "blk.0.ffn_gate.weight" : tensor<256x128x!llm.quant<"gq2a_g64", block = 64,
// SKIP:   llm.weight "blk.0.ffn_up.weight" : tensor<256x128x!llm.quant<"gq8a_g32", block = 32,
// SKIP:   llm.weight "blk.0.ffn_down.weight" : tensor<128x256x!llm.quant<"gq2a_g64", block = 64,

// NOBITS: llm-quantize: bad override 'token_embd.weight': expected GLOB:bits or GLOB:bits:group
// NOTNUM: llm-quantize: bad override 'token_embd.weight:four': bits and group must be positive integers
// BITS: llm-quantize: bad override 'token_embd.weight:9': grouped-integer type: 9 bits (2..8 supported)
// EMPTY: llm-quantize: bad override ':4': empty weight-name glob
// BADGLOB: llm-quantize: bad override 'blk.[.weight:4': invalid glob 'blk.[.weight'
// ROWS: llm-quantize: weight 'token_embd.weight' has rows of 128 weights, not a multiple of the group size 256 (override 'token_embd.weight:4:256')
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
