#!/usr/bin/env bash
# Regenerates data/eval/stories260k.ids and data/calib/stories260k.ids: token
# streams for evaluating and calibrating stories260K, which ships here without
# its tokenizer. Each line is BOS (1) plus 511 tokens sampled from the fp32
# model at temperature 1 with a fixed seed (the eval and calib seeds differ).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
llmc="${LLMC:-$root/build/bin/llmc}"
model="${STORIES260K:-$root/../shared/models/stories260K.bin}"
gen() {
  local out=$1
  shift
  {
    echo "# stories260K token ids (llama2.c vocabulary of 512; no tokenizer ships with the model here)."
    echo "# Each line: BOS (1) + 511 tokens sampled from the fp32 model: llmc run stories260K.bin --prompt-tokens 1 -n 511 --temp 1 --seed S --print-ids"
    echo "# Seeds: $*. Regenerate with scripts/make_stories_ids.sh."
    for s in "$@"; do
      echo "1 $("$llmc" run "$model" --prompt-tokens 1 -n 511 --temp 1 --seed "$s" --print-ids 2>/dev/null)"
    done
  } >"$out.tmp"
  mv "$out.tmp" "$out"
}
gen "$root/data/eval/stories260k.ids" 101 102 103 104
gen "$root/data/calib/stories260k.ids" 201 202 203 204
