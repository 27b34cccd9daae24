// llm-kv-policy inside `llmc compile`: the policy reaches the artifact's
// program (inspect lists it per attention layer; the JSON program carries
// every key), and a rejected option fails the compile without an artifact.
// REQUIRES: stories260k
// RUN: rm -rf %t && mkdir -p %t
// RUN: llmc compile %shared/models/stories260K.bin -o %t/snap.llmc -q --pipeline 'llm-kv-policy{method=snapkv budget=0.1}'
// RUN: llmc inspect %t/snap.llmc | FileCheck %s --check-prefix=SNAP
// RUN: llmc inspect %t/snap.llmc --json | FileCheck %s --check-prefix=JSON
// RUN: llmc compile %shared/models/stories260K.bin -o %t/pyr.llmc -q --pipeline 'llm-kv-policy{method=pyramidkv budget=128 only-layers=0,2,4}'
// RUN: llmc inspect %t/pyr.llmc | FileCheck %s --check-prefix=PYR
// RUN: not llmc compile %shared/models/stories260K.bin -o %t/bad.llmc -q --pipeline 'llm-kv-policy{method=snapkv budget=0}' 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not test -e %t/bad.llmc
// DepthKV calibration runs the model being compiled: stories260K has no
// tokenizer, so it calibrates on token ids (.ids) and rejects text.
// RUN: %python -c "import random; r = random.Random(1); print(' '.join(str(r.randrange(1, 512)) for _ in range(160)))" > %t/calib.ids
// RUN: llmc compile %shared/models/stories260K.bin -o %t/depth.llmc --pipeline 'llm-kv-policy{method=snapkv budget=0.2 window=4 sink=1 layers=depthkv calib-text=%t/calib.ids calib-context=128 calib-score=8}' 2>&1 | FileCheck %s --check-prefix=PROGRESS
// RUN: llmc inspect %t/depth.llmc | FileCheck %s --check-prefix=DEPTH
// RUN: llmc inspect %t/depth.llmc --json | %python -c "import json, sys; n = json.load(sys.stdin)['program']['nodes']; p = [x['attrs']['kv_policy'] for x in n if 'kv_policy' in x['attrs']]; s = [q['layer_scale'] for q in p]; print('layers', len(p), 'mean', round(sum(s) / len(s), 9), 'deltas', sum('depthkv_delta' in q for q in p), 'in-range', all(0.05 - 1e-9 <= v <= 4 + 1e-9 for v in s), 'distinct', len(set(s)) > 1)" | FileCheck %s --check-prefix=DEPTHJ
// RUN: llmc compile %shared/models/stories260K.bin -o %t/depthm.llmc -q --pipeline 'llm-kv-policy{method=depthkv budget=0.2 window=4 sink=1 calib-text=%t/calib.ids calib-context=128 calib-score=8}' 2>&1 | FileCheck %s --allow-empty --check-prefix=QUIET
// RUN: llmc inspect %t/depthm.llmc | FileCheck %s --check-prefix=DEPTHM
// heads=calibrated: one probe per (layer, KV head) (stories260K: 5 x 4),
// head_scale with one entry per KV head and mean 1 in every layer; with
// layers=depthkv both calibrations share one prefill (one "prefill" line
// each, the same full-cache NLL), DepthKV first.
// RUN: llmc compile %shared/models/stories260K.bin -o %t/heads.llmc --pipeline 'llm-kv-policy{method=h2o budget=0.2 window=4 sink=1 heads=calibrated calib-text=%t/calib.ids calib-context=128 calib-score=8}' 2>&1 | FileCheck %s --check-prefix=HPROGRESS
// RUN: llmc inspect %t/heads.llmc --json | %python -c "import json, sys; n = json.load(sys.stdin)['program']['nodes']; p = [x['attrs']['kv_policy'] for x in n if 'kv_policy' in x['attrs']]; h = [q['head_scale'] for q in p]; print('layers', len(p), 'heads', sorted(set(map(len, h))), 'deltas', sorted(set(len(q['head_delta']) for q in p)), 'mean1', all(abs(sum(v) / len(v) - 1) < 1e-9 for v in h), 'layer_scale', sorted(set(q['layer_scale'] for q in p)), 'distinct', any(len(set(v)) > 1 for v in h))" | FileCheck %s --check-prefix=HEADSJ
// RUN: llmc compile %shared/models/stories260K.bin -o %t/dh.llmc --pipeline 'llm-kv-policy{method=snapkv budget=0.2 window=4 sink=1 layers=depthkv heads=calibrated head-metric=kl calib-text=%t/calib.ids calib-context=128 calib-score=8 only-layers=1,3}' 2>&1 | FileCheck %s --check-prefix=DHPROGRESS
// RUN: llmc inspect %t/dh.llmc --json | %python -c "import json, sys; n = json.load(sys.stdin)['program']['nodes']; p = [x['attrs']['kv_policy'] for x in n if 'kv_policy' in x['attrs']]; print('layers', len(p), 'both', all('head_scale' in q and 'depthkv_delta' in q for q in p), 'kl', all(min(q['head_delta']) > 0 for q in p))" | FileCheck %s --check-prefix=DHJ
// RUN: not llmc compile %shared/models/stories260K.bin -o %t/htext.llmc -q --pipeline 'llm-kv-policy{method=snapkv budget=0.1 heads=calibrated}' 2>&1 | FileCheck %s --check-prefix=HNOTOK
// RUN: not llmc compile %shared/models/stories260K.bin -o %t/text.llmc -q --pipeline 'llm-kv-policy{method=depthkv budget=0.1}' 2>&1 | FileCheck %s --check-prefix=NOTOK
// RUN: not llmc compile %shared/models/stories260K.bin -o %t/short.llmc -q --pipeline 'llm-kv-policy{method=depthkv budget=0.1 calib-text=%t/calib.ids}' 2>&1 | FileCheck %s --check-prefix=SHORT

