#!/usr/bin/env python3
"""CPU speed of llmc next to llama.cpp, measured in the same run on this
machine: `llmc bench --json` against llama.cpp's llama-bench, at the same
thread count, on the same weights in formats of the same bits per weight.

Configurations (full run):
  SmolLM2-135M-Instruct (real weights: the F32 reference GGUF that
  bench/llamacpp_quants.py makes from the Q4_1 source GGUF)
    F32     llmc: the F32 GGUF compiled as is      llama.cpp: the F32 GGUF
    Q8_0    llmc: llm-quantize-rtn{bits=8 group=32 sym=true}
            llama.cpp: llama-quantize --pure F32 -> Q8_0
    Q4_0    llmc: llm-quantize-rtn{bits=4 group=32 sym=true}
            llama.cpp: llama-quantize --pure F32 -> Q4_0
    gq4s_g32, gq4a_g64 (llmc's grouped integers, llm-quantize{method=rtn};
            4.5 bpw like Q4_0, so compared with llama.cpp's Q4_0)
    Q5_0    llmc: llm-quantize-rtn{bits=5 group=32 sym=true}
            llama.cpp: llama-quantize --pure F32 -> Q5_0
    Q4_K_M  llama.cpp's usual mix (llama-quantize F32 -> Q4_K_M, not --pure:
            for SmolLM2's width of 576 mostly Q5_0 and Q8_0, some Q6_K and
            Q4_K); llmc compiles that same GGUF as is
  --pure keeps llama-quantize from giving the tied embedding / LM head a
  6-bit type: every matrix of both sides is in the named format, norms F32.
  TinyLlama-1.1B shape (hidden 2048, 22 layers, 32 heads, 4 KV heads,
  intermediate 5632, vocab 32000, untied LM head), random weights, speed
  only: Q8_0, Q4_0 and Q4_K GGUFs written directly by gguf-py (random codes,
  random fp16 scales; no F32 file), compiled by llmc as they are.

Measured per configuration and side: prefill tokens/s (ppP), decode
tokens/s (tgN, from an empty KV cache, as llama-bench's tg), both the median
of R repetitions; load time (llmc: open + verify + executor set-up, from
`llmc bench`; llama.cpp: the "load time" llama_perf_context_print reports in
a separate minimal `llama-bench -v` run); peak RSS of the benchmark process
(GNU time's %M, both sides). Memory bandwidth: STREAM
triad (bench/stream_triad.cpp, compiled here) at 1 and 2 threads. Decode
roofline = read-only bandwidth over a buffer the size of the bytes one
decode step reads (every weight matrix once, the embedding one row unless it
is the LM head, plus the KV cache averaged over the tgN positions: f32 for
llmc, f16 for llama.cpp), at the bench's thread count, best of 1-8
interleaved streams per thread (`stream_triad read`) / those bytes: a model
that fits in the last-level cache is bounded by the cache's bandwidth. The
script exits 1 when a row's decode exceeds its roofline.

Output: docs/results/cpu-performance.md (generated; command, machine, date,
git commit, llama.cpp version), the raw results as JSON next to the work
files, or on stdout with --json. --quick (SmolLM2 Q4_0 only, -p 64 -n 16,
1 rep, small STREAM arrays) is a smoke test and writes its table under the
work folder unless --output is given. Nothing here asserts a speed.

Usage:
  .venv/bin/python bench/cpu_performance.py [--quick] [--threads 2] [--json]
      [-p 512] [-n 128] [--reps 3] [--no-tinyllama] [--output FILE]
"""

import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
import bench_common  # noqa: E402
import llamacpp_quants  # noqa: E402  (make_f32_gguf, llamacpp_version)
from cpu_performance_gguf import gguf_decode_bytes, random_llama_gguf  # noqa: E402
from cpu_performance_report import markdown  # noqa: E402  (the report; targets there)

