// llm-prune-depth repair=true on a real model (stories260K, 5 blocks):
// the least-squares map fitted on calibration ids is folded into the down
// projection of the block before each removed run, and on held-out ids
// (the other half of the token file) the repaired cut is closer to the
// unpruned model than the plain cut (KLD and perplexity), for one block
// and for a run of two. A run at block 0 has no block before it: nothing
// to repair. A bad repair-lambda leaves no artifact.
// REQUIRES: stories260k
// RUN: rm -rf %t && mkdir -p %t
// RUN: %python -c "w = [t for l in open('%S/../../../../data/calib/stories260k.ids') if not l.startswith('#') for t in l.split()]; n = len(w) // 2; open('%t/cal.ids', 'w').write(' '.join(w[:n]) + '\n'); open('%t/ev.ids', 'w').write(' '.join(w[n:]) + '\n')"
// RUN: llmc compile %shared/models/stories260K.bin -o %t/r.llmc --pipeline 'llm-prune-depth{layers=1,2 repair=true calib=%t/cal.ids calib-seq=256 report=%t/r.json}' 2>&1 | FileCheck %s --check-prefix=LOG
// RUN: %python -c "import json; r = json.load(open('%t/r.json'))['repairs']; print('repairs', len(r), r[0]['after_block'], r[0]['removed'], 'smaller', r[0]['stream_error_repaired'] < r[0]['stream_error_cut'])" | FileCheck %s --check-prefix=REPORT
// RUN: llmc run %t/r.llmc --prompt-tokens 1,2,3 -n 4 -q | FileCheck %s --check-prefix=IDS
// RUN: llmc eval %shared/models/stories260K.bin --pipeline 'llm-prune-depth{layers=2}' --ref %shared/models/stories260K.bin --text %t/ev.ids -c 256 --json > %t/cut2.json
// RUN: llmc eval %shared/models/stories260K.bin --pipeline 'llm-prune-depth{layers=2 repair=true calib=%t/cal.ids calib-seq=256}' --ref %shared/models/stories260K.bin --text %t/ev.ids -c 256 --json > %t/rep2.json
// RUN: llmc eval %t/r.llmc --ref %shared/models/stories260K.bin --text %t/ev.ids -c 256 --json > %t/rep12.json
// RUN: llmc eval %shared/models/stories260K.bin --pipeline 'llm-prune-depth{layers=1,2}' --ref %shared/models/stories260K.bin --text %t/ev.ids -c 256 --json > %t/cut12.json
// RUN: %python -c "import json; l = lambda n: json.load(open('%t/' + n + '.json')); print('one', l('rep2')['kld_mean'] < 0.9 * l('cut2')['kld_mean'], l('rep2')['ppl'] < l('cut2')['ppl'], 'two', l('rep12')['kld_mean'] < 0.9 * l('cut12')['kld_mean'], l('rep12')['ppl'] < l('cut12')['ppl'])" | FileCheck %s --check-prefix=BETTER
// RUN: llmc compile %shared/models/stories260K.bin -o %t/z.llmc --pipeline 'llm-prune-depth{layers=0 keep-first=0 repair=true calib=%t/cal.ids}' 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: not llmc compile %shared/models/stories260K.bin -o %t/bad.llmc -q --pipeline 'llm-prune-depth{layers=2 repair=true repair-lambda=0 calib=%t/cal.ids}' 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not test -e %t/bad.llmc

// LOG: prune-depth: removing blocks 1,2; 3 of 5 remain
// LOG: prune-depth repair: blocks 1-2 into blk.0.ffn_down.weight: stream error {{[0-9.]+}} cut, {{[0-9.]+}} repaired (1024 calibration tokens
// REPORT: repairs 1 0 [1, 2] smaller True
// IDS: {{^[0-9]+ [0-9]+ [0-9]+ [0-9]+$}}
// BETTER: one True True two True True
// ZERO: removing blocks 0
// ZERO: prune-depth repair: nothing to repair (no removed run follows a kept block)
// BAD: error: llm-prune-depth: repair-lambda must be > 0
