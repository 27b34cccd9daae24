#!/usr/bin/env python3
"""The models of the GPU speed benchmark (scripts/gpu_bench.py), for
scripts/gpu-prepare.sh: random-weight GGUFs of the SmolLM2-135M shape (F32,
Q8_0, Q4_0, Q4_K_M-style) and the TinyLlama-1.1B shape (Q4_0,
Q4_K_M-style) whose matrices repeat a few random rows (see
bench/cpu_performance_gguf.py), each compiled by llmc (--target cuda,
signed), both xz-compressed into OUT with OUT/shapes.json (each model's
shape, format, file sizes and the bytes one decode step reads).

  .venv/bin/python scripts/gpu_bench_models.py --llmc build/bin/llmc \\
      --work .cache/gpu-bench-src --out .cache/device/bench
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
from cpu_performance_gguf import gguf_decode_bytes, random_llama_gguf  # noqa: E402

SMOLLM2 = {"name": "SmolLM2-135M-shape", "hidden": 576, "layers": 30, "heads": 9, "kv_heads": 3,
           "intermediate": 1536, "vocab": 49152, "context": 8192, "tied": True}
TINYLLAMA = {"name": "TinyLlama-1.1B-shape", "hidden": 2048, "layers": 22, "heads": 32,
             "kv_heads": 4, "intermediate": 5632, "vocab": 32000, "context": 2048, "tied": False}
MODELS = [(SMOLLM2, "F32"), (SMOLLM2, "Q8_0"), (SMOLLM2, "Q4_0"), (SMOLLM2, "Q4_K_M"),
          (TINYLLAMA, "Q4_0"), (TINYLLAMA, "Q4_K_M")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llmc", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--period-rows", type=int, default=8)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    models = []
    for shape, fmt in MODELS:
        name = f"{shape['name']}.{fmt}"
        gguf = os.path.join(a.work, name + ".gguf")
        art = os.path.join(a.work, name + ".llmc")
        if not os.path.isfile(gguf):
            print(f"[gpu-bench-models] {name}: GGUF", file=sys.stderr, flush=True)
            random_llama_gguf(gguf, fmt, shape, period_rows=a.period_rows, tied=shape["tied"])
        # Recompiled when older than its GGUF or than the compiler (new kernels).
        if not os.path.isfile(art) or os.path.getmtime(art) < max(os.path.getmtime(gguf),
                                                                   os.path.getmtime(a.llmc)):
            print(f"[gpu-bench-models] {name}: llmc compile --target cuda", file=sys.stderr, flush=True)
            subprocess.run([a.llmc, "compile", gguf, "-o", art, "--target", "cuda", "-q"], check=True)
        for src in (gguf, art):
            dst = os.path.join(a.out, os.path.basename(src) + ".xz")
            subprocess.run(["xz", "-T2", "-f", "-k", "--lzma2=preset=1,dict=64MiB", "-c", src],
                           stdout=open(dst, "wb"), check=True)
        models.append({"name": name, "shape": shape["name"], "format": fmt,
                       "hidden": shape["hidden"], "layers": shape["layers"],
                       "gguf_bytes": os.path.getsize(gguf), "llmc_bytes": os.path.getsize(art),
                       "decode_bytes": gguf_decode_bytes(gguf)[0], "period_rows": a.period_rows})
    json.dump({"models": models}, open(os.path.join(a.out, "shapes.json"), "w"), indent=1)
    print(f"[gpu-bench-models] {len(models)} models in {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
