#!/usr/bin/env python3
"""Regenerate docs/results/quantization.md: llmc's weight-quantization methods
(RTN, GPTQ, AWQ, OSAQ, AAAC, QTEA, HBQ) and llama.cpp's own formats, on
SmolLM2-135M-Instruct and stories260K.

For every configuration the script compiles the model with
`llmc compile --pipeline='llm-quantize{...}'`, reads the artifact's tensor
table (`llmc inspect --json`) for bits per weight and size, and measures
perplexity, KL divergence (mean, p99) and top-1 agreement against the
reference (the source model: its dequantized weights define the model) with
`llmc eval --ref`. llama.cpp's presets come from bench/llamacpp_quants.py
(llama-quantize built from the llama-cpp-python sdist by
scripts/build_llamacpp.sh) and are scored by the same `llmc eval`. Nothing is
estimated: a configuration that fails is reported as failed.

Usage:
  python3 bench/quantization.py               # both models, every method
  python3 bench/quantization.py --quick       # smoke run: few configs, few tokens
  python3 bench/quantization.py --models stories260k
Only the Python standard library is needed; llmc must be built.
"""

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_common  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO, "docs", "results", "quantization.md")
SHARED = os.environ.get("LLMC_SHARED_DIR", os.path.join(os.path.dirname(REPO), "shared"))

# Each model: source (also the reference), evaluation and calibration data,
# weights kept as in the source, and the groups that divide its widths.
MODELS = {
    "smollm2": {
        "title": "SmolLM2-135M-Instruct",
        "model": os.path.join(REPO, ".cache", "models", "SmolLM2-135M-Instruct.Q4_1.gguf"),
        "text": os.path.join(REPO, "data", "eval", "default.txt"),
        "calib": None,  # data/calib/default.txt
        "skip": "token_embd.weight",
        "skip_why": "the tied embedding / LM head (21% of the weights) stays Q8_0 as in the source",
        "max_tokens": 512,
        "qtea_groups": (64, 192),
        "hbq_wide": 192,  # HBQ-E-like large block (128 does not divide 576)
        "llamacpp": True,
    },
    "stories260k": {
        "title": "stories260K (llama2.c)",
        "model": os.path.join(SHARED, "models", "stories260K.bin"),
        "text": os.path.join(REPO, "data", "eval", "stories260k.ids"),
        "calib": os.path.join(REPO, "data", "calib", "stories260k.ids"),
        "skip": "token_embd.weight,output.weight,blk.*.ffn_down.weight",
        "skip_why": ("embedding and LM head stay f32; ffn_down (rows of 172 = 4 x 43 weights) "
                     "has no group size that is a multiple of 8 dividing its rows, so every "
                     "method rejects it and it stays f32"),
        "max_tokens": 2044,
        "qtea_groups": (64,),
        "hbq_wide": None,  # rows of 64: no block wider than 64 divides them
        "llamacpp": False,
    },
}


def log(msg):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def find_llmc(explicit):
    candidates = [explicit] if explicit else [
        os.path.join(REPO, "build", "bin", "llmc"), shutil.which("llmc")]
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.abspath(c)
    sys.exit("bench/quantization.py: llmc binary not found "
             f"(tried {', '.join(str(c) for c in candidates)}); build it or pass --llmc")


CALIB_SEQ = 512


