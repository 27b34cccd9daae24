// RUN: llmc-opt %s -split-input-file -verify-diagnostics
// llmk.norm_moe's verifier: expert tensor shapes, top_k, adaptive
// activation's energies, one layout per weight.

llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x16xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %r = llm.weight "r" : tensor<4x16xf32>
  %g = llm.weight "g" : tensor<4x8x16xf32>
  %d = llm.weight "d" : tensor<4x16x4xf32>
  // expected-error @+1 {{down must be [4, 16, 8], got 'tensor<4x16x4xf32>'}}
  %m = llmk.norm_moe %x, %r, %g, %g, %d {activation = #llm<activation silu>, top_k = 2 : i64} : (tensor<?x16xf32>, tensor<4x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x16x4xf32>) -> tensor<?x16xf32>
  llm.return %m : tensor<?x16xf32>
}

// -----

llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x16xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %r = llm.weight "r" : tensor<4x16xf32>
  %g = llm.weight "g" : tensor<4x8x16xf32>
  %u = llm.weight "u" : tensor<3x8x16xf32>
  %d = llm.weight "d" : tensor<4x16x8xf32>
  // expected-error @+1 {{gate and up must be [4, intermediate, 16] expert tensors}}
  %m = llmk.norm_moe %x, %r, %g, %u, %d {activation = #llm<activation silu>, top_k = 2 : i64} : (tensor<?x16xf32>, tensor<4x16xf32>, tensor<4x8x16xf32>, tensor<3x8x16xf32>, tensor<4x16x8xf32>) -> tensor<?x16xf32>
  llm.return %m : tensor<?x16xf32>
}

// -----

llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x16xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %r = llm.weight "r" : tensor<4x16xf32>
  %g = llm.weight "g" : tensor<4x8x16xf32>
  %d = llm.weight "d" : tensor<4x16x8xf32>
  // expected-error @+1 {{top_k must be in [1, 4], got 5}}
  %m = llmk.norm_moe %x, %r, %g, %g, %d {activation = #llm<activation silu>, top_k = 5 : i64} : (tensor<?x16xf32>, tensor<4x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32>) -> tensor<?x16xf32>
  llm.return %m : tensor<?x16xf32>
}

// -----

llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x16xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %r = llm.weight "r" : tensor<4x16xf32>
  %g = llm.weight "g" : tensor<4x8x16xf32>
  %d = llm.weight "d" : tensor<4x16x8xf32>
  // expected-error @+1 {{energy_threshold > 0 needs expert_energy}}
  %m = llmk.norm_moe %x, %r, %g, %g, %d {activation = #llm<activation silu>, top_k = 2 : i64, energy_threshold = 0.5 : f64} : (tensor<?x16xf32>, tensor<4x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32>) -> tensor<?x16xf32>
  llm.return %m : tensor<?x16xf32>
}

// -----

llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x16xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %r = llm.weight "r" : tensor<4x16xf32>
  %g = llm.weight "g" : tensor<4x8x16xf32>
  %d = llm.weight "d" : tensor<4x16x8xf32>
  // expected-error @+1 {{layouts must name 4 layouts (router, gate, up, down)}}
  %m = llmk.norm_moe %x, %r, %g, %g, %d {activation = #llm<activation silu>, top_k = 2 : i64, layouts = [#llmk<layout row_major>]} : (tensor<?x16xf32>, tensor<4x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32>) -> tensor<?x16xf32>
  llm.return %m : tensor<?x16xf32>
}

// -----

llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x16xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %n = llm.weight "n" : tensor<16xf32>
  %r = llm.weight "r" : tensor<4x16xf32>
  %g = llm.weight "g" : tensor<4x8x16xf32>
  %d = llm.weight "d" : tensor<4x16x8xf32>
  // expected-error @+1 {{with a norm weight needs 'eps'}}
  %m = llmk.norm_moe %x norm(%n), %r, %g, %g, %d residual(%x) {activation = #llm<activation silu>, top_k = 2 : i64} : (tensor<?x16xf32>, tensor<16xf32>, tensor<4x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
  llm.return %m : tensor<?x16xf32>
}
