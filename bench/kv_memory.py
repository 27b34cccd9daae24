#!/usr/bin/env python3
"""Regenerate docs/results/kv-memory.md: the KV cache's peak during prefill
and the process's peak RSS, with the prompt in one step and in chunks.

A prefill KV policy compresses each layer right after that layer's
attention, so a prompt in one step peaks at the budget plus one layer's
whole prompt, not at the full cache; what one step holds whole are the
activations (the kernel plan's arena, T x its bytes per token). With
`--prefill-chunk N` the runtime feeds the prompt in steps of N tokens and the
policy compresses after each (its budget a share of the positions so far),
so the KV peak stays near the budget and the activations at one chunk's.
Scores then come from each chunk's own window of queries (SnapKV and its
family score with the last 32 queries of the chunk, not of the whole
prompt), so the kept set, and with it quality, can change: the table shows
both.

SmolLM2-135M-Instruct, every prefill policy at a 10% budget, compiled in
memory (`--pipeline 'llm-kv-policy{...}'`), on:
  - perplexity: the first CONTEXT tokens of data/long/licenses.txt, the last
    SCORE of them teacher-forced one at a time after the (compressed) prompt;
  - passkey retrieval at 4k in the chat template (TRIALS prompts, needle
    depths spread over 0..0.85 of the filler), accuracy with its 95% Wilson
    interval: the question at the end of the prompt is what the one-step
    scores see and the chunked ones (but the last chunk) do not.
KV bytes are every head's allocated entries plus the policy's state (window
queries, W_O Gram matrices, attention statistics), as `llmc eval-long`
reports them (`kv_bytes` after the run, `kv_peak_bytes` the high-water mark);
peak RSS is the eval-long process's (wait4's ru_maxrss: model, arena, KV and
everything else). RDKV compresses in one pass over the whole prompt and so
always prefills in one step; InertiaKV evicts only while decoding (not
listed).

Results are cached per (llmc sources, run) in .cache/bench/kv-memory.

Usage:
  python3 bench/kv_memory.py [--chunk 512] [--context 8192] [--trials 10]
Only the Python standard library is needed; llmc must be built.
"""

