#!/usr/bin/env bash
# Prepares the device check (scripts/gpu-check.sh) on this machine, which
# has the compiler but no GPU: writes .cache/device/ (ignored by git, carried
# to the device machine) with
#   llmc-rt, lib/            the runtime-only binary (no MLIR), built here,
#                            and the shared libraries it needs beyond libc/libstdc++
#   smollm2-2blk.llmc        SmolLM2-135M-Instruct Q4_1 cut to 2 blocks by
#                            llm-prune-depth (the same weight formats and
#                            widths as the whole model: q4_1 576/1536 and
#                            q8_0 576, so the same CUDA kernels) compiled
#                            with --target cpu,cuda and signed
#   stories260K.llmc         stories260K (f32 kernels), --target cpu,cuda
#   signing.pub              the public key that signed them
# Then, with a device: run(command="bash scripts/gpu-check.sh",
#   carry=[".cache/device"], timeout_s=300).
set -euo pipefail
cd "$(dirname "$0")/.."
LLMC=${LLMC:-build/bin/llmc}
RT=${LLMC_RT:-build/bin/llmc-rt}
GGUF=.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf
STORIES=../shared/models/stories260K.bin
DEV=.cache/device
[[ -x $LLMC && -x $RT ]] || { echo "gpu-prepare: build llmc and llmc-rt first (bash scripts/setup.sh)" >&2; exit 1; }
[[ -f $GGUF ]] || { echo "gpu-prepare: $GGUF missing (bash scripts/setup.sh)" >&2; exit 1; }
mkdir -p "$DEV/lib"
cp "$RT" "$DEV/llmc-rt"
# Its shared libraries beyond the C and C++ runtimes (cpp-httplib, brotli,
# OpenSSL, zlib): the device image need not have these versions.
ldd "$RT" | awk '/=> \// {print $3}' | grep -Ev '/(libc|libm|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' |
  while read -r lib; do cp -L "$lib" "$DEV/lib/"; done
key=${XDG_CONFIG_HOME:-$HOME/.config}/llmc/signing.key
[[ -f $key ]] || "$LLMC" keygen
cp "$key.pub" "$DEV/signing.pub"
"$LLMC" compile "$GGUF" -o "$DEV/smollm2-2blk.llmc" --target cpu,cuda \
  --pipeline='llm-prune-depth{method=magnitude drop=28}' -q
[[ -f $STORIES ]] && "$LLMC" compile "$STORIES" -o "$DEV/stories260K.llmc" --target cpu,cuda -q
du -sh "$DEV"
echo "gpu-prepare: ready; carry .cache/device and run scripts/gpu-check.sh on the device"
