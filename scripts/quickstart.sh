#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh), compiles SmolLM2-135M-Instruct into
# an artifact and generates text from it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup.sh
GGUF=.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf
# Compiles are signed with your own key so their generated kernels run
# (unsigned artifacts run the runtime's built-in kernels): made once.
KEY="${XDG_CONFIG_HOME:-$HOME/.config}/llmc/signing.key"
[ -f "$KEY" ] || build/bin/llmc keygen --comment "$(id -un)@$(hostname) (quickstart)"
build/bin/llmc compile "$GGUF" -o build/smollm2.llmc
build/bin/llmc inspect build/smollm2.llmc --no-verify | sed -n 1,8p
build/bin/llmc run build/smollm2.llmc --chat -p "${1:-What is the capital of France? Answer in one sentence.}" -n 64 -t 2
