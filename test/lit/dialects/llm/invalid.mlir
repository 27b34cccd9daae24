// RUN: llmc-opt %s -split-input-file -verify-diagnostics

// A projection whose shape disagrees with num_heads * head_dim.
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x16xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %wq = llm.weight "q" : tensor<12x16xf32>
  %wk = llm.weight "k" : tensor<8x16xf32>
  %wo = llm.weight "o" : tensor<16x16xf32>
  // expected-error @+1 {{'wq' has shape [12, 16] but expected [16, 16] (num_heads * head_dim, hidden)}}
  %a = llm.attention %x, %wq, %wk, %wk, %wo {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, rope_theta = 10000.0 : f64, rope_style = #llm<rope_style half>} : (tensor<?x16xf32>, tensor<12x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<?x16xf32>
  llm.return %a : tensor<?x16xf32>
}

// -----

// num_heads must be a multiple of num_kv_heads (GQA groups).
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x12xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x12xf32> -> tensor<?x12xf32>
  %wq = llm.weight "q" : tensor<12x12xf32>
  %wk = llm.weight "k" : tensor<8x12xf32>
  %wo = llm.weight "o" : tensor<12x12xf32>
  // expected-error @+1 {{num_heads (3) must be a multiple of num_kv_heads (2)}}
  %a = llm.attention %x, %wq, %wk, %wk, %wo {layer = 0 : i64, num_heads = 3 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, rope_theta = 10000.0 : f64, rope_style = #llm<rope_style half>} : (tensor<?x12xf32>, tensor<12x12xf32>, tensor<8x12xf32>, tensor<8x12xf32>, tensor<12x12xf32>) -> tensor<?x12xf32>
  llm.return %a : tensor<?x12xf32>
}

// -----

// Unknown RoPE convention.
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x16xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %w = llm.weight "w" : tensor<16x16xf32>
  // expected-error @+1 {{attribute 'rope_style' failed to satisfy constraint: which dimensions RoPE rotates together}}
  %a = llm.attention %x, %w, %w, %w, %w {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 4 : i64, head_dim = 4 : i64, rope_theta = 10000.0 : f64, rope_style = "neox"} : (tensor<?x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<?x16xf32>
  llm.return %a : tensor<?x16xf32>
}

// -----

// Odd head_dim cannot be rotated.
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x12xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x12xf32> -> tensor<?x12xf32>
  %w = llm.weight "w" : tensor<12x12xf32>
  // expected-error @+1 {{head_dim must be even for RoPE, got 3}}
  %a = llm.attention %x, %w, %w, %w, %w {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 4 : i64, head_dim = 3 : i64, rope_theta = 10000.0 : f64, rope_style = #llm<rope_style half>} : (tensor<?x12xf32>, tensor<12x12xf32>, tensor<12x12xf32>, tensor<12x12xf32>, tensor<12x12xf32>) -> tensor<?x12xf32>
  llm.return %a : tensor<?x12xf32>
}

// -----

// Bias of the wrong size.
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x16xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %w = llm.weight "w" : tensor<16x16xf32>
  %b = llm.weight "b" : tensor<16xf32>
  %bad = llm.weight "bk" : tensor<8xf32>
  // expected-error @+1 {{'bk' has shape [8] but expected [16] (num_kv_heads * head_dim)}}
  %a = llm.attention %x, %w, %w, %w, %w bias(%b, %bad, %b) {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 4 : i64, head_dim = 4 : i64, rope_theta = 10000.0 : f64, rope_style = #llm<rope_style half>} : (tensor<?x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16xf32>, tensor<8xf32>, tensor<16xf32>) -> tensor<?x16xf32>
  llm.return %a : tensor<?x16xf32>
}

// -----

// Norm weight size must match the features.
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x16xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %w = llm.weight "n" : tensor<15xf32>
  // expected-error @+1 {{'weight' has shape [15] but expected [16] (one scale per feature of x)}}
  %n = llm.rms_norm %x, %w {eps = 1.0e-05 : f64} : tensor<?x16xf32>, tensor<15xf32>
  llm.return %n : tensor<?x16xf32>
}

// -----

// Non-positive epsilon.
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x16xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %w = llm.weight "n" : tensor<16xf32>
  // expected-error @+1 {{eps must be positive}}
  %n = llm.rms_norm %x, %w {eps = 0.0 : f64} : tensor<?x16xf32>, tensor<16xf32>
  llm.return %n : tensor<?x16xf32>
}

// -----