def configs(spec, quick, calib_tokens):
    """[(method, label, pipeline)] for one model."""
    skip = f"skip={spec['skip']}"
    cal = f"calib-tokens={calib_tokens} calib-seq={CALIB_SEQ}"
    plan = []

    def add(method, label, opts, calibrated=True):
        o = f"method={method} {opts} {skip}" + (f" {cal}" if calibrated else "")
        plan.append((method, label, f"llm-quantize{{{o}}}"))

    if quick:
        add("rtn", "4-bit g64", "bits=4 group=64", calibrated=False)
        add("gptq", "4-bit g64", "bits=4 group=64")
        add("aaac", "4-bit g64", "bits=4 group=64")
        add("hbq", "4-bit b64", "bits=4 group=64", calibrated=False)
        add("qtea", "ternary g64", "group=64")
        return plan
    for bits in (4, 2, 3):
        add("rtn", f"{bits}-bit g64", f"bits={bits} group=64", calibrated=False)
        for m in ("gptq", "awq", "aaac") + (("osaq",) if bits < 4 else ()):
            add(m, f"{bits}-bit g64", f"bits={bits} group=64")
        add("hbq", f"{bits}-bit b64", f"bits={bits} group=64", calibrated=False)
        if bits == 2:  # the sub-2-bit option next to the 2-bit rows
            for g in spec["qtea_groups"]:
                add("qtea", f"ternary g{g}", f"group={g}")
    add("rtn", "4-bit g32", "bits=4 group=32", calibrated=False)
    # At the bits per weight of llama.cpp's Q4_K_M / Q3_K_M here (5.5 / 4.6):
    add("awq", "4-bit g32", "bits=4 group=32")
    add("aaac", "4-bit g32", "bits=4 group=32")
    if spec["hbq_wide"]:
        w = spec["hbq_wide"]
        add("hbq", f"4-bit b{w}", f"bits=4 group={w}", calibrated=False)
    for m in ("rtn", "awq", "aaac"):
        add(m, "3-bit g32", "bits=3 group=32", calibrated=m != "rtn")
    return plan


def run(cmd, timeout):
    t0 = time.monotonic()
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    return p, time.monotonic() - t0


def last_error_line(p):
    lines = [l for l in (p.stderr or "").splitlines() + (p.stdout or "").splitlines() if l.strip()]
    return lines[-1][:200] if lines else f"exit status {p.returncode}"


def compile_artifact(llmc, spec, pipeline, path):
    cmd = [llmc, "compile", spec["model"], "-o", path, "--no-ir"]
    if spec["calib"]:
        cmd += ["--calib", spec["calib"]]
    if pipeline:
        cmd.append(f"--pipeline={pipeline}")
    p, wall = run(cmd, timeout=3600)
    if p.returncode != 0:
        raise RuntimeError(f"compile failed: {last_error_line(p)}")
    m = re.search(r"ran pipeline .* in ([0-9.]+) s", p.stderr)
    quant_s = float(m.group(1)) if m else None
    return wall, quant_s


def tensor_stats(llmc, path, skip_globs):
    """Sizes from the artifact's tensor table. Side data ("<w>.aux") counts
    with its weight; "linear" = the matrix weights the method rewrote."""
    import fnmatch
    p, _ = run([llmc, "inspect", path, "--json", "--no-verify"], timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"inspect failed: {last_error_line(p)}")
    manifest = json.loads(p.stdout)
    tensors = {t["name"]: t for t in bench_common.weight_tensors(manifest)}
    total_bytes = total_params = lin_bytes = lin_params = 0
    dtypes = {}
    for name, t in tensors.items():
        if name.endswith(".aux") and name[:-4] in tensors:
            continue  # counted with its weight
        n = 1
        for d in t["shape"]:
            n *= d
        nbytes = t["nbytes"] + tensors.get(name + ".aux", {}).get("nbytes", 0)
        total_bytes += nbytes
        total_params += n
        skipped = any(fnmatch.fnmatchcase(name, g) for g in skip_globs)
        if len(t["shape"]) >= 2 and not skipped:
            lin_bytes += nbytes
            lin_params += n
            dtypes[t["dtype"]] = dtypes.get(t["dtype"], 0) + 1
    return {
        "bpw": 8.0 * total_bytes / total_params,
        "bpw_linear": 8.0 * lin_bytes / lin_params if lin_params else float("nan"),
        "linear_dtypes": ",".join(sorted(dtypes)),
        "file_bytes": os.path.getsize(path),
    }


