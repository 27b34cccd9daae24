"""End-to-end: continuous batching on the GPU engine (`llmc generate
--device cuda`, `llmc-rt serve --device cuda`) on a machine without a GPU,
through the stand-in CUDA driver that runs the artifact's generated CUDA
kernels on the host (build/lib/libllmc_fakecuda.so; see
test_cuda_engine_emulated.py).

On SmolLM2-135M-Instruct compiled with --target cuda, three prompts of 20,
3 and 17 tokens, 4 greedy tokens each:
- `generate --device cuda --max-batch 4`: all three run in one batch (peak
  3), the decode rows of a step in one decodeBatch graph, and each
  request's tokens equal the CPU engine's (--exact-activations --kv-type
  f16: the same arithmetic up to summation order);
- `--max-batch 2`: the third request takes the sequence the first left
  (its KV rows start again at position 0), same tokens;
- `llmc-rt serve --device cuda`: two concurrent completions (token-id
  prompts) answer the same texts as the CPU's generate, /metrics shows the
  GPU's KV blocks in use going back to 0, SIGTERM exits 0;
- the KV block pool: `generate --device cuda --kv-pool 1` (2 blocks of 16
  positions, where three whole contexts of 128 take 24) admits requests as
  their blocks fit and answers the CPU's tokens (so does the CPU with
  --kv-pool 2); a request larger than the pool exits 1; `run --device
  cuda` with the 20-token prompt ends holding 2 blocks under the full
  cache (10 tokens), 1 under SnapKV (4 tokens: the compressed prompt's
  second block given back) and 1 under StreamingLLM evicting while
  decoding (10 tokens), 2 at most in each, with the CPU's tokens;
- bad flags exit 2 (-t, --kv-type with --device cuda; --no-graphs without
  it), no driver exits 4.
Skipped without NVRTC, the stand-in driver or the model (failed under
CI=true).
"""
import concurrent.futures
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import harness  # noqa: E402
from test_cuda_engine_emulated import PROMPT, emulation_env, require_emulation  # noqa: E402
from test_serve_openai import Served  # noqa: E402

PROMPTS = [PROMPT, "1,504,2838",
           "1,1489,5248,28,357,1175,253,1789,16797,690,5768,30,260,4342,282,1820,30"]


def generate(art, prompts_file, extra, env=None):
    p = harness.run_llmc(["generate", art, "--ids", "--prompts", prompts_file, "-n", "4",
                          "--ignore-eos", "-c", "128", *extra], check=False, timeout=900,
                         env=env)
    rows = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    return p, rows


def stats_line(stderr):
    for line in stderr.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    return {}


def generate_checks(checks, art, env, prompts_file):
    cpu, cpu_rows = generate(art, prompts_file, ["--max-batch", "4", "--exact-activations",
                                                 "--kv-type", "f16", "-q"])
    gpu, gpu_rows = generate(art, prompts_file, ["--max-batch", "4", "--device", "cuda",
                                                 "--stats-json"], env)
    ok = cpu.returncode == 0 and gpu.returncode == 0 and len(cpu_rows) == 3
    checks.check(ok, "generate runs on the CPU and with --device cuda (emulated GPU)",
                 f"exit {cpu.returncode}/{gpu.returncode}: {gpu.stderr.strip()[-400:]}")
    if not ok:
        return None
    st = stats_line(gpu.stderr)
    checks.check(st.get("engine") == "cuda" and st.get("peak_batch") == 3,
                 "--device cuda --max-batch 4: the three requests run in one batch (peak 3)",
                 json.dumps(st)[:300])
    want = [r["tokens"] for r in cpu_rows]
    checks.check([r["tokens"] for r in gpu_rows] == want and all(len(t) == 4 for t in want),
                 "--device cuda: each request's greedy tokens equal the CPU engine's",
                 f"gpu {[r['tokens'] for r in gpu_rows]} cpu {want}")
    two, two_rows = generate(art, prompts_file, ["--max-batch", "2", "--device", "cuda", "-q"],
                             env)
    checks.check(two.returncode == 0 and [r["tokens"] for r in two_rows] == want,
                 "--max-batch 2: the third request reuses a finished sequence, same tokens",
                 f"exit {two.returncode}: {[r['tokens'] for r in two_rows]} "
                 f"{two.stderr.strip()[-300:]}")
    return cpu_rows


