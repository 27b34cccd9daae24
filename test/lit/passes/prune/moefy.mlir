// llm-moefy on a generated Llama (3 blocks, MLP 64 -> 128): every llm.mlp
// becomes an llm.moe with unit gating over f32 expert slabs and a router,
// the dense weights are gone, and the config records the experts. With
// top-k = experts the layer is the dense MLP exactly (KLD ~ 0 against the
// source); fewer experts per token lose accuracy, and more of them lose
// less.
// RUN: rm -rf %t && mkdir -p %t
// RUN: %python %src/test/e2e/ref/make_hf_models.py %t/hf > /dev/null
// RUN: %python -c "print(' '.join(str(3 + i * 37 % 250) for i in range(600)))" > %t/calib.ids
// RUN: %python -c "print(' '.join(str(5 + i * 53 % 240) for i in range(400)))" > %t/eval.ids
// RUN: llmc compile %t/hf/llama-f32 -o %t/all.llmc --pipeline 'llm-moefy{experts=4 top-k=4 calib=%t/calib.ids calib-tokens=512 calib-seq=128 report=%t/all.json}' 2>&1 | FileCheck %s --check-prefix=LOG
// RUN: llmc inspect %t/all.llmc --ir | FileCheck %s --check-prefix=IR
// RUN: %python -c "import json; j = json.load(open('%t/all.json')); b = j['blocks']; print('blocks', len(b), 'recall', min(x['router_recall'] for x in b), 'error', max(x['topk_rel_error'] for x in b) < 1e-9, 'tokens', j['calibration']['tokens'])" | FileCheck %s --check-prefix=REPORT
// RUN: llmc eval %t/all.llmc --ref %t/hf/llama-f32 --text %t/eval.ids -c 64 --max-tokens 256 --json > %t/all.eval
// RUN: llmc eval %t/hf/llama-f32 --pipeline 'llm-moefy{experts=4 top-k=1 calib=%t/calib.ids calib-tokens=512 calib-seq=128}' --ref %t/hf/llama-f32 --text %t/eval.ids -c 64 --max-tokens 256 --json > %t/k1.eval
// RUN: llmc eval %t/hf/llama-f32 --pipeline 'llm-moefy{experts=4 top-k=3 calib=%t/calib.ids calib-tokens=512 calib-seq=128}' --ref %t/hf/llama-f32 --text %t/eval.ids -c 64 --max-tokens 256 --json > %t/k3.eval
// RUN: %python -c "import json; a, k1, k3 = (json.load(open('%t/' + n + '.eval'))['kld_mean'] for n in ('all', 'k1', 'k3')); print('exact', a < 1e-9, 'lossy', k1 > 1e-3, 'more experts closer', k3 < k1)" | FileCheck %s --check-prefix=EVAL
// The weight clustering is data-free for the grouping (the router still fits).
// RUN: llmc compile %t/hf/llama-f32 -o %t/w.llmc -q --pipeline 'llm-moefy{experts=8 top-k=2 clustering=weights calib=%t/calib.ids calib-tokens=256 calib-seq=128}'
// RUN: llmc inspect %t/w.llmc | FileCheck %s --check-prefix=W
// RUN: llmc run %t/w.llmc --prompt-tokens 1,2,3 -n 4 -q | FileCheck %s --check-prefix=IDS
// Bad options and models are refused before anything runs; no artifact.
// RUN: not llmc compile %t/hf/llama-f32 -o %t/bad.llmc -q --pipeline 'llm-moefy{experts=3 top-k=1 calib=%t/calib.ids}' 2>&1 | FileCheck %s --check-prefix=SPLIT
// RUN: not llmc compile %t/hf/llama-f32 -o %t/bad.llmc -q --pipeline 'llm-moefy{experts=4 top-k=5 calib=%t/calib.ids}' 2>&1 | FileCheck %s --check-prefix=TOPK
// RUN: not llmc compile %t/hf/llama-f32 -o %t/bad.llmc -q --pipeline 'llm-moefy{experts=4 top-k=2 clustering=random calib=%t/calib.ids}' 2>&1 | FileCheck %s --check-prefix=CLUSTER
// RUN: not llmc compile %t/hf/llama-f32 -o %t/bad.llmc -q --pipeline 'llm-moefy{top-k=2 calib=%t/calib.ids}' 2>&1 | FileCheck %s --check-prefix=EXPERTS
// RUN: not llmc compile %t/hf/mixtral-f32 -o %t/bad.llmc -q --pipeline 'llm-moefy{experts=4 top-k=2 calib=%t/calib.ids}' 2>&1 | FileCheck %s --check-prefix=NOMLP
// RUN: not test -e %t/bad.llmc

// LOG: moefy: 3 MLPs into 4 experts, top 4 (512 calibration tokens of {{.*}}calib.ids)
// LOG: block 0: router recall 1.000, top-4 relative error 0.0000
// LOG: block 2: router recall

// IR: num_experts = 4 : i64, num_experts_per_token = 4 : i64
// IR-NOT: llm.mlp
// IR-NOT: ffn_gate.weight
// IR: llm.weight "blk.0.ffn_gate_inp.weight" : tensor<4x64xf32>
// IR: llm.weight "blk.0.ffn_gate_exps.weight" : tensor<4x32x64xf32>
// IR: llm.weight "blk.0.ffn_up_exps.weight" : tensor<4x32x64xf32>
// IR: llm.weight "blk.0.ffn_down_exps.weight" : tensor<4x64x32xf32>
// IR: llm.moe {{.*}}gating = #llm<moe_gating unit>, renormalize = false, top_k = 4 : i64
// IR: llm.moe
// IR: llm.moe
// IR-NOT: llm.moe

// REPORT: blocks 3 recall 1.0 error True tokens 512
// EVAL: exact True lossy True more experts closer True
// W: blk.2.ffn_down_exps.weight f32 8x64x16
// IDS: {{^[0-9]+( [0-9]+){3}$}}

// SPLIT: error: llm-moefy: block 0: its 128 MLP neurons do not split into 3 equal experts
// TOPK: error: llm-moefy: top-k must be in [1, 4] (option 'top-k')
// CLUSTER: error: llm-moefy: unknown clustering 'random' (coactivation or weights)
// EXPERTS: error: llm-moefy: experts must be >= 2 (option 'experts')
// NOMLP: error: llm-moefy: the model has no dense llm.mlp to convert
