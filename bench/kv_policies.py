#!/usr/bin/env python3
"""Regenerate docs/results/kv-policies.md: llmc's KV-cache policies on
SmolLM2-135M-Instruct at long context.

Every policy (StreamingLLM, H2O, SnapKV, PyramidKV, ReST-KV, LaProx, CapKV,
InertiaKV, Random) against the full cache, plus RDKV and InertiaKV-Lazy and
(at 10%) the calibrated DepthKV / head-wise SnapKV budgets, on:
  - passkey retrieval at 2k, 4k and 8k tokens (SmolLM2's native length) in
    the model's chat template, 20 prompts per context with the needle at
    depths spread over 0..0.85 of the filler (never in the recent window),
    at budgets of 10 and 25%, with and without PolyKV cache quantization;
  - multi-needle retrieval at 4k: four needles per prompt, every one asked
    (80 answers at 20 prompts), same budgets;
  - perplexity of the last 1024 tokens of a long text at 4k (teacher-forced
    decoding after the compressed prompt) at budgets of 5, 10, 25 and 50%;
  - decode tokens/s and KV bytes at 8k;
  - long generation, the regime of the decode-time policies (InertiaKV, its
    Lazy variant, and H2O / StreamingLLM / Random in decode mode): a 512-token
    prompt, then 3584 teacher-forced tokens of the long text with eviction
    every 16 steps once past a budget of 410 or 1024 entries per (layer, KV
    head) (10% / 25% of 4k), perplexity over those 3584 tokens.
Accuracies carry 95% Wilson intervals; KV bytes are also given as a share of
the full cache's, so RDKV (whose budget is nominal bits) is compared by bytes.
One `llmc eval-long --policies FILE` run per (task, context) prefills each
prompt once and applies every policy to a copy of that cache, so the
policies see identical prompts and the comparison costs one prefill.
Results are cached per (llmc sources, task, context, policies) in
.cache/bench/kv so an interrupted run resumes. Nothing is estimated: a run
that fails is reported as failed.

Usage:
  python3 bench/kv_policies.py            # everything (~2-3 h on 2 cores)
  python3 bench/kv_policies.py --quick    # smoke: 512/1024 tokens, few policies
  python3 bench/kv_policies.py --cached-only
Only the Python standard library is needed; llmc must be built.
"""

