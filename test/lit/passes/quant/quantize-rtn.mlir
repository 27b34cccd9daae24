// RUN: llmc-opt %s --pass-pipeline='builtin.module(llm-quantize-rtn{bits=4 sym=false skip=token_embd.weight})' | FileCheck %s --check-prefix=Q41
// RUN: llmc-opt %s --pass-pipeline='builtin.module(llm-quantize-rtn{bits=8})' | FileCheck %s --check-prefix=Q80

// Matrix weights change type; norms keep theirs; skipped names stay; the
// tied LM head is the (skipped) embedding table.
// Q41-LABEL: llm.model @m
// Q41:   llm.weight "token_embd.weight" : tensor<64x64xf32>
// Q41:   llm.weight "blk.0.attn_norm.weight" : tensor<64xf32>
// Q41:   llm.weight "blk.0.ffn_gate.weight" : tensor<128x64x!llm.quant<"q4_1", block = 32, bytes = 20>>
// Q41:   llm.weight "blk.0.ffn_down.weight" : tensor<64x128x!llm.quant<"q4_1", block = 32, bytes = 20>>
// Q41:   llm.mlp {{.+}} : (tensor<?x64xf32>, tensor<128x64x!llm.quant<"q4_1", block = 32, bytes = 20>>, tensor<128x64x!llm.quant<"q4_1", block = 32, bytes = 20>>, tensor<64x128x!llm.quant<"q4_1", block = 32, bytes = 20>>) -> tensor<?x64xf32>
// Q41:   llm.lm_head {{.+}} : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>

// Q80:   llm.weight "token_embd.weight" : tensor<64x64x!llm.quant<"q8_0", block = 32, bytes = 34>>
// Q80:   llm.weight "blk.0.attn_norm.weight" : tensor<64xf32>
// Q80:   llm.weight "blk.0.ffn_gate.weight" : tensor<128x64x!llm.quant<"q8_0", block = 32, bytes = 34>>
// Q80:   llm.lm_head {{.+}} : (tensor<?x64xf32>, tensor<64x64x!llm.quant<"q8_0", block = 32, bytes = 34>>) -> tensor<?x64xf32>
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "token_embd.weight" : tensor<64x64xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<64x64xf32> -> tensor<?x64xf32>
  %h = llm.layer 0 (%x : tensor<?x64xf32>) {
  ^bb0(%a: tensor<?x64xf32>):
    %nw = llm.weight "blk.0.attn_norm.weight" : tensor<64xf32>
    %n = llm.rms_norm %a, %nw {eps = 1.0e-05 : f64} : tensor<?x64xf32>, tensor<64xf32>
    %g = llm.weight "blk.0.ffn_gate.weight" : tensor<128x64xf32>
    %u = llm.weight "blk.0.ffn_up.weight" : tensor<128x64xf32>
    %d = llm.weight "blk.0.ffn_down.weight" : tensor<64x128xf32>
    %m = llm.mlp %n, %g, %u, %d {activation = #llm<activation silu>} : (tensor<?x64xf32>, tensor<128x64xf32>, tensor<128x64xf32>, tensor<64x128xf32>) -> tensor<?x64xf32>
    %o = llm.add %a, %m : tensor<?x64xf32>
    llm.yield %o : tensor<?x64xf32>
  }
  %l = llm.lm_head %h, %e : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  llm.return %l : tensor<?x64xf32>
}