def evaluate(llmc, path, spec, max_tokens):
    cmd = [llmc, "eval", path, "--ref", spec["model"], "--text", spec["text"], "--json",
           "--max-tokens", str(max_tokens)]
    p, wall = run(cmd, timeout=3600)
    if p.returncode != 0:
        raise RuntimeError(f"eval failed: {last_error_line(p)}")
    r = json.loads(p.stdout)
    r["eval_wall_s"] = wall
    return r


CACHE_DIR = os.path.join(REPO, ".cache", "bench", "quantization")


# What a measured row depends on: the sources of the runtime, the importers,
# the weight store, the quantization numerics and passes, the compile driver
# and the evaluator (not, e.g., the mixed-precision planner or other tools).
RESULT_SOURCES = ("runtime", "compiler/import", "compiler/weights", "compiler/quant",
                  "compiler/artifact", "passes/quant", "dialects", "compiler/driver/Compile.cpp",
                  "compiler/driver/Compile.h", "tools/llmc/Evaluation.cpp",
                  "tools/llmc/EvalCommand.cpp", "data")


def source_digest():
    """Digest of the sources a measured row depends on (RESULT_SOURCES)."""
    return bench_common.source_digest(REPO, RESULT_SOURCES)


def cache_path(llmc_digest, spec, max_tokens, pipeline):
    """Results are kept per (sources, model, data, pipeline): a rerun with the
    same sources skips what was measured (runs can be interrupted)."""
    import hashlib
    key = json.dumps([llmc_digest, spec["model"], spec["text"], spec["calib"], max_tokens,
                      pipeline])
    return os.path.join(CACHE_DIR, hashlib.sha256(key.encode()).hexdigest()[:24] + ".json")


def measure(llmc, spec, max_tokens, work, method, label, pipeline, cache=None, cached_only=False):
    if cache and os.path.isfile(cache):
        with open(cache) as f:
            row = json.load(f)
        log(f"{method} {label}: cached ({os.path.relpath(cache, REPO)})")
        return row
    row = {"method": method, "label": label, "pipeline": pipeline}
    if cached_only:
        row["error"] = "not measured yet (rerun bench/quantization.py)"
        return row
    path = os.path.join(work, re.sub(r"[^A-Za-z0-9]+", "_", method + label) + ".llmc")
    try:
        row["compile_s"], row["quant_s"] = compile_artifact(llmc, spec, pipeline, path)
        row.update(tensor_stats(llmc, path, spec["skip"].split(",")))
        row.update(evaluate(llmc, path, spec, max_tokens))
        log(f"{method} {label}: {row['bpw_linear']:.3f} bpw, kld {row['kld_mean']:.4f}, "
            f"top1 {row['top1']:.2f}%, ppl {row['ppl']:.3f}, quantize {row['quant_s'] or 0:.1f} s")
    except (RuntimeError, subprocess.TimeoutExpired, ValueError, KeyError) as e:
        row["error"] = str(e)
        log(f"{method} {label}: FAILED: {e}")
    finally:
        if os.path.exists(path):
            os.remove(path)
    if cache and "error" not in row:
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        with open(cache + ".tmp", "w") as f:
            json.dump(row, f)
        os.replace(cache + ".tmp", cache)
    return row


