#!/usr/bin/env python3
"""Regenerate docs/results/batching.md: batched generation throughput of
llmc (continuous batching, `llmc generate --stats-json`) against llama.cpp's
llama-batched-bench, on SmolLM2-135M-Instruct (Q4_1 as shipped: both read
the same GGUF; llmc compiles it to a signed artifact), in the same run.

For each batch size B: B sequences of P prompt tokens each, N tokens
generated per sequence. llama-batched-bench -npp P -ntg N -npl B reports
S_PP (prompt tokens / prefill time) and S_TG (B*N / decode time). llmc runs
B different prompts of P random token ids with --max-batch B and a step
budget that takes every prompt in its first step (so prefill and decode
are apart, as in llama-batched-bench); prefill ends at the step that
completes the last prompt, decode is every step after. The median of
--reps runs each. Speeds are ratios measured in the same run on the same
cores; the machine is recorded (shared 2-core machines are noisy).

llmc runs twice per rep: with its paged KV cache (the default) and with
--contiguous-kv, so the cost of paging is measured in the same run.

Usage: python3 bench/batching.py [--batches 1,4,16] [-p 128] [-n 64] [--reps 3]
Needs build/bin/llmc and llama-batched-bench (scripts/build_llamacpp.sh).
"""
import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_common  # noqa: E402
import cpu_performance as cp  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "docs", "results", "batching.md")
MODEL = os.path.join(REPO, ".cache", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def log(msg):
    print(f"[batching {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def prompt_lines(batch, p, vocab=49152):
    lines, s = [], 12345
    for _ in range(batch):
        ids = []
        for _ in range(p):
            s = (s * 6364136223846793005 + 1442695040888963407) % (1 << 64)
            ids.append(str(3 + (s >> 33) % (vocab - 3)))
        lines.append(",".join(ids))
    return "\n".join(lines) + "\n"


def llmc_run(llmc, art, work, batch, p, n, threads, contiguous=False):
    path = os.path.join(work, f"prompts-{batch}.ids")
    with open(path, "w") as f:
        f.write(prompt_lines(batch, p))
    cmd = [llmc, "generate", art, "--prompts", path, "--ids", "-n", str(n), "--ignore-eos",
           "--max-batch", str(batch), "--step-tokens", str(batch * p + batch + 1),
           "-t", str(threads), "--stats-json"] + (["--contiguous-kv"] if contiguous else [])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise RuntimeError(f"llmc generate B={batch}: {r.stderr.strip()[-300:]}")
    stats = [json.loads(l) for l in r.stderr.splitlines() if l.startswith("{")]
    if not stats:
        raise RuntimeError(f"llmc generate B={batch}: no statistics line")
    s = stats[-1]
    if str(s.get("generated_kernels", "")).startswith("not run"):
        raise RuntimeError(f"generated kernels refused: {s['generated_kernels']}")
    if s["peak_batch"] != batch:
        raise RuntimeError(f"llmc ran {s['peak_batch']} sequences per step, not {batch}")
    return s


def llama_run(bin_dir, batch, p, n, threads):
    exe = os.path.join(bin_dir, "llama-batched-bench")
    cmd = [exe, "-m", MODEL, "-c", str(batch * (p + n) + 16), "-b", "2048", "-ub", "512",
           "-npp", str(p), "-ntg", str(n), "-npl", str(batch), "-t", str(threads)]  # flash attention: its default (auto)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise RuntimeError(f"llama-batched-bench B={batch}: {(r.stderr or r.stdout).strip()[-300:]}")
    # The table row: |  PP |  TG |  B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |
    for line in r.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 8 and cells[:3] == [str(p), str(n), str(batch)]:
            return {"prefill_tok_s": float(cells[5]), "decode_tok_s": float(cells[7])}
    raise RuntimeError(f"llama-batched-bench B={batch}: no result row in its output")


def median_of(runs, key):
    return statistics.median(r[key] for r in runs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", default="1,4,16")
    ap.add_argument("-p", type=int, default=128, help="prompt tokens per sequence")
    ap.add_argument("-n", type=int, default=64, help="tokens generated per sequence")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--llmc", default=os.path.join(REPO, "build", "bin", "llmc"))
    ap.add_argument("--bin", default=cp.DEFAULT_BIN, help="llama.cpp tools")
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    if not os.path.exists(MODEL):
        sys.exit(f"{MODEL} missing (scripts/setup.sh)")
    if not os.access(os.path.join(args.bin, "llama-batched-bench"), os.X_OK):
        sys.exit("llama-batched-bench missing: run scripts/build_llamacpp.sh")
    machine = cp.machine_info()
    commit = bench_common.git_commit(REPO)
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="llmc-batching-") as work:
        cp.use_private_signing_key(args.llmc, work)
        art = os.path.join(work, "smollm2.llmc")
        cp.llmc_compile(args.llmc, MODEL, "", art)
        runs = {b: ([], [], []) for b in batches}
        # Each rep runs every batch size and side once, so drift on a shared
        # machine hits all alike, and a rep's B-vs-B=1 ratio is a same-minute one.
        for rep in range(args.reps):
            for b in batches:
                log(f"rep {rep + 1}/{args.reps} B={b}")
                mine, flat, theirs = runs[b]
                mine.append(llmc_run(args.llmc, art, work, b, args.p, args.n, args.threads))
                flat.append(llmc_run(args.llmc, art, work, b, args.p, args.n, args.threads,
                                     contiguous=True))
                theirs.append(llama_run(args.bin, b, args.p, args.n, args.threads))
        rows = [(b, *runs[b]) for b in batches]
    with open(os.path.join(args.bin, "LLAMACPP_VERSION.txt")) as f:
        llama_version = f.read().strip().replace("\n", "; ")
    L = ["# Batched generation: llmc (continuous batching) vs llama.cpp (llama-batched-bench)", "",
         "Generated by `bench/batching.py`; do not edit by hand, rerun it.", "",
         f"- Command: `python3 bench/batching.py --batches {args.batches} -p {args.p} -n {args.n} "
         f"--reps {args.reps} --threads {args.threads}`",
         f"- Date: {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC; run took "
         f"{(time.time() - t0) / 60:.1f} min",
         f"- llmc commit: {commit}",
         f"- llama.cpp: {llama_version}",
         f"- Machine: {machine.get('cpu')}, {machine.get('cpus')} CPUs, L2 {machine.get('l2')}, "
         f"L3 {machine.get('l3')}, SIMD {machine.get('simd')}; load average at start "
         f"{machine['loadavg_start']:.2f}, at end {os.getloadavg()[0]:.2f}",
         f"- Model: SmolLM2-135M-Instruct Q4_1 (the shipped GGUF; llmc: compiled, signed, "
         f"generated kernels, int8 activations); {args.p} prompt tokens and {args.n} generated "
         f"tokens per sequence; {args.threads} threads; median of {args.reps}", "",
         "| B | llmc prefill tok/s | llama.cpp prefill tok/s | ratio | llmc decode tok/s | "
         "llama.cpp decode tok/s | ratio | llmc decode vs its B=1 | "
         "llmc contiguous-KV decode tok/s | paged / contiguous |",
         "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    first = rows[0][1]  # the smallest batch's llmc runs, rep by rep
    for b, mine, flat, theirs in rows:
        mp, tp = median_of(mine, "prefill_tok_s"), median_of(theirs, "prefill_tok_s")
        md, td = median_of(mine, "decode_tok_s"), median_of(theirs, "decode_tok_s")
        fd = median_of(flat, "decode_tok_s")
        # vs B=1: the median of each rep's ratio (runs minutes apart)
        vs1 = statistics.median(m["decode_tok_s"] / f["decode_tok_s"] for m, f in zip(mine, first))
        L.append(f"| {b} | {mp:.0f} | {tp:.0f} | {mp / tp:.2f} | {md:.1f} | {td:.1f} | "
                 f"{md / td:.2f} | {vs1:.2f}x | {fd:.1f} | {md / fd:.2f} |")
    L += ["", "- **decode tok/s**: tokens generated by all B sequences per second of decode "
          "(llmc: every step after the one that completes the last prompt; llama.cpp: S_TG). "
          "**prefill tok/s**: prompt tokens per second of prefill (llmc: the steps up to the "
          "last prompt's, each with every prompt's chunk; llama.cpp: S_PP).",
          f"- **llmc decode vs its B=1**: the median over the {args.reps} reps of each rep's "
          f"ratio; a rep runs every batch size once, back to back.",
          "- llmc's decode step reads every weight once for all B rows (int8 dots over the "
          "eight-row weight layout); attention runs per sequence over its own cache.",
          "- llmc's KV cache is paged by default (blocks of 16 entries of one KV head from one "
          "pool, attention block by block); the contiguous column is the same run with "
          "`--contiguous-kv` (each sequence's cache in its own arrays, the generated attention "
          "kernel), to show what paging costs. The prompts here share no prefix.", ""]
    with open(args.out, "w") as f:
        f.write("\n".join(L))
    log(f"wrote {args.out}")
    print("\n".join(L))


if __name__ == "__main__":
    main()
