// llm.moe in the kernel IR: llm-lower-to-kernels makes one llmk.norm_moe
// that absorbs the RMSNorm before it and the residual add after it (like the
// dense MLP's down projection), keeping the routing attributes (here unit
// gating and adaptive activation); llmk-select-kernels gives the expert
// tensors the eight-row layout slab by slab (q4_0, 32 rows per expert) but
// the router (q8_0, 8 rows: it could be rows8) its rows, read with f32
// activations; llmk-plan-buffers updates the residual in place.
// An MoE whose output has two users keeps its own slot and the add.
// RUN: llmc-opt %s --llm-lower-to-kernels | FileCheck %s
// RUN: llmc-opt %s --llm-lower-to-kernels | llmc-opt | FileCheck %s
// RUN: llmc-opt %s --llm-lower-to-kernels --llmk-select-kernels | FileCheck %s --check-prefix=SELECT
// RUN: llmc-opt %s --llm-lower-to-kernels --llmk-plan-buffers | FileCheck %s --check-prefix=PLAN

// CHECK-LABEL: llm.model @moe
// CHECK:      %[[H:.+]] = llmk.embed
// CHECK:      %[[M:.+]] = llmk.norm_moe %[[H]] norm(%{{.+}}), %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} residual(%[[H]]) {activation = #llm<activation silu>, energy_threshold = 9.000000e-01 : f64, eps = 1.000000e-05 : f64, expert_energy = array<f32: 1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00, 5.000000e+00, 6.000000e+00, 7.000000e+00, 8.000000e+00>, gating = #llm<moe_gating unit>, renormalize = false, top_k = 2 : i64} : (tensor<?x64xf32>, tensor<64xf32>, tensor<8x64x!llm.quant<"q8_0", block = 32, bytes = 34>>, tensor<8x32x64x!llm.quant<"q4_0", block = 32, bytes = 18>>, tensor<8x32x64x!llm.quant<"q4_0", block = 32, bytes = 18>>, tensor<8x64x32x!llm.quant<"q4_0", block = 32, bytes = 18>>, tensor<?x64xf32>) -> tensor<?x64xf32>
// CHECK-NOT:  llm.moe
// CHECK-NOT:  llm.add
// CHECK:      llmk.norm_matmul %[[M]] norm(

// Layer 1's MoE output is read twice: no residual operand, no norm (its
// input is not normed), and the adds stay.
// CHECK-LABEL: llm.model @twice
// CHECK:      %[[H1:.+]] = llmk.embed
// CHECK:      %[[M1:.+]] = llmk.norm_moe %[[H1]], %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} {activation = #llm<activation gelu>, top_k = 1 : i64} : (tensor<?x64xf32>, tensor<2x64xf32>, tensor<2x32x64xf32>, tensor<2x32x64xf32>, tensor<2x64x32xf32>) -> tensor<?x64xf32>
// CHECK-NEXT: %[[S:.+]] = llmk.add %[[H1]], %[[M1]]
// CHECK-NEXT: llmk.add %[[S]], %[[M1]]

// SELECT-LABEL: llm.model @moe
// SELECT: llmk.norm_moe {{.*}}activations = #llmk<activations int8>{{.*}}layouts = [#llmk<layout row_major>, #llmk<layout rows8>, #llmk<layout rows8>, #llmk<layout rows8>]
// SELECT-LABEL: llm.model @twice
// SELECT: llmk.norm_moe {{.*}}activations = #llmk<activations f32>{{.*}}layouts = [#llmk<layout row_major>, #llmk<layout row_major>, #llmk<layout row_major>, #llmk<layout row_major>]

// The residual stream stays at 0: norm_moe takes its residual's slot.
// PLAN-LABEL: llm.model @moe
// PLAN:      llmk.embed {{.+}} {arena_offset = 0 : i64}
// PLAN:      llmk.norm_moe {{.+}} {activation = #llm<activation silu>, arena_offset = 0 : i64,
// PLAN-LABEL: llm.model @twice
// PLAN:      llmk.embed {{.+}} {arena_offset = 0 : i64}
// PLAN:      llmk.norm_moe {{.+}} {activation = #llm<activation gelu>, arena_offset = 64 : i64,