def llamacpp_rows(args):
    """Rows of bench/llamacpp_quants.py (llama.cpp's presets scored by llmc
    eval), or one row saying why there are none."""
    script = os.path.join(REPO, "bench", "llamacpp_quants.py")
    if args.skip_llamacpp:
        return [], "skipped (--skip-llamacpp)"
    if not os.path.isfile(script):
        return [], "bench/llamacpp_quants.py missing"
    last = os.path.join(REPO, ".cache", "peer", "llamacpp_quants.json")
    if args.cached_only:
        if not os.path.isfile(last):
            return [], "not measured yet (rerun bench/quantization.py)"
        with open(last) as f:
            data = json.load(f)
        return (data if isinstance(data, list) else data.get("presets", [])), None
    py = os.path.join(REPO, ".venv", "bin", "python3")
    cmd = [py if os.path.isfile(py) else sys.executable, script, "--json"]
    if args.quick:
        cmd.append("--quick")
    log("llama.cpp presets: " + " ".join(cmd[1:]))
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=7200)
    if p.returncode != 0:
        return [], f"bench/llamacpp_quants.py failed: {last_error_line(p)}"
    try:
        data = json.loads(p.stdout)
    except ValueError as e:
        return [], f"bench/llamacpp_quants.py printed no JSON ({e})"
    rows = data if isinstance(data, list) else data.get("presets", [])
    return rows, None


def git_commit():
    return bench_common.git_commit(REPO)


def fmt(v, spec, missing="—"):
    return missing if v is None else format(v, spec)


def table(rows, ref_ppl, llama=None, llama_why=None):
    L = ["| Method | Setting | Format | bpw (quantized) | bpw (all) | Artifact MiB | Quantize s "
         "| PPL | KLD mean | KLD p99 | Top-1 % |",
         "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
         f"| reference | source weights | — | — | — | — | — | {fmt(ref_ppl, '.3f')} | 0 | 0 | 100 |"]
    gptq = {r["label"]: r for r in rows if r["method"] == "gptq" and "error" not in r}
    for r in rows:
        m = r["method"].upper()
        same = gptq.get(r["label"]) if r["method"] == "osaq" and "error" not in r else None
        if same and all(same[k] == r[k] for k in ("kld_mean", "kld_p99", "ppl", "top1")):
            m = "OSAQ (= GPTQ: identical results)"
        if "error" in r:
            L.append(f"| {m} | {r['label']} | — | — | — | — | — | failed: {r['error']} | | | |")
            continue
        q = r["quant_s"] if r.get("quant_s") is not None else r["compile_s"]
        L.append(f"| {m} | {r['label']} | {r['linear_dtypes']} | {r['bpw_linear']:.3f} | "
                 f"{r['bpw']:.3f} | {r['file_bytes'] / 2**20:.1f} | {q:.1f} | {r['ppl']:.3f} | "
                 f"{r['kld_mean']:.4f} | {r['kld_p99']:.4f} | {r['top1']:.2f} |")
    if llama is not None:
        if llama_why:
            L.append(f"| llama.cpp | Q4_0, Q4_K_M, Q3_K_M, Q2_K | not measured: {llama_why} "
                     "| | | | | | | | |")
        for r in llama:
            if "error" in r:
                L.append(f"| llama.cpp | {r.get('preset', '?')} | — | — | — | — | — | "
                         f"failed: {r['error']} | | | |")
                continue
            L.append(f"| llama.cpp | {r['preset']} | {r.get('types', '?')} | "
                     f"{fmt(r.get('bpw_quantized'), '.3f')} | {fmt(r.get('bpw'), '.3f')} | "
                     f"{fmt(r.get('file_bytes', 0) / 2**20, '.1f')} | "
                     f"{fmt(r.get('quantize_s'), '.1f')} | {r['ppl']:.3f} | {r['kld_mean']:.4f} | "
                     f"{r['kld_p99']:.4f} | {r['top1']:.2f} |")
    return L


def calibration_note(spec, calib_tokens):
    """Which calibration data a model's rows used, and how many tokens."""
    if not spec["calib"]:
        return (f"`data/calib/default.txt` (the default corpus), its first {calib_tokens} tokens "
                f"in sequences of {CALIB_SEQ}")
    n = calib_tokens
    if spec["calib"].endswith(".ids"):
        with open(spec["calib"]) as f:
            ids = sum(len(l.split()) for l in f if not l.lstrip().startswith("#"))
        n = min(n, ids)
    return f"`{os.path.relpath(spec['calib'], REPO)}`, {n} tokens in sequences of {CALIB_SEQ}"


