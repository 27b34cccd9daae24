// llm-quantize method=qtea on a tiny GGUF through `llmc compile`: every
// matrix but the skipped embedding becomes qtea_g<G>_s<P> with a U8 side
// data tensor "<weight>.aux" (per-column rescale, salient columns and their
// 1:4 FP8 residuals); the manifest records the method; the artifact runs;
// the same pipeline gives identical bytes; bad options fail cleanly. Under
// llmc-opt (no weights) QTEA cannot run and says so (module below).
//
// RUN: rm -rf %t && mkdir -p %t
// RUN: %python %S/../../compiler/import/Inputs/make_tiny_gguf.py %t/tiny.gguf --tensor-type f16
// RUN: llmc compile %t/tiny.gguf -o %t/q.llmc --pipeline='llm-quantize{method=qtea group=32 calib-tokens=64 calib-seq=32 skip=token_embd.weight}' 2>&1 | FileCheck %s --check-prefix=PROGRESS
// RUN: llmc inspect %t/q.llmc | FileCheck %s --check-prefix=TABLE
// RUN: llmc inspect %t/q.llmc --ir | FileCheck %s --check-prefix=IR
// RUN: llmc inspect %t/q.llmc --json | FileCheck %s --check-prefix=JSON
// RUN: llmc run %t/q.llmc -p "the a" -n 4 --ignore-eos 2>&1 | FileCheck %s --check-prefix=RUNS
// RUN: llmc compile %t/tiny.gguf -o %t/again.llmc -q --pipeline='llm-quantize{method=qtea group=32 calib-tokens=64 calib-seq=32 skip=token_embd.weight}'
// RUN: cmp %t/q.llmc %t/again.llmc
//
// No salient columns (qtea-salient=0), group 64, embedding included (H = I):
// RUN: llmc compile %t/tiny.gguf -o %t/s0.llmc -q --pipeline='llm-quantize{method=qtea group=64 qtea-salient=0 calib-tokens=64 calib-seq=32}'
// RUN: llmc inspect %t/s0.llmc | FileCheck %s --check-prefix=S0
//
// A generated Mixtral: 3-D expert tensors are quantized slab by slab (one
// Hessian per expert), their side data back to back (4 x 448 bytes), and the
// artifact evaluates against its source.
// RUN: %python -c "import sys; sys.path.insert(0, '%src/test/e2e/ref'); import make_hf_models as m; c = m.make_config('mixtral', 'f32'); m.write_model('%t/moe', c, m.make_weights(c, 4242)); open('%t/moe.ids', 'w').write(' '.join(str((i * 37 + 11) %% c['vocab_size']) for i in range(96)) + '\n')"
// RUN: llmc compile %t/moe -o %t/moe.llmc --calib %t/moe.ids --pipeline='llm-quantize{method=qtea group=16 calib-tokens=96 calib-seq=32 skip=token_embd.weight}' 2>&1 | FileCheck %s --check-prefix=MOE
// RUN: llmc inspect %t/moe.llmc | FileCheck %s --check-prefix=MOE-TABLE
// RUN: llmc eval %t/moe.llmc --ref %t/moe --text %t/moe.ids --json | FileCheck %s --check-prefix=MOE-EVAL
//
// RUN: not llmc compile %t/tiny.gguf -o %t/e.llmc --pipeline='llm-quantize{method=qtea qtea-salient=60}' 2>&1 | FileCheck %s --check-prefix=ERR-SAL
// RUN: not llmc compile %t/tiny.gguf -o %t/e.llmc --pipeline='llm-quantize{method=qtea qtea-deadzone=0}' 2>&1 | FileCheck %s --check-prefix=ERR-OPT
// RUN: not llmc compile %t/tiny.gguf -o %t/e.llmc --pipeline='llm-quantize{method=qtea qtea-decay=-1}' 2>&1 | FileCheck %s --check-prefix=ERR-OPT
// RUN: not llmc compile %t/tiny.gguf -o %t/e.llmc --pipeline='llm-quantize{method=qtea group=48}' 2>&1 | FileCheck %s --check-prefix=ERR-GROUP
// RUN: not llmc compile %t/tiny.gguf -o %t/e.llmc --pipeline='llm-quantize{method=qtea group=12}' 2>&1 | FileCheck %s --check-prefix=ERR-G12
// RUN: not llmc-opt %s --pass-pipeline='builtin.module(llm-quantize{method=qtea})' 2>&1 | FileCheck %s --check-prefix=ERR-OPT-TOOL

