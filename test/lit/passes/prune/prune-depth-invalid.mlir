// Every bad option of llm-prune-depth is refused, with the IR unchanged.
// RUN: not llmc-opt %S/Inputs/four-blocks.mlir --pass-pipeline='builtin.module(llm-prune-depth{drop=1})' 2>&1 | FileCheck %s --check-prefix=NOMETHOD
// RUN: not llmc-opt %S/Inputs/four-blocks.mlir --pass-pipeline='builtin.module(llm-prune-depth{method=deepest drop=1})' 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: not llmc-opt %S/Inputs/four-blocks.mlir --pass-pipeline='builtin.module(llm-prune-depth{method=magnitude})' 2>&1 | FileCheck %s --check-prefix=NOTHING
// RUN: not llmc-opt %S/Inputs/four-blocks.mlir --pass-pipeline='builtin.module(llm-prune-depth{method=magnitude drop=3})' 2>&1 | FileCheck %s --check-prefix=TOOMANY
// RUN: not llmc-opt %S/Inputs/four-blocks.mlir --pass-pipeline='builtin.module(llm-prune-depth{method=magnitude drop=4 keep-first=0 keep-last=0})' 2>&1 | FileCheck %s --check-prefix=TOOMANY4
// RUN: not llmc-opt %S/Inputs/four-blocks.mlir --pass-pipeline='builtin.module(llm-prune-depth{method=magnitude drop=1 ratio=0.5})' 2>&1 | FileCheck %s --check-prefix=BOTH
// RUN: not llmc-opt %S/Inputs/four-blocks.mlir --pass-pipeline='builtin.module(llm-prune-depth{method=magnitude ratio=1.5})' 2>&1 | FileCheck %s --check-prefix=RATIO
// RUN: not llmc-opt %S/Inputs/four-blocks.mlir --pass-pipeline='builtin.module(llm-prune-depth{layers=7})' 2>&1 | FileCheck %s --check-prefix=RANGE
// RUN: not llmc-opt %S/Inputs/four-blocks.mlir --pass-pipeline='builtin.module(llm-prune-depth{layers=1,1})' 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not llmc-opt %S/Inputs/four-blocks.mlir --pass-pipeline='builtin.module(llm-prune-depth{layers=0,1,2,3})' 2>&1 | FileCheck %s --check-prefix=ALL
// RUN: not llmc-opt %S/Inputs/four-blocks.mlir --pass-pipeline='builtin.module(llm-prune-depth{layers=1 drop=1})' 2>&1 | FileCheck %s --check-prefix=MIXED
// RUN: not llmc-opt %S/Inputs/four-blocks.mlir --pass-pipeline='builtin.module(llm-prune-depth{method=angular dry-run=true})' 2>&1 | FileCheck %s --check-prefix=ANGULAR
// RUN: not llmc-opt %S/Inputs/four-blocks.mlir --pass-pipeline='builtin.module(llm-prune-depth{method=wrp drop=1 signature=cka})' 2>&1 | FileCheck %s --check-prefix=SIG
// RUN: not llmc-opt %S/Inputs/four-blocks.mlir --pass-pipeline='builtin.module(llm-prune-depth{method=wrp drop=1 gamma=-1})' 2>&1 | FileCheck %s --check-prefix=GAMMA
// RUN: not llmc-opt %S/Inputs/four-blocks.mlir --pass-pipeline='builtin.module(llm-kv-policy{method=snapkv budget=0.5},llm-prune-depth{layers=1})' 2>&1 | FileCheck %s --check-prefix=POLICY
// RUN: not llmc-opt %S/Inputs/four-blocks-types.mlir --pass-pipeline='builtin.module(llm-prune-depth{method=magnitude drop=1})' 2>&1 | FileCheck %s --check-prefix=TYPES
// RUN: not llmc-opt %S/Inputs/four-blocks.mlir --pass-pipeline='builtin.module(llm-prune-depth{method=magnitude drop=1 report=/nonexistent/dir/r.json})' 2>&1 | FileCheck %s --check-prefix=REPORT

// NOMETHOD: error: llm-prune-depth: option 'method' is required (one of wrp, magnitude, block-influence or angular), or name the blocks with layers=
// UNKNOWN: error: llm-prune-depth: unknown method 'deepest' (option 'method': one of wrp, magnitude, block-influence or angular)
// NOTHING: error: llm-prune-depth: nothing to remove: give drop=N, ratio=r or layers=... (or dry-run to report)
// TOOMANY: error: llm-prune-depth: cannot remove 3 of 4 blocks with keep-first=1 keep-last=1
// TOOMANY4: error: llm-prune-depth: cannot remove 4 of 4 blocks with keep-first=0 keep-last=0
// BOTH: error: llm-prune-depth: give drop or ratio, not both
// RATIO: error: llm-prune-depth: ratio must be in (0, 1)
// RANGE: error: llm-prune-depth: layers: block 7 is not in [0, 4)
// TWICE: error: llm-prune-depth: layers: block 1 is named twice
// ALL: error: llm-prune-depth: layers: at least one block must remain
// MIXED: error: llm-prune-depth: layers= names the blocks to remove; drop and ratio do not go with it
// ANGULAR: error: llm-prune-depth: angular needs drop >= 1 (the length of the run it removes)
// SIG: error: llm-prune-depth: unknown signature 'cka' (one of gram or row-energy)
// GAMMA: error: llm-prune-depth: gamma must be >= 0
// POLICY: error: llm-prune-depth: a KV policy is already attached (its per-layer budgets would go stale): run llm-prune-depth before llm-kv-policy
// TYPES: error: llm-prune-depth: method magnitude needs the weights in the IR (llmc compile, or llmc import --emit-resources)
// REPORT: error: llm-prune-depth: cannot write report '/nonexistent/dir/r.json'