// LayerNorm bias size.
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x16xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %w = llm.weight "n" : tensor<16xf32>
  %b = llm.weight "b" : tensor<4xf32>
  // expected-error @+1 {{'bias' has shape [4] but expected [16] (one offset per feature of x)}}
  %n = llm.layer_norm %x, %w, %b {eps = 1.0e-05 : f64} : tensor<?x16xf32>, tensor<16xf32>, tensor<4xf32>
  llm.return %n : tensor<?x16xf32>
}

// -----

// MLP down projection transposed by mistake.
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x16xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %g = llm.weight "g" : tensor<32x16xf32>
  // expected-error @+1 {{'down' has shape [32, 16] but expected [16, 32] (hidden, intermediate)}}
  %m = llm.mlp %x, %g, %g, %g {activation = #llm<activation silu>} : (tensor<?x16xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x16xf32>) -> tensor<?x16xf32>
  llm.return %m : tensor<?x16xf32>
}

// -----

// MLP gate whose input size is not the hidden size.
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x16xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %g = llm.weight "g" : tensor<32x8xf32>
  %d = llm.weight "d" : tensor<16x32xf32>
  // expected-error @+1 {{'gate' has shape [32, 8] but expected [intermediate, 16]}}
  %m = llm.mlp %x, %g, %g, %d {activation = #llm<activation silu>} : (tensor<?x16xf32>, tensor<32x8xf32>, tensor<32x8xf32>, tensor<16x32xf32>) -> tensor<?x16xf32>
  llm.return %m : tensor<?x16xf32>
}

// -----

// Unknown activation function.
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x16xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %g = llm.weight "g" : tensor<32x16xf32>
  %d = llm.weight "d" : tensor<16x32xf32>
  // expected-error @+1 {{attribute 'activation' failed to satisfy constraint: the gated MLP's activation}}
  %m = llm.mlp %x, %g, %g, %d {activation = "relu"} : (tensor<?x16xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<16x32xf32>) -> tensor<?x16xf32>
  llm.return %m : tensor<?x16xf32>
}

// -----

// MoE router with a different expert count from the stacked experts.
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x16xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %r = llm.weight "r" : tensor<4x16xf32>
  %g = llm.weight "g" : tensor<3x32x16xf32>
  %d = llm.weight "d" : tensor<3x16x32xf32>
  // expected-error @+1 {{'gate' has shape [3, 32, 16] but expected [4, intermediate, 16]}}
  %m = llm.moe %x, %r, %g, %g, %d {top_k = 2 : i64, activation = #llm<activation silu>} : (tensor<?x16xf32>, tensor<4x16xf32>, tensor<3x32x16xf32>, tensor<3x32x16xf32>, tensor<3x16x32xf32>) -> tensor<?x16xf32>
  llm.return %m : tensor<?x16xf32>
}

// -----

// MoE top_k larger than the number of experts.
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x16xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %r = llm.weight "r" : tensor<4x16xf32>
  %g = llm.weight "g" : tensor<4x32x16xf32>
  %d = llm.weight "d" : tensor<4x16x32xf32>
  // expected-error @+1 {{top_k must be in [1, 4], got 5}}
  %m = llm.moe %x, %r, %g, %g, %d {top_k = 5 : i64, activation = #llm<activation silu>} : (tensor<?x16xf32>, tensor<4x16xf32>, tensor<4x32x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>) -> tensor<?x16xf32>
  llm.return %m : tensor<?x16xf32>
}

// -----

// MoE adaptive activation: one energy per expert.
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x16xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %r = llm.weight "r" : tensor<4x16xf32>
  %g = llm.weight "g" : tensor<4x32x16xf32>
  %d = llm.weight "d" : tensor<4x16x32xf32>
  // expected-error @+1 {{expert_energy has 3 values for 4 experts}}
  %m = llm.moe %x, %r, %g, %g, %d {top_k = 2 : i64, activation = #llm<activation silu>, gating = #llm<moe_gating unit>, expert_energy = array<f32: 1.0, 2.0, 3.0>, energy_threshold = 0.5 : f64} : (tensor<?x16xf32>, tensor<4x16xf32>, tensor<4x32x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>) -> tensor<?x16xf32>
  llm.return %m : tensor<?x16xf32>
}

// -----

// MoE adaptive activation needs the energies.
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x16xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %r = llm.weight "r" : tensor<4x16xf32>
  %g = llm.weight "g" : tensor<4x32x16xf32>
  %d = llm.weight "d" : tensor<4x16x32xf32>
  // expected-error @+1 {{energy_threshold > 0 needs expert_energy}}
  %m = llm.moe %x, %r, %g, %g, %d {top_k = 2 : i64, activation = #llm<activation silu>, gating = #llm<moe_gating unit>, energy_threshold = 0.5 : f64} : (tensor<?x16xf32>, tensor<4x16xf32>, tensor<4x32x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>) -> tensor<?x16xf32>
  llm.return %m : tensor<?x16xf32>
}