// PROGRESS: llm-quantize qtea: 64 calibration tokens
// PROGRESS: quantize blk.0.attn_q.weight 64x64 qtea qtea_g32_s5 rel.err {{[0-9.]+}} out.err
// PROGRESS: quantize blk.0.ffn_down.weight 64x128 qtea qtea_g32_s5
// PROGRESS: quantize output.weight 96x64 qtea qtea_g32_s5
// PROGRESS: llm-quantize qtea qtea_g32_s5: 15 tensors

// TABLE: token_embd.weight f16 96x64
// TABLE-NOT: token_embd.weight.aux
// 64 rows x 2 groups x (4 + 7) bytes; side data 4*64 + 8*4 + 16*(4 + 1)
// TABLE: blk.0.attn_q.weight qtea_g32_s5 64x64 1408
// TABLE: blk.0.attn_q.weight.aux u8 368 368
// TABLE: blk.0.attn_k.weight qtea_g32_s5 32x64
// TABLE: blk.0.attn_k.weight.aux u8
// 128 input columns: 7 salient; 4*128 + 8*7 + 16*(7 + 2)
// TABLE: blk.0.ffn_down.weight qtea_g32_s5 64x128 2816
// TABLE: blk.0.ffn_down.weight.aux u8 712 712
// TABLE: output.weight qtea_g32_s5 96x64
// TABLE: output.weight.aux u8

// IR: llm.weight "token_embd.weight" : tensor<96x64xf16>
// IR: llm.weight "blk.0.attn_q.weight" : tensor<64x64x!llm.quant<"qtea_g32_s5", block = 32, bytes = 11>>
// IR: llm.weight "blk.0.ffn_down.weight" : tensor<64x128x!llm.quant<"qtea_g32_s5", block = 32, bytes = 11>>
// IR: llm.weight "output.weight" : tensor<96x64x!llm.quant<"qtea_g32_s5", block = 32, bytes = 11>>

// JSON: "blk.0.ffn_down.weight": {
// JSON-DAG: "method": "qtea"
// JSON-DAG: "format": "qtea_g32_s5"
// JSON-DAG: "hessian": "calibration"
// JSON-DAG: "order": "salient+bunch-kaufman"
// JSON-DAG: "salient_cols": 7
// JSON-DAG: "out_rel_err":
// JSON: "output.weight": {
// JSON-DAG: "hessian": "identity"

// RUNS: generated 4 tokens

// S0: token_embd.weight qtea_g64_s0 96x64 1632
// S0: token_embd.weight.aux u8 256
// S0: blk.0.ffn_down.weight qtea_g64_s0 64x128 2176
// S0: blk.0.ffn_down.weight.aux u8 512

// MOE: quantize blk.0.ffn_gate_exps.weight 4x128x64 qtea qtea_g16_s5 rel.err {{[0-9.]+}} out.err
// MOE: quantize blk.0.ffn_down_exps.weight 4x64x128 qtea qtea_g16_s5
// MOE-TABLE: blk.0.ffn_gate_exps.weight qtea_g16_s5 4x128x64 16384
// MOE-TABLE: blk.0.ffn_gate_exps.weight.aux u8 1792 1792
// MOE-EVAL: "kld_mean":

// ERR-SAL: qtea type: salient share 60% (0..50 supported)
// ERR-OPT: qtea-deadzone and qtea-damp must be positive, qtea-decay non-negative
// ERR-GROUP: weight 'token_embd.weight' has rows of 64 weights, not a multiple of the group size 48
// ERR-G12: qtea type: group size 12
// ERR-OPT-TOOL: method=qtea needs the weights in the IR (llmc import --emit-resources, or llmc compile)

llm.model @m config {} {
^bb0(%t: tensor<?xi32>):
  %e = llm.weight "token_embd.weight" : tensor<64x128xf32>
  %x = llm.embed %t, %e : tensor<?xi32>, tensor<64x128xf32> -> tensor<?x128xf32>
  %l = llm.lm_head %x, %e : (tensor<?x128xf32>, tensor<64x128xf32>) -> tensor<?x64xf32>
  llm.return %l : tensor<?x64xf32>
}
