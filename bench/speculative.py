#!/usr/bin/env python3
"""Regenerate docs/results/speculative.md: speculative decoding with
prompt-lookup drafts (`llmc run --speculate ngram`) against plain greedy
decoding of the same artifact, in the same run.

Model: SmolLM2-135M-Instruct Q4_1 (the shipped GGUF compiled to a signed
artifact, generated kernels). Prompts in the chat template, of the kinds
prompt lookup is for (outputs that copy from the prompt: code edits,
extraction, summaries) and of kinds it is not (free stories), greedy, up
to 256 tokens (the model's own end of sequence stops both modes at the same
token: the outputs are checked equal). Reps interleave the two modes;
reported: the median decode tok/s of each, the speedup (median of the
per-rep ratios), the mean accepted length (tokens per target pass that had
a draft) and the share of drafts accepted.

Usage: python3 bench/speculative.py [--reps 3] [--threads 2] [--draft 4]
"""
import argparse
import datetime
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
OUT = os.path.join(REPO, "docs", "results", "speculative.md")
MODEL = os.path.join(REPO, ".cache", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
CODE = '''def area(shape, a, b=None):
    if shape == "square":
        return a * a
    if shape == "rectangle":
        return a * b
    if shape == "circle":
        return 3.14159 * a * a
    raise ValueError(shape)'''
PROMPTS = [
    ("code edit", "Rewrite this Python function with type hints and a docstring, keeping "
                  "the logic the same:\n\n" + CODE),
    ("extraction", "List every person and city named in this text, one per line: "
                   "Maria flew from Lisbon to Oslo to meet Tom. Tom had driven from Bergen; "
                   "later both took the train to Stockholm, where Anna and Lars lived."),
    ("getters", "Write a Python class Person with a getter and a setter method for each of "
                "the fields name, age, email, phone and address."),
    ("story", "Write a short story about a cat who learns to swim."),
]
GEN = re.compile(r"generated (\d+) tokens, ([\d.]+) tok/s")
SPEC = re.compile(r"(\d+) target passes with a draft, (\d+) of (\d+) drafts accepted, "
                  r"mean accepted length ([\d.]+)")


def log(msg):
    print(f"[speculative {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run(llmc, art, prompt, threads, n, spec_args):
    cmd = [llmc, "run", art, "--chat", "-p", prompt, "-n", str(n), "-t", str(threads),
           "--print-ids", *spec_args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(f"llmc run: {p.stderr.strip()[-300:]}")
    g = GEN.search(p.stderr)
    s = SPEC.search(p.stderr)
    return {"ids": p.stdout.split(), "tokens": int(g[1]), "tok_s": float(g[2]),
            "spec": s and {"passes": int(s[1]), "accepted": int(s[2]), "drafted": int(s[3]),
                           "mean": float(s[4])}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--draft", type=int, default=4)
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("--llmc", default=os.path.join(REPO, "build", "bin", "llmc"))
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args()
    if not os.path.exists(MODEL):
        sys.exit(f"{MODEL} missing (scripts/setup.sh)")
    machine = cp.machine_info()
    t0 = time.time()
    rows = []
    with tempfile.TemporaryDirectory(prefix="llmc-spec-") as work:
        cp.use_private_signing_key(args.llmc, work)
        art = os.path.join(work, "smollm2.llmc")
        cp.llmc_compile(args.llmc, MODEL, "", art)
        spec_args = ["--speculate", "ngram", "--draft", str(args.draft)]
        for name, prompt in PROMPTS:
            plain, spec, ratios = [], [], []
            for rep in range(args.reps):
                a = run(args.llmc, art, prompt, args.threads, args.n, [])
                b = run(args.llmc, art, prompt, args.threads, args.n, spec_args)
                if a["ids"] != b["ids"]:
                    raise RuntimeError(f"{name}: speculative output differs from plain greedy")
                plain.append(a)
                spec.append(b)
                ratios.append(b["tok_s"] / a["tok_s"])
            s = spec[-1]["spec"] or {"passes": 0, "accepted": 0, "drafted": 0, "mean": 0.0}
            rows.append({"name": name, "tokens": plain[-1]["tokens"],
                         "plain": statistics.median(r["tok_s"] for r in plain),
                         "spec": statistics.median(r["tok_s"] for r in spec),
                         "speedup": statistics.median(ratios), "ratios": ratios, **s})
            log(f"{name}: {rows[-1]['tokens']} tokens, speedup {rows[-1]['speedup']:.2f}, "
                f"mean accepted {s['mean']:.2f}")
    L = ["# Speculative decoding: prompt-lookup drafts against plain greedy decoding", "",
         "Generated by `bench/speculative.py`; do not edit by hand, rerun it.", "",
         f"- Command: `python3 bench/speculative.py --reps {args.reps} --threads {args.threads} "
         f"--draft {args.draft} -n {args.n}`",
         f"- Date: {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC; run took "
         f"{(time.time() - t0) / 60:.1f} min",
         f"- llmc commit: {bench_common.git_commit(REPO)}",
         f"- Machine: {machine.get('cpu')}, {machine.get('cpus')} CPUs, SIMD {machine.get('simd')}",
         "- Model: SmolLM2-135M-Instruct Q4_1 (the shipped GGUF compiled to a signed artifact, "
         f"generated kernels); {args.threads} threads; chat template, greedy, up to {args.n} "
         "tokens (the model's end of sequence stops both modes at the same token; each rep "
         "checks the two outputs are the same token ids)",
         f"- llmc: `llmc run ... --speculate ngram --draft {args.draft}` (prompt lookup: the "
         "tokens that followed the latest earlier occurrence of the context's last 3, 2 or 1 "
         "tokens; one target pass scores them all; rejected drafts' KV entries are dropped)",
         "", "| Prompt | Tokens | Plain tok/s | Speculative tok/s | Speedup (per-rep ratios) | "
         "Mean accepted length | Drafts accepted |", "|---|---:|---:|---:|---|---:|---:|"]
    for r in rows:
        acc = f"{100 * r['accepted'] / r['drafted']:.0f}% of {r['drafted']}" if r["drafted"] else "—"
        L.append(f"| {r['name']} | {r['tokens']} | {r['plain']:.1f} | {r['spec']:.1f} | "
                 f"{r['speedup']:.2f}× ({', '.join(f'{x:.2f}' for x in r['ratios'])}) | "
                 f"{r['mean']:.2f} | {acc} |")
    L += ["", "Speedup: median of each rep's speculative / plain decode tok/s. Mean accepted "
          "length: tokens each target pass that had a draft yields (its accepted drafts and the "
          "target's own next token).", ""]
    doc = "\n".join(L)
    with open(args.out, "w") as f:
        f.write(doc)
    log(f"wrote {args.out}")
    print(doc)


if __name__ == "__main__":
    main()
