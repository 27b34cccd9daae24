// llm-quantize method=aaac: through `llmc compile` on a tiny GGUF (the method
// needs weights and calibration data), the IR after the pass has aaac types,
// every quantized matrix has its codebooks as a ".aux" companion tensor, the
// manifest records the method, the artifact runs, and 2-bit codes are further
// from the f32 model than 4-bit ones. Then the option errors under llmc-opt.
//
// RUN: rm -rf %t && mkdir -p %t
// RUN: %python %src/test/lit/compiler/import/Inputs/make_tiny_gguf.py %t/tiny.gguf --tensor-type f32
// RUN: llmc compile %t/tiny.gguf -o %t/ref.llmc -q
// RUN: llmc compile %t/tiny.gguf -o %t/a4.llmc --pipeline='llm-quantize{method=aaac bits=4 group=64 calib-tokens=64 calib-seq=32 skip=token_embd.weight}' 2>&1 | FileCheck %s --check-prefix=PROGRESS
// RUN: llmc inspect %t/a4.llmc --ir | FileCheck %s --check-prefix=IR
// RUN: llmc inspect %t/a4.llmc | FileCheck %s --check-prefix=TENSORS
// RUN: llmc inspect %t/a4.llmc --json | FileCheck %s --check-prefix=JSON
// RUN: llmc run %t/a4.llmc -p "the" -n 4 -q > %t/run.txt
// Same source, same pipeline: identical bytes.
// RUN: llmc compile %t/tiny.gguf -o %t/again.llmc -q --pipeline='llm-quantize{method=aaac bits=4 group=64 calib-tokens=64 calib-seq=32 skip=token_embd.weight}'
// RUN: cmp %t/a4.llmc %t/again.llmc
// 2-bit groups of 32 (10-byte blocks), embedding and LM head included (h = 1).
// RUN: llmc compile %t/tiny.gguf -o %t/a2.llmc -q --pipeline='llm-quantize{method=aaac bits=2 group=32 calib-tokens=64 calib-seq=32 aaac-iters=3}'
// RUN: llmc inspect %t/a2.llmc --ir | FileCheck %s --check-prefix=IR2
// RUN: llmc eval %t/a4.llmc --ref %t/ref.llmc --ctx 64 --max-tokens 128 --json > %t/a4.json
// RUN: llmc eval %t/a2.llmc --ref %t/ref.llmc --ctx 64 --max-tokens 128 --json > %t/a2.json
// RUN: %python -c "import json,sys; a4, a2 = (json.load(open(p)) for p in sys.argv[1:]); \
// RUN:   print('finite', all(abs(j[k]) < 1e30 for j in (a4, a2) for k in ('kld_mean', 'ppl'))); \
// RUN:   print('4-bit closer', a4['kld_mean'] < a2['kld_mean'])" %t/a4.json %t/a2.json \
// RUN:   | FileCheck %s --check-prefix=EVAL
// MoE: stacked experts are quantized expert by expert (each with its own
// Hessian), their codebooks back to back: 4 experts x (2 x 8 fp16) at 3 bits.
// The Mixtral checkpoint has no tokenizer, so calibrate on token ids.
// RUN: %python %src/test/e2e/ref/make_hf_models.py %t/hf > /dev/null
// RUN: %python -c "print(' '.join(str(3 + i * 37 % 250) for i in range(200)))" > %t/calib.ids
// RUN: llmc compile %t/hf/mixtral-f16 -o %t/moe.llmc -q --pipeline='llm-quantize{method=aaac bits=3 group=32 calib-tokens=128 calib-seq=32 calib=%t/calib.ids aaac-iters=4}'
// RUN: llmc inspect %t/moe.llmc | FileCheck %s --check-prefix=MOE
//
// RUN: not llmc-opt %s --pass-pipeline='builtin.module(llm-quantize{method=aaac})' 2>&1 | FileCheck %s --check-prefix=NODATA
// RUN: not llmc-opt %s --pass-pipeline='builtin.module(llm-quantize{method=aaac bits=5})' 2>&1 | FileCheck %s --check-prefix=BITS
// RUN: not llmc-opt %s --pass-pipeline='builtin.module(llm-quantize{method=aaac bits=4 group=12})' 2>&1 | FileCheck %s --check-prefix=GROUP
// RUN: not llmc-opt %s --pass-pipeline='builtin.module(llm-quantize{method=aaac aaac-iters=0})' 2>&1 | FileCheck %s --check-prefix=ITERS
// RUN: not llmc compile %t/tiny.gguf -o %t/bad.llmc --pipeline='llm-quantize{method=aaac group=48}' 2>&1 | FileCheck %s --check-prefix=ROWS

