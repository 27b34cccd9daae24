#!/usr/bin/env python3
"""Regenerate docs/results/depth-pruning.md: llm-prune-depth's methods on
SmolLM2-135M-Instruct (30 blocks), against each other and against random
choices of the same size.

For each share of blocks removed (default 12.5%, 25%, 37.5%: 4, 8 and 11 of
30; the first and last block are never removed) and each method (WRP with
Gram and with row-energy signatures, magnitude, Block Influence, angular
distance, and three seeded random draws), the pruned model is compiled in
memory and scored by `llmc eval --ref` against the unpruned source: mean
and p99 KL divergence, top-1 agreement and perplexity, on two held-out
texts (data/eval/default.txt, prose; data/long/licenses.txt, licences and
technical prose), 1024 positions each. The activation methods calibrate
on the first --calib-tokens tokens of data/calib/default.txt (disjoint
from both texts). The table lists each method's removed blocks, its search
time (the pass's own measurement, from its report) and the Jaccard overlap
of its choice with Block Influence's (the activation-based reference WRP
is meant to approach without data). Each method's choice is also scored
with repair=true (a least-squares map, fitted on the same calibration
tokens, folded into the down projection of the block before each removed
run), beside the plain cut.

Usage: python3 bench/depth_pruning.py [--ratios 0.125,0.25,0.375]
       [--calib-tokens 4096] [--max-tokens 1024] [--threads 0]
Only the Python standard library is needed; llmc must be built.
"""
import argparse
import datetime
import json
import os
import random
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_common  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "docs", "results", "depth-pruning.md")
MODEL = os.path.join(REPO, ".cache", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
TEXTS = (("prose", os.path.join(REPO, "data", "eval", "default.txt")),
         ("licences", os.path.join(REPO, "data", "long", "licenses.txt")))
CALIB = os.path.join(REPO, "data", "calib", "default.txt")
BLOCKS = 30
METHODS = (("wrp", "method=wrp"), ("wrp row-energy", "method=wrp signature=row-energy"),
           ("magnitude", "method=magnitude"), ("block-influence", "method=block-influence"),
           ("angular", "method=angular"))
RANDOM_SEEDS = (0, 1, 2)


def log(msg):
    print(f"[depth {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run(cmd, timeout=3600):
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"{' '.join(cmd[:3])}...: {' | '.join(tail)}")
    return p, time.monotonic() - t0


def choose(llmc, options, k, calib_tokens, work):
    """The pass's choice and search time (dry-run report), without evaluating."""
    report = os.path.join(work, "report.json")
    pipeline = (f"llm-prune-depth{{{options} drop={k} dry-run=true report={report} "
                f"calib={CALIB} calib-tokens={calib_tokens}}}")
    run([llmc, "eval", MODEL, "--pipeline", pipeline, "--max-tokens", "2", "--json", "-q"])
    with open(report) as f:
        return json.load(f)


def evaluate(llmc, layers, max_tokens, threads, repair=None):
    """Scores on both texts; repair=(calib_tokens, work) fits the repair
    (its seconds, from the pass's report, as out['repair_s'])."""
    options = f"layers={','.join(map(str, layers))}"
    report = None
    if repair:
        report = os.path.join(repair[1], "repair.json")
        options += f" repair=true calib={CALIB} calib-tokens={repair[0]} report={report}"
    pipeline = f"llm-prune-depth{{{options}}}"
    out = {}
    for name, text in TEXTS:
        p, _ = run([llmc, "eval", MODEL, "--pipeline", pipeline, "--ref", MODEL, "--text", text,
                    "--max-tokens", str(max_tokens), "-t", str(threads), "--json"])
        out[name] = json.loads(p.stdout)
    if report:
        with open(report) as f:
            reps = json.load(f).get("repairs", [])
        out["repair_s"] = reps[0]["seconds"] if reps else 0.0
    return out


def repaired_cells(rep):
    if not rep:
        return "- | - | - | - |"
    p, q = rep["prose"], rep["licences"]
    return (f"{p['kld_mean']:.4f} | {q['kld_mean']:.4f} | {p['ppl']:.2f} | "
            f"{rep.get('repair_s', 0.0):.2f} |")


def jaccard(a, b):
    a, b = set(a), set(b)
    return len(a & b) / len(a | b) if a | b else 1.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ratios", default="0.125,0.25,0.375")
    ap.add_argument("--calib-tokens", type=int, default=4096)
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--llmc", default=os.path.join(REPO, "build", "bin", "llmc"))
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args()
    if not os.path.exists(MODEL):
        sys.exit(f"{MODEL} missing (scripts/setup.sh)")
    ratios = [float(r) for r in args.ratios.split(",")]
    t0 = time.time()
    load0 = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory(prefix="llmc-depth-") as work:
        for ratio in ratios:
            k = int(round(ratio * BLOCKS))
            chosen = {}
            for label, options in METHODS:
                log(f"{label}: choosing {k} of {BLOCKS}")
                rep = choose(args.llmc, options, k, args.calib_tokens, work)
                chosen[label] = (rep["removed"], rep["search_seconds"])
            for seed in RANDOM_SEEDS:
                r = random.Random(seed * 1000 + k)
                chosen[f"random (seed {seed})"] = (sorted(r.sample(range(1, BLOCKS - 1), k)), 0.0)
            for label, (layers, secs) in chosen.items():
                log(f"{label}: removing {layers}")
                ev = evaluate(args.llmc, layers, args.max_tokens, args.threads)
                rep = None
                if not label.startswith("random"):
                    rep = evaluate(args.llmc, layers, args.max_tokens, args.threads,
                                   (args.calib_tokens, work))
                rows.append({"ratio": ratio, "k": k, "method": label, "removed": layers,
                             "search_s": secs, "eval": ev, "repaired": rep,
                             "jaccard_bi": jaccard(layers, chosen["block-influence"][0])})
                log(f"  kld {ev['prose']['kld_mean']:.4f} / {ev['licences']['kld_mean']:.4f}" +
                    (f", repaired {rep['prose']['kld_mean']:.4f} / "
                     f"{rep['licences']['kld_mean']:.4f}" if rep else ""))
    L = ["# Depth pruning: llm-prune-depth's block choices on SmolLM2-135M-Instruct", "",
         "Generated by `bench/depth_pruning.py`; do not edit by hand, rerun it.", "",
         f"- Command: `python3 bench/depth_pruning.py --ratios {args.ratios} --calib-tokens "
         f"{args.calib_tokens} --max-tokens {args.max_tokens}`",
         f"- Date: {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC; run took "
         f"{(time.time() - t0) / 60:.1f} min",
         f"- Git commit: {bench_common.git_commit(REPO)}",
         f"- Machine: {bench_common.cpu_model()}, {os.cpu_count()} CPUs; load average at start "
         f"{load0:.2f}, at end {os.getloadavg()[0]:.2f} (search times are indicative)",
         f"- Model: SmolLM2-135M-Instruct Q4_1 ({BLOCKS} blocks), pruned in memory and scored "
         "by `llmc eval --ref` against the unpruned model; the first and last block are "
         "never removed (keep-first=1 keep-last=1)",
         f"- Texts: prose = data/eval/default.txt, licences = data/long/licenses.txt, "
         f"{args.max_tokens} positions each (512-token windows)",
         f"- Calibration (block-influence, angular): the first {args.calib_tokens} tokens of "
         "data/calib/default.txt in 512-token sequences; WRP and magnitude read weights only",
         "- Random: blocks drawn uniformly from 1..28 (three seeds per share)",
         f"- Repaired: the same blocks removed with repair=true (repair-lambda 0.1, the first "
         f"{args.calib_tokens} calibration tokens; fit time in 'repair s')", ""]
    for ratio in ratios:
        sub = [r for r in rows if r["ratio"] == ratio]
        k = sub[0]["k"]
        L += [f"## {k} of {BLOCKS} blocks removed ({100 * ratio:.1f}%)", "",
              "| Method | Removed blocks | KLD prose | KLD licences | KLD p99 prose | top-1 prose | "
              "ppl prose | ppl licences | Jaccard vs BI | search s | KLD prose, repaired | "
              "KLD licences, repaired | ppl prose, repaired | repair s |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in sub:
            p, q = r["eval"]["prose"], r["eval"]["licences"]
            L.append(f"| {r['method']} | {','.join(map(str, r['removed']))} | {p['kld_mean']:.4f} | "
                     f"{q['kld_mean']:.4f} | {p['kld_p99']:.3f} | {p['top1']:.1f}% | "
                     f"{p['ppl']:.2f} | {q['ppl']:.2f} | {r['jaccard_bi']:.2f} | "
                     f"{r['search_s']:.2f} | " + repaired_cells(r["repaired"]))
        rnd = [r for r in sub if r["method"].startswith("random")]
        mean = sum(r["eval"]["prose"]["kld_mean"] for r in rnd) / len(rnd)
        mean_l = sum(r["eval"]["licences"]["kld_mean"] for r in rnd) / len(rnd)
        L += ["", f"Random mean KLD: prose {mean:.4f}, licences {mean_l:.4f}.", ""]
    ref = rows[0]["eval"]["prose"] if rows else None
    if ref and "ppl_ref" in ref:
        L.append(f"Unpruned perplexity: prose {ref['ppl_ref']:.2f}.")
    L.append("")
    with open(args.out, "w") as f:
        f.write("\n".join(L))
    log(f"wrote {args.out}")
    print("\n".join(L))


if __name__ == "__main__":
    main()
