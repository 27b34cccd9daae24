#!/usr/bin/env bash
# The device check: runs on the GPU machine (one H200, no network) over the
# files scripts/gpu-prepare.sh wrote into .cache/device (carried; or, with
# GPU_CHECK_DEV=.cache/device-bench, the speed benchmark's folder: each stage
# runs when its inputs are there), in well under 8 minutes. Writes into $OUT
# (default /tmp/gpu-check):
#   nvidia-smi.txt, cuda-check-<artifact>.jsonl (one JSON line per kernel
#   and token count: largest relative error against the CPU, ms per call,
#   GB/s), engine-<artifact>.json (scripts/gpu_engine_check.py: the GPU
#   engine's greedy tokens and prompt logits against the CPU engine's,
#   prefill and decode tok/s with and without CUDA Graphs), bench-*.json
#   (llmc-rt bench: GPU with and without graphs at batch 1 and 16, CPU),
#   generate-*.jsonl / .stats.json (llmc-rt generate: GEN_REQUESTS
#   requests by the continuous batcher on the GPU and on the CPU: tokens
#   per request, steps, peak batch, decode tok/s), gpu-check.md
#   (tables of all of them, with the device).
# Exit 0 when every kernel and engine check passed; 1 otherwise.
set -uo pipefail
shopt -s nullglob # a folder without artifacts (the speed benchmark's) skips their stages
cd "$(dirname "$0")/.."
# The device tool brings back at most 8 files from $OUT: everything is
# written into $WORK and, at the end, $OUT gets gpu-check.md, log.txt and
# one gpu-check.tar.gz of the whole of $WORK.
FINAL=${OUT:-/tmp/gpu-check}
OUT=${GPU_CHECK_WORK:-/tmp/gpu-check-work}
DEV=${GPU_CHECK_DEV:-.cache/device}
# Each step is killed after STEP_S seconds (a hung GPU step must not eat the
# whole lease).
STEP_S=${GPU_CHECK_STEP_S:-150}
rm -rf "$OUT"; mkdir -p "$FINAL"
# Sizes (smaller ones for a dry run here through the host-emulating driver,
# LLMC_CUDA_DRIVER=build/lib/libllmc_fakecuda.so; see the README).
ROWS=${GPU_CHECK_ROWS:-16384} REPS=${GPU_CHECK_REPS:-50}
PROMPT=${GPU_CHECK_PROMPT:-64} TOKENS=${GPU_CHECK_TOKENS:-256}
BENCH_PROMPT=${GPU_CHECK_BENCH_PROMPT:-512} BENCH_TOKENS=${GPU_CHECK_BENCH_TOKENS:-128}
GEN_REQUESTS=${GPU_CHECK_GEN_REQUESTS:-32} GEN_TOKENS=${GPU_CHECK_GEN_TOKENS:-64}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/$DEV/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
status=0
say() { echo "[gpu-check $(date +%T)] $*"; }
# Artifacts gpu-prepare.sh packed with xz (the carry's 64 MiB), unpacked in place.
for f in "$DEV"/*.llmc.xz; do
  say "unpack $(basename "$f")"
  python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[1][:-3], 'wb'))" "$f" &&
    rm "$f" || status=1
done
for art in "$DEV"/*.llmc; do
  name=$(basename "$art" .llmc)
  say "cuda-check $name"
  if ! timeout "$STEP_S" "$DEV/llmc-rt" cuda-check "$art" --json --rows "$ROWS" --reps "$REPS" \
      --trusted-key "$DEV/signing.pub" > "$OUT/cuda-check-$name.jsonl" 2> "$OUT/cuda-check-$name.err"; then
    status=1
  fi
done
# The whole engine on the SmolLM2 cut (its kernels are the whole model's),
# and on the generated PolyKV and MoE models (vocabulary 256).
for art in "$DEV"/smollm2-*.llmc "$DEV"/*-polykv.llmc "$DEV"/*-moe.llmc; do
  name=$(basename "$art" .llmc)
  vocab=49152; [[ $name == *-polykv || $name == *-moe ]] && vocab=256
  say "engine check $name"
  if ! timeout "$STEP_S" python3 scripts/gpu_engine_check.py --rt "$DEV/llmc-rt" --artifact "$art" \
      --key "$DEV/signing.pub" --out "$OUT/engine" --prompt "$PROMPT" --tokens "$TOKENS" --vocab "$vocab" \
      > "$OUT/engine-$name.json" 2> "$OUT/engine-$name.err"; then
    status=1
  fi
done
# llama-bench style speed (median of 3): GPU with and without graphs, and
# the CPU engine on the device machine's cores, same artifact.
for art in "$DEV"/smollm2-*.llmc; do
  name=$(basename "$art" .llmc)
  for mode in graphs graphs-f32-prefill no-graphs graphs-b16 no-graphs-b16 cpu; do
    envs=(LLMC_CUDA_MMA=16) # prompt products on the tensor cores (the default)
    case $mode in
      graphs) flags=(--device cuda) ;;
      graphs-f32-prefill) flags=(--device cuda); envs=(LLMC_CUDA_MMA=0) ;;
      no-graphs) flags=(--device cuda --no-graphs) ;;
      graphs-b16) flags=(--device cuda --batch 16) ;;
      no-graphs-b16) flags=(--device cuda --no-graphs --batch 16) ;;
      cpu) flags=() ;;
    esac
    say "bench $name $mode"
    env "${envs[@]}" timeout "$STEP_S" "$DEV/llmc-rt" bench "$art" -p "$BENCH_PROMPT" -n "$BENCH_TOKENS" -r 3 --json -q \
      --trusted-key "$DEV/signing.pub" "${flags[@]}" > "$OUT/bench-$name-$mode.json" \
      2> "$OUT/bench-$name-$mode.err" || status=1
  done
done
# Continuous batching (generate --max-batch 16): GEN_REQUESTS token-id
# prompts of 8..39 tokens, on the GPU (f16 KV) and the CPU (f32
# activations, f16 KV: the same arithmetic up to summation order).
python3 -c "
import random; r = random.Random(7)
for i in range($GEN_REQUESTS):
    print(','.join(str(r.randrange(100, 20000)) for _ in range(8 + i % 32)))
" > "$OUT/generate-prompts.txt"
for art in "$DEV"/smollm2-*.llmc; do
  name=$(basename "$art" .llmc)
  for mode in cuda cpu; do
    [[ $mode == cuda ]] && flags=(--device cuda) || flags=(--exact-activations --kv-type f16)
    say "generate $name $mode"
    # f32 prompt products (LLMC_CUDA_MMA=0): the tokens must equal the CPU's.
    LLMC_CUDA_MMA=0 timeout "$STEP_S" "$DEV/llmc-rt" generate "$art" --ids --prompts "$OUT/generate-prompts.txt" -n "$GEN_TOKENS" \
      --ignore-eos --max-batch 16 --stats-json --trusted-key "$DEV/signing.pub" "${flags[@]}" \
      > "$OUT/generate-$name-$mode.jsonl" 2> "$OUT/generate-$name-$mode.stderr" || status=1
    grep '^{' "$OUT/generate-$name-$mode.stderr" > "$OUT/generate-$name-$mode.stats.json"
  done
done
# The speed benchmark (random-weight models of real shapes, against llama.cpp's
# CUDA build when carried), then a per-step profile of one decode run each.
if [[ -f $DEV/bench/shapes.json ]]; then
  say "speed benchmark"
  # The peer links the toolkit's cudart and cuBLAS (CUDA 13): their folders here.
  PEER_LD=$(for n in libcudart.so.13 libcublas.so.13 libcublasLt.so.13; do
      find /usr/local /usr/lib /opt -name "$n" 2>/dev/null | head -1; done | xargs -r -n1 dirname | sort -u | paste -sd:)
  echo "peer libraries: ${PEER_LD:-none found}" > "$OUT/gpu-bench.err"
  # The peer, with its xz-packed libraries unpacked, in a folder of its own.
  rm -rf /tmp/gpu-peer; mkdir -p /tmp/gpu-peer
  [[ -d $DEV/peer ]] && cp -P "$DEV"/peer/* /tmp/gpu-peer/
  for f in /tmp/gpu-peer/*.xz; do
    python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[1][:-3], 'wb'))" "$f" &&
      rm "$f" && chmod +x "${f%.xz}"
  done
  timeout "${GPU_CHECK_BENCH_S:-420}" python3 scripts/gpu_bench.py --dir "$DEV/bench" --rt "$DEV/llmc-rt" \
    --key "$DEV/signing.pub" --peer /tmp/gpu-peer --peer-ld "$PEER_LD" --work /tmp/gpu-bench \
    --md "$OUT/gpu-bench.md" ${GPU_BENCH_ARGS:-} > "$OUT/gpu-bench.json" 2>> "$OUT/gpu-bench.err" || status=1
  for m in SmolLM2-135M-shape.Q4_0 TinyLlama-1.1B-shape.Q4_0; do
    [[ -f /tmp/gpu-bench/$m.llmc ]] || continue
    for mode in no-graphs graphs; do
      say "profile $m $mode"
      flags=(--device cuda); [[ $mode == no-graphs ]] && flags+=(--no-graphs)
      LLMC_CUDA_PROFILE=1 timeout "$STEP_S" "$DEV/llmc-rt" bench "/tmp/gpu-bench/$m.llmc" -p 64 -n 64 -r 1 \
        --trusted-key "$DEV/signing.pub" "${flags[@]}" > "$OUT/profile-$m-$mode.txt" 2>&1
    done
  done
fi
python3 - "$OUT" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
rows = []
for f in sorted(glob.glob(os.path.join(out, "cuda-check-*.jsonl"))):
    art = os.path.basename(f)[len("cuda-check-"):-len(".jsonl")]
    for line in open(f):
        if line.startswith("{"):
            r = json.loads(line)
            r["artifact"] = art
            rows.append(r)
dev = rows[0]["device"] if rows else "no result (see the .err files)"
L = ["# GPU check: the artifacts' CUDA kernels against the CPU", "",
     f"- Device: {dev}; image: {rows[0]['image'] if rows else '-'}", "",
     "| Artifact | Kernel | Tokens | Rows | Max rel error | ms / call | GB/s | Pass |",
     "|---|---|---:|---:|---:|---:|---:|---|"]
for r in rows:
    L.append(f"| {r['artifact']} | {r['kernel']} | {r['tokens']} | {r['rows']} | "
             f"{r['max_rel_error']:.2e} | {r['ms']:.4f} | {r['gbps']:.1f} | "
             f"{'yes' if r['pass'] else 'NO'} |")
L += ["", "## The GPU engine against the CPU engine (llmc-rt run --device cuda)", "",
      "| Artifact | Prompt | Tokens | KLD (prompt rows) | Top-1 | Tokens equal | "
      "Prefill tok/s | Decode tok/s, graphs | Decode tok/s, no graphs | Graphs speedup | Pass |",
      "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---|"]
TC = ["", "## Prompt products on the tensor cores (default) vs in f32 (LLMC_CUDA_MMA=0)", "",
      "| Artifact | KLD vs CPU (prompt rows) | Top-1 | Greedy tokens equal to the CPU's | "
      "Prefill tok/s, tensor cores | Prefill tok/s, f32 | Speedup |",
      "|---|---:|---:|---:|---:|---:|---:|"]
for f in sorted(glob.glob(os.path.join(out, "engine-*.json"))):
    try:
        r = json.load(open(f))
    except ValueError:
        L.append(f"| {os.path.basename(f)} | no result (see the .err file) |")
        continue
    g, n = r.get("graphs", {}), r.get("no_graphs", {})
    same = r["checks"].get("greedy tokens equal the CPU's")
    L.append(f"| {r['artifact']} | {r['prompt']} | {r['tokens']} | {r.get('kld', float('nan')):.2e} | "
             f"{r.get('top1', 0):.3f} | {same} | "
             f"{g.get('prefill_tok_s', '-')} | {g.get('decode_tok_s', '-')} | "
             f"{n.get('decode_tok_s', '-')} | {r.get('graphs_speedup', float('nan')):.2f} | "
             f"{'yes' if r.get('pass') else 'NO'} |")
    TC.append(f"| {r['artifact']} | {r.get('tc_kld', float('nan')):.2e} | {r.get('tc_top1', 0):.3f} | "
              f"first {r.get('tc_tokens_equal', '-')} of {r['tokens']} | "
              f"{r.get('tensor_cores', {}).get('prefill_tok_s', '-')} | "
              f"{g.get('prefill_tok_s', '-')} | "
              f"{r.get('tensor_core_prefill_speedup', float('nan')):.2f} |")
L += TC
L += ["", "## Speed: llmc-rt bench (median of 3)", "",
      "| Artifact | Mode | Prefill tok/s | Decode tok/s (all sequences) | Batch | "
      "Batched vs alone, max abs diff | Engine |", "|---|---|---:|---:|---:|---:|---|"]
for f in sorted(glob.glob(os.path.join(out, "bench-*.json"))):
    label = os.path.basename(f)[len("bench-"):-len(".json")]
    try:
        r = json.load(open(f))
    except ValueError:
        L.append(f"| {label} | no result (see the .err file) | | | | | |")
        continue
    L.append(f"| {label} | {r.get('engine')} | {r.get('prefill_tok_s')} | "
             f"{r.get('decode_tok_s')} | {r.get('batch', 1)} | {r.get('batch_max_abs_diff')} | "
             f"{r.get('generated_kernels')} |")
L += ["", "## Continuous batching: llmc-rt generate --max-batch 16", "",
      "| Artifact | Device | Requests | Steps | Peak batch | Prefill tok/s | Decode tok/s | "
      "Requests with the CPU's tokens |", "|---|---|---:|---:|---:|---:|---:|---:|"]
for f in sorted(glob.glob(os.path.join(out, "generate-*-cuda.jsonl"))):
    base = f[:-len("-cuda.jsonl")]
    name = os.path.basename(base)[len("generate-"):]
    def rows(path):
        try:
            return [json.loads(l)["tokens"] for l in open(path) if l.startswith("{")]
        except (OSError, ValueError):
            return []
    gpu, cpu = rows(base + "-cuda.jsonl"), rows(base + "-cpu.jsonl")
    same = sum(a == b for a, b in zip(gpu, cpu))
    for mode in ("cuda", "cpu"):
        try:
            st = json.load(open(f"{base}-{mode}.stats.json"))
        except (OSError, ValueError):
            L.append(f"| {name} | {mode} | no result (see the .stderr file) | | | | | |")
            continue
        L.append(f"| {name} | {mode} | {st['requests']} | {st['steps']} | {st['peak_batch']} | "
                 f"{st['prefill_tok_s']:.1f} | {st['decode_tok_s']:.1f} | "
                 f"{f'{same} of {len(cpu)}' if mode == 'cuda' else '-'} |")
open(os.path.join(out, "gpu-check.md"), "w").write("\n".join(L) + "\n")
print("\n".join(L))
PY
for f in "$OUT"/*.err "$OUT"/*.stderr; do [[ -s $f ]] && { echo "== $f"; head -c 2000 "$f"; }; done
[[ -f $OUT/gpu-bench.md ]] && { cat "$OUT/gpu-bench.md" >> "$OUT/gpu-check.md"; cat "$OUT/gpu-bench.md"; }
for f in "$OUT"/profile-*.txt; do [[ -f $f ]] && { echo "== $f"; grep -E "cuda profile|^\[llmc\] +[0-9]" "$f" | head -24; }; done
cp "$OUT/gpu-check.md" "$FINAL/" 2>/dev/null
cp "$OUT/gpu-bench.json" "$FINAL/" 2>/dev/null
# Everything else in one file (the logit dumps stay: they are tens of MB).
tar czf "$FINAL/gpu-check.tar.gz" --exclude='*.npy' -C "$OUT" .
exit $status