// -----

// MoE adaptive activation: a share of the energy.
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x16xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %r = llm.weight "r" : tensor<4x16xf32>
  %g = llm.weight "g" : tensor<4x32x16xf32>
  %d = llm.weight "d" : tensor<4x16x32xf32>
  // expected-error @+1 {{energy_threshold must be in [0, 1], got 1.5}}
  %m = llm.moe %x, %r, %g, %g, %d {top_k = 2 : i64, activation = #llm<activation silu>, gating = #llm<moe_gating unit>, expert_energy = array<f32: 1.0, 2.0, 3.0, 4.0>, energy_threshold = 1.5 : f64} : (tensor<?x16xf32>, tensor<4x16xf32>, tensor<4x32x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>) -> tensor<?x16xf32>
  llm.return %m : tensor<?x16xf32>
}

// -----

// MoE expert energies are norms.
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x16xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %r = llm.weight "r" : tensor<4x16xf32>
  %g = llm.weight "g" : tensor<4x32x16xf32>
  %d = llm.weight "d" : tensor<4x16x32xf32>
  // expected-error @+1 {{expert_energy values must be finite and >= 0, got -1}}
  %m = llm.moe %x, %r, %g, %g, %d {top_k = 2 : i64, activation = #llm<activation silu>, gating = #llm<moe_gating unit>, expert_energy = array<f32: 1.0, -1.0, 3.0, 4.0>} : (tensor<?x16xf32>, tensor<4x16xf32>, tensor<4x32x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>) -> tensor<?x16xf32>
  llm.return %m : tensor<?x16xf32>
}

// -----

// LM head output must be as wide as the vocabulary.
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x16xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x16xf32> -> tensor<?x16xf32>
  // expected-error @+1 {{'result' has 9 features but expected 8 (the vocabulary size of 'weight')}}
  %l = llm.lm_head %x, %e : (tensor<?x16xf32>, tensor<8x16xf32>) -> tensor<?x9xf32>
  llm.return %l : tensor<?x9xf32>
}

// -----

// Embedding result width must match the table.
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x16xf32>
  // expected-error @+1 {{'result' has 32 features but expected 16 (the table's hidden size)}}
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x16xf32> -> tensor<?x32xf32>
  llm.return %x : tensor<?x32xf32>
}

// -----

// A quantized weight whose rows are not whole blocks.
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  // expected-error @+1 {{weight 'e': innermost dimension 48 is not a multiple of the q4_0 block size 32}}
  %e = llm.weight "e" : tensor<8x48x!llm.quant<"q4_0", block = 32, bytes = 18>>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x48x!llm.quant<"q4_0", block = 32, bytes = 18>> -> tensor<?x48xf32>
  llm.return %x : tensor<?x48xf32>
}

// -----

// A quantized format needs positive block parameters.
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  // expected-error @+1 {{quantized format 'q4_0' needs a positive block size and byte count, got block = 0, bytes = 18}}
  %e = llm.weight "e" : tensor<8x32x!llm.quant<"q4_0", block = 0, bytes = 18>>
  llm.return %e : tensor<8x32x!llm.quant<"q4_0", block = 0, bytes = 18>>
}

// -----

// A quantized type's geometry is its format's own.
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  // expected-error @+1 {{quantized format 'q4_0' packs 32 weights into 18 bytes, not block = 32, bytes = 20}}
  %e = llm.weight "e" : tensor<8x32x!llm.quant<"q4_0", block = 32, bytes = 20>>
  llm.return %e : tensor<8x32x!llm.quant<"q4_0", block = 32, bytes = 20>>
}

// -----

// Parametric families are checked too (gq4a_g64: 64 four-bit codes, fp16 scale and min).
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  // expected-error @+1 {{quantized format 'gq4a_g64' packs 64 weights into 36 bytes, not block = 32, bytes = 36}}
  %e = llm.weight "e" : tensor<8x64x!llm.quant<"gq4a_g64", block = 32, bytes = 36>>
  llm.return %e : tensor<8x64x!llm.quant<"gq4a_g64", block = 32, bytes = 36>>
}

// -----

// A format the runtime does not know is rejected.
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  // expected-error @+1 {{unknown quantized format 'q9_9'}}
  %e = llm.weight "e" : tensor<8x32x!llm.quant<"q9_9", block = 32, bytes = 34>>
  llm.return %e : tensor<8x32x!llm.quant<"q9_9", block = 32, bytes = 34>>
}

