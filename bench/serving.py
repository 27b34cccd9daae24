#!/usr/bin/env python3
"""Regenerate docs/results/serving.md: the load and fault test of
`llmc-rt serve` against llama.cpp's own `llama-server`, on the same
model (SmolLM2-135M-Instruct Q4_1: llama-server reads the shipped GGUF,
llmc compiles it to a signed artifact), the same threads, the same load,
in the same run. Loopback only; bounded in requests and in time.

Load: for each concurrency C (default 1, 4, 16, 64), C clients send
max(2C, 16) streamed /v1/completions requests in all (each client one at a
time) with mixed prompt lengths (slices of data/long/licenses.txt of 200
to 2000 characters, ~50-500 tokens) and mixed output lengths (32 to 128
tokens), greedy, `ignore_eos` so both servers generate exactly max_tokens.
Reported per C: generated tokens/s over the phase's wall time, aggregate
decode tokens/s (tokens after each request's first, over the time at least
one request was decoding), time to
first token and inter-token latency (gaps between streamed chunks) p50 and
p99, and the server's peak RSS (VmHWM) so far.

Steady decode: C clients (1, and 16 when 16 is a level) each send one
request at the same moment (a 200-character prompt, 256 tokens out); the
aggregate decode tokens/s is counted over the window in which every one of
them is decoding (from the last first token to the first last token), so
no prefill falls inside it: the "decode throughput at C concurrent
sequences" of the targets, where the mixed load above also charges the
decoders for other requests' prefill.

Faults, then health: malformed JSON, a body past the server's limit, a
slow client trickling its body while normal requests run, abrupt
disconnects mid-stream (RST), a garbage non-HTTP client; after them the
server must answer /health, hold no running sequence, and give the same
greedy text as before the faults.

Usage: python3 bench/serving.py [--concurrency 1,4,16,64] [--threads 2]
       [--kv-type f16|f32|q8_0] [--only llmc|llama] [--out FILE]
(docs/results/serving-q8_0.md: --kv-type q8_0 --out docs/results/serving-q8_0.md,
both servers with q8_0 KV rows.)
Needs build/bin/llmc, build/bin/llmc-rt and llama-server
(scripts/build_llamacpp.sh). Only the Python standard library is needed.
"""
import argparse
import datetime
import http.client
import json
import os
import re
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_common  # noqa: E402
import cpu_performance as cp  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "docs", "results", "serving.md")
MODEL = os.path.join(REPO, ".cache", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
TEXT = os.path.join(REPO, "data", "long", "licenses.txt")
HOST = "127.0.0.1"
CTX_PER_SEQ = 1024
PROMPT_CHARS = (200, 600, 1200, 2000)
OUTPUT_TOKENS = (32, 64, 128, 96)
LEVEL_TIMEOUT_S = 900
REQUESTS_MIN = 16  # requests of a level with few clients
STEADY_PROMPT_CHARS = 200
STEADY_TOKENS = 256
STEADY_REPS = 5  # the steady phase's figure is the median of its reps


def log(msg):
    print(f"[serving {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class ServerProcess:
    """A server under test: started, waited for, measured, stopped."""

    def __init__(self, name, cmd, port=None, port_from_log=None):
        self.name, self.cmd = name, cmd
        self.log_lines = []
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, errors="replace")
        self.port = port
        self._reader = threading.Thread(target=self._read, args=(port_from_log,), daemon=True)
        self._reader.start()
        deadline = time.time() + 300
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{name} exited {self.proc.returncode}: "
                                   f"{' | '.join(self.log_lines[-5:])}")
            if self.port and self.get("/health")[0] == 200:
                return
            time.sleep(0.2)
        raise RuntimeError(f"{name} did not become healthy in 300 s")

    def _read(self, port_from_log):
        for line in self.proc.stdout:
            self.log_lines.append(line.rstrip())
            if port_from_log and not self.port:
                m = re.search(port_from_log, line)
                if m:
                    self.port = int(m.group(1))

    def get(self, path):
        try:
            c = http.client.HTTPConnection(HOST, self.port, timeout=10)
            c.request("GET", path)
            r = c.getresponse()
            body = r.read().decode(errors="replace")
            c.close()
            return r.status, body
        except OSError:
            return 0, ""

    def peak_rss_mib(self):
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            pass
        return float("nan")

    def running_sequences(self):
        """Sequences the server still runs (its own metric), or None."""
        status, body = self.get("/metrics")
        if status != 200:
            return None
        for name in ("llmc_running_sequences", "llamacpp:requests_processing"):
            m = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.e+-]+)$", body, re.M)
            if m:
                return float(m.group(1))
        return None

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self.proc.returncode