def render(sections, args, argv, started, elapsed):
    L = ["# Weight quantization: llmc's methods and llama.cpp's formats", "",
         "Generated by `bench/quantization.py`; do not edit by hand, rerun it.", "",
         f"- Command: `{' '.join(shlex.quote(a) for a in argv)}`",
         f"- Machine: {bench_common.cpu_model()}, {os.cpu_count()} CPU cores (nproc), {platform.machine()}, "
         f"{platform.system()} {platform.release()}; shared with other jobs, so times are indicative",
         f"- Date: {started.strftime('%Y-%m-%d %H:%M %Z').strip()} (run took {elapsed / 60:.1f} min)",
         f"- Git commit: {git_commit()}",
         f"- Calibrated methods (GPTQ, AWQ, OSAQ, AAAC, QTEA): `calib-tokens={args.calib_tokens} "
         f"calib-seq={CALIB_SEQ}`, layer by layer; SmolLM2 calibrates on the first "
         f"{args.calib_tokens} tokens of the default corpus (data/calib/default.txt), where GPTQ "
         "saturates (docs/results/calibration.md)"]
    if args.quick:
        L.append("- **Quick mode**: reduced configurations and tokens; a smoke run, not a result")
    for key in [k for k in MODELS if k in sections]:
        spec, rows, ref_ppl, tokens, llama, why = sections[key]
        L += ["", f"## {spec['title']}", "",
              f"- Source and reference: `{os.path.relpath(spec['model'], REPO) if spec['model'].startswith(REPO) else os.path.basename(spec['model'])}`",
              f"- Evaluation: `{os.path.relpath(spec['text'], REPO)}`, {tokens} scored positions",
              f"- Calibration: {calibration_note(spec, args.calib_tokens)}",
              f"- Kept as in the source (`skip={spec['skip']}`): {spec['skip_why']}", ""]
        L += table(rows, ref_ppl, llama if spec["llamacpp"] else None, why)
    L += ["", "## Reading the tables", "",
          "- **Formats**: `gq<b>a_g<G>` grouped integers (b-bit codes, fp16 scale and minimum per "
          "G weights; RTN, GPTQ, AWQ, OSAQ); `aaac<b>_g<G>` (b-bit indices into one of two "
          "learned 2^b-entry codebooks per matrix, chosen by the sign of the group's fp16 scale); "
          "`qtea_g<G>_s<P>` (ternary codes 5 per byte, fp16 alpha/beta per group, per-column "
          "rescale and 1:4 FP8 residuals on P% salient columns); `hbq<b>_b<B>` (b-bit FP "
          "elements, E5M3 scale per B weights, 2-bit significand per B/4). See docs/design.md.",
          "- **bpw (quantized)**: bytes of the rewritten matrices, side data included, × 8 / their "
          "weights. **bpw (all)**: every tensor of the artifact. **Artifact MiB**: file size.",
          "- **Quantize s**: the pass pipeline inside `llmc compile` (calibration included).",
          "- **OSAQ (= GPTQ: identical results)**: OSAQ's row equals GPTQ's at the same setting "
          "in every measure (its null-space correction changed nothing at this calibration "
          "size); the row says so itself.",
          "- **KLD**: per position KL(reference ‖ quantized) of the next-token distributions; "
          "**Top-1**: % of positions where both models' most likely next token agree; **PPL** on "
          "the evaluation text (noisier).",
          "- SmolLM2's source is itself 4-bit (Q4_1, groups of 32): `rtn 4-bit g32` lands on that "
          "grid exactly (KLD 0, a check). The other rows requantize it, so their errors are not "
          "comparable to published numbers from bf16 checkpoints.",
          "- llama.cpp rows: llama.cpp's `llama-quantize` applied to an F32 GGUF of the same "
          "reference weights, scored by the same `llmc eval` (bench/llamacpp_quants.py; "
          "llama-perplexity --kl-divergence agrees within ~1% on the same positions). "
          "SmolLM2's 576-wide rows are not a multiple of 256, so llama.cpp replaces its "
          "K-quants there by legacy types (Q2_K/Q3_K -> Q4_0, Q4_K -> Q5_0, Q5_K -> Q5_1, "
          "Q6_K -> Q8_0); only ffn_down gets real K-quants. Hence `Q2_K` is ~4.2 and "
          "`Q3_K_M` ~4.6 bits per weight here: compare rows by their bpw, not their names. "
          "The embedding is Q8_0 in every preset, as in our rows.",
          "- stories260K ships here without its tokenizer: its evaluation and calibration tokens "
          "are samples of the fp32 model (scripts/make_stories_ids.sh).", ""]
    return "\n".join(L)