DEFAULT_MODEL = os.path.join(REPO, ".cache", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
DEFAULT_BIN = os.path.join(REPO, ".cache", "peer", "build", "bin")
QUANTS = os.path.join(REPO, ".cache", "peer", "quants")  # shared with llamacpp_quants.py
DEFAULT_WORK = os.path.join(REPO, ".cache", "peer", "cpu_perf")
DEFAULT_OUTPUT = os.path.join(REPO, "docs", "results", "cpu-performance.md")

# (label, llmc pipeline or None for the GGUF as is, llama.cpp GGUF type).
# The "mix" types are llama-quantize's own choice per tensor (no --pure),
# and llmc compiles llama.cpp's GGUF itself.
MIXED_TYPES = {"Q4_K_M"}
SMOLLM2_CONFIGS = [
    ("F32", None, "F32"),
    ("Q8_0", "llm-quantize-rtn{bits=8 group=32 sym=true}", "Q8_0"),
    ("Q4_0", "llm-quantize-rtn{bits=4 group=32 sym=true}", "Q4_0"),
    ("gq4s_g32", "llm-quantize{method=rtn bits=4 group=32 sym=true}", "Q4_0"),
    ("gq4a_g64", "llm-quantize{method=rtn bits=4 group=64 sym=false}", "Q4_0"),
    ("Q5_0", "llm-quantize-rtn{bits=5 group=32 sym=true}", "Q5_0"),
    ("Q4_K_M", None, "Q4_K_M"),
]
TINYLLAMA = {"hidden": 2048, "layers": 22, "heads": 32, "kv_heads": 4,
             "intermediate": 5632, "vocab": 32000, "context": 2048}


def log(msg):
    print(f"[cpu_perf {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


#===- processes -------------------------------------------------------------===#

class Measured:
    def __init__(self, returncode, stdout, stderr, wall_s, maxrss_mb):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr
        self.wall_s, self.maxrss_mb = wall_s, maxrss_mb


GNU_TIME = "/usr/bin/time"


def have_gnu_time():
    try:
        p = subprocess.run([GNU_TIME, "--version"], capture_output=True, text=True)
        return "GNU" in (p.stdout + p.stderr)
    except OSError:
        return False


HAVE_GNU_TIME = have_gnu_time()


def run_measured(cmd, timeout):
    """Runs cmd; returns its exit status, output, wall time and peak RSS (MiB).

    The peak is GNU time's %M (ru_maxrss of a child it forked from its own
    small image). os.wait4 on a direct child would not do: Linux carries
    ru_maxrss across execve, so a child forked from this Python process
    would report at least this process's size. Without GNU time, wait4 is
    the fallback (an upper bound)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile(mode="r", suffix=".rss") as rss:
        full = [GNU_TIME, "-f", "%M", "-o", rss.name] + list(cmd) if HAVE_GNU_TIME else list(cmd)
        t0 = time.monotonic()
        p = subprocess.Popen(full, cwd=REPO, stdout=out, stderr=err)
        timer = threading.Timer(timeout, p.kill)
        timer.start()
        try:
            _, status, ru = os.wait4(p.pid, 0)
        finally:
            timer.cancel()
        wall = time.monotonic() - t0
        p.returncode = os.waitstatus_to_exitcode(status)  # keeps Popen from waiting again
        code = p.returncode
        if code == -9 and wall >= timeout:
            code = 124
        maxrss_kib = ru.ru_maxrss
        if HAVE_GNU_TIME:
            try:
                # The last line: GNU time puts "Command exited with non-zero
                # status N" before it.
                maxrss_kib = int(rss.read().split()[-1])
            except (ValueError, IndexError):
                maxrss_kib = None
        out.seek(0)
        err.seek(0)
        return Measured(code, out.read().decode(errors="replace"),
                        err.read().decode(errors="replace"), wall,
                        None if maxrss_kib is None else maxrss_kib / 1024.0)


def last_error_line(m):
    lines = [l for l in (m.stderr + "\n" + m.stdout).splitlines() if l.strip()]
    return (lines[-1][:300] if lines else "") + f" (exit status {m.returncode})"


def check_call(cmd, what, timeout=3600):
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        lines = [l for l in (p.stderr + p.stdout).splitlines() if l.strip()]
        raise RuntimeError(f"{what} failed: {lines[-1][:300] if lines else p.returncode}")
    return p


#===- machine -----------------------------------------------------------------===#

def machine_info():
    info = {"kernel": platform.release(), "cpus": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"model name\s*:\s*(.*)", f.read())
            info["cpu"] = m.group(1).strip() if m else platform.processor()
    except OSError:
        info["cpu"] = platform.processor()
    try:
        with open("/proc/meminfo") as f:
            m = re.search(r"MemTotal:\s*(\d+) kB", f.read())
            info["mem_gib"] = round(int(m.group(1)) / 2**20, 1) if m else None
    except OSError:
        pass
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for key, name in (("L2 cache", "l2"), ("L3 cache", "l3"), ("Flags", "flags")):
            m = re.search(rf"^{key}:\s*(.*)$", out, re.M)
            if m:
                info[name] = m.group(1).strip()
        if "flags" in info:  # only the SIMD levels that matter here
            flags = info.pop("flags").split()
            info["simd"] = " ".join(f for f in ("avx2", "fma", "f16c", "avx512f", "avx512bw",
                                                "avx512_vnni", "avx_vnni") if f in flags)
        hv = re.search(r"^Hypervisor vendor:\s*(.*)$", out, re.M)
        if hv:
            info["hypervisor"] = hv.group(1).strip()
    except OSError:
        pass
    info["loadavg_start"] = os.getloadavg()[0]
    return info


class ReadBandwidth:
    """Read-only bandwidth (GB/s) over a buffer of a decode step's working
    set, at the bench's thread count (`stream_triad read`), measured once per
    MiB size: the roofline of a row whose weights fit in the caches is the
    caches' bandwidth, not DRAM's."""

    def __init__(self, exe, threads, passes):
        self.exe, self.threads, self.passes, self.cache = exe, threads, passes, {}

    def __call__(self, nbytes):
        mib = max(1, int(round(nbytes / 2**20)))
        if mib not in self.cache:
            log(f"read-only bandwidth over {mib} MiB, {self.threads} thread(s)")
            p = check_call([self.exe, "read", str(self.threads), str(mib * 2**20), str(self.passes)],
                           "stream_triad read", timeout=600)
            self.cache[mib] = json.loads(p.stdout)
        return self.cache[mib]["read_gbs"]


def stream_bandwidth(work, threads_list, mib, passes):
    src = os.path.join(REPO, "bench", "stream_triad.cpp")
    exe = os.path.join(work, "stream_triad")
    if not os.path.isfile(exe) or os.path.getmtime(exe) < os.path.getmtime(src):
        log("compiling bench/stream_triad.cpp")
        check_call(["g++", "-O3", "-march=native", "-std=c++17", "-pthread", src, "-o", exe],
                   "g++ stream_triad.cpp")
    res = {}
    for t in threads_list:
        log(f"STREAM triad, {t} thread(s), 3 x {mib} MiB")
        p = check_call([exe, str(t), str(mib), str(passes)], "stream_triad", timeout=600)
        res[t] = json.loads(p.stdout)
    return res


#===- models ------------------------------------------------------------------===#

def smollm2_f32(model):
    os.makedirs(QUANTS, exist_ok=True)
    f32 = os.path.join(QUANTS, os.path.basename(model).replace(".gguf", "") + ".F32.gguf")
    if not os.path.isfile(f32) or os.path.getmtime(f32) < os.path.getmtime(model):
        log(f"writing the reference F32 GGUF {f32}")
        llamacpp_quants.make_f32_gguf(model, f32)
    return f32


def llama_quantize_pure(bin_dir, f32, qtype, work, threads):
    """F32 -> qtype with every matrix in qtype (--pure; a MIXED_TYPES type:
    llama-quantize's own per-tensor choice); cached."""
    pure = qtype not in MIXED_TYPES
    out = os.path.join(work, os.path.basename(f32).replace(".F32.gguf", "") +
                       (f".pure_{qtype}.gguf" if pure else f".{qtype}.gguf"))
    if os.path.isfile(out) and os.path.getmtime(out) >= os.path.getmtime(f32):
        return out
    log(f"llama-quantize {'--pure ' if pure else ''}{qtype}")
    check_call([os.path.join(bin_dir, "llama-quantize")] + (["--pure"] if pure else []) +
               [f32, out, qtype, str(threads)], f"llama-quantize {qtype}")
    return out


def tinyllama_gguf(work, qtype):
    path = os.path.join(work, f"tinyllama-shape-random.{qtype}.gguf")
    if not os.path.isfile(path):
        log(f"writing the random TinyLlama-shape {qtype} GGUF {path}")
        random_llama_gguf(path, qtype, TINYLLAMA)
    return path


#===- the two benchmarks ------------------------------------------------------===#

def use_private_signing_key(llmc, work):
    """The bench's own XDG_CONFIG_HOME with a default signing key that is
    trusted there (llmc keygen), so the artifacts it compiles are signed and
    run their generated kernels, as after `llmc keygen` on a user's machine;
    the user's ~/.config is not touched."""
    home = os.path.join(work, "signing-config")
    os.environ["XDG_CONFIG_HOME"] = home
    if not os.path.exists(os.path.join(home, "llmc", "signing.key")):
        check_call([llmc, "keygen", "--comment", "bench/cpu_performance.py"], "llmc keygen")


def llmc_compile(llmc, src, pipeline, out):
    cmd = [llmc, "compile", src, "-o", out]
    if pipeline:
        cmd += ["--pipeline", pipeline]
    t0 = time.monotonic()
    check_call(cmd, f"llmc compile {os.path.basename(out)}")
    return time.monotonic() - t0


def llmc_bench(llmc, artifact, threads, p, n, reps, timeout, extra=()):
    m = run_measured([llmc, "bench", artifact, "--json", "-q", "-t", str(threads), "-p", str(p),
                      "-n", str(n), "-r", str(reps), *extra], timeout)
    if m.returncode != 0:
        raise RuntimeError(f"llmc bench {os.path.basename(artifact)}: {last_error_line(m)}")
    j = json.loads(m.stdout)
    if str(j.get("generated_kernels", "")).startswith("not run"):
        raise RuntimeError(f"llmc bench {os.path.basename(artifact)}: generated kernels refused: "
                           f"{j['generated_kernels']}")
    j["peak_rss_mb_outside"] = m.maxrss_mb  # same process, measured from outside
    j["wall_s"] = m.wall_s
    return j


def llama_bench(bin_dir, gguf, threads, p, n, reps, timeout):
    exe = os.path.join(bin_dir, "llama-bench")
    m = run_measured([exe, "-m", gguf, "-t", str(threads), "-p", str(p), "-n", str(n),
                      "-r", str(reps), "-o", "json"], timeout)
    if m.returncode in (-4, 132):  # SIGILL, directly or through a shell
        raise RuntimeError(
            f"llama-bench {os.path.basename(gguf)} died with SIGILL (an instruction this machine "
            "does not grant, e.g. AMX tiles in a VM): rebuild the peer without GGML_NATIVE "
            "and with AMX off, as scripts/build_llamacpp.sh's header shows")
    if m.returncode != 0:
        raise RuntimeError(f"llama-bench {os.path.basename(gguf)}: {last_error_line(m)}")
    tests = json.loads(m.stdout)
    out = {"peak_rss_mb": m.maxrss_mb, "wall_s": m.wall_s}
    for t in tests:
        samples = t.get("samples_ts") or [t["avg_ts"]]
        key = "prefill" if t.get("n_prompt", 0) > 0 and t.get("n_gen", 0) == 0 else "decode"
        out[f"{key}_tok_s"] = statistics.median(samples)
        out[f"{key}_avg_tok_s"] = t["avg_ts"]
        out[f"{key}_runs"] = samples
        out["size_bytes"] = t.get("model_size")
        out["params"] = t.get("model_n_params")
        out["build"] = t.get("build_commit")
    if out.get("size_bytes") and out.get("params"):
        out["bpw"] = 8.0 * out["size_bytes"] / out["params"]
    # Load time: llama-bench reports none; llama_perf_context_print does,
    # with -v, after each test. A separate minimal run (one 1-token prompt).
    lm = run_measured([exe, "-m", gguf, "-t", str(threads), "-p", "1", "-n", "0", "-r", "1",
                       "--no-warmup", "-v", "-o", "json"], timeout)
    # Its "load time" runs from the start of the model load to the end of the
    # first evaluation; without warm-up that is the timed 1-token test, whose
    # own time (avg_ns) is subtracted.
    mt = re.search(r"load time\s*=\s*([0-9.]+)\s*ms", lm.stderr)
    out["load_s"] = None
    if lm.returncode == 0 and mt:
        try:
            first_eval_s = float(json.loads(lm.stdout)[0]["avg_ns"]) / 1e9
        except (ValueError, KeyError, IndexError):
            first_eval_s = 0.0
        out["load_s"] = max(float(mt.group(1)) / 1000.0 - first_eval_s, 0.0)
    out["load_run_wall_s"] = lm.wall_s
    return out


#===- driver ------------------------------------------------------------------===#

LLAMA_BENCH_CACHE = {}  # GGUF path -> llama_bench() result, within one run

def measure(args, name, label, llmc_art, gguf, bw, result_rows):
    row = {"model": name, "format": label, "llmc_artifact": os.path.relpath(llmc_art, REPO),
           "gguf": os.path.relpath(gguf, REPO)}
    try:
        log(f"{name} {label}: llmc bench")
        row["llmc"] = llmc_bench(args.llmc, llmc_art, args.threads, args.p, args.n, args.reps,
                                 args.timeout)
        lc = row["llmc"]
        log(f"{name} {label}: llmc pp {lc['prefill_tok_s']:.1f} tg {lc['decode_tok_s']:.1f} tok/s")
        # Load with every tensor's checksum verified (what a default load skips).
        v = llmc_bench(args.llmc, llmc_art, args.threads, 0, 1, 1, args.timeout,
                       ["--verify-weights", "--no-warmup"])
        row["llmc_load_verified_s"] = v["load_s"]
    except (RuntimeError, ValueError, KeyError, subprocess.TimeoutExpired) as e:
        row["llmc_error"] = str(e)
        log(f"{name} {label}: llmc FAILED: {e}")
    if not args.no_generated:
        # The same artifact with the runtime's library kernels instead of its
        # generated ones (the default).
        try:
            row["llmc_lib"] = llmc_bench(args.llmc, llmc_art, args.threads, args.p, args.n,
                                         args.reps, args.timeout, ["--library-kernels"])
            g = row["llmc_lib"]
            log(f"{name} {label}: llmc --library-kernels pp {g['prefill_tok_s']:.1f} "
                f"tg {g['decode_tok_s']:.1f} tok/s")
        except (RuntimeError, ValueError, KeyError, subprocess.TimeoutExpired) as e:
            row["llmc_lib_error"] = str(e)
    if "llmc" in row and "int8" in str(row["llmc"].get("activations", "")):
        # The same artifact with f32 activations (--exact-activations): what
        # the int8 integer dots are worth, and the speed of the exact path.
        try:
            row["llmc_exact"] = llmc_bench(args.llmc, llmc_art, args.threads, args.p, args.n,
                                           args.reps, args.timeout, ["--exact-activations"])
            e = row["llmc_exact"]
            log(f"{name} {label}: llmc --exact-activations pp {e['prefill_tok_s']:.1f} "
                f"tg {e['decode_tok_s']:.1f} tok/s")
        except (RuntimeError, ValueError, KeyError, subprocess.TimeoutExpired) as e:
            row["llmc_exact_error"] = str(e)
    if not args.no_llamacpp:
        try:
            if gguf not in LLAMA_BENCH_CACHE:  # gq4* rows share the Q4_0 run
                log(f"{name} {label}: llama-bench")
                LLAMA_BENCH_CACHE[gguf] = llama_bench(args.bin, gguf, args.threads, args.p,
                                                      args.n, args.reps, args.timeout)
            row["llamacpp"] = LLAMA_BENCH_CACHE[gguf]
            lb = row["llamacpp"]
            log(f"{name} {label}: llama.cpp pp {lb.get('prefill_tok_s', 0):.1f} "
                f"tg {lb.get('decode_tok_s', 0):.1f} tok/s")
        except (RuntimeError, ValueError, KeyError, subprocess.TimeoutExpired) as e:
            row["llamacpp_error"] = str(e)
            log(f"{name} {label}: llama.cpp FAILED: {e}")
    # Rooflines: bandwidth / bytes per decode step, KV cache averaged over the
    # tgN positions 0..N-1 (step i reads i+1 cached positions).
    mean_ctx = (args.n + 1) / 2.0
    if "llmc" in row:
        lc = row["llmc"]
        b = lc["decode_weight_bytes_per_token"] + lc["kv_bytes_per_position"] * mean_ctx
        row["llmc_bytes_per_token"] = b
        row["llmc_read_gbs"] = bw(b)
        row["llmc_roofline_tok_s"] = row["llmc_read_gbs"] * 1e9 / b
        row["llmc_roofline_frac"] = lc["decode_tok_s"] / row["llmc_roofline_tok_s"]
    if "llamacpp" in row:
        wb, kvb = gguf_decode_bytes(gguf)
        b = wb + kvb * mean_ctx
        row["llamacpp_bytes_per_token"] = b
        row["llamacpp_read_gbs"] = bw(b)
        row["llamacpp_roofline_tok_s"] = row["llamacpp_read_gbs"] * 1e9 / b
        if row["llamacpp"].get("decode_tok_s"):
            row["llamacpp_roofline_frac"] = row["llamacpp"]["decode_tok_s"] / row["llamacpp_roofline_tok_s"]
    if "llmc" in row and "llamacpp" in row:
        for k in ("prefill_tok_s", "decode_tok_s", "load_s"):
            a, b = row["llmc"].get(k), row["llamacpp"].get(k)
            row[f"ratio_{k}"] = a / b if a and b else None
        a, b = row["llmc"]["peak_rss_mb_outside"], row["llamacpp"]["peak_rss_mb"]
        row["ratio_peak_rss_mb"] = a / b if a and b else None
    result_rows.append(row)


def measure_smollm2(args, res, bw):
    """The SmolLM2 rows: each format compiled by llmc and quantized by llama.cpp."""
    f32 = smollm2_f32(args.model)
    configs = [c for c in SMOLLM2_CONFIGS if not args.quick or c[0] == "Q4_0"]
    for label, pipeline, qtype in configs:
        try:
            gguf = f32 if qtype == "F32" else (
                llama_quantize_pure(args.bin, f32, qtype, args.work, args.threads)
                if not args.no_llamacpp else f32)
            art = os.path.join(args.work, f"SmolLM2-135M-Instruct.{label}.llmc")
            log(f"SmolLM2 {label}: llmc compile" + (f" --pipeline '{pipeline}'" if pipeline else ""))
            # A mix is compiled from llama.cpp's GGUF itself (same tensors).
            source = gguf if qtype in MIXED_TYPES else f32
            if qtype in MIXED_TYPES and args.no_llamacpp:
                raise RuntimeError(f"{qtype} needs llama-quantize (no --no-llamacpp)")
            secs = llmc_compile(args.llmc, source, pipeline, art)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            res["rows"].append({"model": "SmolLM2-135M", "format": label, "llmc_error": str(e)})
            log(f"SmolLM2 {label}: FAILED: {e}")
            continue
        measure(args, "SmolLM2-135M", label, art, gguf, bw, res["rows"])
        res["rows"][-1]["llmc_compile_s"] = secs
        if qtype != label:
            res["rows"][-1]["llamacpp_format"] = qtype


def measure_tinyllama(args, res, bw):
    """The TinyLlama-shape rows (random weights, speed only)."""
    for qtype in ("Q8_0", "Q4_0", "Q4_K"):
        try:
            gguf = tinyllama_gguf(args.work, qtype)
            art = os.path.join(args.work, f"tinyllama-shape-random.{qtype}.llmc")
            log(f"TinyLlama-shape {qtype}: llmc compile")
            secs = llmc_compile(args.llmc, gguf, None, art)
        except (RuntimeError, subprocess.TimeoutExpired, ImportError, KeyError) as e:
            res["rows"].append({"model": "TinyLlama-1.1B-shape (random)", "format": qtype,
                                "llmc_error": str(e)})
            log(f"TinyLlama-shape {qtype}: FAILED: {e}")
            continue
        measure(args, "TinyLlama-1.1B-shape (random)", qtype, art, gguf, bw, res["rows"])
        res["rows"][-1]["llmc_compile_s"] = secs
        os.remove(art)  # rebuilt by every run anyway; the GGUF stays cached


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=DEFAULT_MODEL, help="SmolLM2 source GGUF")
    ap.add_argument("--llmc", default=os.path.join(REPO, "build", "bin", "llmc"))
    ap.add_argument("--bin", default=DEFAULT_BIN, help="llama.cpp tools (scripts/build_llamacpp.sh)")
    ap.add_argument("--work", default=DEFAULT_WORK, help="artifacts and GGUFs (kept)")
    ap.add_argument("--output", help=f"markdown file (default {os.path.relpath(DEFAULT_OUTPUT, REPO)}; "
                                     "--quick: WORK/cpu-performance-quick.md)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("-p", type=int, default=512, help="prefill prompt tokens")
    ap.add_argument("-n", type=int, default=128, help="decode tokens")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--stream-mib", type=int, default=256, help="MiB per STREAM array")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per benchmark process")
    ap.add_argument("--quick", action="store_true",
                    help="smoke test: SmolLM2 Q4_0 only, -p 64 -n 16, 1 rep, small STREAM arrays")
    ap.add_argument("--no-tinyllama", action="store_true", help="skip the 1.1B random-weight rows")
    ap.add_argument("--no-llamacpp", action="store_true", help="llmc only")
    ap.add_argument("--no-generated", action="store_true",
                    help="skip the second llmc run with --library-kernels")
    ap.add_argument("--json", action="store_true", help="also print the raw results on stdout")
    args = ap.parse_args()
    if args.quick:
        args.p, args.n, args.reps, args.stream_mib = 64, 16, 1, 128
        args.no_tinyllama = True
    if min(args.threads, args.reps, args.n, args.p) < 1:
        sys.exit("bench/cpu_performance.py: --threads, -p, -n and --reps must be positive")
    output = args.output or (os.path.join(args.work, "cpu-performance-quick.md") if args.quick
                             else DEFAULT_OUTPUT)

    for path, what in ((args.model, "source model"), (args.llmc, "llmc binary")):
        if not os.path.isfile(path):
            sys.exit(f"bench/cpu_performance.py: {what} {path} not found")
    if not args.no_llamacpp and not all(
            os.access(os.path.join(args.bin, t), os.X_OK) for t in ("llama-bench", "llama-quantize")):
        log("llama.cpp tools missing: running scripts/build_llamacpp.sh")
        subprocess.run([os.path.join(REPO, "scripts", "build_llamacpp.sh")], cwd=REPO, check=True)
    os.makedirs(args.work, exist_ok=True)
    use_private_signing_key(args.llmc, args.work)

    res = {"command": " ".join(["bench/cpu_performance.py"] + sys.argv[1:]),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "git_commit": bench_common.git_commit(REPO), "machine": machine_info(),
           "args": {"threads": args.threads, "p": args.p, "n": args.n, "reps": args.reps,
                    "quick": args.quick},
           "rows": []}
    ver = llamacpp_quants.llamacpp_version(args.bin)
    res["llamacpp_version"] = (f"commit {ver.get('llama.cpp commit', 'unknown')}, ggml "
                               f"{ver.get('ggml version', '?')} (llama-cpp-python sdist "
                               f"{ver.get('llama-cpp-python sdist', '?')})") if ver else "unknown"

    # What each binary costs before it loads anything.
    res["baseline_rss_mb"] = {}
    for key, cmd in (("llmc", [args.llmc, "--version"]),
                     ("llama-bench", [os.path.join(args.bin, "llama-bench"), "--help"])):
        if os.access(cmd[0], os.X_OK):
            res["baseline_rss_mb"][key] = run_measured(cmd, 60).maxrss_mb

    threads_list = sorted({1, 2, args.threads})
    res["stream"] = {str(k): v for k, v in stream_bandwidth(
        args.work, threads_list, args.stream_mib, 3 if args.quick else 10).items()}
    bw = ReadBandwidth(os.path.join(args.work, "stream_triad"), args.threads, 3 if args.quick else 10)

    measure_smollm2(args, res, bw)
    if not args.no_tinyllama:
        measure_tinyllama(args, res, bw)

    res["machine"]["loadavg_end"] = os.getloadavg()[0]
    md = markdown(res)
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    with open(output + ".tmp", "w") as f:
        f.write(md)
    os.replace(output + ".tmp", output)
    raw = os.path.join(args.work, "results-quick.json" if args.quick else "results.json")
    with open(raw, "w") as f:
        json.dump(res, f, indent=1)
    log(f"wrote {output} and {raw}")
    if args.json:
        print(json.dumps(res, indent=1))
    else:
        print(md)
    ok = any("llmc" in r for r in res["rows"])
    # A roofline is an upper bound: a row above it means the bound is wrong.
    over = [f"{r['model']} {r['format']} {side} {100 * r[side + '_roofline_frac']:.0f}%"
            for r in res["rows"] for side in ("llmc", "llamacpp")
            if r.get(side + "_roofline_frac", 0) > 1.0]
    if over:
        log("ERROR: decode above its roofline (the bound is not one): " + "; ".join(over))
        return 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
