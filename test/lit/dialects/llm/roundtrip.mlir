// RUN: llmc-opt %s | FileCheck %s
// RUN: llmc-opt %s | llmc-opt | FileCheck %s
// RUN: llmc-opt %s -mlir-print-op-generic | llmc-opt | FileCheck %s

// A two-layer GQA model with tied embeddings, q/k/v biases and a quantized
// projection: every op prints and parses back unchanged.
// CHECK-LABEL: llm.model @tiny config
// CHECK-SAME:    hidden_size = 64
// CHECK:         %[[TABLE:.+]] = llm.weight "token_embd.weight" : tensor<512x64xf32>
// CHECK:         %[[H0:.+]] = llm.embed %{{.+}}, %[[TABLE]] : tensor<?xi32>, tensor<512x64xf32> -> tensor<?x64xf32>
// CHECK:         %[[H1:.+]] = llm.layer 0 (%[[H0]] : tensor<?x64xf32>) {
// CHECK:           llm.weight "blk.0.attn_q.weight" : tensor<64x64x!llm.quant<"q8_0", block = 32, bytes = 34>>
// CHECK:           llm.attention {{.+}} bias({{.+}}) {head_dim = 16 : i64, layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, rope_style = #llm<rope_style half>, rope_theta = 1.000000e+04 : f64}
// CHECK:           llm.mlp {{.+}} {activation = #llm<activation silu>}
// CHECK:           llm.yield
// CHECK:         llm.layer 1 (%[[H1]] : tensor<?x64xf32>)
// CHECK:           llm.moe {{.+}} {activation = #llm<activation gelu>, top_k = 2 : i64}
// CHECK:         llm.lm_head %{{.+}}, %[[TABLE]]
// CHECK:         llm.return %{{.+}} : tensor<?x512xf32>
llm.model @tiny config {architecture = "llama", hidden_size = 64 : i64} {
^bb0(%tokens: tensor<?xi32>):
  %table = llm.weight "token_embd.weight" : tensor<512x64xf32>
  %h0 = llm.embed %tokens, %table : tensor<?xi32>, tensor<512x64xf32> -> tensor<?x64xf32>
  %h1 = llm.layer 0 (%h0 : tensor<?x64xf32>) {
  ^bb0(%x: tensor<?x64xf32>):
    %nw = llm.weight "blk.0.attn_norm.weight" : tensor<64xf32>
    %n = llm.rms_norm %x, %nw {eps = 1.0e-05 : f64} : tensor<?x64xf32>, tensor<64xf32>
    %wq = llm.weight "blk.0.attn_q.weight" : tensor<64x64x!llm.quant<"q8_0", block = 32, bytes = 34>>
    %wk = llm.weight "blk.0.attn_k.weight" : tensor<32x64xf16>
    %wv = llm.weight "blk.0.attn_v.weight" : tensor<32x64xbf16>
    %wo = llm.weight "blk.0.attn_output.weight" : tensor<64x64xf32>
    %bq = llm.weight "blk.0.attn_q.bias" : tensor<64xf32>
    %bk = llm.weight "blk.0.attn_k.bias" : tensor<32xf32>
    %bv = llm.weight "blk.0.attn_v.bias" : tensor<32xf32>
    %a = llm.attention %n, %wq, %wk, %wv, %wo bias(%bq, %bk, %bv) {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, rope_theta = 10000.0 : f64, rope_style = #llm<rope_style half>} : (tensor<?x64xf32>, tensor<64x64x!llm.quant<"q8_0", block = 32, bytes = 34>>, tensor<32x64xf16>, tensor<32x64xbf16>, tensor<64x64xf32>, tensor<64xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<?x64xf32>
    %r = llm.add %x, %a : tensor<?x64xf32>
    %g = llm.weight "blk.0.ffn_gate.weight" : tensor<128x64xf32>
    %u = llm.weight "blk.0.ffn_up.weight" : tensor<128x64xf32>
    %d = llm.weight "blk.0.ffn_down.weight" : tensor<64x128xf32>
    %m = llm.mlp %r, %g, %u, %d {activation = #llm<activation silu>} : (tensor<?x64xf32>, tensor<128x64xf32>, tensor<128x64xf32>, tensor<64x128xf32>) -> tensor<?x64xf32>
    %o = llm.add %r, %m : tensor<?x64xf32>
    llm.yield %o : tensor<?x64xf32>
  }
  %h2 = llm.layer 1 (%h1 : tensor<?x64xf32>) {
  ^bb0(%x: tensor<?x64xf32>):
    %lw = llm.weight "blk.1.attn_norm.weight" : tensor<64xf32>
    %lb = llm.weight "blk.1.attn_norm.bias" : tensor<64xf32>
    %n = llm.layer_norm %x, %lw, %lb {eps = 1.0e-05 : f64} : tensor<?x64xf32>, tensor<64xf32>, tensor<64xf32>
    %router = llm.weight "blk.1.ffn_gate_inp.weight" : tensor<4x64xf32>
    %g = llm.weight "blk.1.ffn_gate_exps.weight" : tensor<4x32x64xf32>
    %u = llm.weight "blk.1.ffn_up_exps.weight" : tensor<4x32x64xf32>
    %d = llm.weight "blk.1.ffn_down_exps.weight" : tensor<4x64x32xf32>
    %m = llm.moe %n, %router, %g, %u, %d {top_k = 2 : i64, activation = #llm<activation gelu>} : (tensor<?x64xf32>, tensor<4x64xf32>, tensor<4x32x64xf32>, tensor<4x32x64xf32>, tensor<4x64x32xf32>) -> tensor<?x64xf32>
    %o = llm.add %x, %m : tensor<?x64xf32>
    llm.yield %o : tensor<?x64xf32>
  }
  %fw = llm.weight "output_norm.weight" : tensor<64xf32>
  %f = llm.rms_norm %h2, %fw {eps = 1.0e-05 : f64} : tensor<?x64xf32>, tensor<64xf32>
  %logits = llm.lm_head %f, %table : (tensor<?x64xf32>, tensor<512x64xf32>) -> tensor<?x512xf32>
  llm.return %logits : tensor<?x512xf32>
}
