#!/usr/bin/env bash
# The device check: runs on the GPU machine (one H200, no network) over the
# files scripts/gpu-prepare.sh wrote into .cache/device (carried), in well
# under 8 minutes. Writes into $OUT (default /tmp/gpu-check):
#   nvidia-smi.txt, cuda-check-<artifact>.jsonl (one JSON line per kernel
#   and token count: largest relative error against the CPU, ms per call,
#   GB/s), gpu-check.md (a table of all of them, with the device).
# Exit 0 when every kernel passed; 1 otherwise (the table says which).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-check}
DEV=.cache/device
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/$DEV/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
status=0
for art in "$DEV"/*.llmc; do
  name=$(basename "$art" .llmc)
  if ! "$DEV/llmc-rt" cuda-check "$art" --json --rows 16384 --reps 50 \
      --trusted-key "$DEV/signing.pub" > "$OUT/cuda-check-$name.jsonl" 2> "$OUT/cuda-check-$name.err"; then
    status=1
  fi
done
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
open(os.path.join(out, "gpu-check.md"), "w").write("\n".join(L) + "\n")
print("\n".join(L))
PY
for f in "$OUT"/*.err; do [[ -s $f ]] && { echo "== $f"; cat "$f"; }; done
exit $status
