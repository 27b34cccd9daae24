// llm-prune-depth inside `llmc compile` on a real model (stories260K, 5
// blocks): every method removes whole blocks, the artifact holds fewer
// layers and their weights only, and the runtime runs it. The activation
// methods run the model on calibration token ids (stories260K has no
// tokenizer).
// REQUIRES: stories260k
// RUN: rm -rf %t && mkdir -p %t
// RUN: %python -c "import random; r = random.Random(3); print(' '.join(str(r.randrange(1, 512)) for _ in range(300)))" > %t/calib.ids
// RUN: llmc compile %shared/models/stories260K.bin -o %t/bi.llmc --pipeline 'llm-prune-depth{method=block-influence drop=2 calib=%t/calib.ids calib-tokens=256 calib-seq=128 report=%t/bi.json}' 2>&1 | FileCheck %s --check-prefix=BI
// RUN: llmc inspect %t/bi.llmc --json --no-verify | %python -c "import json, sys; j = json.load(sys.stdin); c = j['config']; n = j['program']['nodes']; print('layers', c['num_layers'], 'kept', c['kept_layers'], 'attention', sorted(x['attrs']['layer'] for x in n if x['op'] == 'attention'), 'blk tensors', len([t for t in j['tensors'] if t['name'].startswith('blk.')]))" | FileCheck %s --check-prefix=BIJ
// RUN: %python -c "import json; j = json.load(open('%t/bi.json')); print('scores', len(j['scores']), 'calib', j['calibration']['tokens'], j['calibration']['sequences'], 'removed', len(j['removed']), 'in range', all(0 < x < 4 for x in j['removed']))" | FileCheck %s --check-prefix=BIR
// RUN: llmc run %t/bi.llmc --prompt-tokens 1,2,3 -n 4 -q | FileCheck %s --check-prefix=IDS
// RUN: llmc compile %shared/models/stories260K.bin -o %t/ang.llmc --pipeline 'llm-prune-depth{method=angular drop=2 calib=%t/calib.ids calib-tokens=256 calib-seq=128}' 2>&1 | FileCheck %s --check-prefix=ANG
// RUN: llmc compile %shared/models/stories260K.bin -o %t/wrp.llmc -q --pipeline 'llm-prune-depth{method=wrp ratio=0.4}'
// RUN: llmc compile %shared/models/stories260K.bin -o %t/mag.llmc -q --pipeline 'llm-prune-depth{method=magnitude drop=2}'
// RUN: llmc inspect %t/wrp.llmc | FileCheck %s --check-prefix=THREE
// RUN: llmc inspect %t/mag.llmc | FileCheck %s --check-prefix=THREE
// RUN: llmc run %t/wrp.llmc --prompt-tokens 1,2,3 -n 4 -q | FileCheck %s --check-prefix=IDS
// Quantization composes: prune, then quantize the blocks that remain
// (stories260K's down projections have rows of 172, no Q8_0 blocks).
// RUN: llmc compile %shared/models/stories260K.bin -o %t/pq.llmc -q --pipeline 'llm-prune-depth{method=magnitude drop=2},llm-quantize-rtn{bits=8 skip=*ffn_down*}'
// RUN: llmc inspect %t/pq.llmc | FileCheck %s --check-prefix=PQ
// A text calibration file needs a tokenizer; a bad option leaves no artifact.
// RUN: not llmc compile %shared/models/stories260K.bin -o %t/text.llmc -q --pipeline 'llm-prune-depth{method=block-influence drop=1}' 2>&1 | FileCheck %s --check-prefix=NOTOK
// RUN: not test -e %t/text.llmc
// RUN: not llmc compile %shared/models/stories260K.bin -o %t/bad.llmc -q --pipeline 'llm-prune-depth{method=wrp drop=9}' 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not test -e %t/bad.llmc

// BI: prune-depth block-influence over 5 blocks (256 calibration tokens of {{.*}}calib.ids)
// BI: removing blocks {{[1-3],[1-3]}}; 3 of 5 remain
// BIJ: layers 3 kept [0, {{[1-3]}}, 4] attention [0, 1, 2] blk tensors 27
// BIR: scores 5 calib 256 2 removed 2 in range True
// IDS: {{^[0-9]+ [0-9]+ [0-9]+ [0-9]+$}}
// ANG: prune-depth angular over 5 blocks
// ANG: run at  0 (was 0)
// ANG: run at  3 (was 3)
// ANG-NOT: run at  4
// ANG: removing blocks {{1,2|2,3}}; 3 of 5 remain
// THREE: kept_layers
// THREE: num_layers               3
// PQ: num_layers               3
// PQ: q8_0
// NOTOK: the model has no tokenizer to encode the calibration text
// BAD: error: llm-prune-depth: cannot remove 9 of 5 blocks