def request_body(i, text):
    chars = PROMPT_CHARS[i % len(PROMPT_CHARS)]
    start = (i * 7919) % (len(text) - chars - 1)
    return {"model": "m", "prompt": text[start:start + chars],
            "max_tokens": OUTPUT_TOKENS[(i // len(PROMPT_CHARS)) % len(OUTPUT_TOKENS)],
            "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}


def streamed_completion(port, body, timeout=600, spans=None):
    """One streamed completion: (tokens, ttft_s, chunk gaps, text). With a
    list `spans`, appends (first chunk, last chunk, tokens after the first
    chunk) on the perf_counter clock: the request's decode interval."""
    c = http.client.HTTPConnection(HOST, port, timeout=timeout)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]!r}")
    times, parts, usage = [], [], None
    while True:
        line = r.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            break
        j = json.loads(data)
        if j.get("usage"):
            usage = j["usage"]
        choices = j.get("choices") or []
        if choices and choices[0].get("text"):
            times.append(time.perf_counter())
            parts.append(choices[0]["text"])
    c.close()
    if not times:
        raise RuntimeError("no tokens streamed")
    tokens = usage["completion_tokens"] if usage else len(times)
    gaps = [b - a for a, b in zip(times, times[1:])]
    if isinstance(spans, dict):
        spans["chunks"] = times
        spans["tokens"] = tokens
    elif spans is not None and len(times) > 1:
        spans.append((times[0], times[-1], tokens - 1))
    return tokens, times[0] - t0, gaps, "".join(parts)


def decode_tok_s(spans):
    """Aggregate decode throughput: tokens generated after each request's
    first token, over the time during which at least one request was
    decoding (the union of the requests' first-to-last chunk intervals).
    Prefill steps of other requests inside those intervals count as time."""
    busy, end = 0.0, float("-inf")
    for a, b, _ in sorted(spans):
        if b > end:
            busy += b - max(a, end)
            end = b
    return sum(n for _, _, n in spans) / busy if busy > 0 else float("nan")


def percentile(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def load_level(server, clients, text):
    """C clients, max(2C, REQUESTS_MIN) requests in all; returns the level's
    figures."""
    n_req = max(2 * clients, REQUESTS_MIN)
    results, errors, spans, lock = [], [], [], threading.Lock()
    next_i = iter(range(n_req))

    def client():
        while True:
            with lock:
                i = next(next_i, None)
            if i is None:
                return
            body = request_body(i, text)
            try:
                tokens, ttft, gaps, _ = streamed_completion(server.port, body, spans=spans)
                with lock:
                    if tokens != body["max_tokens"]:
                        errors.append(f"request {i}: {tokens} tokens, asked {body['max_tokens']}")
                    results.append((tokens, ttft, gaps))
            except Exception as e:  # noqa: BLE001 - reported, not hidden
                with lock:
                    errors.append(f"request {i}: {e}")

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(LEVEL_TIMEOUT_S)
    wall = time.perf_counter() - t0
    if any(t.is_alive() for t in threads):
        errors.append(f"level did not finish in {LEVEL_TIMEOUT_S} s")
    tokens = sum(r[0] for r in results)
    ttfts = [r[1] for r in results]
    gaps = [g for r in results for g in r[2]]
    return {"clients": clients, "requests": n_req, "done": len(results), "errors": errors,
            "tokens": tokens, "wall_s": wall, "tok_s": tokens / wall if wall else 0.0,
            "decode_tok_s": decode_tok_s(spans),
            "ttft_p50": percentile(ttfts, 0.5), "ttft_p99": percentile(ttfts, 0.99),
            "itl_p50": percentile(gaps, 0.5), "itl_p99": percentile(gaps, 0.99),
            "rss_mib": server.peak_rss_mib()}


def steady_once(server, clients, text):
    """C simultaneous requests of STEADY_TOKENS tokens; decode tok/s over the
    window in which all C are decoding (tokens counted by chunk, each
    chunk weighted by its request's tokens per chunk)."""
    records = [dict() for _ in range(clients)]
    errors, barrier = [], threading.Barrier(clients)

    def client(k):
        start = (k * 7919) % (len(text) - STEADY_PROMPT_CHARS - 1)
        body = {"model": "m", "prompt": text[start:start + STEADY_PROMPT_CHARS],
                "max_tokens": STEADY_TOKENS, "temperature": 0, "ignore_eos": True,
                "stream": True, "stream_options": {"include_usage": True}}
        barrier.wait()
        try:
            streamed_completion(server.port, body, spans=records[k])
        except Exception as e:  # noqa: BLE001 - reported, not hidden
            errors.append(f"steady request {k}: {e}")

    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(LEVEL_TIMEOUT_S)
    if errors or any(len(r.get("chunks", ())) < 2 for r in records):
        return {"tok_s": float("nan"), "window_s": 0.0, "errors": errors or ["no chunks"]}
    lo = max(r["chunks"][0] for r in records)
    hi = min(r["chunks"][-1] for r in records)
    if hi <= lo:
        return {"tok_s": float("nan"), "window_s": 0.0, "errors": ["no common decode window"]}
    tokens = 0.0
    for r in records:
        per_chunk = (r["tokens"] - 1) / (len(r["chunks"]) - 1)
        tokens += per_chunk * sum(1 for t in r["chunks"][1:] if lo < t <= hi)
    return {"tok_s": tokens / (hi - lo), "window_s": hi - lo, "errors": []}


def steady_levels(server, levels, text):
    """STEADY_REPS rounds, each running every level once, one after another:
    the machine's speed drifts over minutes (a shared VM), so a level's reps
    are spread over the same stretch of time as the others', and a round's
    levels can be compared with each other (paired ratios)."""
    reps = {c: [] for c in levels}
    for i in range(STEADY_REPS):
        for c in levels:
            reps[c].append(steady_once(server, c, text))
            log(f"  round {i + 1}, {c} clients: {reps[c][-1]['tok_s']:.1f} tok/s")
    out = []
    for c in levels:
        ok = [r["tok_s"] for r in reps[c] if not r["errors"]]
        out.append({"clients": c, "reps": [r["tok_s"] for r in reps[c]],
                    "tok_s": statistics.median(ok) if ok else float("nan"),
                    "window_s": statistics.median(r["window_s"] for r in reps[c]),
                    "errors": [e for r in reps[c] for e in r["errors"]]})
    return out


def paired_ratio(by_c, hi, lo):
    """Median over rounds of (hi clients' tok/s) / (lo clients' tok/s) in
    the same round, and the per-round ratios."""
    ratios = [a / b for a, b in zip(by_c[hi]["reps"], by_c[lo]["reps"])
              if b > 0 and a == a and b == b]
    return (statistics.median(ratios) if ratios else float("nan")), ratios


#===- faults -------------------------------------------------------------===#

def status_line(s, data=b""):
    """Reads until the end of the response's first line; returns it."""
    while b"\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    s.close()
    return data.split(b"\r\n", 1)[0].decode(errors="replace") or "connection closed, no response"


def guarded(exchange):
    """What happened, as text, when an exchange failed at the socket level."""
    try:
        return exchange()
    except ConnectionResetError:
        return "connection reset"
    except socket.timeout:
        return "no response in time"
    except OSError as e:
        return f"error: {e}"


def raw_exchange(port, payload, read=True, timeout=30):
    """Sends raw bytes; returns the response's status line (or what happened),
    or with read=False the open socket."""
    def exchange():
        s = socket.create_connection((HOST, port), timeout=timeout)
        s.sendall(payload)
        return status_line(s) if read else s
    return guarded(exchange)


def post_status(port, body_bytes):
    """POSTs a body; a server may answer (e.g. 413) before it has all of it."""
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body_bytes)}\r\nConnection: close\r\n\r\n").encode()

    def exchange():
        s = socket.create_connection((HOST, port), timeout=60)
        s.sendall(head)
        s.settimeout(0.5)
        data = b""
        try:
            data = s.recv(4096)  # an early answer to the headers alone
        except socket.timeout:
            pass
        s.settimeout(60)
        if not data:
            try:
                for i in range(0, len(body_bytes), 1 << 20):
                    s.sendall(body_bytes[i:i + (1 << 20)])
            except OSError:
                pass  # closed while we were sending: read what it said
        return status_line(s, data)
    return guarded(exchange)


