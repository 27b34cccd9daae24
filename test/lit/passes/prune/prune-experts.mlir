// llm-prune-experts on a generated Mixtral (2 MoE blocks, 4 experts, top 2):
// every method keeps half the experts, the router rows and stacked slabs
// shrink to the kept ones (the IR after the pass), the layer keeps its
// Mixtral routing over them, and the runtime runs the result. The OMP
// report's error curve falls to 0 with every expert kept.
// RUN: rm -rf %t && mkdir -p %t
// RUN: %python %src/test/e2e/ref/make_hf_models.py %t/hf > /dev/null
// RUN: %python -c "print(' '.join(str(3 + i * 37 % 250) for i in range(600)))" > %t/calib.ids
// RUN: %python -c "print(' '.join(str(5 + i * 53 % 240) for i in range(400)))" > %t/eval.ids
// RUN: llmc compile %t/hf/mixtral-f32 -o %t/omp.llmc --pipeline 'llm-prune-experts{method=omp ratio=0.5 calib=%t/calib.ids calib-tokens=512 calib-seq=128 report=%t/omp.json}' 2>&1 | FileCheck %s --check-prefix=LOG
// RUN: llmc inspect %t/omp.llmc --ir | FileCheck %s --check-prefix=IR
// RUN: %python -c "import json; j = json.load(open('%t/omp.json')); l = j['layers'][0]; e = l['err']; print('layers', len(j['layers']), 'keep', l['keep'], 'full', e[4] < 1e-9, 'falls', all(a >= b - 1e-12 for a, b in zip(e, e[1:])), 'kept from order', sorted(l['order'][:2]) == l['kept'], 'tokens', sum(l['routed_tokens']))" | FileCheck %s --check-prefix=REPORT
// RUN: llmc run %t/omp.llmc --prompt-tokens 1,2,3 -n 4 -q | FileCheck %s --check-prefix=IDS
// RUN: llmc compile %t/hf/mixtral-f32 -o %t/freq.llmc -q --pipeline 'llm-prune-experts{method=frequency ratio=0.5 calib=%t/calib.ids calib-tokens=512 calib-seq=128}'
// RUN: llmc compile %t/hf/mixtral-f32 -o %t/norm.llmc -q --pipeline 'llm-prune-experts{method=norm ratio=0.25 calib=%t/calib.ids calib-tokens=512 calib-seq=128}'
// RUN: llmc compile %t/hf/mixtral-f32 -o %t/greedy.llmc -q --pipeline 'llm-prune-experts{method=greedy ratio=0.5 allocation=waterfill calib=%t/calib.ids calib-tokens=512 calib-seq=128}'
// RUN: llmc inspect %t/freq.llmc | FileCheck %s --check-prefix=HALF
// RUN: llmc inspect %t/greedy.llmc | FileCheck %s --check-prefix=HALF
// RUN: llmc inspect %t/norm.llmc | FileCheck %s --check-prefix=THREE
// Adaptive activation is recorded on the op and run by the runtime: at
// tau = 1 every routed expert runs (the same logits as without it); at a
// lower tau fewer run and the output moves.
// RUN: llmc compile %t/hf/mixtral-f32 -o %t/a1.llmc -q --pipeline 'llm-prune-experts{method=omp ratio=0.5 adaptive-energy=1.0 calib=%t/calib.ids calib-tokens=512 calib-seq=128}'
// RUN: llmc compile %t/hf/mixtral-f32 -o %t/a6.llmc --pipeline 'llm-prune-experts{method=omp ratio=0.5 adaptive-energy=0.6 calib=%t/calib.ids calib-tokens=512 calib-seq=128}' 2>&1 | FileCheck %s --check-prefix=ADAPT
// RUN: llmc inspect %t/a6.llmc --ir | FileCheck %s --check-prefix=ADAPTIR
// RUN: llmc eval %t/a1.llmc --ref %t/omp.llmc --text %t/eval.ids -c 64 --max-tokens 256 --json > %t/a1.eval
// RUN: llmc eval %t/a6.llmc --ref %t/omp.llmc --text %t/eval.ids -c 64 --max-tokens 256 --json > %t/a6.eval
// RUN: %python -c "import json; a1, a6 = (json.load(open('%t/' + n + '.eval'))['kld_mean'] for n in ('a1', 'a6')); print('tau 1 same', a1 < 1e-9, 'tau 0.6 moves', a6 > 1e-6)" | FileCheck %s --check-prefix=TAU
// rescale folds OMP's least-squares weights into the down projections (f32).
// RUN: llmc compile %t/hf/mixtral-f16 -o %t/rs.llmc -q --pipeline 'llm-prune-experts{method=omp ratio=0.5 rescale=true calib=%t/calib.ids calib-tokens=512 calib-seq=128}'
// RUN: llmc inspect %t/rs.llmc | FileCheck %s --check-prefix=RESCALE
// dry-run reports and changes nothing.
// RUN: llmc compile %t/hf/mixtral-f32 -o %t/dry.llmc -q --pipeline 'llm-prune-experts{method=frequency ratio=0.5 dry-run=true calib=%t/calib.ids calib-tokens=512 calib-seq=128}'
// RUN: llmc inspect %t/dry.llmc | FileCheck %s --check-prefix=DRY
// Composes: a dense Llama cut into experts, pruned, then quantized.
// RUN: llmc compile %t/hf/llama-f32 -o %t/mpq.llmc -q --pipeline 'llm-moefy{experts=4 top-k=2 calib=%t/calib.ids calib-tokens=512 calib-seq=128},llm-prune-experts{method=omp ratio=0.25 calib=%t/calib.ids calib-tokens=512 calib-seq=128},llm-quantize-rtn{bits=8}'
// The quantized experts run on the kernel engine, stored as eight-row slabs.
// RUN: llmc inspect %t/mpq.llmc --json | %python -c "import json, sys; p = json.load(sys.stdin)['packed_weights']['blk.0.ffn_gate_exps.weight']; print('MPQ', p['dtype'], p['shape'])" | FileCheck %s --check-prefix=MPQ
// RUN: llmc run %t/mpq.llmc --prompt-tokens 1,2,3 -n 4 -q | FileCheck %s --check-prefix=IDS
// Bad options and models: refused, no artifact.
// RUN: not llmc compile %t/hf/mixtral-f32 -o %t/bad.llmc -q --pipeline 'llm-prune-experts{ratio=0.5}' 2>&1 | FileCheck %s --check-prefix=NOMETHOD
// RUN: not llmc compile %t/hf/mixtral-f32 -o %t/bad.llmc -q --pipeline 'llm-prune-experts{method=random ratio=0.5}' 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: not llmc compile %t/hf/mixtral-f32 -o %t/bad.llmc -q --pipeline 'llm-prune-experts{method=omp ratio=1.5}' 2>&1 | FileCheck %s --check-prefix=RATIO
// RUN: not llmc compile %t/hf/mixtral-f32 -o %t/bad.llmc -q --pipeline 'llm-prune-experts{method=omp ratio=0.9}' 2>&1 | FileCheck %s --check-prefix=FLOOR
// RUN: not llmc compile %t/hf/mixtral-f32 -o %t/bad.llmc -q --pipeline 'llm-prune-experts{method=norm ratio=0.5 allocation=waterfill}' 2>&1 | FileCheck %s --check-prefix=WATER
// RUN: not llmc compile %t/hf/mixtral-f32 -o %t/bad.llmc -q --pipeline 'llm-prune-experts{method=norm ratio=0.5 rescale=true}' 2>&1 | FileCheck %s --check-prefix=RESCALEBAD
// RUN: not llmc compile %t/hf/mixtral-f32 -o %t/bad.llmc -q --pipeline 'llm-prune-experts{method=omp ratio=0.5 adaptive-energy=2}' 2>&1 | FileCheck %s --check-prefix=TAUBAD
// RUN: not llmc compile %t/hf/llama-f32 -o %t/bad.llmc -q --pipeline 'llm-prune-experts{method=omp ratio=0.5}' 2>&1 | FileCheck %s --check-prefix=DENSE
// RUN: not llmc compile %t/hf/mixtral-f32 -o %t/bad.llmc -q --pipeline 'llm-quantize{method=aaac bits=3 group=32 calib-tokens=128 calib-seq=32 calib=%t/calib.ids aaac-iters=2},llm-prune-experts{method=omp ratio=0.5 calib=%t/calib.ids}' 2>&1 | FileCheck %s --check-prefix=AUX
// RUN: not test -e %t/bad.llmc

