#!/usr/bin/env bash
# Builds llmc-rt with ThreadSanitizer (clang-22, runtime only, build-tsan/)
# and puts `llmc-rt serve` under concurrent load (test/tsan/serve_load.py)
# on stories260K compiled by build/bin/llmc. Not part of .ci/run (its build
# adds minutes); run it after changing the batcher, the server or the
# executor's threading. Exit status: the load script's.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
MODEL="${LLMC_SHARED_DIR:-$ROOT/../shared}/models/stories260K.bin"
[ -x build/bin/llmc ] || { echo "tsan.sh: build llmc first (scripts/setup.sh)" >&2; exit 1; }
[ -f "$MODEL" ] || { echo "tsan.sh: $MODEL missing" >&2; exit 1; }
CC=clang-22 CXX=clang++-22 cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DLLMC_BUILD_COMPILER=OFF -DCMAKE_CXX_FLAGS="-fsanitize=thread -g" \
  -DCMAKE_C_FLAGS="-fsanitize=thread -g" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" >/dev/null
cmake --build build-tsan --target llmc-rt
ART="$(mktemp -d)/stories.llmc"
build/bin/llmc compile "$MODEL" -o "$ART" --no-sign -q
python3 test/tsan/serve_load.py build-tsan/bin/llmc-rt "$ART"
