// Numerics of a pass, checked through the IR: a tiny model whose weights
// are literals in this file; llm-quantize-rtn writes their Q8_0 bytes as a
// blob (4 bytes of alignment, then per 32-weight block the f16 scale and 32
// int8 codes). Row 0 has max |w| 127 (scale 1.0 = 0x3C00, codes = weights),
// row 1 max |w| 254 (scale 2.0 = 0x4000, codes -127 and 1).
// RUN: llmc-opt %s --pass-pipeline='builtin.module(llm-quantize-rtn{bits=8})' | FileCheck %s
// The result reads back and a second run of the same pass leaves the bytes alone
// (a q8_0 weight is not requantized).
// RUN: llmc-opt %s --pass-pipeline='builtin.module(llm-quantize-rtn{bits=8})' \
// RUN:   | llmc-opt --pass-pipeline='builtin.module(llm-quantize-rtn{bits=8})' | FileCheck %s
// A literal whose size does not match its weight's type is refused.
// RUN: not llmc-opt %S/Inputs/bad-weight-bytes.mlir 2>&1 | FileCheck %s --check-prefix=BAD

// CHECK: llm.weight "token_embd.weight" {transform = {{[{].*}}method = "rtn", rel_rmse = 0.000000e+00 : f64{{.*}}, value = dense_resource<[[EMB:[^>]+]]> : tensor<68xi8>{{[}]}} : tensor<2x32x!llm.quant<"q8_0", block = 32, bytes = 34>>
// The norm is not a matrix: its literal is kept as written.
// CHECK: llm.weight "output_norm.weight" {value = dense<1.000000e+00> : tensor<32xf32>{{[}]}} : tensor<32xf32>
// CHECK: dialect_resources
// CHECK: [[EMB]]: "0x01000000003C7F0102030405060708090A0B0C0D0E0F101112131415161718191A1B1C1D1E1F00408101000000000000000000000000000000000000000000000000000000000000"

// BAD: error: 'llm.weight' op 'value' holds 100 bytes but the weight's type stores 256

llm.model @tiny config {vocab_size = 2 : i64, hidden_size = 32 : i64} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "token_embd.weight" {value = dense<[[127.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0, 18.0, 19.0, 20.0, 21.0, 22.0, 23.0, 24.0, 25.0, 26.0, 27.0, 28.0, 29.0, 30.0, 31.0], [-254.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]]> : tensor<2x32xf32>} : tensor<2x32xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<2x32xf32> -> tensor<?x32xf32>
  %nw = llm.weight "output_norm.weight" {value = dense<1.0> : tensor<32xf32>} : tensor<32xf32>
  %n = llm.rms_norm %x, %nw {eps = 1.0e-05 : f64} : tensor<?x32xf32>, tensor<32xf32>
  %l = llm.lm_head %n, %e : (tensor<?x32xf32>, tensor<2x32xf32>) -> tensor<?x2xf32>
  llm.return %l : tensor<?x2xf32>
}
