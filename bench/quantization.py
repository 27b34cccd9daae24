#!/usr/bin/env python3
"""Regenerate docs/results/quantization.md: weight-quantization methods of llmc
compared on SmolLM2-135M-Instruct.

For every configuration (method x bits x group) the script compiles the GGUF
with `llmc compile --pipeline='llm-quantize{...}'`, reads the artifact's tensor
table (`llmc inspect --json`) for bits per weight and size, and measures
perplexity, KL divergence (mean, p99) and top-1 agreement against the reference
(the GGUF itself, whose dequantized weights define the model) with
`llmc eval --ref`. Nothing is estimated: a configuration that fails is reported
as failed, and methods llmc does not implement yet are listed as not measured.

Usage:
  python3 bench/quantization.py            # full table (~20 min on 2 cores)
  python3 bench/quantization.py --quick    # smoke run: few configs, few tokens
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

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL = os.path.join(REPO, ".cache", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
DEFAULT_TEXT = os.path.join(REPO, "data", "eval", "default.txt")
DEFAULT_OUT = os.path.join(REPO, "docs", "results", "quantization.md")
SKIP = "token_embd.weight"

# Methods and formats that exist elsewhere but are not (yet) measured here.
NOT_MEASURED = [
    ("OSAQ", "not implemented in llmc yet"),
    ("AAAC", "not implemented in llmc yet"),
    ("QTEA", "not implemented in llmc yet"),
    ("HBQ", "not implemented in llmc yet"),
    ("llama.cpp Q4_0", "needs llama-cpp-python built from its sdist (not installed)"),
    ("llama.cpp Q4_K_M", "needs llama-cpp-python built from its sdist (not installed)"),
    ("llama.cpp Q3_K_M", "needs llama-cpp-python built from its sdist (not installed)"),
    ("llama.cpp Q2_K", "needs llama-cpp-python built from its sdist (not installed)"),
]


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


def configs(quick, calib_tokens):
    """(label, method, bits, group, pipeline or None for the reference)."""
    if quick:
        plan = [("rtn", 4, 64), ("rtn", 4, 32), ("gptq", 4, 64), ("awq", 4, 64)]
    else:
        plan = [(m, b, 64) for b in (4, 3, 2) for m in ("rtn", "gptq", "awq")]
        plan += [(m, 4, 32) for m in ("rtn", "gptq", "awq")]
    out = []
    for method, bits, group in plan:
        opts = f"method={method} bits={bits} group={group} sym=false skip={SKIP}"
        if method != "rtn":
            opts += f" calib-tokens={calib_tokens}"
        out.append((f"{method} {bits}-bit g{group}", method, bits, group,
                    f"llm-quantize{{{opts}}}"))
    return out


def run(cmd, timeout):
    t0 = time.monotonic()
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    return p, time.monotonic() - t0


def last_error_line(p):
    lines = [l for l in (p.stderr or "").splitlines() + (p.stdout or "").splitlines() if l.strip()]
    return lines[-1][:200] if lines else f"exit status {p.returncode}"


def compile_artifact(llmc, model, pipeline, path):
    cmd = [llmc, "compile", model, "-o", path, "--no-ir"]
    if pipeline:
        cmd.append(f"--pipeline={pipeline}")
    p, wall = run(cmd, timeout=3600)
    if p.returncode != 0:
        raise RuntimeError(f"compile failed: {last_error_line(p)}")
    m = re.search(r"ran pipeline .* in ([0-9.]+) s", p.stderr)
    quant_s = float(m.group(1)) if m else None
    return wall, quant_s


def tensor_stats(llmc, path):
    p, _ = run([llmc, "inspect", path, "--json", "--no-verify"], timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"inspect failed: {last_error_line(p)}")
    manifest = json.loads(p.stdout)
    total_bytes = total_params = lin_bytes = lin_params = 0
    dtypes = {}
    embd_dtype = "?"
    for t in manifest["tensors"]:
        n = 1
        for d in t["shape"]:
            n *= d
        total_bytes += t["nbytes"]
        total_params += n
        if len(t["shape"]) == 2 and t["name"] != SKIP:
            lin_bytes += t["nbytes"]
            lin_params += n
            dtypes[t["dtype"]] = dtypes.get(t["dtype"], 0) + 1
        if t["name"] == SKIP:
            embd_dtype = t["dtype"]
    return {
        "bpw": 8.0 * total_bytes / total_params,
        "bpw_linear": 8.0 * lin_bytes / lin_params if lin_params else float("nan"),
        "params": total_params,
        "weight_bytes": total_bytes,
        "linear_dtypes": ",".join(sorted(dtypes)),
        "embd_dtype": embd_dtype,
        "file_bytes": os.path.getsize(path),
    }


def evaluate(llmc, path, ref, text, max_tokens):
    cmd = [llmc, "eval", path, "--ref", ref, "--text", text, "--json",
           "--max-tokens", str(max_tokens)]
    p, wall = run(cmd, timeout=3600)
    if p.returncode != 0:
        raise RuntimeError(f"eval failed: {last_error_line(p)}")
    r = json.loads(p.stdout)
    r["eval_wall_s"] = wall
    return r


def measure(llmc, model, text, max_tokens, work, label, pipeline):
    path = os.path.join(work, re.sub(r"[^A-Za-z0-9]+", "_", label) + ".llmc")
    row = {"label": label, "pipeline": pipeline}
    try:
        log(f"{label}: compiling")
        row["compile_s"], row["quant_s"] = compile_artifact(llmc, model, pipeline, path)
        row.update(tensor_stats(llmc, path))
        log(f"{label}: compiled in {row['compile_s']:.1f} s "
            f"({row['bpw']:.3f} bpw, {row['file_bytes'] / 2**20:.1f} MiB); evaluating")
        row.update(evaluate(llmc, path, model, text, max_tokens))
        log(f"{label}: ppl {row['ppl']:.3f}  kld {row['kld_mean']:.4f}  "
            f"p99 {row['kld_p99']:.4f}  top1 {row['top1']:.2f}%")
    except (RuntimeError, subprocess.TimeoutExpired, ValueError, KeyError) as e:
        row["error"] = str(e)
        log(f"{label}: FAILED: {e}")
    finally:
        if os.path.exists(path):
            os.remove(path)
    return row


def git_commit():
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=REPO, capture_output=True, text=True).stdout.strip()
        return (head or "unknown") + (" (with uncommitted changes)" if dirty else "")
    except OSError:
        return "unknown"


def fmt(v, spec, missing="—"):
    return missing if v is None else format(v, spec)


def render(rows, ref_row, args, argv, started, elapsed):
    L = []
    L.append("# Weight quantization on SmolLM2-135M-Instruct")
    L.append("")
    L.append("Generated by `bench/quantization.py`; do not edit by hand, rerun it.")
    L.append("")
    L.append(f"- Command: `{' '.join(shlex.quote(a) for a in argv)}`")
    L.append(f"- Machine: {os.cpu_count()} CPU cores (nproc), {platform.machine()}, "
             f"{platform.system()} {platform.release()}; shared with other jobs, so times are indicative")
    L.append(f"- Date: {started.strftime('%Y-%m-%d %H:%M %Z').strip()} "
             f"(run took {elapsed / 60:.1f} min)")
    L.append(f"- Git commit: {git_commit()}")
    L.append(f"- Model and reference: `{os.path.relpath(args.model, REPO)}` — its dequantized "
             "weights define the reference model (linears "
             f"{ref_row.get('linear_dtypes', '?').upper()}; embedding "
             f"{ref_row.get('embd_dtype', '?')}, tied to the LM head)")
    tokens = next((r["tokens"] for r in [ref_row] + rows if "tokens" in r), args.max_tokens)
    ctx = next((r["ctx"] for r in rows if "ctx" in r), "?")
    L.append(f"- Evaluation: `{os.path.relpath(args.text, REPO)}`, {tokens} scored tokens "
             f"(`llmc eval --max-tokens {args.max_tokens}`, windows of {ctx})")
    L.append(f"- Calibration (GPTQ, AWQ): default calibration text, `calib-tokens={args.calib_tokens}`")
    L.append(f"- Every configuration: `sym=false skip={SKIP}` (embedding kept as in the source)")
    if args.quick:
        L.append("- **Quick mode**: reduced configurations and tokens; a smoke run, not a result")
    L.append("")
    L.append("| Method | Format | bpw (all) | bpw (linears) | Artifact MiB | Quantize s | PPL | KLD mean | KLD p99 | Top-1 % |")
    L.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    if "error" in ref_row:
        L.append(f"| reference (source GGUF) | q4_1 | — | — | — | — | failed: {ref_row['error']} | | | |")
    else:
        L.append(f"| reference (source GGUF) | q4_1 g32 | {ref_row['bpw']:.3f} | "
                 f"{ref_row['bpw_linear']:.3f} | {ref_row['file_bytes'] / 2**20:.1f} | — | "
                 f"{fmt(ref_row.get('ref_ppl'), '.3f')} | 0 | 0 | 100 |")
    for r in rows:
        method = r["label"].split()[0].upper()
        if "error" in r:
            L.append(f"| {method} | {r['label']} | — | — | — | — | failed: {r['error']} | | | |")
            continue
        q = r["quant_s"] if r.get("quant_s") is not None else r["compile_s"]
        L.append(f"| {method} | {r['linear_dtypes']} | {r['bpw']:.3f} | {r['bpw_linear']:.3f} | "
                 f"{r['file_bytes'] / 2**20:.1f} | {q:.1f} | {r['ppl']:.3f} | "
                 f"{r['kld_mean']:.4f} | {r['kld_p99']:.4f} | {r['top1']:.2f} |")
    for name, why in NOT_MEASURED:
        L.append(f"| {name} | — | not yet measured | | | | | | | ({why}) |")
    L.append("")
    L.append("## Reading the table")
    L.append("")
    L.append("- **Format** `gq<bits>a_g<group>`: `bits`-bit codes with one fp16 scale and one "
             "fp16 minimum per `group` weights of a row (asymmetric). Only the linear "
             "projections are requantized; norms stay f32 and the embedding stays as in the source.")
    L.append("- **bpw (all)**: total bytes of every tensor in the artifact's tensor table × 8 / "
             "number of parameters (embedding and norms included). **bpw (linears)**: the same "
             "over the quantized projection matrices only. **Artifact MiB**: file size.")
    L.append("- **Quantize s**: time of the pass pipeline inside `llmc compile` (RTN: rounding "
             "only; GPTQ/AWQ: layer-by-layer calibration included).")
    L.append("- **PPL**: perplexity of the quantized model on the evaluation text. **KLD**: per "
             "position KL(reference ‖ quantized) of the next-token distributions, mean and 99th "
             "percentile. **Top-1**: % of positions where both models' most likely next token "
             "agree. KLD and top-1 measure closeness to the reference, which is what quantization "
             "should preserve; PPL on a short text is noisier.")
    L.append("- The source is itself 4-bit (Q4_1, groups of 32). The **4-bit g32** rows "
             "quantize onto exactly the grid the source weights already lie on, so every method "
             "should reproduce the reference (KLD ≈ 0, top-1 ≈ 100%) — a check, not a "
             "compression result. The g64 and lower-bit rows requantize an already-quantized "
             "model, so their errors are not comparable to published numbers obtained from "
             "bf16 checkpoints.")
    L.append("- Rows marked *not yet measured* are methods llmc does not implement yet or "
             "llama.cpp's own formats, which would need llama.cpp's quantizer; no numbers are "
             "given for them.")
    L.append("")
    return "\n".join(L)


def write_atomically(path, text):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".quant-", suffix=".md")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the usual mode
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
    ap.add_argument("--model", default=DEFAULT_MODEL, help="GGUF model, also the reference")
    ap.add_argument("--text", default=DEFAULT_TEXT, help="evaluation text")
    ap.add_argument("--max-tokens", type=int, help="scored tokens (default 512; quick 128)")
    ap.add_argument("--calib-tokens", type=int, help="GPTQ/AWQ calibration tokens (default 256; quick 64)")
    args = ap.parse_args()
    if args.max_tokens is None:
        args.max_tokens = 128 if args.quick else 512
    if args.calib_tokens is None:
        args.calib_tokens = 64 if args.quick else 256
    for what, p in (("model", args.model), ("text", args.text)):
        if not os.path.isfile(p):
            sys.exit(f"bench/quantization.py: {what} file not found: {p}")
    args.model, args.text = os.path.abspath(args.model), os.path.abspath(args.text)
    llmc = find_llmc(args.llmc)
    argv = ["python3", os.path.relpath(os.path.abspath(sys.argv[0]), REPO)] + sys.argv[1:]
    started = datetime.datetime.now().astimezone()
    t0 = time.monotonic()
    plan = configs(args.quick, args.calib_tokens)
    log(f"llmc: {llmc}; {len(plan)} configurations, {args.max_tokens} eval tokens, "
        f"calib-tokens {args.calib_tokens}")

    with tempfile.TemporaryDirectory(prefix="llmc-bench-quant-") as work:
        # Reference: the source compiled as is (for its size / bpw); its
        # perplexity comes from the first eval's ref_ppl.
        ref_row = {"label": "reference"}
        ref_path = os.path.join(work, "reference.llmc")
        try:
            log("reference: compiling the source as is")
            compile_artifact(llmc, args.model, None, ref_path)
            ref_row.update(tensor_stats(llmc, ref_path))
        except (RuntimeError, subprocess.TimeoutExpired, ValueError, KeyError) as e:
            ref_row["error"] = str(e)
            log(f"reference: FAILED: {e}")
        finally:
            if os.path.exists(ref_path):
                os.remove(ref_path)
        rows = []
        for i, (label, _m, _b, _g, pipeline) in enumerate(plan, 1):
            log(f"[{i}/{len(plan)}] {pipeline}")
            rows.append(measure(llmc, args.model, args.text, args.max_tokens, work, label, pipeline))
            if "ref_ppl" in rows[-1] and "ref_ppl" not in ref_row:
                ref_row["ref_ppl"] = rows[-1]["ref_ppl"]
                ref_row["tokens"] = rows[-1]["tokens"]

    md = render(rows, ref_row, args, argv, started, time.monotonic() - t0)
    write_atomically(args.out, md)
    log(f"wrote {args.out}")
    return 1 if any("error" in r for r in rows) or "error" in ref_row else 0


if __name__ == "__main__":
    sys.exit(main())
