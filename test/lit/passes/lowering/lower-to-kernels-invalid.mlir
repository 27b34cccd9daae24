// Ops without a kernel lowering make the pass fail with an error on the op.
// RUN: not llmc-opt %s --split-input-file --llm-lower-to-kernels 2>&1 | FileCheck %s

llm.model @ln config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "token_embd.weight" : tensor<16x8xf32>
  %h = llm.embed %t, %e : tensor<?xi32>, tensor<16x8xf32> -> tensor<?x8xf32>
  %w = llm.weight "output_norm.weight" : tensor<8xf32>
  // CHECK: error: 'llm.layer_norm' op has no kernel lowering yet (the model runs on the reference executor)
  %n = llm.layer_norm %h, %w {eps = 1.0e-05 : f64} : tensor<?x8xf32>, tensor<8xf32>
  %l = llm.lm_head %n, %e : (tensor<?x8xf32>, tensor<16x8xf32>) -> tensor<?x16xf32>
  llm.return %l : tensor<?x16xf32>
}

// -----

llm.model @bias config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "token_embd.weight" : tensor<16x8xf32>
  %h = llm.embed %t, %e : tensor<?xi32>, tensor<16x8xf32> -> tensor<?x8xf32>
  %wq = llm.weight "q" : tensor<8x8xf32>
  %wk = llm.weight "k" : tensor<8x8xf32>
  %wv = llm.weight "v" : tensor<8x8xf32>
  %wo = llm.weight "o" : tensor<8x8xf32>
  %bq = llm.weight "bq" : tensor<8xf32>
  %bk = llm.weight "bk" : tensor<8xf32>
  %bv = llm.weight "bv" : tensor<8xf32>
  // CHECK: error: 'llm.attention' op with q/k/v biases has no kernel lowering yet
  %a = llm.attention %h, %wq, %wk, %wv, %wo bias(%bq, %bk, %bv) {layer = 0 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, rope_theta = 10000.0 : f64, rope_style = #llm<rope_style half>} : (tensor<?x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
  %l = llm.lm_head %a, %e : (tensor<?x8xf32>, tensor<16x8xf32>) -> tensor<?x16xf32>
  llm.return %l : tensor<?x16xf32>
}
