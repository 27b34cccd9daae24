// llm-prune-depth on four blocks whose matrices are splats of 0.1 x
// [1, 0.1, 2, 0.5] (Inputs/four-blocks.mlir): removed blocks are gone with
// their weights, later blocks are renumbered (index, KV slot, weight names)
// and the config records num_layers and kept_layers.
// RUN: llmc-opt %S/Inputs/four-blocks.mlir --pass-pipeline='builtin.module(llm-prune-depth{layers=1,2})' | FileCheck %s --check-prefix=EXPL
// Magnitude removes the weakest removable block (keep-first=1 keep-last=1:
// blocks 1 and 2 may go; block 1 has the smallest weights) and prints
// every score.
// RUN: llmc-opt %S/Inputs/four-blocks.mlir --pass-pipeline='builtin.module(llm-prune-depth{method=magnitude drop=1})' 2>&1 | FileCheck %s --check-prefix=MAG
// ratio=0.5 of 4 with no protected ends: the two weakest, blocks 1 and 3.
// RUN: llmc-opt %S/Inputs/four-blocks.mlir --pass-pipeline='builtin.module(llm-prune-depth{method=magnitude ratio=0.5 keep-first=0 keep-last=0})' | FileCheck %s --check-prefix=RATIO
// For WRP, splats write in the same directions (similarity 1), so blocks 1 and 2
// form one group and the one with the smaller write scale (block 1) goes.
// RUN: llmc-opt %S/Inputs/four-blocks.mlir --pass-pipeline='builtin.module(llm-prune-depth{method=wrp drop=1})' 2>&1 | FileCheck %s --check-prefix=WRP
// RUN: llmc-opt %S/Inputs/four-blocks.mlir --pass-pipeline='builtin.module(llm-prune-depth{method=wrp signature=row-energy drop=1})' 2>&1 | FileCheck %s --check-prefix=WRP
// dry-run reports and changes nothing; report= writes the scores as JSON.
// RUN: rm -f %t.json
// RUN: llmc-opt %S/Inputs/four-blocks.mlir --pass-pipeline='builtin.module(llm-prune-depth{method=magnitude drop=2 keep-first=0 keep-last=0 dry-run=true report=%t.json})' 2>&1 | FileCheck %s --check-prefix=DRY
// RUN: %python -c "import json; j = json.load(open('%t.json')); print('removed', j['removed'], 'kept', j['kept_original'], 'scores', [round(s, 4) for s in j['scores']], 'dry', j['dry_run'])" | FileCheck %s --check-prefix=REPORT
// Pruning twice composes kept_layers (indices of the original model), and
// the result reads back.
// RUN: llmc-opt %S/Inputs/four-blocks.mlir --pass-pipeline='builtin.module(llm-prune-depth{layers=1},llm-prune-depth{layers=1})' | llmc-opt | FileCheck %s --check-prefix=TWICE

// EXPL: llm.model @four config {{.*}}kept_layers = [0, 3]{{.*}}num_layers = 2 : i64
// EXPL: llm.layer 0
// EXPL: llm.weight "blk.0.attn_q.weight" {value = dense<1.000000e-01>
// EXPL: llm.attention {{.*}}layer = 0 : i64
// EXPL: llm.layer 1
// EXPL: llm.weight "blk.1.attn_q.weight" {value = dense<5.000000e-02>
// EXPL: llm.attention {{.*}}layer = 1 : i64
// EXPL: llm.weight "blk.1.ffn_down.weight" {value = dense<5.000000e-02>
// EXPL-NOT: llm.layer 2
// EXPL-NOT: blk.2.
// EXPL-NOT: blk.3.

// MAG: remark: [llmc] prune-depth magnitude over 4 blocks
// MAG: block  0 (was 0): 0.100000
// MAG: block  1 (was 1): 0.010000  removed
// MAG: block  2 (was 2): 0.200000
// MAG: block  3 (was 3): 0.050000
// MAG: removing blocks 1; 3 of 4 remain
// MAG: kept_layers = [0, 2, 3]{{.*}}num_layers = 3 : i64
// MAG: llm.weight "blk.1.attn_q.weight" {value = dense<2.000000e-01>

// RATIO: kept_layers = [0, 2]{{.*}}num_layers = 2 : i64
// RATIO: llm.weight "blk.1.attn_q.weight" {value = dense<2.000000e-01>

// WRP: remark: [llmc] prune-depth wrp over 4 blocks
// WRP: removing blocks 1; 3 of 4 remain
// WRP: kept_layers = [0, 2, 3]

// DRY: would remove blocks 1,3; 2 of 4 would remain (dry run: nothing changed)
// DRY-NOT: kept_layers
// DRY: llm.layer 3

// REPORT: removed [1, 3] kept [0, 2] scores [0.1, 0.01, 0.2, 0.05] dry True

// TWICE: kept_layers = [0, 3]{{.*}}num_layers = 2 : i64
// TWICE: llm.weight "blk.1.attn_q.weight" {value = dense<5.000000e-02>