// -----

// Weights have static shapes.
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  // expected-error @+1 {{weight 'e' must have a static shape}}
  %e = llm.weight "e" : tensor<?x16xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<?x16xf32> -> tensor<?x16xf32>
  llm.return %x : tensor<?x16xf32>
}

// -----

// The model body takes the token ids.
// expected-error @+1 {{body must take exactly one argument, the token ids (tensor<?xi32>)}}
llm.model @m config {} {
^bb0(%t: tensor<?xi64>):
  %e = llm.weight "e" : tensor<8x16xf32>
  %l = llm.lm_head %e, %e : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x8xf32>
  llm.return %l : tensor<8x8xf32>
}

// -----

// The model must end with llm.return.
// expected-error @+1 {{body must end with 'llm.return'}}
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x16xf32>
}

// -----

// A layer must yield the residual stream of its input's type.
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x16xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x16xf32> -> tensor<?x16xf32>
  // expected-error @+1 {{layer index must be non-negative, got -1}}
  %y = llm.layer -1 (%x : tensor<?x16xf32>) {
  ^bb0(%a: tensor<?x16xf32>):
    llm.yield %a : tensor<?x16xf32>
  }
  %l = llm.lm_head %y, %e : (tensor<?x16xf32>, tensor<8x16xf32>) -> tensor<?x8xf32>
  llm.return %l : tensor<?x8xf32>
}

// -----

// Biases come as a q/k/v triple.
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x16xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %w = llm.weight "w" : tensor<16x16xf32>
  %b = llm.weight "b" : tensor<16xf32>
  // expected-error @+1 {{q, k and v biases come together or not at all}}
  %a = "llm.attention"(%x, %w, %w, %w, %w, %b) <{layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 4 : i64, head_dim = 4 : i64, rope_theta = 10000.0 : f64, rope_style = #llm<rope_style half>, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 0, 0>}> : (tensor<?x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16xf32>) -> tensor<?x16xf32>
  llm.return %a : tensor<?x16xf32>
}

// -----

// A RoPE style outside the closed set (LlmEnums.td) does not parse.
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "token_embd.weight" : tensor<16x16xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<16x16xf32> -> tensor<?x16xf32>
  %w = llm.weight "w" : tensor<16x16xf32>
  // expected-error @+2 {{expected ::llmc::llm::RopeStyle to be one of: interleaved, half}}
  // expected-error @+1 {{failed to parse Llm_RopeStyleAttr parameter 'value'}}
  %a = llm.attention %x, %w, %w, %w, %w {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 4 : i64, head_dim = 4 : i64, rope_theta = 10000.0 : f64, rope_style = #llm<rope_style neox>} : (tensor<?x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<?x16xf32>
  %l = llm.lm_head %a, %e : (tensor<?x16xf32>, tensor<16x16xf32>) -> tensor<?x16xf32>
  llm.return %l : tensor<?x16xf32>
}

// -----

// llm.speculate medusa: the heads read the LM head's input.
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x4xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x4xf32> -> tensor<?x4xf32>
  %l = llm.lm_head %x, %e : (tensor<?x4xf32>, tensor<8x4xf32>) -> tensor<?x8xf32>
  %h = llm.weight "h" : tensor<2x4x8xf32>
  %b = llm.weight "b" : tensor<2x4xf32>
  // expected-error @+1 {{'hidden' must be the input of an 'llm.lm_head'}}
  llm.speculate medusa(%l : tensor<?x8xf32>) heads(%h, %b : tensor<2x4x8xf32>, tensor<2x4xf32>) {draft_vocab = array<i32: 1, 2>, max_draft = 2 : i64}
  llm.return %l : tensor<?x8xf32>
}

// -----

// llm.speculate medusa: heads are [heads, D, 2D].
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x4xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x4xf32> -> tensor<?x4xf32>
  %l = llm.lm_head %x, %e : (tensor<?x4xf32>, tensor<8x4xf32>) -> tensor<?x8xf32>
  %h = llm.weight "h" : tensor<2x4x4xf32>
  %b = llm.weight "b" : tensor<2x4xf32>
  // expected-error @+1 {{'heads' has shape [2, 4, 4] but expected [heads, 4, 8]}}
  llm.speculate medusa(%x : tensor<?x4xf32>) heads(%h, %b : tensor<2x4x4xf32>, tensor<2x4xf32>) {draft_vocab = array<i32: 1, 2>, max_draft = 2 : i64}
  llm.return %l : tensor<?x8xf32>
}

// -----

