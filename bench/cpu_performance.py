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
roofline = triad bandwidth at the bench's thread count / bytes one decode
step reads (every weight matrix once, the embedding one row unless it is the
LM head, plus the KV cache averaged over the tgN positions: f32 for llmc,
f16 for llama.cpp).

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
# The issue's targets, reported (never asserted).
TARGET_DECODE_RATIO, TARGET_PREFILL_RATIO, TARGET_ROOFLINE = 1.2, 1.0, 0.75


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


def random_llama_gguf(path, qtype_name, shape, seed=1234):
    """A llama-architecture GGUF of the given shape whose matrices are random
    blocks of qtype (random codes, fp16 scales of a realistic size), norms
    ones, and a synthetic 32000-piece SentencePiece-style vocabulary."""
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFWriter, GGML_QUANT_SIZES, TokenType

    qtype = GGMLQuantizationType[qtype_name]
    block, block_bytes = GGML_QUANT_SIZES[qtype]
    # Weight std ~0.02: Q8_0 codes are uniform int8 (std ~74), Q4_0 codes
    # uniform in -8..7 (std ~4.6); Q4_K: d * 6-bit scale (mean ~32) * codes
    # 0..15 (std ~4.6) minus dmin * 6-bit min.
    scale = {"Q8_0": 0.02 / 74.0, "Q4_0": 0.02 / 4.6, "Q4_K": 0.02 / (32 * 4.6)}[qtype_name]
    rng = np.random.default_rng(seed)
    H, L, NH, KV = shape["hidden"], shape["layers"], shape["heads"], shape["kv_heads"]
    FF, V, hd = shape["intermediate"], shape["vocab"], shape["hidden"] // shape["heads"]

    def qmatrix(rows, cols):
        nb = cols // block
        b = rng.integers(0, 256, size=(rows, nb, block_bytes), dtype=np.uint8)
        d = (scale * rng.uniform(0.5, 1.5, size=(rows, nb))).astype(np.float16)
        b[:, :, 0:2] = d.view(np.uint8).reshape(rows, nb, 2)
        if qtype_name == "Q4_K":  # dmin: the mins centre the codes (~7.5 * sc * d)
            dmin = (scale * 7.5 * rng.uniform(0.5, 1.5, size=(rows, nb))).astype(np.float16)
            b[:, :, 2:4] = dmin.view(np.uint8).reshape(rows, nb, 2)
        return b.reshape(rows, nb * block_bytes)

    tmp = path + ".tmp"
    w = GGUFWriter(tmp, "llama")
    w.add_name("TinyLlama-1.1B-shape-random")
    w.add_context_length(shape["context"])
    w.add_embedding_length(H)
    w.add_block_count(L)
    w.add_feed_forward_length(FF)
    w.add_head_count(NH)
    w.add_head_count_kv(KV)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type({"Q8_0": 7, "Q4_0": 2, "Q4_K": 14}[qtype_name])
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    tokens += [f"\u2581t{i}" for i in range(V - len(tokens))]
    types = ([TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL] + [TokenType.BYTE] * 256
             + [TokenType.NORMAL] * (V - 259))
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([-float(i) for i in range(V)])
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    ones = np.ones(H, dtype=np.float32)
    w.add_tensor("token_embd.weight", qmatrix(V, H), raw_dtype=qtype)
    for l in range(L):
        p = f"blk.{l}."
        w.add_tensor(p + "attn_norm.weight", ones)
        w.add_tensor(p + "attn_q.weight", qmatrix(NH * hd, H), raw_dtype=qtype)
        w.add_tensor(p + "attn_k.weight", qmatrix(KV * hd, H), raw_dtype=qtype)
        w.add_tensor(p + "attn_v.weight", qmatrix(KV * hd, H), raw_dtype=qtype)
        w.add_tensor(p + "attn_output.weight", qmatrix(H, NH * hd), raw_dtype=qtype)
        w.add_tensor(p + "ffn_norm.weight", ones)
        w.add_tensor(p + "ffn_gate.weight", qmatrix(FF, H), raw_dtype=qtype)
        w.add_tensor(p + "ffn_up.weight", qmatrix(FF, H), raw_dtype=qtype)
        w.add_tensor(p + "ffn_down.weight", qmatrix(H, FF), raw_dtype=qtype)
    w.add_tensor("output_norm.weight", ones)
    w.add_tensor("output.weight", qmatrix(V, H), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, path)


