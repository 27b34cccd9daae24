// llmk-select-kernels writes the kernel decision on every product: rows8
// for formats the int8 kernels read interleaved (Q8_0, Q4_0, Q4_1 and the
// grouped integers that map onto them), when the matrix is whole groups of
// 8 rows of 32-weight blocks (Q4_K: of 256-weight super-blocks), Q5_0,
// Q5_1 and Q4_K too (the runtime's library has their vector kernels, so the
// choice is the same with or without generated code); row_major otherwise
// (f32, rows of 16 weights); int8
// activations when some weight has an int8 dot product.
// RUN: llmc-opt %s --llm-lower-to-kernels --llmk-select-kernels | FileCheck %s
// The lowering phase of llmc compile, as one registered pipeline.
// RUN: llmc-opt %s --pass-pipeline='builtin.module(llmc-lower)' | FileCheck %s --check-prefix=PIPE
// RUN: not llmc-opt %s --llm-lower-to-kernels '--llmk-select-kernels=target=riscv' 2>&1 | FileCheck %s --check-prefix=TARGET

// CHECK-LABEL: llm.model @m
// q (q8_0), k (gq4s_g64), v (f32): rows8, rows8, row_major; int8 (q and k have int8 dots).
// CHECK: llmk.norm_matmul {{.*}}{activations = #llmk<activations int8>, eps = {{.*}}, layouts = [#llmk<layout rows8>, #llmk<layout rows8>, #llmk<layout row_major>]}
// o (q4_1): rows8
// CHECK: llmk.matmul_add {{.*}}{activations = #llmk<activations int8>, layouts = [#llmk<layout rows8>]}
// gate (q4_K) and up (q5_0): rows8
// CHECK: llmk.norm_gated_matmul {{.*}}activations = #llmk<activations int8>{{.*}}layouts = [#llmk<layout rows8>, #llmk<layout rows8>]
// down (f32 rows of 16, not whole 32-blocks): row_major, f32
// CHECK: llmk.matmul_add {{.*}}{activations = #llmk<activations f32>, layouts = [#llmk<layout row_major>]}
// the LM head (q8_0, 16 rows): rows8
// CHECK: llmk.norm_matmul {{.*}}activations = #llmk<activations int8>{{.*}}layouts = [#llmk<layout rows8>]

// PIPE: llmk.arena_floats_per_token
// PIPE: llmk.norm_matmul {{.*}}layouts = [#llmk<layout rows8>, #llmk<layout rows8>, #llmk<layout row_major>]

// TARGET: error: llmk-select-kernels: unknown target 'riscv' (known: x86-64)

llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "token_embd.weight" : tensor<16x256x!llm.quant<"q8_0", block = 32, bytes = 34>>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<16x256x!llm.quant<"q8_0", block = 32, bytes = 34>> -> tensor<?x256xf32>
  %h = llm.layer 0 (%x : tensor<?x256xf32>) {
  ^bb0(%a: tensor<?x256xf32>):
    %nw = llm.weight "blk.0.attn_norm.weight" : tensor<256xf32>
    %n = llm.rms_norm %a, %nw {eps = 1.0e-05 : f64} : tensor<?x256xf32>, tensor<256xf32>
    %wq = llm.weight "blk.0.attn_q.weight" : tensor<256x256x!llm.quant<"q8_0", block = 32, bytes = 34>>
    %wk = llm.weight "blk.0.attn_k.weight" : tensor<128x256x!llm.quant<"gq4s_g64", block = 64, bytes = 34>>
    %wv = llm.weight "blk.0.attn_v.weight" : tensor<128x256xf32>
    %wo = llm.weight "blk.0.attn_output.weight" : tensor<256x256x!llm.quant<"q4_1", block = 32, bytes = 20>>
    %att = llm.attention %n, %wq, %wk, %wv, %wo {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, rope_theta = 10000.0 : f64, rope_style = #llm<rope_style half>} : (tensor<?x256xf32>, tensor<256x256x!llm.quant<"q8_0", block = 32, bytes = 34>>, tensor<128x256x!llm.quant<"gq4s_g64", block = 64, bytes = 34>>, tensor<128x256xf32>, tensor<256x256x!llm.quant<"q4_1", block = 32, bytes = 20>>) -> tensor<?x256xf32>
    %r = llm.add %a, %att : tensor<?x256xf32>
    %nw2 = llm.weight "blk.0.ffn_norm.weight" : tensor<256xf32>
    %n2 = llm.rms_norm %r, %nw2 {eps = 1.0e-05 : f64} : tensor<?x256xf32>, tensor<256xf32>
    %g = llm.weight "blk.0.ffn_gate.weight" : tensor<16x256x!llm.quant<"q4_K", block = 256, bytes = 144>>
    %u = llm.weight "blk.0.ffn_up.weight" : tensor<16x256x!llm.quant<"q5_0", block = 32, bytes = 22>>
    %d = llm.weight "blk.0.ffn_down.weight" : tensor<256x16xf32>
    %m = llm.mlp %n2, %g, %u, %d {activation = #llm<activation silu>} : (tensor<?x256xf32>, tensor<16x256x!llm.quant<"q4_K", block = 256, bytes = 144>>, tensor<16x256x!llm.quant<"q5_0", block = 32, bytes = 22>>, tensor<256x16xf32>) -> tensor<?x256xf32>
    %o = llm.add %r, %m : tensor<?x256xf32>
    llm.yield %o : tensor<?x256xf32>
  }
  %fw = llm.weight "output_norm.weight" : tensor<256xf32>
  %f = llm.rms_norm %h, %fw {eps = 1.0e-05 : f64} : tensor<?x256xf32>, tensor<256xf32>
  %l = llm.lm_head %f, %e : (tensor<?x256xf32>, tensor<16x256x!llm.quant<"q8_0", block = 32, bytes = 34>>) -> tensor<?x16xf32>
  llm.return %l : tensor<?x16xf32>
}
