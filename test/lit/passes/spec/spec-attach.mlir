// llm-spec-attach on a generated Llama (3 blocks, hidden 64, vocabulary
// 256): Medusa heads fitted on calibration ids become an llm.speculate op
// over the LM head's input with [heads, D, 2D] and [heads, D] f32 weights
// and a draft vocabulary, carried into the manifest and shown by inspect;
// the runtime's drafts are lossless (greedy: the same ids as without, with
// the artifact's drafter or a named one); a second attach replaces the
// first; the IR round-trips through llmc-opt; bad options are refused with
// no artifact.
// RUN: rm -rf %t && mkdir -p %t
// RUN: %python %src/test/e2e/ref/make_hf_models.py %t/hf > /dev/null
// RUN: %python -c "print(' '.join(str(3 + i * 37 % 250) for i in range(2000)))" > %t/calib.ids
// RUN: llmc compile %t/hf/llama-f32 -o %t/m.llmc --pipeline 'llm-spec-attach{method=medusa heads=2 calib=%t/calib.ids calib-tokens=2048 calib-seq=128 draft-vocab=64 report=%t/fit.json}' 2>&1 | FileCheck %s --check-prefix=LOG
// RUN: llmc inspect %t/m.llmc | FileCheck %s --check-prefix=INSPECT
// RUN: llmc inspect %t/m.llmc --ir | FileCheck %s --check-prefix=IR
// RUN: %python -c "import json; j = json.load(open('%t/fit.json')); print('heads', j['heads'], 'vocab', j['draft_vocab_size'], 'top1', len(j['top1']), 'seqs', j['calibration']['sequences'], 'held', j['calibration']['held_out_sequences'], 'better than copying', all(m < c for m, c in zip(j['held_out_mse'], j['held_out_mse_copy'])))" | FileCheck %s --check-prefix=REPORT
// RUN: llmc run %t/m.llmc --prompt-tokens 1,2,3 -n 40 -q --print-ids > %t/plain.txt
// RUN: llmc run %t/m.llmc --prompt-tokens 1,2,3 -n 40 -q --print-ids --speculate medusa > %t/medusa.txt
// RUN: llmc run %t/m.llmc --prompt-tokens 1,2,3 -n 40 -q --print-ids --speculate auto --engine reference > %t/auto.txt
// RUN: diff %t/plain.txt %t/medusa.txt
// RUN: diff %t/plain.txt %t/auto.txt
// RUN: llmc run %t/m.llmc --prompt-tokens 1,2,3 -n 40 --speculate auto 2>&1 >/dev/null | FileCheck %s --check-prefix=DRAFTED
// Draft trees (tree=6): carried into the manifest, used by the artifact's
// drafter, lossless; --tree 0 turns them off; prompt lookup drafts trees
// too (lossless), a draft model does not.
// RUN: llmc compile %t/hf/llama-f32 -o %t/tree.llmc -q --pipeline 'llm-spec-attach{method=medusa heads=2 tree=6 calib=%t/calib.ids calib-tokens=2048 calib-seq=128 draft-vocab=64}'
// RUN: llmc inspect %t/tree.llmc | FileCheck %s --check-prefix=TREEINSPECT
// RUN: llmc inspect %t/tree.llmc --ir | FileCheck %s --check-prefix=TREEIR
// RUN: llmc run %t/tree.llmc --prompt-tokens 1,2,3 -n 40 -q --print-ids --speculate auto > %t/tree.txt
// RUN: diff %t/plain.txt %t/tree.txt
// RUN: llmc run %t/tree.llmc --prompt-tokens 1,2,3 -n 40 --speculate auto 2>&1 >/dev/null | FileCheck %s --check-prefix=TREEDRAFTED
// RUN: llmc run %t/tree.llmc --prompt-tokens 1,2,3 -n 40 --speculate auto --tree 0 2>&1 >/dev/null | FileCheck %s --check-prefix=NOTREE
// RUN: llmc run %t/tree.llmc --prompt-tokens 1,2,3 -n 40 -q --print-ids --speculate ngram --tree 6 > %t/ngramtree.txt
// RUN: diff %t/plain.txt %t/ngramtree.txt
// RUN: not llmc run %t/tree.llmc --prompt-tokens 1,2,3 -n 4 -q --speculate draft --draft-model %t/tree.llmc --tree 4 2>&1 | FileCheck %s --check-prefix=TREEDRAFT
// Two attaches: the second replaces the first (one op, the ngram drafter's).
// RUN: llmc compile %t/hf/llama-f32 -o %t/ng.llmc -q --pipeline 'llm-spec-attach{method=medusa heads=2 calib=%t/calib.ids calib-tokens=2048 calib-seq=128},llm-spec-attach{method=ngram ngram=2 draft=6}'
// RUN: llmc inspect %t/ng.llmc | FileCheck %s --check-prefix=NGRAM
// RUN: llmc inspect %t/ng.llmc --ir | FileCheck %s --check-prefix=NGRAMIR
// RUN: llmc run %t/ng.llmc --prompt-tokens 1,2,3 -n 40 -q --print-ids --speculate auto > %t/ng.txt
// RUN: diff %t/plain.txt %t/ng.txt
// RUN: not llmc run %t/ng.llmc --prompt-tokens 1,2,3 -n 4 -q --speculate medusa 2>&1 | FileCheck %s --check-prefix=NOHEADS
// The IR with its heads round-trips.
// RUN: llmc import %t/hf/llama-f32 --emit-resources -o %t/m.mlirbc
// RUN: llmc-opt %t/m.mlirbc --pass-pipeline='builtin.module(llm-spec-attach{method=medusa heads=1 calib=%t/calib.ids calib-tokens=1024 calib-seq=128 draft-vocab=16})' -o %t/att.mlir 2>/dev/null
// RUN: llmc-opt %t/att.mlir | llmc-opt | FileCheck %s --check-prefix=ROUND
// Bad options: refused, nothing written.
// RUN: not llmc compile %t/hf/llama-f32 -o %t/bad.llmc -q --pipeline 'llm-spec-attach{heads=2}' 2>&1 | FileCheck %s --check-prefix=NOMETHOD
// RUN: not llmc compile %t/hf/llama-f32 -o %t/bad.llmc -q --pipeline 'llm-spec-attach{method=eagle}' 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: not llmc compile %t/hf/llama-f32 -o %t/bad.llmc -q --pipeline 'llm-spec-attach{method=medusa heads=2 draft=3}' 2>&1 | FileCheck %s --check-prefix=DRAFT
// RUN: not llmc compile %t/hf/llama-f32 -o %t/bad.llmc -q --pipeline 'llm-spec-attach{method=ngram tree=4}' 2>&1 | FileCheck %s --check-prefix=TREEMETHOD
// RUN: not llmc compile %t/hf/llama-f32 -o %t/bad.llmc -q --pipeline 'llm-spec-attach{method=medusa heads=2 calib=%t/calib.ids calib-tokens=200 calib-seq=128}' 2>&1 | FileCheck %s --check-prefix=FEW
// RUN: not test -e %t/bad.llmc