def write_atomically(path, text):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".quant-",
                               suffix=".md")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="few configurations and tokens (smoke run)")
    ap.add_argument("--out", default=DEFAULT_OUT, help="markdown file to write (default: %(default)s)")
    ap.add_argument("--llmc", help="llmc binary (default: build/bin/llmc, then PATH)")
    ap.add_argument("--models", default="stories260k,smollm2",
                    help="comma-separated: " + ", ".join(MODELS))
    ap.add_argument("--calib-tokens", type=int, help="calibration tokens (default 8192; quick 128)")
    ap.add_argument("--skip-llamacpp", action="store_true", help="no llama.cpp rows")
    ap.add_argument("--cached-only", action="store_true",
                    help="render only results already measured with these sources "
                         "(.cache/bench/quantization); the rest are marked not measured")
    args = ap.parse_args()
    if args.calib_tokens is None:
        args.calib_tokens = 128 if args.quick else 8192
    keys = [k.strip() for k in args.models.split(",") if k.strip()]
    for k in keys:
        if k not in MODELS:
            sys.exit(f"bench/quantization.py: unknown model '{k}' (known: {', '.join(MODELS)})")
        for what in ("model", "text"):
            if not os.path.isfile(MODELS[k][what]):
                sys.exit(f"bench/quantization.py: {k} {what} file not found: {MODELS[k][what]}")
    llmc = find_llmc(args.llmc)
    digest = source_digest()
    argv = ["python3", os.path.relpath(os.path.abspath(sys.argv[0]), REPO)] + sys.argv[1:]
    started = datetime.datetime.now().astimezone()
    t0 = time.monotonic()
    sections = {}
    failed = False
    with tempfile.TemporaryDirectory(prefix="llmc-bench-quant-") as work:
        for k in keys:
            spec = MODELS[k]
            max_tokens = 128 if args.quick else spec["max_tokens"]
            plan = configs(spec, args.quick, args.calib_tokens)
            log(f"{spec['title']}: {len(plan)} configurations, {max_tokens} eval tokens")
            rows, ref_ppl, tokens = [], None, max_tokens
            llama, why = ([], None)
            if spec["llamacpp"]:
                llama, why = llamacpp_rows(args)
            for i, (method, label, pipeline) in enumerate(plan, 1):
                log(f"[{k} {i}/{len(plan)}] {pipeline}")
                rows.append(measure(llmc, spec, max_tokens, work, method, label, pipeline,
                                    cache_path(digest, spec, max_tokens, pipeline),
                                    args.cached_only))
                if ref_ppl is None and "ref_ppl" in rows[-1]:
                    ref_ppl, tokens = rows[-1]["ref_ppl"], rows[-1]["tokens"]
            failed = failed or any("error" in r for r in rows)
            sections[k] = (spec, rows, ref_ppl, tokens, llama, why)
    md = render(sections, args, argv, started, time.monotonic() - t0)
    write_atomically(args.out, md)
    log(f"wrote {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
