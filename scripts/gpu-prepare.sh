#!/usr/bin/env bash
# Prepares the device check (scripts/gpu-check.sh) on this machine, which
# has the compiler but no GPU: writes .cache/device/ (ignored by git, carried
# to the device machine) with
#   llmc-rt, lib/            the runtime-only binary (no MLIR), built here,
#                            and the shared libraries it needs beyond libc/libstdc++
#   smollm2-2blk.llmc.xz     SmolLM2-135M-Instruct Q4_1 cut to 2 blocks by
#                            llm-prune-depth (the same weight formats and
#                            widths as the whole model: q4_1 576/1536 and
#                            q8_0 576, so the same CUDA kernels) compiled
#                            with --target cpu,cuda and signed (xz: gpu-check
#                            unpacks it)
#   stories260K.llmc         stories260K (f32 kernels), --target cpu,cuda
#   llama-hd64-polykv.llmc   a generated two-layer llama (head size 64, 256
#                            wide, f16 weights) under SnapKV + PolyKV: the
#                            PolyKV kernels (llmc_cu_pkv_*) on the GPU
#   mixtral-q8_0-moe.llmc    a generated Mixtral-style model (Q8_0, 4 experts,
#                            top-2): MoE layers (llmc_cu_moe_*) on the GPU
#   signing.pub              the public key that signed them
# and .cache/device-bench/ (the speed benchmark; a second carry, since the
# device tool takes at most 64 MiB a call, the working tree included) with
#   llmc-rt, lib/, signing.pub   as above
#   bench/                   the speed benchmark's models (scripts/gpu_bench.py):
#                            random-weight GGUFs of the SmolLM2-135M and
#                            TinyLlama-1.1B shapes and their llmc artifacts,
#                            xz-compressed (a few MB), and shapes.json
#   peer/                    llama.cpp's CUDA llama-bench and llama-batched-bench
#                            and their shared libraries (LLAMACPP_CUDA=1
#                            scripts/build_llamacpp.sh), when built
# Then, with a device, two calls (each prints its tables; about 1 and 3 minutes):
#   run(command="bash scripts/gpu-check.sh 2>&1 | tee $OUT/log.txt",
#       carry=[".cache/device"], timeout_s=300)
#   run(command="GPU_CHECK_DEV=.cache/device-bench bash scripts/gpu-check.sh 2>&1 | tee $OUT/log.txt",
#       carry=[".cache/device-bench"], timeout_s=420)
set -euo pipefail
cd "$(dirname "$0")/.."
LLMC=${LLMC:-build/bin/llmc}
RT=${LLMC_RT:-build/bin/llmc-rt}
GGUF=.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf
STORIES=../shared/models/stories260K.bin
DEV=.cache/device
BENCH=.cache/device-bench
[[ -x $LLMC && -x $RT ]] || { echo "gpu-prepare: build llmc and llmc-rt first (bash scripts/setup.sh)" >&2; exit 1; }
[[ -f $GGUF ]] || { echo "gpu-prepare: $GGUF missing (bash scripts/setup.sh)" >&2; exit 1; }
rm -rf "$DEV" "$BENCH"
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
mkdir -p .cache/gpu-bench-src
.venv/bin/python - .cache/gpu-bench-src/llama-hd64.gguf .cache/gpu-bench-src/mixtral-q8_0.gguf <<'PY'
import sys
sys.path.insert(0, "test/e2e/ref")
import make_gguf_models, make_hf_models
cfg = make_hf_models.make_config("llama", "f32", head_dim=64)
cfg.update({"head_dim": 64, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2})
make_gguf_models.write_gguf(sys.argv[1], cfg, make_hf_models.make_weights(cfg, 4103),
                            make_gguf_models.Q.F16)
cfg = make_hf_models.make_config("mixtral", "f32", head_dim=32)
make_gguf_models.write_gguf(sys.argv[2], cfg, make_hf_models.make_weights(cfg, 3101),
                            make_gguf_models.Q.Q8_0)
PY
"$LLMC" compile .cache/gpu-bench-src/mixtral-q8_0.gguf -o "$DEV/mixtral-q8_0-moe.llmc" --target cpu,cuda -q
"$LLMC" compile .cache/gpu-bench-src/llama-hd64.gguf -o "$DEV/llama-hd64-polykv.llmc" --target cpu,cuda \
  --pipeline='llm-kv-policy{method=snapkv budget=0.5 window=8 kv-quant=polykv}' -q
mkdir -p "$BENCH"
cp -r "$DEV/llmc-rt" "$DEV/lib" "$DEV/signing.pub" "$BENCH/"
.venv/bin/python scripts/gpu_bench_models.py --llmc "$LLMC" --work .cache/gpu-bench-src --out "$BENCH/bench"
PEER=.cache/peer/build-cuda/bin
if [[ -x $PEER/llama-bench && -x $PEER/llama-batched-bench ]]; then
  mkdir -p "$BENCH/peer"
  for t in llama-bench llama-batched-bench; do strip -o "$BENCH/peer/$t" "$PEER/$t"; done
  for l in "$PEER"/*.so*; do [[ -L $l ]] && cp -P "$l" "$BENCH/peer/" || strip -o "$BENCH/peer/$(basename "$l")" "$l"; done
  cp "$PEER/LLAMACPP_VERSION.txt" "$BENCH/peer/"
  # libggml-cuda.so (sm_90 code, ~48 MB) packs to ~19 MB: gpu-check unpacks it.
  for f in "$BENCH"/peer/*; do
    [[ ! -L $f && $(stat -c %s "$f") -gt 8000000 ]] && xz -T2 -6 "$f"
  done
else
  echo "gpu-prepare: no llama.cpp CUDA peer (LLAMACPP_CUDA=1 LLAMACPP_JOBS=2 bash scripts/build_llamacpp.sh): the benchmark runs without it" >&2
fi
# The SmolLM2 cut (~37 MB, mostly its q8_0 LM head) packs to ~32 MB with
# xz, leaving the working tree room in the carry, and the generated models
# (about 4 and 2 MB) pack too; gpu-check.sh unpacks them.
xz -T2 -6 "$DEV/smollm2-2blk.llmc" "$DEV/llama-hd64-polykv.llmc" "$DEV/mixtral-q8_0-moe.llmc"
[[ -f $DEV/stories260K.llmc ]] && xz -T2 -6 "$DEV/stories260K.llmc"
tree=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
for d in "$DEV" "$BENCH"; do
  total=$(( tree + $(du -sb "$d" | cut -f1) ))
  echo "gpu-prepare: $d + the working tree = $(( total / 1048576 )) MiB of the device tool's 64" \
    "$( (( total > 64 * 1048576 )) && echo '(TOO LARGE: carry less)')"
done
echo "gpu-prepare: ready; carry .cache/device, then .cache/device-bench (GPU_CHECK_DEV), and run scripts/gpu-check.sh on the device"