// LOG: prune-experts omp (uniform) over 2 MoE layers (512 calibration tokens of {{.*}}calib.ids)
// LOG: block 0: keep 2 of 4 {{{[0-3],[0-3]}}}, error {{[0-9.]+}}, routing change
// LOG: block 1: keep 2 of 4
// LOG: keeping 4 of 8 experts; search

// IR: num_experts = 2 : i64
// IR: llm.weight "blk.0.ffn_gate_inp.weight" : tensor<2x64xf32>
// IR: llm.weight "blk.0.ffn_gate_exps.weight" : tensor<2x128x64xf32>
// IR: llm.weight "blk.0.ffn_down_exps.weight" : tensor<2x64x128xf32>
// IR: llm.moe {{.*}}top_k = 2 : i64} : (tensor<?x64xf32>, tensor<2x64xf32>, tensor<2x128x64xf32>, tensor<2x128x64xf32>, tensor<2x64x128xf32>)
// IR: llm.moe {{.*}}tensor<2x64xf32>

// REPORT: layers 2 keep 2 full True falls True kept from order True tokens 1024
// IDS: {{^[0-9]+( [0-9]+){3}$}}
// HALF: blk.1.ffn_up_exps.weight f32 2x128x64
// THREE: blk.1.ffn_up_exps.weight f32 3x128x64

// ADAPT: block 0: keep 2 of 4 {{.*}}of top 2 run
// ADAPTIR: llm.moe {{.*}}energy_threshold = 6.000000e-01 : f64, expert_energy = array<f32: {{[0-9.e+-]+}}, {{[0-9.e+-]+}}>
// TAU: tau 1 same True tau 0.6 moves True

// RESCALE: blk.0.ffn_gate_exps.weight f16 2x128x64
// RESCALE: blk.0.ffn_down_exps.weight f32 2x64x128
// DRY: blk.1.ffn_up_exps.weight f32 4x128x64
// MPQ: MPQ q8_0 [3, 32, 64]

// NOMETHOD: error: llm-prune-experts: option 'method' is required (one of omp, frequency, norm or greedy)
// UNKNOWN: error: llm-prune-experts: unknown method 'random'
// RATIO: error: llm-prune-experts: ratio must be in (0, 1)
// FLOOR: error: llm-prune-experts: ratio 0.900000 keeps 1 experts, fewer than the layers' top k (4)
// WATER: error: llm-prune-experts: allocation=waterfill needs an error curve: method omp or greedy
// RESCALEBAD: error: llm-prune-experts: rescale=true goes with method=omp
// TAUBAD: error: llm-prune-experts: adaptive-energy must be in [0, 1]
// DENSE: error: llm-prune-experts: the model has no llm.moe layer (llm-moefy makes one from a dense MLP)
// AUX: error: llm-prune-experts: {{.*}}prune experts before quantizing