def serve_checks(checks, art, env, cpu_rows):
    os.environ.update(env)  # the server inherits the stand-in driver
    srv = Served(art, "--device", "cuda", "--max-batch", "4", "-c", "128", "-q")
    try:
        checks.check(srv.port is not None, "llmc-rt serve --device cuda listens",
                     "".join(srv.log)[-400:])
        if srv.port is None:
            return

        def complete(i):
            body = {"prompt": [int(t) for t in PROMPTS[i].split(",")], "max_tokens": 4,
                    "temperature": 0}
            status, text = srv.post("/v1/completions", json.dumps(body).encode())
            return status, json.loads(text) if status == 200 else text

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            results = list(pool.map(complete, [0, 2]))
        got = [r[1]["choices"][0]["text"] if r[0] == 200 else r for r in results]
        want = [cpu_rows[0]["text"], cpu_rows[2]["text"]]
        checks.check(got == want, "serve --device cuda: two concurrent completions answer the "
                     "CPU engine's texts", f"got {got!r} want {want!r}")
        used, blocks = srv.metric("llmc_kv_pool_blocks_used"), srv.metric("llmc_kv_pool_blocks")
        checks.check(used == 0 and blocks == 4 * 8,
                     "serve --device cuda: /metrics shows the GPU's KV blocks (4 sequences x 8 "
                     "blocks of 16), none held once the requests are done",
                     f"used {used}, capacity {blocks}")
    finally:
        code = srv.stop()
        for k in env:
            os.environ.pop(k, None)
    checks.check(code == 0, "serve --device cuda: SIGTERM exits 0", f"exit {code}")


def flag_checks(checks, art, env, prompts_file, work):
    for extra, what in ((["--device", "cuda", "-t", "2"], "--device cuda -t 2"),
                        (["--device", "cuda", "--kv-type", "f16"], "--device cuda --kv-type"),
                        (["--no-graphs"], "--no-graphs without --device cuda")):
        p, _ = generate(art, prompts_file, extra, env)
        checks.check(p.returncode == 2 and not p.stdout, f"generate {what}: exit 2",
                     f"exit {p.returncode}: {p.stderr.strip()[-200:]}")
    p, _ = generate(art, prompts_file, ["--device", "cuda"],
                    {"LLMC_CUDA_DRIVER": os.path.join(work, "no-such.so")})
    checks.check(p.returncode == 4 and "no usable CUDA device" in p.stderr and not p.stdout,
                 "generate --device cuda without a driver: exit 4", p.stderr.strip()[-200:])


# SmolLM2's KV block on the GPU: 16 positions x 30 layers x 3 KV heads x
# (64 + 64) f16 values = 368640 bytes, so --kv-pool 1 holds 2 blocks.
POOL_BLOCKS_1MIB = 2
LONG_PROMPT = ",".join(str(3 + (37 * i) % 9000) for i in range(40))


