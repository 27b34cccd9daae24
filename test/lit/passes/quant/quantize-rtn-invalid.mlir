// RUN: llmc-opt %s -split-input-file -verify-diagnostics --pass-pipeline='builtin.module(llm-quantize-rtn{bits=4})'
// RUN: not llmc-opt %s -split-input-file --pass-pipeline='builtin.module(llm-quantize-rtn{bits=3})' 2>&1 | FileCheck %s --check-prefix=BITS
// RUN: not llmc-opt %s -split-input-file --pass-pipeline='builtin.module(llm-quantize-rtn{bits=4 group=64})' 2>&1 | FileCheck %s --check-prefix=GROUP

// BITS: llm-quantize-rtn: no storage format for bits=3 group=32 sym=true
// GROUP: llm-quantize-rtn: no storage format for bits=4 group=64 sym=true

// A weight whose rows are not whole groups is named, and nothing is rewritten.
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  // expected-error @+1 {{llm-quantize-rtn: weight 'token_embd.weight' has rows of 48 weights, not a multiple of the group size 32}}
  %e = llm.weight "token_embd.weight" : tensor<8x48xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x48xf32> -> tensor<?x48xf32>
  llm.return %x : tensor<?x48xf32>
}