// llm.speculate medusa: the draft vocabulary is increasing ids of the vocabulary.
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x4xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x4xf32> -> tensor<?x4xf32>
  %l = llm.lm_head %x, %e : (tensor<?x4xf32>, tensor<8x4xf32>) -> tensor<?x8xf32>
  %h = llm.weight "h" : tensor<2x4x8xf32>
  %b = llm.weight "b" : tensor<2x4xf32>
  // expected-error @+1 {{draft_vocab must be increasing token ids, got 2 after 5}}
  llm.speculate medusa(%x : tensor<?x4xf32>) heads(%h, %b : tensor<2x4x8xf32>, tensor<2x4xf32>) {draft_vocab = array<i32: 5, 2>, max_draft = 2 : i64}
  llm.return %l : tensor<?x8xf32>
}

// -----

llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x4xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x4xf32> -> tensor<?x4xf32>
  %l = llm.lm_head %x, %e : (tensor<?x4xf32>, tensor<8x4xf32>) -> tensor<?x8xf32>
  %h = llm.weight "h" : tensor<2x4x8xf32>
  %b = llm.weight "b" : tensor<2x4xf32>
  // expected-error @+1 {{draft_vocab id 9 is outside the vocabulary of 8}}
  llm.speculate medusa(%x : tensor<?x4xf32>) heads(%h, %b : tensor<2x4x8xf32>, tensor<2x4xf32>) {draft_vocab = array<i32: 1, 9>, max_draft = 2 : i64}
  llm.return %l : tensor<?x8xf32>
}

// -----

llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x4xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x4xf32> -> tensor<?x4xf32>
  %l = llm.lm_head %x, %e : (tensor<?x4xf32>, tensor<8x4xf32>) -> tensor<?x8xf32>
  %h = llm.weight "h" : tensor<2x4x8xf32>
  %b = llm.weight "b" : tensor<2x4xf32>
  // expected-error @+1 {{max_draft 3 exceeds the 2 heads}}
  llm.speculate medusa(%x : tensor<?x4xf32>) heads(%h, %b : tensor<2x4x8xf32>, tensor<2x4xf32>) {draft_vocab = array<i32: 1, 2>, max_draft = 3 : i64}
  llm.return %l : tensor<?x8xf32>
}

// -----

// llm.speculate ngram takes no weights.
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x4xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x4xf32> -> tensor<?x4xf32>
  %l = llm.lm_head %x, %e : (tensor<?x4xf32>, tensor<8x4xf32>) -> tensor<?x8xf32>
  %h = llm.weight "h" : tensor<2x4x8xf32>
  %b = llm.weight "b" : tensor<2x4xf32>
  // expected-error @+1 {{method 'ngram' drafts from the context and takes no operands or draft_vocab}}
  llm.speculate ngram(%x : tensor<?x4xf32>) heads(%h, %b : tensor<2x4x8xf32>, tensor<2x4xf32>) {max_draft = 2 : i64}
  llm.return %l : tensor<?x8xf32>
}

// -----

// llm.speculate: draft trees belong to Medusa heads.
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x4xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x4xf32> -> tensor<?x4xf32>
  %l = llm.lm_head %x, %e : (tensor<?x4xf32>, tensor<8x4xf32>) -> tensor<?x8xf32>
  // expected-error @+1 {{tree_nodes belongs to method 'medusa'}}
  llm.speculate ngram {max_draft = 2 : i64, tree_nodes = 4 : i64}
  llm.return %l : tensor<?x8xf32>
}

// -----

// llm.speculate: at most 64 tree nodes.
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x4xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x4xf32> -> tensor<?x4xf32>
  %l = llm.lm_head %x, %e : (tensor<?x4xf32>, tensor<8x4xf32>) -> tensor<?x8xf32>
  %h = llm.weight "h" : tensor<2x4x8xf32>
  %b = llm.weight "b" : tensor<2x4xf32>
  // expected-error @+1 {{tree_nodes must be in [0, 64], got 65}}
  llm.speculate medusa(%x : tensor<?x4xf32>) heads(%h, %b : tensor<2x4x8xf32>, tensor<2x4xf32>) {draft_vocab = array<i32: 1, 2>, max_draft = 2 : i64, tree_nodes = 65 : i64}
  llm.return %l : tensor<?x8xf32>
}

// -----

llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "e" : tensor<8x4xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x4xf32> -> tensor<?x4xf32>
  %l = llm.lm_head %x, %e : (tensor<?x4xf32>, tensor<8x4xf32>) -> tensor<?x8xf32>
  // expected-error @+1 {{max_draft must be in [1, 64], got 0}}
  llm.speculate ngram {max_draft = 0 : i64}
  llm.return %l : tensor<?x8xf32>
}
