// llm-spec-attach{method=self} on a generated Llama (3 blocks): the drafter
// is the model's own kernel plan without some blocks, named by skip= or
// chosen by a preceding llm-prune-depth{dry-run=true} (its choice is left
// on the model as llm.depth_choice). The op carries skip_blocks into the
// manifest; inspect shows it; drafting with it is lossless (the same ids as
// plain greedy decoding); a real prune-depth (not a dry run) leaves no
// choice behind; bad blocks and options are refused with no artifact.
// RUN: rm -rf %t && mkdir -p %t
// RUN: %python %src/test/e2e/ref/make_hf_models.py %t/hf > /dev/null
// RUN: %python -c "print(' '.join(str(3 + i * 37 % 250) for i in range(600)))" > %t/calib.ids
// RUN: llmc compile %t/hf/llama-f32 -o %t/s.llmc --pipeline 'llm-spec-attach{method=self skip=1}' 2>&1 | FileCheck %s --check-prefix=LOG
// RUN: llmc inspect %t/s.llmc | FileCheck %s --check-prefix=INSPECT
// RUN: llmc inspect %t/s.llmc --ir | FileCheck %s --check-prefix=IR
// RUN: llmc run %t/s.llmc --prompt-tokens 1,2,3 -n 40 -q --print-ids > %t/plain.txt
// RUN: llmc run %t/s.llmc --prompt-tokens 1,2,3 -n 40 -q --print-ids --speculate self > %t/self.txt
// RUN: llmc run %t/s.llmc --prompt-tokens 1,2,3 -n 40 -q --print-ids --speculate auto > %t/auto.txt
// RUN: diff %t/plain.txt %t/self.txt
// RUN: diff %t/plain.txt %t/auto.txt
// RUN: llmc run %t/s.llmc --prompt-tokens 1,2,3 -n 40 --speculate auto 2>&1 >/dev/null | FileCheck %s --check-prefix=DRAFTED
// The blocks from llm-prune-depth's scores.
// RUN: llmc compile %t/hf/llama-f32 -o %t/a.llmc --pipeline 'llm-prune-depth{method=angular drop=1 keep-first=0 dry-run=true calib=%t/calib.ids calib-tokens=512 calib-seq=128},llm-spec-attach{method=self}' 2>&1 | FileCheck %s --check-prefix=CHOSEN
// RUN: llmc inspect %t/a.llmc | FileCheck %s --check-prefix=INSPECTA
// A real prune leaves no choice behind, so self has nothing to skip.
// RUN: not llmc compile %t/hf/llama-f32 -o %t/bad.llmc -q --pipeline 'llm-prune-depth{method=magnitude drop=1 keep-first=0 dry-run=true},llm-prune-depth{method=magnitude drop=1 keep-first=0},llm-spec-attach{method=self}' 2>&1 | FileCheck %s --check-prefix=NONE
// RUN: not llmc compile %t/hf/llama-f32 -o %t/bad.llmc -q --pipeline 'llm-spec-attach{method=self skip=3}' 2>&1 | FileCheck %s --check-prefix=RANGE
// RUN: not llmc compile %t/hf/llama-f32 -o %t/bad.llmc -q --pipeline 'llm-spec-attach{method=self skip=0,1,2}' 2>&1 | FileCheck %s --check-prefix=ALL
// RUN: not llmc compile %t/hf/llama-f32 -o %t/bad.llmc -q --pipeline 'llm-spec-attach{method=ngram skip=1}' 2>&1 | FileCheck %s --check-prefix=NOTSELF
// RUN: not test -e %t/bad.llmc
// An artifact without a self drafter cannot --speculate self.
// RUN: llmc compile %t/hf/llama-f32 -o %t/plain.llmc -q
// RUN: not llmc run %t/plain.llmc --prompt-tokens 1,2,3 -n 4 -q --speculate self 2>&1 | FileCheck %s --check-prefix=NOSELF

// LOG: spec-attach self: the drafter skips blocks 1 (skip=), drafts of up to 4
// INSPECT: speculation: self, drafts of up to 4 tokens, the model without blocks 1
// IR: llm.speculate self {skip_blocks = array<i64: 1>}
// DRAFTED: speculative (self-speculation, up to 4 drafts): {{[0-9]+}} target passes with a draft
// CHOSEN: prune-depth: would remove blocks [[B:[0-9]]]; 2 of 3 would remain (dry run: nothing changed)
// CHOSEN: spec-attach self: the drafter skips blocks [[B]] (llm-prune-depth's choice)
// INSPECTA: speculation: self, drafts of up to 4 tokens, the model without blocks
// NONE: llm-spec-attach: method=self needs the blocks its drafter skips
// RANGE: skip_blocks must be ascending block indices in [0, 3), got 3
// ALL: skip_blocks leaves the drafter no block
// NOTSELF: llm-spec-attach: skip= belongs to method=self
// NOSELF: --speculate self: the artifact has no self-speculation drafter
