"""End-to-end: the GPU engine (`llmc run --device cuda`) on a machine
without a GPU, through a stand-in CUDA driver that runs the artifact's
generated CUDA kernels on the host (build/lib/libllmc_fakecuda.so, selected
with LLMC_CUDA_DRIVER; test/fakecuda/FakeCudaDriver.cpp). Everything of the
engine but the GPU itself runs: weights uploaded (the CPU's eight-row
copies unpacked), the kernel plan as launches with their slot addresses,
the paged f16 KV cache, the decode step captured into a graph and replayed.

On SmolLM2-135M-Instruct compiled with --target cuda, a 20-token prompt
(past one 16-position KV block) and 4 greedy tokens:
- the tokens equal the CPU engine's with f32 activations and f16 KV rows
  (--exact-activations --kv-type f16: the same arithmetic up to summation
  order), and the logits of all 20 prompt rows are within KLD 1e-5 (top-1
  100%) of the CPU's;
- the decode steps replay one captured graph; --no-graphs launches them
  eagerly with the same logits;
- no driver (LLMC_CUDA_DRIVER naming a missing library): exit 4 with a
  message; stories260K (heads of 8: no CUDA attention kernels): exit 1
  naming the missing kernel, never a crash;
- `llmc-rt cuda-check` passes each matvec kernel at 1 and 8 tokens, each
  one-token kernel, and each tensor-core kernel at 16 and 37 tokens (within
  f16 rounding);
- `llmc bench --device cuda` measures prefill and decode (graphs); with
  --batch 3 (a graph of 4 rows, one padding) every sequence's logits equal
  its logits decoded alone;
- bad flags: --device tpu, --device cuda --speculate ngram, --no-graphs
  without --device cuda: exit 2.
Skipped without NVRTC (compile --target cuda needs it), the stand-in
driver or the models (failed under CI=true).
"""
import json
import os
import re
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import harness  # noqa: E402
from test_cuda_codegen import nvrtc_present  # noqa: E402

STORIES = os.path.join(harness.shared_dir(), "models", "stories260K.bin")
FAKE = os.path.join(os.path.dirname(os.path.dirname(harness.llmc_bin())), "lib",
                    "libllmc_fakecuda.so")
PROMPT = ",".join(str(t) for t in (1, 504, 2838, 314, 260, 4342, 282, 1820, 30, 1489, 5248, 28,
                                   357, 1175, 253, 1789, 16797, 690, 5768, 30))


def require_emulation(smollm2=False):
    """Skips the test (failed under CI=true) without NVRTC (compile --target
    cuda needs it), the stand-in driver or, with smollm2, the SmolLM2 GGUF."""
    if not nvrtc_present():
        harness.skip("libnvrtc (the CUDA toolkit's NVRTC) not found")
    if not os.path.exists(FAKE):
        harness.skip(f"{FAKE} missing (built with the tests)")
    if smollm2 and not os.path.exists(harness.SMOLLM2_GGUF):
        harness.skip(f"{harness.SMOLLM2_GGUF} missing (scripts/setup.sh fetches it)")


def emulation_env(art, src=None, f32_prompts=True):
    """The environment that runs `art` on the stand-in driver: its CUDA
    source written to src (art + ".cu" by default). f32_prompts: the
    prompt's products in f32 (LLMC_CUDA_MMA=0), as the CPU engine's;
    emulating the tensor cores at SmolLM2's widths takes too long (they are
    test_cuda_mma_emulated's)."""
    src = src or art + ".cu"
    cuda_source(art, src)
    env = {"LLMC_CUDA_DRIVER": FAKE, "LLMC_FAKECUDA_SOURCE": src}
    if f32_prompts:
        env["LLMC_CUDA_MMA"] = "0"
    return env


def cuda_bench(art, args, env):
    """`llmc bench ART --device cuda ARGS --json -q` on the stand-in driver:
    (the process, its JSON object or {} when it printed none)."""
    b = harness.run_llmc(["bench", art, "--device", "cuda", *args, "--json", "-q"], check=False,
                         timeout=900, env=env)
    try:
        return b, json.loads(b.stdout)
    except ValueError:
        return b, {}


def cuda_source(art, out):
    """Writes the artifact's CUDA source section (codegen.cuda.kernels.cu) to out."""
    m = json.loads(harness.run_llmc(["inspect", art, "--json", "--no-verify"]).stdout)
    t = {x["name"]: x for x in m["tensors"]}[m["codegen_cuda"]["source"]]
    with open(art, "rb") as f:
        data_offset = int.from_bytes(f.read(64)[32:40], "little")
        f.seek(data_offset + t["offset"])
        data = f.read(t["nbytes"])
    with open(out, "wb") as f:
        f.write(data)


def run(art, extra, env=None, dump=None):
    args = ["run", art, "--prompt-tokens", PROMPT, "-n", "4", "--print-ids", "--ignore-eos",
            *extra]
    if dump:
        args += ["--dump-logits", dump]
    return harness.run_llmc(args, check=False, timeout=900, env=env)


