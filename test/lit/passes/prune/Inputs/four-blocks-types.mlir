// Four decoder blocks of width 8 (2 heads of 4, MLP 16) whose matrices are
// splats of 0.1 x [1.0, 0.1, 2.0, 0.5] per block (types only: no values).
llm.model @four config {hidden_size = 8 : i64, num_layers = 4 : i64, vocab_size = 4 : i64, context_length = 64 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "token_embd.weight" : tensor<4x8xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<4x8xf32> -> tensor<?x8xf32>
  %h0 = llm.layer 0 (%x : tensor<?x8xf32>) {
  ^bb0(%a: tensor<?x8xf32>):
    %an = llm.weight "blk.0.attn_norm.weight" : tensor<8xf32>
    %n1 = llm.rms_norm %a, %an {eps = 1.0e-05 : f64} : tensor<?x8xf32>, tensor<8xf32>
    %q = llm.weight "blk.0.attn_q.weight" : tensor<8x8xf32>
    %k = llm.weight "blk.0.attn_k.weight" : tensor<8x8xf32>
    %v = llm.weight "blk.0.attn_v.weight" : tensor<8x8xf32>
    %o = llm.weight "blk.0.attn_output.weight" : tensor<8x8xf32>
    %att = llm.attention %n1, %q, %k, %v, %o {head_dim = 4 : i64, layer = 0 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, rope_style = #llm<rope_style interleaved>, rope_theta = 1.0e+04 : f64} : (tensor<?x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
    %r = llm.add %a, %att : tensor<?x8xf32>
    %fn = llm.weight "blk.0.ffn_norm.weight" : tensor<8xf32>
    %n2 = llm.rms_norm %r, %fn {eps = 1.0e-05 : f64} : tensor<?x8xf32>, tensor<8xf32>
    %g = llm.weight "blk.0.ffn_gate.weight" : tensor<16x8xf32>
    %u = llm.weight "blk.0.ffn_up.weight" : tensor<16x8xf32>
    %d = llm.weight "blk.0.ffn_down.weight" : tensor<8x16xf32>
    %mlp = llm.mlp %n2, %g, %u, %d {activation = #llm<activation silu>} : (tensor<?x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>) -> tensor<?x8xf32>
    %y = llm.add %r, %mlp : tensor<?x8xf32>
    llm.yield %y : tensor<?x8xf32>
  }
  %h1 = llm.layer 1 (%h0 : tensor<?x8xf32>) {
  ^bb0(%a: tensor<?x8xf32>):
    %an = llm.weight "blk.1.attn_norm.weight" : tensor<8xf32>
    %n1 = llm.rms_norm %a, %an {eps = 1.0e-05 : f64} : tensor<?x8xf32>, tensor<8xf32>
    %q = llm.weight "blk.1.attn_q.weight" : tensor<8x8xf32>
    %k = llm.weight "blk.1.attn_k.weight" : tensor<8x8xf32>
    %v = llm.weight "blk.1.attn_v.weight" : tensor<8x8xf32>
    %o = llm.weight "blk.1.attn_output.weight" : tensor<8x8xf32>
    %att = llm.attention %n1, %q, %k, %v, %o {head_dim = 4 : i64, layer = 1 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, rope_style = #llm<rope_style interleaved>, rope_theta = 1.0e+04 : f64} : (tensor<?x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
    %r = llm.add %a, %att : tensor<?x8xf32>
    %fn = llm.weight "blk.1.ffn_norm.weight" : tensor<8xf32>
    %n2 = llm.rms_norm %r, %fn {eps = 1.0e-05 : f64} : tensor<?x8xf32>, tensor<8xf32>
    %g = llm.weight "blk.1.ffn_gate.weight" : tensor<16x8xf32>
    %u = llm.weight "blk.1.ffn_up.weight" : tensor<16x8xf32>
    %d = llm.weight "blk.1.ffn_down.weight" : tensor<8x16xf32>
    %mlp = llm.mlp %n2, %g, %u, %d {activation = #llm<activation silu>} : (tensor<?x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>) -> tensor<?x8xf32>
    %y = llm.add %r, %mlp : tensor<?x8xf32>
    llm.yield %y : tensor<?x8xf32>
  }
  %h2 = llm.layer 2 (%h1 : tensor<?x8xf32>) {
  ^bb0(%a: tensor<?x8xf32>):
    %an = llm.weight "blk.2.attn_norm.weight" : tensor<8xf32>
    %n1 = llm.rms_norm %a, %an {eps = 1.0e-05 : f64} : tensor<?x8xf32>, tensor<8xf32>
    %q = llm.weight "blk.2.attn_q.weight" : tensor<8x8xf32>
    %k = llm.weight "blk.2.attn_k.weight" : tensor<8x8xf32>
    %v = llm.weight "blk.2.attn_v.weight" : tensor<8x8xf32>
    %o = llm.weight "blk.2.attn_output.weight" : tensor<8x8xf32>
    %att = llm.attention %n1, %q, %k, %v, %o {head_dim = 4 : i64, layer = 2 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, rope_style = #llm<rope_style interleaved>, rope_theta = 1.0e+04 : f64} : (tensor<?x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
    %r = llm.add %a, %att : tensor<?x8xf32>
    %fn = llm.weight "blk.2.ffn_norm.weight" : tensor<8xf32>
    %n2 = llm.rms_norm %r, %fn {eps = 1.0e-05 : f64} : tensor<?x8xf32>, tensor<8xf32>
    %g = llm.weight "blk.2.ffn_gate.weight" : tensor<16x8xf32>
    %u = llm.weight "blk.2.ffn_up.weight" : tensor<16x8xf32>
    %d = llm.weight "blk.2.ffn_down.weight" : tensor<8x16xf32>
    %mlp = llm.mlp %n2, %g, %u, %d {activation = #llm<activation silu>} : (tensor<?x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>) -> tensor<?x8xf32>
    %y = llm.add %r, %mlp : tensor<?x8xf32>
    llm.yield %y : tensor<?x8xf32>
  }
  %h3 = llm.layer 3 (%h2 : tensor<?x8xf32>) {
  ^bb0(%a: tensor<?x8xf32>):
    %an = llm.weight "blk.3.attn_norm.weight" : tensor<8xf32>
    %n1 = llm.rms_norm %a, %an {eps = 1.0e-05 : f64} : tensor<?x8xf32>, tensor<8xf32>
    %q = llm.weight "blk.3.attn_q.weight" : tensor<8x8xf32>
    %k = llm.weight "blk.3.attn_k.weight" : tensor<8x8xf32>
    %v = llm.weight "blk.3.attn_v.weight" : tensor<8x8xf32>
    %o = llm.weight "blk.3.attn_output.weight" : tensor<8x8xf32>
    %att = llm.attention %n1, %q, %k, %v, %o {head_dim = 4 : i64, layer = 3 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, rope_style = #llm<rope_style interleaved>, rope_theta = 1.0e+04 : f64} : (tensor<?x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
    %r = llm.add %a, %att : tensor<?x8xf32>
    %fn = llm.weight "blk.3.ffn_norm.weight" : tensor<8xf32>
    %n2 = llm.rms_norm %r, %fn {eps = 1.0e-05 : f64} : tensor<?x8xf32>, tensor<8xf32>
    %g = llm.weight "blk.3.ffn_gate.weight" : tensor<16x8xf32>
    %u = llm.weight "blk.3.ffn_up.weight" : tensor<16x8xf32>
    %d = llm.weight "blk.3.ffn_down.weight" : tensor<8x16xf32>
    %mlp = llm.mlp %n2, %g, %u, %d {activation = #llm<activation silu>} : (tensor<?x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>) -> tensor<?x8xf32>
    %y = llm.add %r, %mlp : tensor<?x8xf32>
    llm.yield %y : tensor<?x8xf32>
  }
  %on = llm.weight "output_norm.weight" : tensor<8xf32>
  %n = llm.rms_norm %h3, %on {eps = 1.0e-05 : f64} : tensor<?x8xf32>, tensor<8xf32>
  %logits = llm.lm_head %n, %e : (tensor<?x8xf32>, tensor<4x8xf32>) -> tensor<?x4xf32>
  llm.return %logits : tensor<?x4xf32>
}