// LOG: spec-attach medusa: 2 heads fitted on 2000 calibration tokens of {{.*}}calib.ids (16 sequences, 2 held out: 204 positions)
// LOG: draft vocabulary: 64 tokens
// LOG: head 1 (token t+2): held-out top-1 {{[0-9.]+}}, chain
// LOG: head 2 (token t+3): held-out top-1
// LOG: predicted mean accepted length

// INSPECT: speculation:   medusa, drafts of up to 2 tokens, 2 heads over a draft vocabulary of 64 tokens
// INSPECT-NEXT: fit: 2000 calibration tokens; held-out top-1 per head {{[0-9.]+}}, {{[0-9.]+}}; predicted accepted length
// INSPECT: spec.medusa.heads{{ +}}f32{{ +}}2x64x128
// INSPECT: spec.medusa.bias{{ +}}f32{{ +}}2x64 

// IR: llm.weight "output_norm.weight"
// IR-NEXT: %[[H:.*]] = llm.rms_norm
// IR: llm.lm_head %[[H]]
// IR: llm.speculate medusa(%[[H]] : tensor<?x64xf32>) heads(%{{.*}}, %{{.*}} : tensor<2x64x128xf32>, tensor<2x64xf32>) {draft_vocab = array<i32: 3, 4,
// IR-SAME: max_draft = 2 : i64
// IR-NEXT: llm.return

// REPORT: heads 2 vocab 64 top1 2 seqs 16 held 2 better than copying True

// DRAFTED: [llmc] speculative (medusa heads, up to 2 drafts): {{[0-9]+}} target passes with a draft
// DRAFTED-NOT: branching tree

// TREEINSPECT: speculation:   medusa, drafts of up to 2 tokens, 2 heads over a draft vocabulary of 64 tokens, trees of up to 6 tokens
// TREEIR: llm.speculate medusa
// TREEIR-SAME: tree_nodes = 6 : i64
// TREEDRAFTED: [llmc] speculative (medusa heads, up to 2 drafts): {{[0-9]+}} target passes with a draft, {{.*}} {{[1-9][0-9]*}} passes over a branching tree
// NOTREE: [llmc] speculative (medusa heads, up to 2 drafts)
// NOTREE-NOT: branching tree
// TREEDRAFT: --tree applies to prompt lookup and Medusa heads{{.*}}not to draft models

// NGRAM: speculation:   ngram, drafts of up to 6 tokens, suffixes of up to 2 tokens
// NGRAM-NOT: spec.medusa
// NGRAMIR-NOT: spec.medusa
// NGRAMIR: llm.speculate ngram {max_draft = 6 : i64, ngram = 2 : i64}
// NGRAMIR-NOT: llm.speculate

// NOHEADS: has no Medusa heads

// ROUND: llm.speculate medusa(%{{.*}} : tensor<?x64xf32>) heads(%{{.*}}, %{{.*}} : tensor<1x64x128xf32>, tensor<1x64xf32>)

// NOMETHOD: llm-spec-attach: option 'method' is required (ngram, medusa or self)
// UNKNOWN: llm-spec-attach: unknown method 'eagle'
// DRAFT: llm-spec-attach: draft 3 exceeds the 2 heads
// TREEMETHOD: llm-spec-attach: tree= belongs to method=medusa
// FEW: llm-spec-attach: calib-tokens must cover at least two sequences