import argparse
import datetime
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_common  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO, "docs", "results", "kv-memory.md")
MODEL = os.path.join(REPO, ".cache", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
CACHE_DIR = os.path.join(REPO, ".cache", "bench", "kv-memory")
RESULT_SOURCES = ("runtime", "compiler", "passes", "dialects", "tools/llmc", "tools/cli",
                  "data/long")
POLICIES = [("full", "method=full"),
            ("streaming", "method=streaming budget=0.1"),
            ("h2o", "method=h2o budget=0.1"),
            ("snapkv", "method=snapkv budget=0.1"),
            ("pyramidkv", "method=pyramidkv budget=0.1"),
            ("restkv", "method=restkv budget=0.1"),
            ("laprox", "method=laprox budget=0.1"),
            ("capkv", "method=capkv budget=0.1"),
            ("random", "method=random budget=0.1"),
            ("snapkv+polykv", "method=snapkv budget=0.1 kv-quant=polykv"),
            ("rdkv", "method=rdkv budget=0.1")]
RETRIEVAL = ("full", "streaming", "snapkv", "restkv")


def log(msg):
    print(f"[kv-memory {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def cached(key, make):
    """make()'s JSON object, kept in CACHE_DIR under `key`; an {"error": ...}
    result is returned but not kept, so a rerun tries again."""
    path = os.path.join(CACHE_DIR, hashlib.sha256(key.encode()).hexdigest()[:24] + ".json")
    if os.path.isfile(path):
        with open(path) as f:
            return json.load(f)
    r = make()
    if "error" not in r:
        os.makedirs(CACHE_DIR, exist_ok=True)
        with open(path + ".tmp", "w") as f:
            json.dump(r, f)
        os.replace(path + ".tmp", path)
    return r


def run_measured(cmd):
    """Runs cmd; (exit code, stdout, stderr, peak RSS in bytes from wait4)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(p.pid, 0)
        out.seek(0)
        err.seek(0)
        return (os.waitstatus_to_exitcode(status), out.read(), err.read(),
                usage.ru_maxrss * 1024)  # Linux: KiB


def last_line(text):
    return (text.strip().splitlines() or ["?"])[-1]


def run_eval_long(llmc, digest, args):
    """One eval-long --json run (cached): its JSON object, or {"error": ...}."""
    def make():
        cmd = [llmc, "eval-long", MODEL, "--json", "-q", *args]
        log(" ".join(cmd))
        t0 = time.time()
        code, stdout, stderr, rss = run_measured(cmd)
        if code != 0:
            log(f"FAILED: {last_line(stderr)}")
            return {"error": last_line(stderr)}
        r = json.loads(stdout.strip().splitlines()[-1])
        r["wall_s"] = round(time.time() - t0, 1)
        r["max_rss_bytes"] = rss
        log(f"done in {r['wall_s']} s")
        return r
    return cached(json.dumps([digest, args]), make)


def rss_floor(llmc, digest):
    """Peak RSS of a short run (256 tokens, full cache) of the GGUF compiled in
    memory, as every row here runs, and of llmc-rt on the compiled artifact:
    the first is the floor of the table's RSS column (the in-memory compile's
    high-water mark), the second what a deployed artifact needs."""
    def make():
        with tempfile.TemporaryDirectory() as work:
            art = os.path.join(work, "smollm2.llmc")
            p = subprocess.run([llmc, "compile", MODEL, "-o", art, "--no-sign", "-q"],
                               capture_output=True, text=True)
            if p.returncode != 0:
                return {"error": last_line(p.stderr)}
            short = ["--task", "ppl", "--context", "256", "--score-tokens", "16", "--json",
                     "-q", "-t", "1"]
            rt = os.path.join(os.path.dirname(llmc), "llmc-rt")
            out = {}
            for label, cmd in (("gguf", [llmc, "eval-long", MODEL, *short]),
                               ("artifact", [rt, "eval-long", art, *short])):
                code, _, _, rss = run_measured(cmd)
                if code != 0:
                    return {"error": f"{' '.join(cmd)} failed"}
                out[label] = rss
            return out
    return cached(json.dumps([digest, "rss-floor"]), make)


def mib(v):
    return f"{v / 2**20:.1f}"


wilson95 = bench_common.wilson95


def accuracy(r):
    if "error" in r:
        return "—"
    n = r.get("asked", r["trials"])
    lo, hi = wilson95(r["correct"], n)
    return f"{r['correct']}/{n} ({100 * lo:.0f}–{100 * hi:.0f}%)"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llmc", default=os.path.join(REPO, "build", "bin", "llmc"))
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--context", type=int, default=8192, help="perplexity context (tokens)")
    ap.add_argument("--score", type=int, default=256, help="scored tokens at the end")
    ap.add_argument("--chunk", type=int, default=512, help="prefill chunk (tokens)")
    ap.add_argument("--retrieval-context", type=int, default=4096)
    ap.add_argument("--trials", type=int, default=10, help="passkey prompts")
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    if not os.access(args.llmc, os.X_OK):
        sys.exit(f"bench/kv_memory.py: {args.llmc} not found; build llmc or pass --llmc")
    if not os.path.isfile(MODEL):
        sys.exit(f"bench/kv_memory.py: {MODEL} missing; run scripts/setup.sh")
    digest = bench_common.source_digest(REPO, RESULT_SOURCES)
    started = time.time()
    common = ["-t", str(args.threads)]

    def pipeline(line):
        return [] if line == "method=full" else ["--pipeline", f"llm-kv-policy{{{line}}}"]

    ppl, ret = {}, {}
    for name, line in POLICIES:
        for chunk in (0, args.chunk):
            ppl[(name, chunk)] = run_eval_long(
                llmc=args.llmc, digest=digest,
                args=["--task", "ppl", "--context", str(args.context), "--score-tokens",
                      str(args.score), "--prefill-chunk", str(chunk), *pipeline(line), *common])
    for name, line in POLICIES:
        if name not in RETRIEVAL:
            continue
        for chunk in (0, args.chunk):
            ret[(name, chunk)] = run_eval_long(
                llmc=args.llmc, digest=digest,
                args=["--task", "passkey", "--context", str(args.retrieval_context), "--chat",
                      "--trials", str(args.trials), "--prefill-chunk", str(chunk),
                      *pipeline(line), *common])

    floor = rss_floor(args.llmc, digest)
    full_peak = ppl[("full", 0)].get("kv_peak_bytes")
    out = []
    w = out.append
    w("# KV cache: peak bytes during prefill, one step and chunked\n")
    w("Generated by `bench/kv_memory.py`; do not edit by hand, rerun it.\n")
    w(f"- Command: `python3 bench/kv_memory.py --context {args.context} --score {args.score} "
      f"--chunk {args.chunk} --retrieval-context {args.retrieval_context} "
      f"--trials {args.trials}`")
    w(f"- Model: SmolLM2-135M-Instruct (`{os.path.relpath(MODEL, REPO)}`); the full cache "
      "stores keys and values in f32")
    w(f"- Machine: {bench_common.cpu_model()}, {os.cpu_count()} CPU cores, "
      f"{platform.machine()} (times are indicative)")
    w(f"- Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; run took "
      f"{(time.time() - started) / 60:.1f} min (cached rows count as 0)")
    w(f"- Git commit: {bench_common.git_commit(REPO)}")
    w(f"- Every policy at a 10% budget (entries per layer and KV head, a share of the "
      f"positions so far), compiled in memory with `--pipeline 'llm-kv-policy{{...}}'`; "
      f"chunked: `--prefill-chunk {args.chunk}`")
    w("")
    w(f"## Perplexity at {args.context} tokens (last {args.score} scored)\n")
    w("| Policy | Prefill | KV MiB after | KV peak MiB | KV peak % of full's | peak RSS MiB | "
      "ppl | prefill s |")
    w("|---|---|---:|---:|---:|---:|---:|---:|")
    for name, _ in POLICIES:
        for chunk in (0, args.chunk):
            r = ppl[(name, chunk)]
            if "error" in r:
                w(f"| {name} | {'chunks' if chunk else 'one step'} | — | — | — | — | — | — |")
                continue
            prompt = args.context - args.score  # ppl: what is prefilled
            how = (f"chunks of {r['prefill_chunk']}" if r["prefill_chunk"] < prompt
                   else "one step")
            share = f"{100 * r['kv_peak_bytes'] / full_peak:.1f}%" if full_peak else "—"
            w(f"| {name} | {how} | {mib(r['kv_bytes'])} | {mib(r['kv_peak_bytes'])} | {share} | "
              f"{mib(r['max_rss_bytes'])} | {r['ppl']:.3f} | {r['prefill_s']:.1f} |")
    w("")
    w(f"## Passkey at {args.retrieval_context} tokens ({args.trials} prompts, chat template)\n")
    w("| Policy | Prefill | correct (95% Wilson) | KV peak MiB | KV MiB after | peak RSS MiB |")
    w("|---|---|---:|---:|---:|---:|")
    for name in RETRIEVAL:
        for chunk in (0, args.chunk):
            r = ret[(name, chunk)]
            how = "chunks" if chunk else "one step"
            if "error" in r:
                w(f"| {name} | {how} | — | — | — | — |")
                continue
            how = (f"chunks of {r['prefill_chunk']}" if r["prefill_chunk"] < r["tokens"]
                   else "one step")
            w(f"| {name} | {how} | {accuracy(r)} | {mib(r['kv_peak_bytes'])} | "
              f"{mib(r['kv_bytes'])} | {mib(r['max_rss_bytes'])} |")
    w("")
    errors = [(k, r["error"]) for d in (ppl, ret) for k, r in d.items() if "error" in r]
    if errors:
        w("## Not measured\n")
        for (name, chunk), e in errors:
            w(f"- {name}, chunk {chunk}: {e}")
        w("")
    # Checks the table's own claims (printed, and stated in the table).
    checks = []
    f0, fc = ppl[("full", 0)], ppl[("full", args.chunk)]
    if "error" not in f0 and "error" not in fc:
        rel = abs(fc["ppl"] - f0["ppl"]) / f0["ppl"]
        checks.append((rel < 1e-3, f"full cache: chunked ppl {fc['ppl']:.4f} equals one step's "
                                   f"{f0['ppl']:.4f} (relative difference {rel:.1e} < 1e-3)"))
    for name, _ in POLICIES:
        a, b = ppl[(name, 0)], ppl[(name, args.chunk)]
        if name == "full" or "error" in a or "error" in b or not full_peak:
            continue
        checks.append((a["kv_peak_bytes"] < 0.25 * full_peak,
                       f"{name}, one step: KV peak {mib(a['kv_peak_bytes'])} MiB < 25% of the "
                       f"full cache's {mib(full_peak)} MiB"))
        if name != "rdkv":
            checks.append((b["kv_peak_bytes"] <= a["kv_peak_bytes"],
                           f"{name}, chunked: KV peak {mib(b['kv_peak_bytes'])} MiB <= one "
                           f"step's {mib(a['kv_peak_bytes'])} MiB"))
    w("## Checks\n")
    for ok, text in checks:
        w(f"- {'PASS' if ok else 'FAIL'}: {text}")
    w("")
    w("## Reading the tables\n")
    w("- **KV peak**: the most the caches held at any append or compression, prefill "
      "included (each layer is compressed right after its attention, so a one-step prompt "
      "peaks at the budget plus one layer's whole prompt); scratch buffers of a compression "
      "are not counted. **KV MiB after**: what they hold at the end of the run. **peak RSS**: "
      "the whole eval-long process (the mapped model, the activation arena, the KV cache, "
      "the tokenizer and the evaluation text). Every run compiles the GGUF in memory, and "
      "that compile's high-water mark is the column's floor: "
      + (f"{mib(floor['gguf'])} MiB for a 256-token run of the GGUF, against "
         f"{mib(floor['artifact'])} MiB for `llmc-rt eval-long` on the compiled artifact "
         "(what a deployment needs), so differences above the floor are the runtime's."
         if "error" not in floor else f"not measured ({floor['error']})."))
    w(f"- In the perplexity table the {args.score} teacher-forced tokens after the prompt "
      "grow every head past the prefill's peak, so there the peak is the cache at the end; "
      "the passkey table (at most 8 tokens decoded) shows the prefill's own peak.")
    w("- Chunked prefill compresses after each chunk to the budget's share of the positions so "
      "far; scores of the window-query family (SnapKV, PyramidKV, ReST-KV, LaProx, CapKV) then "
      "come from each chunk's last queries, so the kept set differs from one step's. "
      "Streaming keeps the same positions either way; H2O's accumulated attention covers "
      "the queries so far.")
    w("- **prefill s**: the prompt's forward (indicative: the machine is shared). In chunks "
      "each chunk attends over the compressed cache, not over every earlier position, so "
      "under a policy a long prompt also prefills faster.")
    w("- RDKV always prefills in one step (one pass over the whole prompt), so its two rows "
      "are the same run's figures.")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("\n".join(out) + "\n")
    for ok, text in checks:
        log(("PASS " if ok else "FAIL ") + text)
    log(f"wrote {os.path.relpath(args.out, REPO)}")


if __name__ == "__main__":
    main()
