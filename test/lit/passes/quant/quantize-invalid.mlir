// RUN: llmc-opt %s -split-input-file -verify-diagnostics --pass-pipeline='builtin.module(llm-quantize{group=32})'
// RUN: not llmc-opt %s --pass-pipeline='builtin.module(llm-quantize{method=gptq group=16})' 2>&1 | FileCheck %s --check-prefix=GPTQ
// RUN: not llmc-opt %s --pass-pipeline='builtin.module(llm-quantize{method=awq group=16})' 2>&1 | FileCheck %s --check-prefix=AWQ
// RUN: not llmc-opt %s --pass-pipeline='builtin.module(llm-quantize{method=osaq group=16})' 2>&1 | FileCheck %s --check-prefix=OSAQ
// RUN: not llmc-opt %s --pass-pipeline='builtin.module(llm-quantize{method=hqq group=16})' 2>&1 | FileCheck %s --check-prefix=METHOD
// RUN: not llmc-opt %s --pass-pipeline='builtin.module(llm-quantize{bits=9 group=16})' 2>&1 | FileCheck %s --check-prefix=BITS
// RUN: not llmc-opt %s --pass-pipeline='builtin.module(llm-quantize{bits=4 group=12})' 2>&1 | FileCheck %s --check-prefix=GROUP
// RUN: not llmc-opt %s --pass-pipeline='builtin.module(llm-quantize{group=16 calib-tokens=0})' 2>&1 | FileCheck %s --check-prefix=TOKENS

// GPTQ: llm-quantize: method=gptq needs the weights in the IR (llmc import --emit-resources, or llmc compile)
// AWQ: llm-quantize: method=awq needs the weights in the IR (llmc import --emit-resources, or llmc compile)
// OSAQ: llm-quantize: method=osaq needs the weights in the IR (llmc import --emit-resources, or llmc compile)
// METHOD: llm-quantize: unknown method 'hqq' (expected rtn, gptq, awq, osaq, aaac, qtea or hbq)
// BITS: llm-quantize: method=rtn bits=9 group=16: grouped-integer type: 9 bits (2..8 supported)
// GROUP: llm-quantize: method=rtn bits=4 group=12: grouped-integer type: group size 12 (must be a multiple of 8 in [8, 4096])
// TOKENS: llm-quantize: calib-tokens, calib-seq and awq-samples must be positive

// A weight whose rows are not whole groups is named, and nothing is rewritten
// (the first run: group=32 does not divide 48).
llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  // expected-error @+1 {{llm-quantize: weight 'token_embd.weight' has rows of 48 weights, not a multiple of the group size 32}}
  %e = llm.weight "token_embd.weight" : tensor<8x48xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<8x48xf32> -> tensor<?x48xf32>
  llm.return %x : tensor<?x48xf32>
}