import argparse
import datetime
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_common  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO, "docs", "results", "kv-policies.md")
MODEL = os.path.join(REPO, ".cache", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
CACHE_DIR = os.path.join(REPO, ".cache", "bench", "kv")
METHODS = ("streaming", "h2o", "snapkv", "pyramidkv", "restkv", "laprox", "capkv", "inertiakv",
           "random")
BUDGETS = (0.05, 0.1, 0.25, 0.5)
RETRIEVAL_BUDGETS = (0.1, 0.25)
LAZY_SCORE_EVERY = 8  # InertiaKV-Lazy: EMA refreshed every 8 decode steps
# What a measured row depends on (cached rows are reused only while these
# sources are unchanged).
RESULT_SOURCES = ("runtime", "compiler", "passes", "dialects", "tools/llmc", "data/long")


def log(msg):
    print(f"[kv-bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def find_llmc(explicit):
    for c in ([explicit] if explicit else [os.path.join(REPO, "build", "bin", "llmc"),
                                           shutil.which("llmc")]):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.abspath(c)
    sys.exit("bench/kv_policies.py: llmc not found; build it or pass --llmc")


def source_digest():
    """Digest of the sources a measured row depends on (RESULT_SOURCES)."""
    return bench_common.source_digest(REPO, RESULT_SOURCES)


def policy_lines(methods, budgets, quant, extras=True, calibrated=True):
    """(key, option string) of every policy of a sweep, the full cache first.

    extras adds the policies that do not take PolyKV or cost a calibration:
    RDKV (chooses its own widths) and InertiaKV-Lazy at every budget, and the
    calibrated DepthKV and head-wise SnapKV budgets at 10% only (each line
    runs its calibration, 1-2 min, once per sweep)."""
    lines = [("full", "method=full")]
    if quant:
        lines.append(("full+polykv", "method=streaming budget=1.0 kv-quant=polykv"))
    for m in methods:
        for b in budgets:
            lines.append((f"{m}@{b:g}", f"method={m} budget={b:g}"))
            if quant:
                lines.append((f"{m}@{b:g}+polykv", f"method={m} budget={b:g} kv-quant=polykv"))
    if extras:
        for b in budgets:
            lines.append((f"rdkv@{b:g}", f"method=rdkv budget={b:g}"))
        for b in budgets:
            lines.append((f"inertiakv-lazy@{b:g}",
                          f"method=inertiakv budget={b:g} score-every={LAZY_SCORE_EVERY}"))
        if 0.1 in budgets and calibrated:
            lines.append(("depthkv@0.1", "method=depthkv budget=0.1"))
            lines.append(("snapkv-heads@0.1", "method=snapkv budget=0.1 heads=calibrated"))
    return lines


def long_generation_lines(budgets=(410, 1024)):
    """Decode-time eviction over a long generation (absolute budgets)."""
    lines = [("full", "method=full")]
    for b in budgets:
        lines += [(f"inertiakv@{b}", f"method=inertiakv budget={b}"),
                  (f"inertiakv-lazy@{b}",
                   f"method=inertiakv budget={b} score-every={LAZY_SCORE_EVERY}"),
                  (f"h2o-decode@{b}", f"method=h2o budget={b} mode=decode"),
                  (f"streaming-decode@{b}", f"method=streaming budget={b} mode=decode"),
                  (f"random-decode@{b}", f"method=random budget={b} mode=decode")]
    return lines


def run_sweep(llmc, digest, task, context, lines, extra, timeout, cached_only):
    """Rows of one eval-long sweep keyed by policy key, from the cache or a run."""
    key = json.dumps([digest, task, context, [l for _, l in lines], extra])
    path = os.path.join(CACHE_DIR, hashlib.sha256(key.encode()).hexdigest()[:24] + ".json")
    if os.path.isfile(path):
        with open(path) as f:
            log(f"{task} @ {context}: cached")
            return json.load(f)
    if cached_only:
        return {"error": "not measured yet (rerun bench/kv_policies.py)"}
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        for _, l in lines:
            f.write(l + "\n")
        pfile = f.name
    cmd = [llmc, "eval-long", MODEL, "--task", task, "--context", str(context), "--policies",
           pfile, "--json", *extra]
    log(f"{task} @ {context}: {len(lines)} policies: {' '.join(cmd)}")
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        os.unlink(pfile)
        return {"error": f"timed out after {timeout} s"}
    os.unlink(pfile)
    if p.returncode != 0:
        msg = (p.stderr.strip().splitlines() or ["?"])[-1]
        log(f"{task} @ {context}: FAILED: {msg}")
        return {"error": msg}
    rows = {}
    by_line = {l: k for k, l in lines}
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            rows[by_line.get(r.get("policy"), r.get("policy"))] = r
    result = {"rows": rows, "seconds": round(time.time() - t0, 1)}
    os.makedirs(CACHE_DIR, exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(path + ".tmp", path)
    log(f"{task} @ {context}: done in {result['seconds']} s")
    return result


def cell(res, key, field, fmt):
    if "error" in res:
        return "—"
    r = res["rows"].get(key)
    if r is None or r.get(field) is None:
        return "—"
    return fmt(r[field])


def key_cells(key):
    """Policy, budget and KV-quant cells of a policy key like 'snapkv@0.1+polykv'."""
    method = key.split("@")[0].split("+")[0]
    budget = f"{100 * float(key.split('@')[1].split('+')[0]):g}%" if "@" in key else "100%"
    return [method, budget, "polykv" if key.endswith("+polykv") else "none"]


wilson95 = bench_common.wilson95


def accuracy_cell(res, key):
    """'55% (34-74)': accuracy and its 95% Wilson interval, from correct/asked."""
    r = res.get("rows", {}).get(key) if "rows" in res else None
    if not r or r.get("correct") is None:
        return "—"
    n = r.get("asked", r.get("trials", 0))
    lo, hi = wilson95(r["correct"], n)
    return f"{100 * r['correct'] / n:.0f}% ({100 * lo:.0f}–{100 * hi:.0f})"


def git_commit():
    return bench_common.git_commit(REPO)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke run: short contexts, few policies")
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--llmc")
    ap.add_argument("--trials", type=int, help="retrieval prompts per context (default 20; quick 2)")
    ap.add_argument("--threads", type=int, default=0, help="llmc threads (0: all cores)")
    ap.add_argument("--cached-only", action="store_true", help="render cached results only")
    args = ap.parse_args()
    llmc = find_llmc(args.llmc)
    if not os.path.isfile(MODEL):
        sys.exit(f"bench/kv_policies.py: {MODEL} missing; run scripts/setup.sh")
    digest = source_digest()
    started = time.time()
    quick = args.quick
    trials = args.trials or (2 if quick else 20)
    methods = ("streaming", "snapkv", "restkv") if quick else METHODS
    budgets = (0.1, 0.5) if quick else BUDGETS
    rbudgets = (0.1,) if quick else RETRIEVAL_BUDGETS
    # Retrieval: fewer budgets (each prompt costs a prefill plus every
    # policy's answers); the calibrated lines (a calibration each per sweep)
    # only at the middle context.
    rlines = policy_lines(methods, rbudgets, quant=True, extras=not quick, calibrated=False)
    rlines_cal = policy_lines(methods, rbudgets, quant=True, extras=not quick)
    lines = policy_lines(methods, budgets, quant=False, extras=not quick)  # ppl
    speed_lines = policy_lines(methods, (0.1,), quant=True, extras=not quick, calibrated=False)
    passkey_ctx = (512, 1024) if quick else (2048, 4096, 8192)
    needle_ctx = 1024 if quick else 4096
    ppl_ctx = 1024 if quick else 4096
    ppl_score = 128 if quick else 1024
    speed_ctx = 2048 if quick else 8192
    long_ctx, long_score = (1024, 768) if quick else (4096, 3584)
    long_lines = long_generation_lines((100,) if quick else (410, 1024))
    common = ["-t", str(args.threads), "-q"]

    # Most informative first (an interrupted run still renders what it has):
    # the shortest context, then the 4k retrieval and perplexity,
    # the 8k speed run, then the rest.
    res = {}
    retrieval = ["--trials", str(trials), "--chat"]
    mid = passkey_ctx[len(passkey_ctx) // 2]
    order = [("passkey", mid, rlines_cal, retrieval),
             ("ppl", ppl_ctx, lines, ["--score-tokens", str(ppl_score)]),
             ("multi-needle", needle_ctx, rlines, retrieval),
             *[("passkey", c, rlines, retrieval) for c in passkey_ctx if c != mid],
             ("speed", speed_ctx, speed_lines, ["--score-tokens", "16" if quick else "32"]),
             ("longgen", long_ctx, long_lines, ["--score-tokens", str(long_score)])]
    for kind, ctx, pl, extra in order:
        task = "ppl" if kind in ("speed", "longgen") else kind
        res[(kind, ctx)] = run_sweep(llmc, digest, task, ctx, pl, common + extra, 7200,
                                     args.cached_only)

    out = []
    w = out.append
    w("# KV-cache policies: retrieval, perplexity, memory and speed\n")
    w("Generated by `bench/kv_policies.py`; do not edit by hand, rerun it.\n")
    w(f"- Command: `python3 bench/kv_policies.py{' --quick' if quick else ''}"
      f"{f' --trials {args.trials}' if args.trials else ''}"
      f"{' --cached-only' if args.cached_only else ''}`")
    w(f"- Model: SmolLM2-135M-Instruct (`{os.path.relpath(MODEL, REPO)}`), weights as in the "
      "source; the full cache stores keys and values in f32")
    w(f"- Machine: {bench_common.cpu_model()}, {os.cpu_count()} CPU cores, {platform.machine()}, shared with other jobs "
      "(speeds are indicative)")
    w(f"- Date: {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC; run took "
      f"{(time.time() - started) / 60:.1f} min")
    w(f"- Git commit: {git_commit()}")
    w(f"- Retrieval: {trials} prompts per context in the chat template, needle depths evenly "
      f"spread over 0..0.85 of the filler; accuracy with its 95% Wilson interval; budgets are "
      "fractions of the prompt's entries per (layer, KV head), observation window 32 included")
    w(f"- Perplexity: the last {ppl_score} tokens of {ppl_ctx} of data/long/licenses.txt")
    w("")
    pk = [("passkey", c) for c in passkey_ctx]
    ctxname = lambda c: f"{c // 1024}k" if c >= 1024 else str(c)  # noqa: E731
    w(f"## Retrieval ({trials} prompts per context)\n")
    hdr = (["Policy", "Budget", "KV quant"] + [f"passkey {ctxname(c)}" for _, c in pk] +
           [f"multi-needle {ctxname(needle_ctx)} (4 per prompt)"])
    w("| " + " | ".join(hdr) + " |")
    w("|" + "|".join(["---"] * 3 + ["---:"] * (len(hdr) - 3)) + "|")
    for key, line in rlines_cal:
        cells = key_cells(key)
        cells += [accuracy_cell(res[t], key) for t in pk]
        cells.append(accuracy_cell(res[("multi-needle", needle_ctx)], key))
        w("| " + " | ".join(cells) + " |")
    w("")
    w(f"## Perplexity and memory at {ctxname(ppl_ctx)}\n")
    hdr = ["Policy", "Budget", "KV quant", f"ppl (last {ppl_score})", "KV MiB", "KV % of full",
           "decode tok/s", "compress ms"]
    w("| " + " | ".join(hdr) + " |")
    w("|" + "|".join(["---"] * 3 + ["---:"] * (len(hdr) - 3)) + "|")
    r = res[("ppl", ppl_ctx)]
    full_bytes = r.get("rows", {}).get("full", {}).get("kv_bytes") if "rows" in r else None
    for key, line in lines:
        cells = key_cells(key)
        cells.append(cell(r, key, "ppl", lambda v: f"{v:.3f}"))
        cells.append(cell(r, key, "kv_bytes", lambda v: f"{v / 2**20:.1f}"))
        cells.append(cell(r, key, "kv_bytes",
                          lambda v: f"{100 * v / full_bytes:.1f}%" if full_bytes else "—"))
        cells.append(cell(r, key, "decode_tok_s", lambda v: f"{v:.1f}"))
        cells.append(cell(r, key, "compress_s", lambda v: f"{1000 * v:.0f}"))
        w("| " + " | ".join(cells) + " |")
    w("")
    sr = res[("speed", speed_ctx)]
    w(f"## Decode at {speed_ctx // 1024}k tokens (budget 10%)\n")
    w("| Policy | KV quant | KV MiB | KV entries | decode tok/s | vs full | compress ms |")
    w("|---|---|---:|---:|---:|---:|---:|")
    full_speed = sr.get("rows", {}).get("full", {}).get("decode_tok_s") if "rows" in sr else None
    for key, _ in speed_lines:
        method = key.split("@")[0].split("+")[0]
        quant = "polykv" if key.endswith("+polykv") else "none"
        r = sr.get("rows", {}).get(key) if "rows" in sr else None
        if not r:
            w(f"| {method} | {quant} | — | — | — | — | — |")
            continue
        ratio = f"{r['decode_tok_s'] / full_speed:.2f}x" if full_speed else "—"
        w(f"| {method} | {quant} | {r['kv_bytes'] / 2**20:.1f} | {r.get('kv_entries', 0)} | "
          f"{r['decode_tok_s']:.1f} | {ratio} | {1000 * r.get('compress_s', 0):.0f} |")
    w("")
    lr = res[("longgen", long_ctx)]
    w(f"## Long generation: decode-time eviction over {long_score} tokens\n")
    w(f"A {long_ctx - long_score}-token prompt of data/long/licenses.txt, then its next "
      f"{long_score} tokens teacher-forced one at a time; the policies evict during decoding "
      "(every 16 steps past the budget; inertiakv-lazy folds attention into its EMA every "
      f"{LAZY_SCORE_EVERY} steps). Budget: entries per (layer, KV head).\n")
    w("| Policy | Budget | ppl | KV MiB at the end | decode tok/s |")
    w("|---|---:|---:|---:|---:|")
    for key, _ in long_lines:
        method, _, budget = key.partition("@")
        w(f"| {method} | {budget or 'all'} | {cell(lr, key, 'ppl', lambda v: f'{v:.3f}')} | "
          f"{cell(lr, key, 'kv_bytes', lambda v: f'{v / 2**20:.1f}')} | "
          f"{cell(lr, key, 'decode_tok_s', lambda v: f'{v:.1f}')} |")
    w("")
    errors = [(t, c, r["error"]) for (t, c), r in res.items() if "error" in r]
    if errors:
        w("## Not measured\n")
        for t, c, e in errors:
            w(f"- {t} @ {c}: {e}")
        w("")
    w("## Reading the tables\n")
    w("- **Budget**: entries kept per (layer, KV head) after the prompt, as a fraction of the "
      "prompt (the 32-token observation window included, so 5% of 1k keeps the window plus "
      "~19). PyramidKV spreads the same total over layers (more in early layers). Decode-time "
      "policies (InertiaKV, Random) evict while generating, every 16 tokens past the budget; "
      f"inertiakv-lazy folds attention into its EMA every {LAZY_SCORE_EVERY} decode steps "
      "instead of every step. RDKV's budget is a fraction of the fp16 bits: it keeps more "
      "entries at 8/4/2 bits. depthkv and snapkv-heads (SnapKV with calibrated per-KV-head "
      "budgets) calibrate on data/calib/default.txt when the line is resolved.")
    w("- **KV quant polykv**: keys int8 (q8_0 blocks), values rotated by a seeded "
      "Walsh-Hadamard transform and stored as 3-bit Lloyd-Max codes plus an fp16 norm "
      "(94 bytes per head and token instead of 512 in f32); `full+polykv` quantizes without "
      "evicting.")
    w("- **KV MiB**: bytes the cache holds after the run (allocated storage of every head; "
      "evicted entries are freed); **KV % of full** compares every policy by bytes, RDKV "
      "included (its nominal budget counts fp16 bits, so it keeps more entries at 8/4/2 bits). **decode tok/s**: teacher-forced single-token steps after "
      "the compressed prompt. **compress ms**: applying the policy to the prefilled cache "
      "(scoring + compaction, all layers).")
    w("- ppl: perplexity of the last scored tokens of data/long/ (GNU licence texts) given "
      "the compressed prompt before them.")
    w("- Retrieval prompts: an instruction, the classic filler (\"The grass is green. ...\"), "
      "the needle(s), the question, in the chat template; the needle is never in the last 15% "
      "of the filler, so no policy keeps it merely because it is recent. Multi-needle asks "
      "all four needles of a prompt in turn (the first asked rotates), each answer scored.")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("\n".join(out) + "\n")
    log(f"wrote {os.path.relpath(args.out, REPO)}")


if __name__ == "__main__":
    main()