def kld(p_logits, q_logits):
    p = np.exp(p_logits - p_logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    q = np.exp(q_logits - q_logits.max(1, keepdims=True))
    q /= q.sum(1, keepdims=True)
    return float((p * (np.log(p + 1e-30) - np.log(q + 1e-30))).sum(1).mean())


def smollm2_checks(checks, work):
    art = os.path.join(work, "smollm2-cuda.llmc")
    src = os.path.join(work, "smollm2-kernels.cu")
    harness.run_llmc(["compile", harness.SMOLLM2_GGUF, "-o", art, "--target", "cuda", "-q"],
                     timeout=900)
    env = emulation_env(art, src)
    gpu_npy, cpu_npy, eager_npy = (os.path.join(work, n) for n in
                                   ("gpu.npy", "cpu.npy", "eager.npy"))
    g = run(art, ["--device", "cuda"], env, gpu_npy)
    c = run(art, ["--exact-activations", "--kv-type", "f16", "-q"], None, cpu_npy)
    ok = g.returncode == 0 and c.returncode == 0
    checks.check(ok, "SmolLM2: --device cuda runs (emulated GPU) and the CPU engine runs",
                 f"exit {g.returncode}/{c.returncode}: {g.stderr.strip()[-400:]}")
    if not ok:
        return
    checks.check(g.stdout.split() == c.stdout.split() and len(c.stdout.split()) == 4,
                 "SmolLM2: greedy tokens equal the CPU engine's (f32 activations, f16 KV)",
                 f"gpu {g.stdout.split()} cpu {c.stdout.split()}")
    gl, cl = np.load(gpu_npy), np.load(cpu_npy)
    d = kld(cl, gl)
    top1 = float(np.mean(gl.argmax(1) == cl.argmax(1)))
    checks.check(gl.shape == cl.shape == (20, cl.shape[1]) and d < 1e-5 and top1 == 1.0,
                 "SmolLM2: the 20 prompt rows' logits within KLD 1e-5 of the CPU's, top-1 100%",
                 f"shape {gl.shape}, KLD {d:.3g}, top-1 {top1:.3f}, "
                 f"max |diff| {float(np.abs(gl - cl).max()):.4g}")
    m = re.search(r"(\d+) graph replays \((\d+) captured\), (\d+) eager", g.stderr)
    checks.check(bool(m) and m.groups() == ("3", "1", "1"),
                 "SmolLM2: the prompt runs eagerly, the 3 decode steps replay 1 captured graph",
                 m.group(0) if m else g.stderr.strip()[-300:])
    e = run(art, ["--device", "cuda", "--no-graphs"], env, eager_npy)
    m = re.search(r"(\d+) graph replays \((\d+) captured\), (\d+) eager", e.stderr)
    checks.check(e.returncode == 0 and e.stdout.split() == g.stdout.split() and bool(m) and
                 m.groups() == ("0", "0", "4") and np.array_equal(np.load(eager_npy), gl),
                 "SmolLM2: --no-graphs launches all 4 steps eagerly, same tokens and logits",
                 m.group(0) if m else e.stderr.strip()[-300:])
    # LLMC_CUDA_PROFILE=1: per-step GPU times of the eager steps on stderr,
    # the same tokens (a profiled run only synchronizes more).
    pr = run(art, ["--device", "cuda", "--no-graphs"], dict(env, LLMC_CUDA_PROFILE="1"))
    rows = re.findall(r"^\[llmc\] +[\d.]+ ms +[\d.]+% +(\d+) calls .* (norm_matmul T=1|attend T=1)",
                      pr.stderr, re.M)
    checks.check(pr.returncode == 0 and pr.stdout.split() == g.stdout.split() and
                 "cuda profile, GPU time of eager plan steps" in pr.stderr and
                 {k for _, k in rows} == {"attend T=1", "norm_matmul T=1"} and
                 "cuda profile" not in e.stderr,
                 "SmolLM2: LLMC_CUDA_PROFILE=1 prints per-step GPU times, same tokens; off by default",
                 "; ".join(f"{k}: {c} calls" for c, k in rows) or pr.stderr.strip()[-300:])
    # With graphs: the eager prompt is timed, the captured decode step is not
    # (waiting on an event recorded in a capturing stream is refused).
    pg = run(art, ["--device", "cuda"], dict(env, LLMC_CUDA_PROFILE="1"))
    checks.check(pg.returncode == 0 and pg.stdout.split() == g.stdout.split() and
                 "cuda profile, GPU time of eager plan steps" in pg.stderr and
                 not re.search(r"attend T=1$", pg.stderr, re.M),
                 "SmolLM2: LLMC_CUDA_PROFILE=1 with graphs: the prompt profiled, the graph captured",
                 f"exit {pg.returncode}: {pg.stderr.strip()[-300:]}")
    b, bj = cuda_bench(art, ["-p", "8", "-n", "4", "-r", "1"], env)
    checks.check(b.returncode == 0 and bj.get("engine") == "cuda" and
                 bj.get("prefill_tok_s", 0) > 0 and bj.get("decode_tok_s", 0) > 0 and
                 "CUDA Graphs" in bj.get("generated_kernels", ""),
                 "SmolLM2: llmc bench --device cuda measures prefill and decode (graphs)",
                 f"exit {b.returncode}: {b.stdout.strip()[:300]} {b.stderr.strip()[-200:]}")
    b, bj = cuda_bench(art, ["-p", "4", "-n", "3", "-r", "1", "--batch", "3"], env)
    checks.check(b.returncode == 0 and bj.get("batch") == 3 and
                 bj.get("batch_max_abs_diff") == 0 and bj.get("decode_tok_s", 0) > 0,
                 "SmolLM2: a batch of 3 sequences (bucket 4, one padding row) decodes each "
                 "exactly as alone", f"exit {b.returncode}: batch_max_abs_diff "
                 f"{bj.get('batch_max_abs_diff')} {b.stderr.strip()[-200:]}")
    cc = subprocess.run([harness.llmc_rt_bin(), "cuda-check", art, "--rows", "64", "--reps", "1",
                         "--json"], capture_output=True, text=True, timeout=600,
                        env=dict(os.environ, **env))
    lines = [json.loads(l) for l in cc.stdout.splitlines() if l.startswith("{")]
    one = sorted(l["kernel"] for l in lines if l["kernel"].startswith("llmc_cu_mv1_"))
    mma = sorted((l["kernel"], l["tokens"]) for l in lines if l["kernel"].startswith("llmc_cu_mm_"))
    checks.check(cc.returncode == 0 and len(lines) == 15 and all(l["pass"] for l in lines) and
                 one == ["llmc_cu_mv1_q4_1_1536", "llmc_cu_mv1_q4_1_576", "llmc_cu_mv1_q8_0_576"] and
                 mma == [(f"llmc_cu_mm_{k}", t) for k in ("q4_1_1536", "q4_1_576", "q8_0_576")
                         for t in (16, 37)],
                 "SmolLM2: llmc-rt cuda-check passes its 3 matvec kernels at 1 and 8 tokens, "
                 "their 3 one-token (decode) kernels and their 3 tensor-core kernels at 16 and "
                 "37 tokens",
                 f"exit {cc.returncode}, {len(lines)} results: "
                 f"{[(l['kernel'], l['max_rel_error']) for l in lines]} {cc.stderr.strip()[-200:]}")
    n = run(art, ["--device", "cuda"], {"LLMC_CUDA_DRIVER": os.path.join(work, "no-such.so")})
    checks.check(n.returncode == 4 and "no usable CUDA device" in n.stderr and not n.stdout,
                 "no CUDA driver: exit 4 with a message", f"exit {n.returncode}: {n.stderr.strip()}")
    for extra, what in ((["--device", "tpu"], "--device tpu"),
                        (["--device", "cuda", "--speculate", "ngram"], "--device cuda --speculate"),
                        (["--no-graphs"], "--no-graphs without --device cuda")):
        p = run(art, extra, env)
        checks.check(p.returncode == 2, f"{what}: exit 2", f"exit {p.returncode}: "
                     f"{p.stderr.strip()[-200:]}")


def stories_checks(checks, work):
    art = os.path.join(work, "stories-cuda.llmc")
    src = os.path.join(work, "stories-kernels.cu")
    harness.run_llmc(["compile", STORIES, "-o", art, "--target", "cuda", "-q"], timeout=900)
    cuda_source(art, src)
    p = harness.run_llmc(["run", art, "--device", "cuda", "--prompt-tokens", "1,403,407", "-n",
                          "2"], check=False, timeout=300,
                         env={"LLMC_CUDA_DRIVER": FAKE, "LLMC_FAKECUDA_SOURCE": src})
    checks.check(p.returncode == 1 and "llmc_cu_rope_kv" in p.stderr and
                 "Segmentation" not in p.stderr and not p.stdout.strip(),
                 "stories260K (heads of 8): exit 1 naming the missing attention kernel",
                 f"exit {p.returncode}: {p.stderr.strip()[-300:]}")


def main():
    checks = harness.Checks("llmc run --device cuda on the host-emulating CUDA driver")
    require_emulation()
    work = harness.work_dir("cuda_engine_emulated")
    if os.path.exists(harness.SMOLLM2_GGUF):
        smollm2_checks(checks, work)
    else:
        harness.skip_part(f"{harness.SMOLLM2_GGUF} missing (scripts/setup.sh fetches it)")
    if os.path.exists(STORIES):
        stories_checks(checks, work)
    else:
        harness.skip_part(f"{STORIES} missing")
    checks.finish()


if __name__ == "__main__":
    main()
