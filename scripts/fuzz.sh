#!/usr/bin/env bash
# Builds the libFuzzer targets (test/fuzz: GGUF, llama2.c, Hugging Face, ONNX,
# artifact and OpenAI-request parsers) with clang-22, ASan and UBSan, in
# build-fuzz/ (runtime only: no MLIR), and runs each for LLMC_FUZZ_RUNS
# inputs from the committed seeds through ctest. A crash leaves its input
# in build-fuzz/test/fuzz/crash-*; rerun it with the target and that file.
#
# Usage: scripts/fuzz.sh                 (20000 inputs per target)
#        LLMC_FUZZ_RUNS=1000000 scripts/fuzz.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
RUNS="${LLMC_FUZZ_RUNS:-20000}"
CC=clang-22 CXX=clang++-22 cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DLLMC_BUILD_COMPILER=OFF -DLLMC_BUILD_FUZZERS=ON -DLLMC_FUZZ_RUNS="$RUNS" >/dev/null
targets=(fuzz_gguf fuzz_llama2c fuzz_hf fuzz_onnx fuzz_artifact fuzz_request fuzz_tokenizer)
cmake --build build-fuzz --target "${targets[@]}"
ctest --test-dir build-fuzz --output-on-failure -j2 --timeout 900