// SNAP: pipeline: llm-kv-policy{budget=0.1 {{.*}}method=snapkv {{.*}}}
// SNAP: kv policies: 5 of 5 attention layers
// SNAP-NEXT: layer 0 snapkv budget 0.1, layer_scale 1, mode prefill, kv_quant none
// SNAP-NEXT: layer 1 snapkv budget 0.1,
// SNAP-NEXT: layer 2 snapkv budget 0.1,
// SNAP-NEXT: layer 3 snapkv budget 0.1,
// SNAP-NEXT: layer 4 snapkv budget 0.1,

// JSON: "kv_policy": {
// JSON-NEXT: "budget": 0.1,
// JSON-NEXT: "budget_tokens": 0,
// JSON-NEXT: "kv_quant": "none",
// JSON-NEXT: "layer_scale": 1.0,
// JSON-NEXT: "method": "snapkv",
// JSON-NEXT: "mode": "prefill",
// JSON-NEXT: "pool": 7,
// JSON-NEXT: "refresh": 16,
// JSON-NEXT: "seed": 0,
// JSON-NEXT: "sink": 4,
// JSON-NEXT: "window": 32
// JSON-NEXT: },
// JSON-NEXT: "layer": 0,

// L = 5 counts every attention layer, selected or not: the pyramid's scales
// at layers 0, 2, 4 are 1.95, 1.0, 0.05.
// PYR: kv policies: 3 of 5 attention layers
// PYR-NEXT: layer 0 pyramidkv budget 128 tokens, layer_scale 1.95, mode prefill
// PYR-NEXT: layer 2 pyramidkv budget 128 tokens, layer_scale 1, mode prefill
// PYR-NEXT: layer 4 pyramidkv budget 128 tokens, layer_scale 0.05, mode prefill

// BAD: error: llm-kv-policy: option 'budget': ratio 0 is not in (0, 1]
// BAD: llmc: error: pipeline 'llm-kv-policy{method=snapkv budget=0}' failed

// PROGRESS: [llmc] llm-kv-policy depthkv: 119 prompt + 8 scored tokens of {{.*}}calib.ids, probe snapkv budget 0.2; prefill
// PROGRESS: [llmc] depthkv layer 0 (1/5): delta
// PROGRESS: [llmc] depthkv layer 4 (5/5): delta
// PROGRESS: [llmc] llm-kv-policy depthkv: layer_scale
// DEPTH: kv policies: 5 of 5 attention layers
// DEPTH-NEXT: layer 0 snapkv budget 0.2, layer_scale
// DEPTH-COUNT-4: snapkv budget 0.2, layer_scale
// DEPTHJ: layers 5 mean 1.0 deltas 5 in-range True distinct True
// QUIET-NOT: depthkv
// DEPTHM: layer 0 depthkv budget 0.2, layer_scale
// HPROGRESS: [llmc] llm-kv-policy heads=calibrated: 119 prompt + 8 scored tokens of {{.*}}calib.ids, probe h2o per KV head (20 probes, delta = nll rise); prefill
// HPROGRESS: [llmc] heads layer 0 (1/5): delta {{[0-9.]+ [0-9.]+ [0-9.]+ [0-9.]+}}, head_scale {{[0-9.]+ [0-9.]+ [0-9.]+ [0-9.]+}},
// HPROGRESS: [llmc] heads layer 4 (5/5): delta
// HPROGRESS: [llmc] llm-kv-policy heads=calibrated: 20 probes in
// HEADSJ: layers 5 heads [4] deltas [4] mean1 True layer_scale [1.0] distinct True
// DHPROGRESS: [llmc] llm-kv-policy depthkv: 119 prompt + 8 scored tokens of {{.*}}calib.ids, probe snapkv budget 0.2; prefill [[T:[0-9.]+s, full-cache nll [0-9.]+]]
// DHPROGRESS: [llmc] depthkv layer 4 (5/5): delta
// DHPROGRESS: [llmc] llm-kv-policy heads=calibrated: 119 prompt + 8 scored tokens of {{.*}}calib.ids, probe snapkv per KV head (8 probes, delta = kl); prefill [[T]]
// DHPROGRESS: [llmc] heads layer 1 (1/2): delta
// DHPROGRESS: [llmc] heads layer 3 (2/2): delta
// DHJ: layers 2 both True kl True
// HNOTOK: error: llm-kv-policy: heads=calibrated calibration: {{.*}}stories260K.bin: the model has no tokenizer to encode the calibration text {{.*}}default.txt (give token ids in a .ids file with calib-text=FILE.ids)
// NOTOK: error: llm-kv-policy: method=depthkv calibration: {{.*}}stories260K.bin: the model has no tokenizer to encode the calibration text {{.*}}default.txt (give token ids in a .ids file with calib-text=FILE.ids)
// SHORT: error: llm-kv-policy: method=depthkv calibration: {{.*}}calib.ids: only 160 calibration tokens, calib-context needs 1024