// PROGRESS: [llmc] llm-quantize aaac: 64 calibration tokens
// PROGRESS: [llmc] quantize blk.0.attn_q.weight {{.+}} aaac aaac4_g64 rel.err {{[0-9.]+}} out.err {{[0-9.]+}}
// PROGRESS: [llmc] quantize output.weight {{.+}} aaac aaac4_g64 rel.err
// PROGRESS: [llmc] llm-quantize aaac aaac4_g64: 15 tensors

// IR: llm.weight "token_embd.weight" : tensor<96x64xf32>
// IR: llm.weight "blk.0.attn_norm.weight" : tensor<64xf32>
// IR: llm.weight "blk.0.attn_q.weight" : tensor<64x64x!llm.quant<"aaac4_g64", block = 64, bytes = 34>>
// IR: llm.weight "blk.0.ffn_down.weight" : tensor<64x128x!llm.quant<"aaac4_g64", block = 64, bytes = 34>>
// IR: llm.weight "output.weight" : tensor<96x64x!llm.quant<"aaac4_g64", block = 64, bytes = 34>>

// TENSORS: token_embd.weight f32 96x64
// TENSORS-NOT: token_embd.weight.aux
// TENSORS: blk.0.attn_q.weight aaac4_g64 64x64 2176
// TENSORS-NEXT: blk.0.attn_q.weight.aux u8 64 64
// TENSORS: blk.0.ffn_down.weight aaac4_g64 64x128 4352
// TENSORS-NEXT: blk.0.ffn_down.weight.aux u8 64 64
// TENSORS: output.weight aaac4_g64 96x64 3264
// TENSORS-NEXT: output.weight.aux u8 64 64

// JSON: "weight_transforms": {
// JSON: "blk.0.attn_k.weight": {
// JSON: "activation_weighted": true,
// JSON: "format": "aaac4_g64",
// JSON: "method": "aaac",
// JSON: "out_rel_err":

// IR2: llm.weight "token_embd.weight" : tensor<96x64x!llm.quant<"aaac2_g32", block = 32, bytes = 10>>
// IR2: llm.weight "blk.1.ffn_up.weight" : tensor<128x64x!llm.quant<"aaac2_g32", block = 32, bytes = 10>>

// EVAL: finite True
// EVAL: 4-bit closer True

// MOE: blk.0.ffn_gate_exps.weight aaac3_g32 4x128x64 14336
// MOE-NEXT: blk.0.ffn_gate_exps.weight.aux u8 128 128
// MOE: blk.0.ffn_down_exps.weight aaac3_g32 4x64x128 14336
// MOE-NEXT: blk.0.ffn_down_exps.weight.aux u8 128 128

// NODATA: llm-quantize: method=aaac needs the weights in the IR (llmc import --emit-resources, or llmc compile)
// BITS: llm-quantize: method=aaac bits=5 group=64: aaac type: 5 bits (2..4 supported)
// GROUP: llm-quantize: method=aaac bits=4 group=12: aaac type: group size 12 (must be a multiple of 8 in [8, 4096])
// ITERS: llm-quantize: aaac-iters, qtea-deadzone and qtea-damp must be positive
// ROWS: llm-quantize: weight '{{.+}}' has rows of 64 weights, not a multiple of the group size 48

llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "token_embd.weight" : tensor<64x128xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<64x128xf32> -> tensor<?x128xf32>
  %l = llm.lm_head %x, %e : (tensor<?x128xf32>, tensor<64x128xf32>) -> tensor<?x64xf32>
  llm.return %l : tensor<?x64xf32>
}