def pool_checks(checks, work, art, env, prompts_file, cpu_rows):
    """The GPU engine's KV block pool: smaller than every sequence's whole
    context, sequences draw blocks as they grow, and a policy's evictions
    give blocks back."""
    want = [r["tokens"] for r in cpu_rows]
    gpu, rows = generate(art, prompts_file, ["--max-batch", "3", "--device", "cuda",
                                             "--kv-pool", "1", "--stats-json"], env)
    st = stats_line(gpu.stderr)
    checks.check(gpu.returncode == 0 and [r["tokens"] for r in rows] == want and
                 st.get("kv_pool_blocks") == POOL_BLOCKS_1MIB and
                 0 < st.get("kv_blocks_peak", 0) <= POOL_BLOCKS_1MIB and st.get("peak_batch", 9) < 3,
                 f"generate --device cuda --kv-pool 1: a pool of {POOL_BLOCKS_1MIB} blocks (three "
                 "whole contexts would take 24) answers the CPU's tokens, requests admitted as "
                 "their blocks fit", f"exit {gpu.returncode}: {json.dumps(st)[:300]} "
                 f"{[r['tokens'] for r in rows]} {gpu.stderr.strip()[-300:]}")
    cpu, rows = generate(art, prompts_file, ["--max-batch", "3", "--kv-pool", "2",
                                             "--exact-activations", "--kv-type", "f16", "-q"])
    checks.check(cpu.returncode == 0 and [r["tokens"] for r in rows] == want,
                 "generate --kv-pool 2 on the CPU: the same tokens",
                 f"exit {cpu.returncode}: {cpu.stderr.strip()[-300:]}")
    big = os.path.join(work, "long-prompt.txt")
    with open(big, "w") as f:
        f.write(LONG_PROMPT + "\n")
    p, _ = generate(art, big, ["--device", "cuda", "--kv-pool", "1"], env)
    checks.check(p.returncode == 1 and "needs 1.05 MiB of KV cache; the pool has 1.00 MiB" in p.stderr and not p.stdout.strip(),
                 "generate --device cuda --kv-pool 1: a request larger than the pool exits 1 "
                 "with a message", f"exit {p.returncode}: {p.stderr.strip()[-300:]}")
    # The 20-token prompt, 10 tokens (9 decode steps): the full cache holds
    # 21 positions after the first step and 29 at the end (2 blocks);
    # SnapKV (budget 0.5), 4 tokens, compresses the prompt to 10 (its
    # second block given back) and ends at 13 (1 block); StreamingLLM evicting while
    # decoding (12 entries whenever 16 are reached) keeps the prompt whole,
    # then falls to 12 at the first step (1 block) and stays below 17.
    held = {}
    for name, pipeline, n in (("full", "", 10), ("snapkv", "method=snapkv budget=0.5 window=8", 4),
                              ("streaming", "method=streaming budget=12 window=4 sink=4 "
                                            "mode=decode refresh=4", 10)):
        a = os.path.join(work, f"smollm2-pool-{name}.llmc")
        harness.run_llmc(["compile", harness.SMOLLM2_GGUF, "-o", a, "--target", "cpu,cuda", "-q"] +
                         (["--pipeline", f"llm-kv-policy{{{pipeline}}}"] if pipeline else []),
                         timeout=900)
        args = ["run", a, "--prompt-tokens", PROMPT, "-n", str(n), "--print-ids", "--ignore-eos"]
        g = harness.run_llmc(args + ["--device", "cuda"], check=False, timeout=900,
                             env=emulation_env(a))
        c = harness.run_llmc(args + ["--exact-activations", "--kv-type", "f16", "-q"], check=False,
                             timeout=900)
        m = re.search(r"kv pool: (\d+) blocks of 16 positions, (\d+) in use at most, (\d+) now",
                      g.stderr)
        held[name] = (int(m[2]), int(m[3])) if m else None
        checks.check(g.returncode == 0 and g.stdout.split() == c.stdout.split() and m,
                     f"run --device cuda ({name}): the CPU's tokens, the pool reported",
                     f"exit {g.returncode}: {g.stdout.split()} vs {c.stdout.split()} "
                     f"{g.stderr.strip()[-300:]}")
    checks.check(held.get("full") == (2, 2) and held.get("snapkv") == (2, 1) and
                 held.get("streaming") == (2, 1),
                 "the GPU's KV blocks (most at once, at the end): full cache 2 and 2, SnapKV's "
                 "compressed prompt 2 and 1, StreamingLLM evicting while decoding 2 and 1 "
                 "(blocks given back)",
                 str(held))


def main():
    checks = harness.Checks("continuous batching on the GPU engine (host-emulating driver)")
    require_emulation(smollm2=True)
    work = harness.work_dir("cuda_batching_emulated")
    art = os.path.join(work, "smollm2-cuda.llmc")
    src = os.path.join(work, "smollm2-kernels.cu")
    harness.run_llmc(["compile", harness.SMOLLM2_GGUF, "-o", art, "--target", "cuda", "-q"],
                     timeout=900)
    env = emulation_env(art, src)
    prompts_file = os.path.join(work, "prompts.txt")
    with open(prompts_file, "w") as f:
        f.write("\n".join(PROMPTS) + "\n")
    cpu_rows = generate_checks(checks, art, env, prompts_file)
    if cpu_rows:
        serve_checks(checks, art, env, cpu_rows)
        pool_checks(checks, work, art, env, prompts_file, cpu_rows)
    flag_checks(checks, art, env, prompts_file, work)
    checks.finish()


if __name__ == "__main__":
    main()