def tinyllama_gguf(work, qtype):
    path = os.path.join(work, f"tinyllama-shape-random.{qtype}.gguf")
    if not os.path.isfile(path):
        log(f"writing the random TinyLlama-shape {qtype} GGUF {path}")
        random_llama_gguf(path, qtype, TINYLLAMA)
    return path


def gguf_decode_bytes(path):
    """Bytes one llama.cpp decode step reads from the weights (every tensor
    once; token_embd one row when a separate output.weight exists) and the
    f16 KV cache bytes per cached position."""
    from gguf import GGUFReader
    r = GGUFReader(path)
    names = {t.name for t in r.tensors}
    total = 0
    for t in r.tensors:
        nb = int(t.n_bytes)
        if t.name == "token_embd.weight" and "output.weight" in names:
            nb //= int(t.shape[-1])  # ggml shape: [cols, rows]
        total += nb
    arch = r.fields["general.architecture"].contents()
    get = lambda k: r.fields[f"{arch}.{k}"].contents() if f"{arch}.{k}" in r.fields else None
    layers, heads = int(get("block_count")), int(get("attention.head_count"))
    kv = int(get("attention.head_count_kv") or heads)
    hd = int(get("attention.key_length") or get("embedding_length") // heads)
    return total, 2 * layers * kv * hd * 2


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
        row["llmc_roofline_tok_s"] = bw * 1e9 / b
        row["llmc_roofline_frac"] = lc["decode_tok_s"] / row["llmc_roofline_tok_s"]
    if "llamacpp" in row:
        wb, kvb = gguf_decode_bytes(gguf)
        b = wb + kvb * mean_ctx
        row["llamacpp_bytes_per_token"] = b
        row["llamacpp_roofline_tok_s"] = bw * 1e9 / b
        if row["llamacpp"].get("decode_tok_s"):
            row["llamacpp_roofline_frac"] = row["llamacpp"]["decode_tok_s"] / row["llamacpp_roofline_tok_s"]
    if "llmc" in row and "llamacpp" in row:
        for k in ("prefill_tok_s", "decode_tok_s", "load_s"):
            a, b = row["llmc"].get(k), row["llamacpp"].get(k)
            row[f"ratio_{k}"] = a / b if a and b else None
        a, b = row["llmc"]["peak_rss_mb_outside"], row["llamacpp"]["peak_rss_mb"]
        row["ratio_peak_rss_mb"] = a / b if a and b else None
    result_rows.append(row)


def fmt(v, spec=".1f", none="—"):
    return none if v is None else format(v, spec)


def markdown(res):
    a = res["args"]
    m = res["machine"]
    L = ["# CPU performance: llmc vs llama.cpp", "",
         "Generated by `bench/cpu_performance.py` — do not edit by hand; rerun it.", ""]
    if a["quick"]:
        L += ["**Smoke run (--quick): SmolLM2 Q4_0 only, tiny prompt and decode, one repetition. "
              "Run `bench/cpu_performance.py` without --quick on an idle machine for the real "
              "measurement.**", ""]
    L += [f"- Command: `{res['command']}`",
         f"- Date: {res['date']}",
         f"- llmc commit: {res['git_commit']}",
         f"- llama.cpp: {res['llamacpp_version']}",
         f"- Machine: {m.get('cpu')}, {m.get('cpus')} CPUs, L2 {m.get('l2', '?')}, "
         f"L3 {m.get('l3', '?')}, {m.get('mem_gib')} GiB RAM, SIMD {m.get('simd', '?')}"
         + (f", {m['hypervisor']} guest" if m.get("hypervisor") else "") + f", Linux {m.get('kernel')}",
         f"- Load average (1 min) at start / end: {m['loadavg_start']:.2f} / {m['loadavg_end']:.2f}"
         + (" — **the machine was busy: these numbers are not representative**"
            if max(m["loadavg_start"], m["loadavg_end"]) > a["threads"] + 0.5 else ""),
         f"- Settings: {a['threads']} threads, prefill pp{a['p']}, decode tg{a['n']}, "
         f"median of {a['reps']} repetition(s) each" + (" (**--quick smoke run**)" if a["quick"] else ""),
         "", "## Memory bandwidth (STREAM triad, bench/stream_triad.cpp)", "",
         "| Threads | Triad GB/s | Read-only GB/s |", "|---:|---:|---:|"]
    for t, s in sorted(res["stream"].items(), key=lambda kv: int(kv[0])):
        L.append(f"| {t} | {s['triad_gbs']:.2f} | {s['read_gbs']:.2f} |")
    L += ["", f"Arrays of {next(iter(res['stream'].values()))['mib_per_array']} MiB each "
          "(3 arrays, far beyond the L3); best of "
          f"{next(iter(res['stream'].values()))['passes']} passes; GB = 1e9 bytes. "
          "The rooflines below use the triad figure at the bench's thread count.", "",
          "## Speed (tokens/s, higher is better)", "",
          "| Model | Format (llmc / llama.cpp) | bpw | Prefill llmc | Prefill llama.cpp | ratio "
          "| Decode llmc | Decode llama.cpp | ratio | Decode roofline | llmc % roofline "
          "| llama.cpp % roofline |",
          "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in res["rows"]:
        lc, lb = r.get("llmc", {}), r.get("llamacpp", {})
        fmt_name = r["format"] + (f" / {r['llamacpp_format']}" if r.get("llamacpp_format") else "")
        err = r.get("llmc_error") or r.get("llamacpp_error")
        if err and not lc and not lb:
            L.append(f"| {r['model']} | {fmt_name} | failed: {err} |||||||||")
            continue
        L.append(
            f"| {r['model']} | {fmt_name} | {fmt(lc.get('bpw'), '.2f')} / {fmt(lb.get('bpw'), '.2f')} "
            f"| {fmt(lc.get('prefill_tok_s'))} | {fmt(lb.get('prefill_tok_s'))} "
            f"| {fmt(r.get('ratio_prefill_tok_s'), '.2f')} "
            f"| {fmt(lc.get('decode_tok_s'))} | {fmt(lb.get('decode_tok_s'))} "
            f"| {fmt(r.get('ratio_decode_tok_s'), '.2f')} | {fmt(r.get('llmc_roofline_tok_s'))} "
            f"| {fmt(100 * r['llmc_roofline_frac'] if 'llmc_roofline_frac' in r else None, '.0f')} "
            f"| {fmt(100 * r['llamacpp_roofline_frac'] if 'llamacpp_roofline_frac' in r else None, '.0f')} |")
    L += ["", "## Load time and memory", "",
          "| Model | Format | Size MiB (llmc / llama.cpp) | Load s llmc | Load s llama.cpp "
          "| Peak RSS MiB llmc | Peak RSS MiB llama.cpp | RSS ratio |",
          "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in res["rows"]:
        lc, lb = r.get("llmc", {}), r.get("llamacpp", {})
        if not lc and not lb:
            continue
        mib = lambda v: None if v is None else v / 2**20
        L.append(f"| {r['model']} | {r['format']} | {fmt(mib(lc.get('size_bytes')))} / "
                 f"{fmt(mib(lb.get('size_bytes')))} | {fmt(lc.get('load_s'), '.3f')} "
                 f"| {fmt(lb.get('load_s'), '.3f')} | {fmt(lc.get('peak_rss_mb_outside'))} "
                 f"| {fmt(lb.get('peak_rss_mb'))} | {fmt(r.get('ratio_peak_rss_mb'), '.2f')} |")
    exact_rows = [r for r in res["rows"] if "llmc_exact" in r and "llmc" in r]
    if exact_rows:
        L += ["", "## Int8 activations vs f32 activations", "",
              "llmc's kernel engine quantizes the activations of products with 32-weight block "
              "formats (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) to int8 per 32 values and runs integer "
              "dots, from eight-row interleaved weight copies for Q8_0/Q4_0/Q4_1 and llmc's "
              "grouped integers gq4s/gq4a/gq8s with groups of 32k (as llama.cpp does with its "
              "Q8_0 activations and repacked Q4_0). `--exact-activations` keeps "
              "f32 activations (what the reference engine computes). The table above is the "
              "default (int8); this is the same artifact both ways.", "",
              "| Model | Format | prefill int8 | prefill f32 | int8 / f32 | decode int8 "
              "| decode f32 | int8 / f32 |",
              "|---|---|---:|---:|---:|---:|---:|---:|"]
        for r in exact_rows:
            lc, e = r["llmc"], r["llmc_exact"]
            rp = lc["prefill_tok_s"] / e["prefill_tok_s"] if e.get("prefill_tok_s") else None
            rd = lc["decode_tok_s"] / e["decode_tok_s"] if e.get("decode_tok_s") else None
            L.append(f"| {r['model']} | {r['format']} | {fmt(lc.get('prefill_tok_s'))} "
                     f"| {fmt(e.get('prefill_tok_s'))} | {fmt(rp, '.2f')} "
                     f"| {fmt(lc.get('decode_tok_s'))} | {fmt(e.get('decode_tok_s'))} "
                     f"| {fmt(rd, '.2f')} |")
    gen_rows = [r for r in res["rows"] if "llmc_lib" in r and "llmc" in r]
    if gen_rows:
        L += ["", "## Generated kernels and compile time", "",
              "The same artifact run by the kernel engine with its generated kernels (the "
              "default: the model-specialised kernels stored in the artifact, for every "
              "product in a generated format and every other op: embedding, RMSNorm, SiLU "
              "gate, RoPE, attention) and with the runtime's library kernels "
              "(`--library-kernels`). Compile: `llmc compile` wall time, lowering and kernel "
              "generation (two instruction-set levels) included.", "",
              "| Model | Format | prefill library | prefill generated | generated / library "
              "| decode library | decode generated | generated / library | generated kernels "
              "| compile s |",
              "|---|---|---:|---:|---:|---:|---:|---:|---|---:|"]
        for r in gen_rows:
            lc, g = r["llmc_lib"], r["llmc"]
            rp = g["prefill_tok_s"] / lc["prefill_tok_s"] if lc.get("prefill_tok_s") else None
            rd = g["decode_tok_s"] / lc["decode_tok_s"] if lc.get("decode_tok_s") else None
            L.append(f"| {r['model']} | {r['format']} "
                     f"| {fmt(lc.get('prefill_tok_s'))} | {fmt(g.get('prefill_tok_s'))} "
                     f"| {fmt(rp, '.2f')} "
                     f"| {fmt(lc.get('decode_tok_s'))} | {fmt(g.get('decode_tok_s'))} "
                     f"| {fmt(rd, '.2f')} | {g.get('generated_kernels', '?')} "
                     f"| {fmt(r.get('llmc_compile_s'), '.1f')} |")
    errs = [(r["model"], r["format"], k, r[k]) for r in res["rows"]
            for k in ("llmc_error", "llmc_lib_error", "llmc_exact_error", "llamacpp_error")
            if k in r]
    if errs:
        L += ["", "Failures:", ""] + [f"- {m_} {f_} ({k.split('_')[0]}): {e}" for m_, f_, k, e in errs]
    # Targets (reported, not asserted).
    L += ["", "## Against the targets", "",
          f"Targets of the CPU-runtime issue: decode >= {TARGET_DECODE_RATIO}x llama.cpp at equal "
          f"bpw (8 and 4 bit), prefill >= {TARGET_PREFILL_RATIO}x, decode >= "
          f"{TARGET_ROOFLINE:.0%} of the roofline.", "",
          "| Model | Format | decode ratio | prefill ratio | % roofline | met |",
          "|---|---|---:|---:|---:|---|"]
    for r in res["rows"]:
        if r["format"] == "F32" or "ratio_decode_tok_s" not in r:
            continue
        d, p_, f = r.get("ratio_decode_tok_s"), r.get("ratio_prefill_tok_s"), r.get("llmc_roofline_frac")
        met = [name for ok, name in ((d and d >= TARGET_DECODE_RATIO, "decode"),
                                     (p_ and p_ >= TARGET_PREFILL_RATIO, "prefill"),
                                     (f and f >= TARGET_ROOFLINE, "roofline")) if ok]
        L.append(f"| {r['model']} | {r['format']} | {fmt(d, '.2f')} | {fmt(p_, '.2f')} "
                 f"| {fmt(100 * f if f else None, '.0f')} | {', '.join(met) or 'none'} |")
    L += ["", "## What is measured", "",
          "- Both sides run the same weights: SmolLM2 rows start from the F32 GGUF that "
          "dequantizes the Q4_1 source (bench/llamacpp_quants.py). llmc quantizes it with "
          "`llm-quantize-rtn` (Q8_0, Q4_0) or `llm-quantize{method=rtn}` (gq4*), llama.cpp with "
          "`llama-quantize --pure` (every matrix, the tied embedding / LM head included, in the "
          "named type; without --pure it would be Q6_K). gq4s_g32 and gq4a_g64 are llmc's own "
          "4.5-bpw formats, compared with llama.cpp's Q4_0 (4.5 bpw). Q4_K_M is llama.cpp's usual "
          "mix as llama-quantize picks it per tensor (no --pure), and llmc compiles that same "
          "GGUF. TinyLlama-shape rows use "
          "random Q8_0 / Q4_0 / Q4_K blocks written by gguf-py (Q4_K: the 6-bit scales and mins random too), which llmc compiles unchanged.",
          "- bpw = 8 x (all tensor bytes) / (all parameters), norms included, each side from its "
          "own file (llmc: `llmc bench`; llama.cpp: llama-bench's model_size / model_n_params).",
          "- Prefill: one forward of a P-token prompt from an empty KV cache (llmc: BOS then a "
          "fixed pseudo-random id sequence; llama-bench: BOS then random ids), median of the "
          "repetitions (llama-bench's own figure is the mean; its samples give the median used "
          "here). Decode: N one-token steps at positions 0..N-1 from an empty KV cache (llmc "
          "feeds back its greedy token, llama-bench random ids), median of the repetitions. "
          "Both warm up once before measuring.",
          "- Load: llmc = open + checksum verification of every tensor + executor set-up, as "
          "`llmc run` reports; llama.cpp = the \"load time\" of llama_perf_context_print (model "
          "load from the mmap'd file, no verification, weight repacking for its CPU kernels, "
          "context set-up, up to the end of the first evaluation) in a separate "
          "`llama-bench -p 1 -n 0 -r 1 --no-warmup -v` run, less that 1-token evaluation's "
          "own time.",
          "- Peak RSS: the benchmark process's ru_maxrss as GNU time (`/usr/bin/time -f %M`) "
          "reports it, over the whole run (load, warm-up, every repetition), both sides; file "
          "pages of the mmap'd weights count once touched, and so do the pages of the "
          "binaries and their shared libraries (`llmc --version` alone: "
          f"{fmt(res.get('baseline_rss_mb', {}).get('llmc'))} MiB, `llama-bench --help` alone: "
          f"{fmt(res.get('baseline_rss_mb', {}).get('llama-bench'))} MiB). `llmc bench` also "
          "reports its own peak (VmHWM, in the raw JSON).",
          "- Roofline: STREAM triad GB/s / bytes per decode step, where the bytes are every weight "
          "tensor once (matrices and norms; the token embedding one row unless it is also the "
          "LM head, as in SmolLM2) plus the KV cache at the average position of the tgN test "
          "((N+1)/2 cached positions x layers x KV width x K and V: f32 for llmc, f16 for "
          "llama.cpp). Activations and logits are not counted. Caches are ignored, so a model "
          "that fits in the L3 (32 MiB here) could exceed it.",
          ""]
    return "\n".join(L)


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
    bw = res["stream"][str(args.threads)]["triad_gbs"]

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

    if not args.no_tinyllama:
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
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