llm.model @moe config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "token_embd.weight" : tensor<256x64xf32>
  %h0 = llm.embed %t, %e : tensor<?xi32>, tensor<256x64xf32> -> tensor<?x64xf32>
  %h1 = llm.layer 0 (%h0 : tensor<?x64xf32>) {
  ^bb0(%x: tensor<?x64xf32>):
    %fn = llm.weight "blk.0.ffn_norm.weight" : tensor<64xf32>
    %n = llm.rms_norm %x, %fn {eps = 1.0e-05 : f64} : tensor<?x64xf32>, tensor<64xf32>
    %router = llm.weight "blk.0.ffn_gate_inp.weight" : tensor<8x64x!llm.quant<"q8_0", block = 32, bytes = 34>>
    %g = llm.weight "blk.0.ffn_gate_exps.weight" : tensor<8x32x64x!llm.quant<"q4_0", block = 32, bytes = 18>>
    %u = llm.weight "blk.0.ffn_up_exps.weight" : tensor<8x32x64x!llm.quant<"q4_0", block = 32, bytes = 18>>
    %d = llm.weight "blk.0.ffn_down_exps.weight" : tensor<8x64x32x!llm.quant<"q4_0", block = 32, bytes = 18>>
    %m = llm.moe %n, %router, %g, %u, %d {top_k = 2 : i64, activation = #llm<activation silu>, gating = #llm<moe_gating unit>, renormalize = false, expert_energy = array<f32: 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0>, energy_threshold = 0.9 : f64} : (tensor<?x64xf32>, tensor<8x64x!llm.quant<"q8_0", block = 32, bytes = 34>>, tensor<8x32x64x!llm.quant<"q4_0", block = 32, bytes = 18>>, tensor<8x32x64x!llm.quant<"q4_0", block = 32, bytes = 18>>, tensor<8x64x32x!llm.quant<"q4_0", block = 32, bytes = 18>>) -> tensor<?x64xf32>
    %o = llm.add %x, %m : tensor<?x64xf32>
    llm.yield %o : tensor<?x64xf32>
  }
  %on = llm.weight "output_norm.weight" : tensor<64xf32>
  %n2 = llm.rms_norm %h1, %on {eps = 1.0e-05 : f64} : tensor<?x64xf32>, tensor<64xf32>
  %l = llm.lm_head %n2, %e : (tensor<?x64xf32>, tensor<256x64xf32>) -> tensor<?x256xf32>
  llm.return %l : tensor<?x256xf32>
}

llm.model @twice config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "token_embd.weight" : tensor<256x64xf32>
  %h0 = llm.embed %t, %e : tensor<?xi32>, tensor<256x64xf32> -> tensor<?x64xf32>
  %router = llm.weight "blk.0.ffn_gate_inp.weight" : tensor<2x64xf32>
  %g = llm.weight "blk.0.ffn_gate_exps.weight" : tensor<2x32x64xf32>
  %u = llm.weight "blk.0.ffn_up_exps.weight" : tensor<2x32x64xf32>
  %d = llm.weight "blk.0.ffn_down_exps.weight" : tensor<2x64x32xf32>
  %m = llm.moe %h0, %router, %g, %u, %d {top_k = 1 : i64, activation = #llm<activation gelu>} : (tensor<?x64xf32>, tensor<2x64xf32>, tensor<2x32x64xf32>, tensor<2x32x64xf32>, tensor<2x64x32xf32>) -> tensor<?x64xf32>
  %s = llm.add %h0, %m : tensor<?x64xf32>
  %s2 = llm.add %s, %m : tensor<?x64xf32>
  %l = llm.lm_head %s2, %e : (tensor<?x64xf32>, tensor<256x64xf32>) -> tensor<?x256xf32>
  llm.return %l : tensor<?x256xf32>
}
