// llm-moefy and llm-prune-experts on a real model (SmolLM2-135M, 30 blocks,
// MLP 576 -> 1536). With every expert run, the MoEfied model is the dense
// model (KLD ~ 0 on real weights, both on the reference engine: the kernel
// engine's int8 activations would differ from the MoE's f32 ones); then 16 experts, top 4, half of them
// pruned by OMP: the compile keeps 8 experts per block and the model
// generates. Everything in memory (the f32 expert weights are large).
// REQUIRES: smollm2
// RUN: rm -rf %t && mkdir -p %t
// RUN: llmc eval %smollm2 --pipeline 'llm-moefy{experts=16 top-k=16 calib-tokens=512}' --ref %smollm2 --max-tokens 128 -c 128 --json --engine reference > %t/exact.json
// RUN: %python -c "import json; j = json.load(open('%t/exact.json')); print('exact', j['kld_mean'] < 1e-6, 'top1', j['top1'])" | FileCheck %s --check-prefix=EXACT
// RUN: llmc compile %smollm2 --dry-run --pipeline 'llm-moefy{experts=16 top-k=4 calib-tokens=512},llm-prune-experts{method=omp ratio=0.5 calib-tokens=512 report=%t/omp.json}' 2>&1 | FileCheck %s --check-prefix=DRY
// RUN: %python -c "import json; j = json.load(open('%t/omp.json')); print('layers', len(j['layers']), 'kept', sorted(set(len(l['kept']) for l in j['layers'])), 'tokens', j['calibration']['tokens'])" | FileCheck %s --check-prefix=REPORT
// RUN: llmc run %smollm2 --pipeline 'llm-moefy{experts=16 top-k=4 calib-tokens=512},llm-prune-experts{method=frequency ratio=0.5 calib-tokens=512}' -p "Once upon a time" -n 8 -q | FileCheck %s --check-prefix=TEXT

// EXACT: exact True top1 100.0
// DRY: blk.29.ffn_gate_inp.weight {{.*}}8x576
// DRY: blk.29.ffn_gate_exps.weight {{.*}}8x96x576
// REPORT: layers 30 kept [8] tokens 512
// TEXT: {{[[:alpha:]]}}
