"""End-to-end: the GPU engine's prompt products on the tensor cores
(llmc_cu_mm_*: mma.m16n8k16, f16 inputs, f32 sums; from 16 tokens by
default, LLMC_CUDA_MMA=N from N, 0 off) on generated models, on a machine
without a GPU, through the stand-in CUDA driver that runs the artifact's
generated kernels on the host (build/lib/libllmc_fakecuda.so; its mma
follows PTX's fragment layout, see test/unit/CudaEmulation.h).

Generated llama models (make_gguf_models: head size 32 in F16, Q8_0 and
Q4_0; head size 64, 256 wide in Q4_1; the K-quant kernels are the unit
test's: the generator's K-quant model has Q5_K, which the GPU lacks) compiled --target
cpu,cuda, a seeded 40-token prompt and 4 greedy tokens:
- LLMC_CUDA_MMA=0 (f32 products in groups of 8 tokens): the prompt rows'
  logits within KLD 1e-5 of the CPU engine's (--exact-activations
  --kv-type f16), top-1 100%;
- the default (tensor cores): within KLD 1e-4 and top-1 >= 95% of the
  CPU's (f16 rounding of weights and activations: measured 3e-7 to
  1.2e-5; a fragment slip gives garbage), and not equal to the
  f32 path's (the tensor-core kernels ran);
- LLMC_CUDA_MMA=abc: exit 1 naming the variable, nothing on stdout.
Stories260K and SmolLM2 are not run here: emulating the tensor cores
replays each warp once per mma, too slow for their widths (their f32 path
is test_cuda_engine_emulated's; a GPU run checks the tensor cores on
SmolLM2, scripts/gpu_engine_check.py). Skipped without NVRTC, the stand-in
driver or gguf-py (failed under CI=true).
"""
import os
import random
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import harness  # noqa: E402
from test_cuda_engine_emulated import emulation_env, kld, require_emulation  # noqa: E402


def make_models(work):
    import make_gguf_models
    import make_hf_models
    Q = make_gguf_models.Q
    made = []
    for name, qt, overrides, seed in (("hd32-f16", Q.F16, {"head_dim": 32}, 4100),
                                      ("hd32-q8_0", Q.Q8_0, {"head_dim": 32}, 4101),
                                      ("hd32-q4_0", Q.Q4_0, {"head_dim": 32}, 4102),
                                      ("hd64-w256-q4_1", Q.Q4_1,
                                       {"head_dim": 64, "hidden_size": 256,
                                        "intermediate_size": 512, "num_hidden_layers": 2}, 4103)):
        cfg = make_hf_models.make_config("llama", "f32", head_dim=overrides["head_dim"])
        cfg.update(overrides)
        path = os.path.join(work, name + ".gguf")
        make_gguf_models.write_gguf(path, cfg, make_hf_models.make_weights(cfg, seed), qt)
        made.append((name, path))
    return made


def model_checks(checks, work, name, gguf, prompt):
    art = os.path.join(work, name + ".llmc")
    harness.run_llmc(["compile", gguf, "-o", art, "--target", "cpu,cuda", "-q"], timeout=900)
    env = emulation_env(art, f32_prompts=False)
    runs = {}
    for mode, extra, e in (("tensor_cores", ["--device", "cuda"], env),
                           ("f32", ["--device", "cuda"], dict(env, LLMC_CUDA_MMA="0")),
                           ("cpu", ["--exact-activations", "--kv-type", "f16"], None)):
        npy = os.path.join(work, f"{name}-{mode}.npy")
        p = harness.run_llmc(["run", art, "--prompt-tokens", prompt, "-n", "4", "--print-ids",
                              "--ignore-eos", "-q", "--dump-logits", npy, *extra],
                             check=False, timeout=900, env=e)
        runs[mode] = (p, npy)
    ok = all(p.returncode == 0 for p, _ in runs.values())
    checks.check(ok, f"{name}: the GPU engine (tensor cores, f32) and the CPU engine run",
                 "; ".join(f"{m} exit {p.returncode} {p.stderr.strip()[-200:]}"
                           for m, (p, _) in runs.items()))
    if not ok:
        return
    tc, f32, cpu = (np.load(runs[m][1]) for m in ("tensor_cores", "f32", "cpu"))
    d32, dtc = kld(cpu, f32), kld(cpu, tc)
    top32 = float(np.mean(f32.argmax(1) == cpu.argmax(1)))
    toptc = float(np.mean(tc.argmax(1) == cpu.argmax(1)))
    checks.check(f32.shape == cpu.shape == (40, cpu.shape[1]) and d32 < 1e-5 and top32 == 1.0,
                 f"{name}: LLMC_CUDA_MMA=0 (f32 products): the 40 prompt rows within KLD 1e-5 "
                 "of the CPU's, top-1 100%", f"KLD {d32:.3g}, top-1 {top32:.3f}")
    checks.check(tc.shape == cpu.shape and dtc < 1e-4 and toptc >= 0.95,
                 f"{name}: tensor cores (f16 inputs): the 40 prompt rows within KLD 1e-4 of the "
                 "CPU's, top-1 >= 95%", f"KLD {dtc:.3g}, top-1 {toptc:.3f}, "
                 f"max |diff| {float(np.abs(tc - cpu).max()):.4g}")
    checks.check(tc.shape == f32.shape and not np.array_equal(tc, f32),
                 f"{name}: the tensor-core logits differ from the f32 path's (its kernels ran)",
                 f"max |diff| {float(np.abs(tc - f32).max()) if tc.shape == f32.shape else 'shape'}")


def main():
    checks = harness.Checks("tensor-core prompt products on the host-emulated GPU engine")
    require_emulation()
    try:
        import gguf  # noqa: F401
    except ImportError:
        harness.skip("gguf-py missing (scripts/setup.sh installs it)")
    work = harness.work_dir("cuda_mma_emulated")
    rng = random.Random(11)
    prompt = ",".join(str(rng.randrange(3, 256)) for _ in range(40))
    models = make_models(work)
    for name, path in models:
        model_checks(checks, work, name, path, prompt)
    name, path = models[0]
    art = os.path.join(work, name + ".llmc")
    p = harness.run_llmc(["run", art, "--device", "cuda", "--prompt-tokens", prompt, "-n", "1"],
                         check=False, timeout=300,
                         env=dict(emulation_env(art, f32_prompts=False), LLMC_CUDA_MMA="abc"))
    checks.check(p.returncode == 1 and "LLMC_CUDA_MMA" in p.stderr and not p.stdout.strip(),
                 "LLMC_CUDA_MMA=abc: exit 1 naming the variable",
                 f"exit {p.returncode}: {p.stderr.strip()[-200:]}")
    checks.finish()


if __name__ == "__main__":
    main()