def fault_malformed(server):
    return post_status(server.port, b'{"prompt": "Hello", "max_tokens": 4,')


def fault_oversized(server):
    """64 MiB of JSON: a short prompt and a huge unknown field (cheap to serve
    for a server that takes it, so only the size is tested)."""
    body = json.dumps({"prompt": "Hello", "max_tokens": 1, "padding": "x" * (64 << 20)}).encode()
    return post_status(server.port, body)


def fault_slow_client(server, text):
    """A client that sends its headers and then one body byte per 0.25 s for
    5 s, while 4 normal requests run; returns what the normal ones saw."""
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
            f"Content-Length: 100000\r\n\r\n").encode()
    slow = raw_exchange(server.port, head, read=False)
    if isinstance(slow, str):
        return f"could not connect: {slow}"
    done, errs = [], []

    def normal(i):
        try:
            body = dict(request_body(i, text), max_tokens=32)
            t0 = time.perf_counter()
            streamed_completion(server.port, body, timeout=120)
            done.append(time.perf_counter() - t0)
        except Exception as e:  # noqa: BLE001
            errs.append(str(e))

    ts = [threading.Thread(target=normal, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    cut = "kept open"
    for _ in range(20):
        try:
            slow.sendall(b" ")
        except OSError:
            cut = "closed by the server"
            break
        time.sleep(0.25)
    for t in ts:
        t.join(180)
    slow.close()
    if errs:
        return f"normal requests failed: {errs[0]}"
    return f"4/4 normal requests served (max {max(done):.1f} s) while the slow one trickled ({cut})"


def fault_disconnects(server, text, n=8):
    """n streamed requests dropped with a TCP reset after their first chunk."""
    def one(i):
        body = dict(request_body(i, text), max_tokens=200)
        data = json.dumps(body).encode()
        head = (f"POST /v1/completions HTTP/1.1\r\nHost: {HOST}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n").encode()
        try:
            s = socket.create_connection((HOST, server.port), timeout=120)
            s.sendall(head + data)
            got = b""
            while got.count(b"data:") < 1:
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
        except OSError:
            pass

    ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(180)
    deadline, running = time.time() + 30, None
    while time.time() < deadline:
        running = server.running_sequences()
        if running == 0:
            break
        time.sleep(0.5)
    waited = 30 - max(0.0, deadline - time.time())
    if running is None:
        return f"{n} dropped; running sequences not reported"
    return (f"{n} dropped; running sequences {running:g} after {waited:.1f} s"
            + ("" if running == 0 else " (NOT freed)"))


def fault_garbage(server):
    return raw_exchange(server.port, os.urandom(4096) + b"\r\n\r\n")


def reference_text(server, text):
    body = dict(request_body(1, text), max_tokens=32, stream=False)
    body.pop("stream_options")
    c = http.client.HTTPConnection(HOST, server.port, timeout=120)
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    j = json.loads(r.read())
    c.close()
    return j["choices"][0]["text"] if r.status == 200 else f"HTTP {r.status}"


def run_faults(server, text):
    before = reference_text(server, text)
    out = [("malformed JSON", fault_malformed(server)),
           ("64 MiB body (a huge unknown field)", fault_oversized(server)),
           ("slow client (1 byte / 0.25 s)", fault_slow_client(server, text)),
           ("8 abrupt disconnects mid-stream (RST)", fault_disconnects(server, text)),
           ("4 KiB of random bytes", fault_garbage(server))]
    status, _ = server.get("/health")
    after = reference_text(server, text)
    out.append(("then: /health", str(status)))
    out.append(("then: greedy text equals the one before the faults",
                "yes" if after == before else f"NO ({before[:40]!r} vs {after[:40]!r})"))
    return out


#===- servers ------------------------------------------------------------===#

def start_llmc(llmc_rt, art, threads, slots, kv_type):
    cmd = [llmc_rt, "serve", art, "--host", HOST, "--port", "0", "-t", str(threads),
           "--max-batch", str(slots), "--max-queue", "256", "-c", str(CTX_PER_SEQ),
           "--kv-type", kv_type, "-q"]
    return ServerProcess("llmc", cmd, port_from_log=r"on http://[^:]+:(\d+)")


def llama_cache_flags(kv_type):
    """llama-server's KV cache at llmc's row type where it has one: q8_0 keys and
    values (a quantized V cache needs its flash attention); else its default f16."""
    return ["-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on"] if kv_type == "q8_0" else []


def start_llama(bin_dir, threads, slots, kv_type):
    port = free_port()
    cmd = [os.path.join(bin_dir, "llama-server"), "-m", MODEL, "--host", HOST,
           "--port", str(port), "-t", str(threads), "-tb", str(threads),
           "--parallel", str(slots), "-c", str(slots * CTX_PER_SEQ), "--metrics",
           "--no-webui", *llama_cache_flags(kv_type)]
    return ServerProcess("llama-server", cmd, port=port)


def measure(server, levels, text):
    log(f"{server.name}: warm-up")
    streamed_completion(server.port, request_body(0, text))
    rows = []
    for c in levels:
        log(f"{server.name}: {c} concurrent clients")
        rows.append(load_level(server, c, text))
        r = rows[-1]
        log(f"  {r['tokens']} tokens in {r['wall_s']:.1f} s = {r['tok_s']:.1f} tok/s, "
            f"{len(r['errors'])} errors")
    log(f"{server.name}: steady decode")
    steady = steady_levels(server, [1] + ([16] if 16 in levels else []), text)
    for st in steady:
        log(f"  {st['clients']} clients: {st['tok_s']:.1f} tok/s (reps {st['reps']})")
    log(f"{server.name}: faults")
    faults = run_faults(server, text)
    rows_rss = server.peak_rss_mib()
    rc = server.stop()
    return {"rows": rows, "steady": steady, "faults": faults, "exit": rc, "rss_mib": rows_rss,
            "cmd": " ".join(os.path.basename(a) if a.startswith("/") else a
                            for a in server.cmd)}


def render(args, levels, res, machine, llama_version, t0):
    fmt_ms = lambda s: f"{1000 * s:.0f}"  # noqa: E731
    L = ["# Serving: `llmc-rt serve` against `llama-server` under load and faults", "",
         "Generated by `bench/serving.py`; do not edit by hand, rerun it.", "",
         f"- Command: `python3 bench/serving.py --concurrency {args.concurrency} "
         f"--threads {args.threads} --kv-type {args.kv_type}"
         f"{'' if args.out == OUT else ' --out ' + os.path.relpath(args.out, REPO)}`",
         f"- Date: {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC; run took "
         f"{(time.time() - t0) / 60:.1f} min",
         f"- llmc commit: {bench_common.git_commit(REPO)}",
         f"- llama.cpp: {llama_version}",
         f"- Machine: {machine.get('cpu')}, {machine.get('cpus')} CPUs, SIMD "
         f"{machine.get('simd')}; load average at start {machine['loadavg_start']:.2f}, "
         f"at end {os.getloadavg()[0]:.2f}",
         f"- Model: SmolLM2-135M-Instruct Q4_1 (llama-server: the shipped GGUF; llmc: compiled "
         f"from it, signed, generated kernels); {args.threads} threads each; "
         f"{max(levels)} sequence slots each, {CTX_PER_SEQ} positions per sequence; KV cache "
         f"rows: llmc {args.kv_type}, llama-server "
         f"{'q8_0 (-ctk q8_0 -ctv q8_0, flash attention on)' if args.kv_type == 'q8_0' else 'f16 (its default)'}",
         f"- Load: C clients send max(2C, {REQUESTS_MIN}) streamed /v1/completions requests in all, one at a "
         f"time each; prompts of {'/'.join(map(str, PROMPT_CHARS))} characters of "
         f"data/long/licenses.txt (~50-500 tokens), outputs of "
         f"{'/'.join(map(str, OUTPUT_TOKENS))} tokens (greedy, ignore_eos)"]
    for name in res:
        L.append(f"- {name}: `{res[name]['cmd']}`")
    L += ["", "| Server | Clients | Requests ok | Generated tokens | Wall s | Generated tok/s | "
          "Decode tok/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | Peak RSS MiB |",
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in res.items():
        for row in r["rows"]:
            L.append(f"| {name} | {row['clients']} | {row['done']}/{row['requests']} | "
                     f"{row['tokens']} | {row['wall_s']:.1f} | {row['tok_s']:.1f} | "
                     f"{row['decode_tok_s']:.1f} | "
                     f"{fmt_ms(row['ttft_p50'])} | {fmt_ms(row['ttft_p99'])} | "
                     f"{fmt_ms(row['itl_p50'])} | {fmt_ms(row['itl_p99'])} | "
                     f"{row['rss_mib']:.0f} |")
    L.append("")
    if "llmc" in res and "llama-server" in res:
        L += ["| Clients | llmc / llama-server generated tok/s | llmc / llama-server decode "
              "tok/s |", "|---:|---:|---:|"]
        for a, b in zip(res["llmc"]["rows"], res["llama-server"]["rows"]):
            L.append(f"| {a['clients']} | {a['tok_s'] / b['tok_s']:.2f} | "
                     f"{a['decode_tok_s'] / b['decode_tok_s']:.2f} |")
        L.append("")
    steady = {n: {s["clients"]: s for s in r.get("steady", [])} for n, r in res.items()}
    if any(steady.values()):
        L += [f"Steady decode: C clients each send one request at once ({STEADY_PROMPT_CHARS}-"
              f"character prompt, {STEADY_TOKENS} tokens, greedy, ignore_eos); aggregate decode "
              "tok/s over the window in which all C are decoding (no prefill inside it); "
              f"median of {STEADY_REPS} reps, taken in rounds (1 client, then 16, then 1 "
              "again, ...) so that the VM's drift in speed reaches both alike.", "",
              "| Server | Clients | Decode tok/s | Reps | Window s |", "|---|---:|---:|---|---:|"]
        for name, by_c in steady.items():
            for c, s in by_c.items():
                L.append(f"| {name} | {c} | {s['tok_s']:.1f} | "
                         f"{', '.join(f'{x:.1f}' for x in s['reps'])} | {s['window_s']:.1f} |")
        L.append("")
    if "llmc" in res:
        rows = {r["clients"]: r for r in res["llmc"]["rows"]}
        mine = steady.get("llmc", {})
        if 1 in mine and 16 in mine:
            x, ratios = paired_ratio(mine, 16, 1)
            L.append(f"- **Target 1** (llmc's aggregate decode tok/s at 16 concurrent sequences ≥ 4× "
                     f"its single sequence's, steady decode): {x:.2f}× (median of the rounds' "
                     f"ratios {', '.join(f'{r:.2f}' for r in ratios)}; ratio of the medians "
                     f"{mine[16]['tok_s'] / mine[1]['tok_s']:.2f}×) — "
                     f"{'met' if x >= 4 else 'not met'}")
        if 1 in rows and 16 in rows:
            x = rows[16]["decode_tok_s"] / rows[1]["decode_tok_s"]
            g = rows[16]["tok_s"] / rows[1]["tok_s"]
            L.append(f"- Under the mixed load (other requests' prefill inside the decode "
                     f"intervals), 16 clients vs 1: decode tok/s {x:.2f}×, generated tok/s "
                     f"{g:.2f}×")
        if "llama-server" in res:
            theirs = {r["clients"]: r for r in res["llama-server"]["rows"]}
            theirs_steady = steady.get("llama-server", {})
            if 16 in mine and 16 in theirs_steady:
                y = mine[16]["tok_s"] / theirs_steady[16]["tok_s"]
                L.append(f"- **Target 2** (llmc's aggregate decode tok/s at 16 concurrent sequences "
                         f"≥ 1.2× llama-server's, steady decode): {y:.2f}× — "
                         f"{'met' if y >= 1.2 else 'not met'}")
            if 16 in rows and 16 in theirs:
                y = rows[16]["decode_tok_s"] / theirs[16]["decode_tok_s"]
                g = rows[16]["tok_s"] / theirs[16]["tok_s"]
                L.append(f"- Under the mixed load at 16 clients, llmc / llama-server: decode tok/s "
                         f"{y:.2f}×, generated tok/s {g:.2f}×")
        L.append("- Generated tok/s: completion tokens of all requests of the level over its "
                 "wall time (prefill included). Decode tok/s: tokens after each request's first, "
                 "over the union of the requests' first-to-last-chunk intervals (other requests' "
                 "prefill inside them counts as time). TTFT: request sent to first streamed text. "
                 "ITL: gaps between streamed chunks of one request (a chunk may carry more "
                 "than one token when text is held back for UTF-8 or stop strings).")
        L.append("")
    L += ["## Faults, then health", "", "| Fault | " + " | ".join(res) + " |",
          "|---|" + "---|" * len(res)]
    names = [f for f, _ in next(iter(res.values()))["faults"]]
    for i, f in enumerate(names):
        L.append(f"| {f} | " + " | ".join(r["faults"][i][1] for r in res.values()) + " |")
    L.append("| then: SIGTERM, exit status | " +
             " | ".join(str(r["exit"]) for r in res.values()) + " |")
    errors = [(n, row["clients"], e) for n, r in res.items()
              for row in r["rows"] + r.get("steady", []) for e in row["errors"]]
    L += ["", f"Request errors during the load: {len(errors)}"]
    L += [f"- {n} at {c} clients: {e}" for n, c, e in errors[:20]]
    L.append("")
    return "\n".join(L)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", default="1,4,16,64")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv-type", choices=("f16", "f32", "q8_0"), default="f16",
                    help="llmc's KV rows (default f16, as llama-server's default cache; "
                         "q8_0 also gives llama-server q8_0 keys and values)")
    ap.add_argument("--only", choices=("llmc", "llama"))
    ap.add_argument("--llmc", default=os.path.join(REPO, "build", "bin", "llmc"))
    ap.add_argument("--llmc-rt", default=os.path.join(REPO, "build", "bin", "llmc-rt"))
    ap.add_argument("--bin", default=cp.DEFAULT_BIN, help="llama.cpp tools")
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    if not os.path.exists(MODEL):
        sys.exit(f"{MODEL} missing (scripts/setup.sh)")
    if args.only != "llmc" and not os.access(os.path.join(args.bin, "llama-server"), os.X_OK):
        sys.exit("llama-server missing: run scripts/build_llamacpp.sh")
    with open(TEXT, encoding="utf-8") as f:
        text = f.read()
    machine = cp.machine_info()
    t0 = time.time()
    res = {}
    with tempfile.TemporaryDirectory(prefix="llmc-serving-") as work:
        if args.only != "llama":
            cp.use_private_signing_key(args.llmc, work)
            art = os.path.join(work, "smollm2.llmc")
            cp.llmc_compile(args.llmc, MODEL, "", art)
            res["llmc"] = measure(start_llmc(args.llmc_rt, art, args.threads, max(levels),
                                             args.kv_type), levels, text)
        if args.only != "llmc":
            res["llama-server"] = measure(start_llama(args.bin, args.threads, max(levels),
                                                      args.kv_type), levels, text)
    version = "not run"
    vfile = os.path.join(args.bin, "LLAMACPP_VERSION.txt")
    if os.path.exists(vfile):
        with open(vfile) as f:
            version = f.read().strip().replace("\n", "; ")
    doc = render(args, levels, res, machine, version, t0)
    with open(args.out, "w") as f:
        f.write(doc)
    log(f"wrote {args.out}")
    print(doc)


if __name__ == "__main__":
    main()
