#!/usr/bin/env python3
"""Regenerate docs/results/expert-pruning.md: llm-moefy and llm-prune-experts
on SmolLM2-135M-Instruct's real weights.

No small real MoE checkpoint is at hand, so the MoE model is built from
SmolLM2's dense MLPs (llm-moefy: co-activation clustering of each MLP's
1536 neurons into E experts, a ridge-regression router, unit gates).

1. MoEfication: E = 8 and 16 experts, top-k = 2 and 4 (and the weight
   clustering at E = 8, top-k = 4), each scored by `llmc eval --ref` against
   the dense model: mean and p99 KL divergence, top-1 agreement, perplexity;
   the pass's mean router recall and top-k relative error per block.
2. Expert pruning of the MoEfied model (E = --experts, top-k = --top-k) at
   each --ratios share by every method (omp, frequency, norm, greedy; omp and
   greedy also with water-filling; omp with adaptive activation), scored
   against the unpruned MoEfied model (the reference expert pruning must
   stay close to) and, for perplexity, on its own: KLD, top-1, perplexity,
   the pass's search time (its report), the kept experts' share and, with
   adaptive activation, the experts run per token. Decode speed: tokens/s
   of 64 generated tokens on the kernel engine (llmk.norm_moe: only routed
   experts run) with the weights quantized to Q8_0 (llm-quantize-rtn bits=8)
   for the unpruned MoE model and for each omp variant, as a ratio to the
   unpruned MoE model, next to the dense model (same Q8_0) and the unpruned
   MoE model on the reference engine, all measured in the same run.
Quality is scored with f32 activations (`llmc eval --exact-activations`):
the kernel engine's int8 activations would flip the hard top-k routing of a
MoEfied model (tests: test_kernel_plan_moe).

Usage: python3 bench/expert_pruning.py [--ratios 0.25,0.5] [--experts 16]
       [--top-k 4] [--calib-tokens 4096] [--max-tokens 1024]
Only the Python standard library is needed; llmc must be built.
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

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "docs", "results", "expert-pruning.md")
MODEL = os.path.join(REPO, ".cache", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
TEXT = os.path.join(REPO, "data", "eval", "default.txt")
CALIB = os.path.join(REPO, "data", "calib", "default.txt")
MOEFY_GRID = ((8, 2, "coactivation"), (8, 4, "coactivation"), (16, 2, "coactivation"),
              (16, 4, "coactivation"), (8, 4, "weights"))
METHODS = (("omp", "method=omp"), ("omp waterfill", "method=omp allocation=waterfill"),
           ("omp + adaptive 0.9", "method=omp adaptive-energy=0.9"),
           ("omp + adaptive 0.7", "method=omp adaptive-energy=0.7"),
           ("frequency", "method=frequency"), ("norm", "method=norm"),
           ("greedy", "method=greedy"), ("greedy waterfill", "method=greedy allocation=waterfill"))
SPEED_METHODS = ("omp", "omp + adaptive 0.9", "omp + adaptive 0.7")
PROMPT = "The history of the printing press begins"


def log(msg):
    print(f"[experts {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run(cmd, timeout=3600):
    # Generated text may cut a UTF-8 character between tokens.
    p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout)
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"{' '.join(cmd[:3])}...: {' | '.join(tail)}")
    return p


def moefy(experts, top_k, clustering, calib_tokens, report=""):
    rep = f" report={report}" if report else ""
    return (f"llm-moefy{{experts={experts} top-k={top_k} clustering={clustering} "
            f"calib={CALIB} calib-tokens={calib_tokens}{rep}}}")


def evaluate(llmc, pipeline, ref_pipeline, max_tokens, threads):
    cmd = [llmc, "eval", MODEL, "--pipeline", pipeline, "--ref", MODEL, "--text", TEXT,
           "--max-tokens", str(max_tokens), "-t", str(threads), "--json", "-q",
           "--exact-activations"]
    if ref_pipeline:
        cmd += ["--ref-pipeline", ref_pipeline]
    return json.loads(run(cmd).stdout)


SPEED_QUANT = "llm-quantize-rtn{bits=8 group=32 sym=true}"


def decode_speed(llmc, pipeline, threads, tokens=64, engine="kernels"):
    """Decode tok/s of `pipeline` (weights then quantized to Q8_0)."""
    full = f"{pipeline},{SPEED_QUANT}" if pipeline else SPEED_QUANT
    # --ignore-eos: a pruned model that ends its answer early would time a
    # handful of tokens (the first of them slower), not `tokens`.
    p = run([llmc, "run", MODEL, "--pipeline", full, "-p", PROMPT, "-n", str(tokens),
             "-t", str(threads), "--engine", engine, "--ignore-eos"])
    m = re.search(r"generated (\d+) tokens, ([0-9.]+) tok/s", p.stderr)
    if not m:
        raise RuntimeError("no decode speed in llmc run's statistics")
    if int(m.group(1)) != tokens:
        raise RuntimeError(f"llmc run generated {m.group(1)} tokens, not {tokens}")
    return float(m.group(2))


def moefy_rows(args, work):
    rows = []
    for experts, top_k, clustering in MOEFY_GRID:
        report = os.path.join(work, "moefy.json")
        log(f"moefy E={experts} top-k={top_k} {clustering}")
        t0 = time.monotonic()
        ev = evaluate(args.llmc, moefy(experts, top_k, clustering, args.calib_tokens, report),
                      None, args.max_tokens, args.threads)
        with open(report) as f:
            blocks = json.load(f)["blocks"]
        rows.append({"experts": experts, "top_k": top_k, "clustering": clustering, "eval": ev,
                     "recall": statistics.mean(b["router_recall"] for b in blocks),
                     "error": statistics.mean(b["topk_rel_error"] for b in blocks),
                     "moefy_s": sum(b["seconds"] for b in blocks),
                     "wall_s": time.monotonic() - t0})
        log(f"  kld {ev['kld_mean']:.4f} top-1 {ev['top1']:.1f}%")
    return rows


def prune_rows(args, work, base):
    rows = []
    for ratio in args.ratio_list:
        for label, options in METHODS:
            report = os.path.join(work, "prune.json")
            pipeline = (f"{base},llm-prune-experts{{{options} ratio={ratio} calib={CALIB} "
                        f"calib-tokens={args.calib_tokens} report={report}}}")
            log(f"{label} ratio {ratio}")
            ev = evaluate(args.llmc, pipeline, base, args.max_tokens, args.threads)
            with open(report) as f:
                rep = json.load(f)
            kept = sum(len(layer["kept"]) for layer in rep["layers"])
            total = sum(layer["experts"] for layer in rep["layers"])
            run_share = [layer.get("experts_run_per_token") for layer in rep["layers"]]
            row = {"ratio": ratio, "method": label, "eval": ev, "search_s": rep["search_seconds"],
                   "kept": kept, "total": total, "pipeline": pipeline,
                   "run_per_token": (statistics.mean(run_share) if None not in run_share
                                     else None),
                   "keep_counts": [len(layer["kept"]) for layer in rep["layers"]]}
            if label in SPEED_METHODS:
                row["tok_s"] = decode_speed(args.llmc, pipeline, args.threads)
            rows.append(row)
            log(f"  kld {ev['kld_mean']:.4f} top-1 {ev['top1']:.1f}% search "
                f"{rep['search_seconds']:.1f} s")
    return rows


def header(args, t0, load0):
    return ["# Expert pruning: llm-moefy and llm-prune-experts on SmolLM2-135M-Instruct", "",
            "Generated by `bench/expert_pruning.py`; do not edit by hand, rerun it.", "",
            f"- Command: `python3 bench/expert_pruning.py --ratios {args.ratios} --experts "
            f"{args.experts} --top-k {args.top_k} --calib-tokens {args.calib_tokens} "
            f"--max-tokens {args.max_tokens}`",
            f"- Date: {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC; run took "
            f"{(time.time() - t0) / 60:.1f} min",
            f"- Git commit: {bench_common.git_commit(REPO)}",
            f"- Machine: {bench_common.cpu_model()}, {os.cpu_count()} CPUs; load average at "
            f"start {load0:.2f}, at end {os.getloadavg()[0]:.2f} (times are indicative)",
            "- Model: SmolLM2-135M-Instruct Q4_1 (30 blocks, MLP 576 -> 1536); every MoE model is "
            "built and pruned in memory; expert weights are f32 (dequantized, regrouped) for "
            "quality, Q8_0 for the decode speeds; quality with f32 activations",
            f"- Text: data/eval/default.txt, {args.max_tokens} positions (512-token windows); "
            f"calibration: the first {args.calib_tokens} tokens of data/calib/default.txt "
            "(disjoint) for both passes", ""]


def moefy_table(rows):
    L = ["## MoEfied SmolLM2 against the dense model", "",
         "| Experts | top-k | active neurons | clustering | KLD | KLD p99 | top-1 | ppl | "
         "router recall | top-k rel. error | moefy s |", "|---:|---:|---:|---|---:|---:|---:|---:|"
         "---:|---:|---:|"]
    for r in rows:
        ev = r["eval"]
        L.append(f"| {r['experts']} | {r['top_k']} | {100 * r['top_k'] / r['experts']:.1f}% | "
                 f"{r['clustering']} | {ev['kld_mean']:.4f} | {ev['kld_p99']:.3f} | "
                 f"{ev['top1']:.1f}% | {ev['ppl']:.2f} | {r['recall']:.3f} | {r['error']:.3f} | "
                 f"{r['moefy_s']:.1f} |")
    ref_ppl = rows[0]["eval"]["ref_ppl"]
    L += ["", f"Dense model perplexity on the same positions: {ref_ppl:.2f}. Router recall: "
          "mean over blocks of the share of each token's true top-k experts (by output norm) "
          "the router picks; top-k rel. error: mean over blocks of ||y - y_topk||^2 / ||y||^2 on "
          "the calibration tokens.", ""]
    return L


def prune_tables(args, rows, speeds):
    base_speed = speeds["moe"]
    L = [f"## Expert pruning of the MoEfied model (E={args.experts}, top-k={args.top_k}) "
         "against the unpruned MoE model", "",
         f"Decode, 64 tokens, weights Q8_0: unpruned MoE model {base_speed:.1f} tok/s on the "
         f"kernel engine ({speeds['moe_reference']:.1f} on the reference engine); the dense "
         f"model {speeds['dense']:.1f} tok/s on the kernel engine (MoE / dense "
         f"{base_speed / speeds['dense']:.2f}x).", ""]
    for ratio in args.ratio_list:
        sub = [r for r in rows if r["ratio"] == ratio]
        L += [f"### {100 * ratio:.0f}% of the experts removed", "",
              "| Method | kept | KLD vs MoE | KLD p99 | top-1 vs MoE | ppl | search s | "
              "experts run / token | decode tok/s (x MoE) | per-layer kept (min-max) |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in sub:
            ev = r["eval"]
            runs = (f"{r['run_per_token']:.2f}" if r["run_per_token"] is not None
                    else f"{args.top_k}")
            speed = (f"{r['tok_s']:.1f} ({r['tok_s'] / base_speed:.2f}x)" if "tok_s" in r
                     else "-")
            L.append(f"| {r['method']} | {r['kept']}/{r['total']} | {ev['kld_mean']:.4f} | "
                     f"{ev['kld_p99']:.3f} | {ev['top1']:.1f}% | {ev['ppl']:.2f} | "
                     f"{r['search_s']:.2f} | {runs} | {speed} | "
                     f"{min(r['keep_counts'])}-{max(r['keep_counts'])} |")
        L.append("")
    return L


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ratios", default="0.25,0.5")
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--top-k", type=int, default=4)
    ap.add_argument("--calib-tokens", type=int, default=4096)
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--llmc", default=os.path.join(REPO, "build", "bin", "llmc"))
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args()
    if not os.path.exists(MODEL):
        sys.exit(f"{MODEL} missing (scripts/setup.sh)")
    args.ratio_list = [float(r) for r in args.ratios.split(",")]
    t0 = time.time()
    load0 = os.getloadavg()[0]
    base = moefy(args.experts, args.top_k, "coactivation", args.calib_tokens)
    with tempfile.TemporaryDirectory(prefix="llmc-experts-") as work:
        mrows = moefy_rows(args, work)
        log("decode speed of the unpruned MoE model and the dense model")
        speeds = {"moe": decode_speed(args.llmc, base, args.threads),
                  "moe_reference": decode_speed(args.llmc, base, args.threads,
                                                engine="reference"),
                  "dense": decode_speed(args.llmc, "", args.threads)}
        prows = prune_rows(args, work, base)
    L = header(args, t0, load0) + moefy_table(mrows) + prune_tables(args, prows, speeds)
    L += ["Reading the tables: KLD and top-1 of a pruned model are measured against the unpruned "
          "MoEfied model (the same moefy pipeline as --ref-pipeline), so they isolate the damage "
          "of expert pruning; ppl is the pruned model's own. Kept experts never run more than "
          "top-k per token, so pruning alone shrinks the weights, not the per-token work: the "
          "decode speed moves with adaptive activation (fewer experts per token), not with "
          "the kept count.", ""]
    with open(args.out, "w") as f:
        f.write("\n".join(L))
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
