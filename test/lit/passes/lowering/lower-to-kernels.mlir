// RUN: llmc-opt %s --llm-lower-to-kernels | FileCheck %s
// RUN: llmc-opt %s --llm-lower-to-kernels | llmc-opt | FileCheck %s

// Layer 0 is a Llama block: every fusion applies. The norm goes into q/k/v
// (one product, width 64 + 32 + 32), RoPE with the cache append, the output
// projection and the down projection absorb their residual adds, gate/up
// with SwiGLU; the kv_policy slot is carried to the attend kernel.
// CHECK-LABEL: llm.model @m
// CHECK:      %[[H0:.+]] = llmk.embed %arg0, %[[E:.+]] :
// CHECK-NOT:  llm.layer
// CHECK:      %[[QKV:.+]] = llmk.norm_matmul %[[H0]] norm(%{{.+}}), %{{.+}}, %{{.+}}, %{{.+}} {eps = 1.000000e-05 : f64} : ({{.+}}) -> tensor<?x128xf32>
// CHECK-NEXT: %[[Q:.+]] = llmk.rope_kv_append %[[QKV]] {head_dim = 16 : i64, layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, rope_style = #llm<rope_style half>, rope_theta = 1.000000e+04 : f64} : (tensor<?x128xf32>) -> tensor<?x64xf32>
// CHECK-NEXT: %[[A:.+]] = llmk.attend %[[Q]] {head_dim = 16 : i64, kv_policy = {method = "snapkv"}, layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<?x64xf32>) -> tensor<?x64xf32>
// CHECK:      %[[R1:.+]] = llmk.matmul_add %[[A]], %{{.+}}, %[[H0]] :
// CHECK:      %[[G:.+]] = llmk.norm_gated_matmul %[[R1]] norm(%{{.+}}), %{{.+}}, %{{.+}} {activation = #llm<activation silu>, eps = 1.000000e-05 : f64} : ({{.+}}) -> tensor<?x96xf32>
// CHECK:      %[[R2:.+]] = llmk.matmul_add %[[G]], %{{.+}}, %[[R1]] :

// Layer 1 is irregular: its norm has a second user (kept as llmk.rms_norm,
// and still fused into the attention), the attention output is used twice
// (no residual fusion: a plain projection, then llmk.add), and the MLP reads
// an un-normed input.
// CHECK:      %[[N:.+]] = llmk.rms_norm %[[R2]], %{{.+}} {eps = 1.000000e-05 : f64}
// CHECK:      llmk.norm_matmul %[[R2]] norm(%{{.+}}), %{{.+}}, %{{.+}}, %{{.+}} {eps
// CHECK:      %[[A1:.+]] = llmk.attend
// CHECK:      %[[O1:.+]] = llmk.norm_matmul %[[A1]], %{{.+}} : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
// CHECK:      %[[S:.+]] = llmk.add %[[N]], %[[O1]]
// CHECK:      %[[S2:.+]] = llmk.add %[[S]], %[[O1]]
// CHECK:      %[[G1:.+]] = llmk.norm_gated_matmul %[[S2]], %{{.+}}, %{{.+}} {activation = #llm<activation gelu>}
// CHECK:      %[[R3:.+]] = llmk.matmul_add %[[G1]], %{{.+}}, %[[S2]]
// The final norm goes into the LM head (the tied embedding table).
// CHECK:      %[[L:.+]] = llmk.norm_matmul %[[R3]] norm(%{{.+}}), %[[E]] {eps = 9.9999999999999995E-7 : f64} : ({{.+}}) -> tensor<?x256xf32>
// CHECK-NEXT: llm.return %[[L]]
// CHECK-NOT:  llm.rms_norm
// CHECK-NOT:  llm.add

llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "token_embd.weight" : tensor<256x64xf32>
  %h0 = llm.embed %t, %e : tensor<?xi32>, tensor<256x64xf32> -> tensor<?x64xf32>
  %h1 = llm.layer 0 (%h0 : tensor<?x64xf32>) {
  ^bb0(%x: tensor<?x64xf32>):
    %an = llm.weight "blk.0.attn_norm.weight" : tensor<64xf32>
    %n = llm.rms_norm %x, %an {eps = 1.0e-05 : f64} : tensor<?x64xf32>, tensor<64xf32>
    %wq = llm.weight "blk.0.attn_q.weight" : tensor<64x64xf32>
    %wk = llm.weight "blk.0.attn_k.weight" : tensor<32x64xf32>
    %wv = llm.weight "blk.0.attn_v.weight" : tensor<32x64xf32>
    %wo = llm.weight "blk.0.attn_output.weight" : tensor<64x64xf32>
    %a = llm.attention %n, %wq, %wk, %wv, %wo {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, rope_theta = 10000.0 : f64, rope_style = #llm<rope_style half>, kv_policy = {method = "snapkv"}} : (tensor<?x64xf32>, tensor<64x64xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
    %r = llm.add %x, %a : tensor<?x64xf32>
    %fn = llm.weight "blk.0.ffn_norm.weight" : tensor<64xf32>
    %n2 = llm.rms_norm %r, %fn {eps = 1.0e-05 : f64} : tensor<?x64xf32>, tensor<64xf32>
    %g = llm.weight "blk.0.ffn_gate.weight" : tensor<96x64xf32>
    %u = llm.weight "blk.0.ffn_up.weight" : tensor<96x64xf32>
    %d = llm.weight "blk.0.ffn_down.weight" : tensor<64x96xf32>
    %m = llm.mlp %n2, %g, %u, %d {activation = #llm<activation silu>} : (tensor<?x64xf32>, tensor<96x64xf32>, tensor<96x64xf32>, tensor<64x96xf32>) -> tensor<?x64xf32>
    %o = llm.add %r, %m : tensor<?x64xf32>
    llm.yield %o : tensor<?x64xf32>
  }
  %h2 = llm.layer 1 (%h1 : tensor<?x64xf32>) {
  ^bb0(%x: tensor<?x64xf32>):
    %an = llm.weight "blk.1.attn_norm.weight" : tensor<64xf32>
    %n = llm.rms_norm %x, %an {eps = 1.0e-05 : f64} : tensor<?x64xf32>, tensor<64xf32>
    %wq = llm.weight "blk.1.attn_q.weight" : tensor<64x64xf32>
    %wk = llm.weight "blk.1.attn_k.weight" : tensor<32x64xf32>
    %wv = llm.weight "blk.1.attn_v.weight" : tensor<32x64xf32>
    %wo = llm.weight "blk.1.attn_output.weight" : tensor<64x64xf32>
    %a = llm.attention %n, %wq, %wk, %wv, %wo {layer = 1 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, rope_theta = 10000.0 : f64, rope_style = #llm<rope_style half>} : (tensor<?x64xf32>, tensor<64x64xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
    %s = llm.add %n, %a : tensor<?x64xf32>
    %s2 = llm.add %s, %a : tensor<?x64xf32>
    %g = llm.weight "blk.1.ffn_gate.weight" : tensor<96x64xf32>
    %u = llm.weight "blk.1.ffn_up.weight" : tensor<96x64xf32>
    %d = llm.weight "blk.1.ffn_down.weight" : tensor<64x96xf32>
    %m = llm.mlp %s2, %g, %u, %d {activation = #llm<activation gelu>} : (tensor<?x64xf32>, tensor<96x64xf32>, tensor<96x64xf32>, tensor<64x96xf32>) -> tensor<?x64xf32>
    %o = llm.add %s2, %m : tensor<?x64xf32>
    llm.yield %o : tensor<?x64xf32>
  }
  %on = llm.weight "output_norm.weight" : tensor<64xf32>
  %f = llm.rms_norm %h2, %on {eps = 1.0e-06 : f64} : tensor<?x64xf32>, tensor<64xf32>
  %l = llm.lm_head %f, %e : (tensor<?x64xf32>, tensor<256x64xf32>) -> tensor<?x256xf32>
  llm.return %l : tensor<?x256xf32>
}
