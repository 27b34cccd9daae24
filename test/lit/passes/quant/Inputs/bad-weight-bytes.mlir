// Input of quantize-rtn-numerics.mlir: 100 bytes given for an f32 [64] weight.
llm.model @bad config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "token_embd.weight" : tensor<4x64xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<4x64xf32> -> tensor<?x64xf32>
  %nw = llm.weight "output_norm.weight" {value = dense<0> : tensor<100xi8>} : tensor<64xf32>
  %n = llm.rms_norm %x, %nw {eps = 1.0e-05 : f64} : tensor<?x64xf32>, tensor<64xf32>
  %l = llm.lm_head %n, %e : (tensor<?x64xf32>, tensor<4x64xf32>) -> tensor<?x4xf32>
  llm.return %l : tensor<?x4xf32>
}
