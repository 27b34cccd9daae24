"""End-to-end: `llmc-rt cuda-check` runs an artifact's CUDA kernels on the
GPU against the CPU (SmolLM2-135M-Instruct compiled with --target cpu,cuda).

Everywhere (no GPU needed): an unsigned artifact (--no-sign) and one whose
CUDA section was changed after signing are refused (exit 1, saying why)
before any device is opened; a signed one without a usable GPU exits 4
with "no usable CUDA device".
With a GPU: every product kernel the manifest lists passes (largest
relative error <= 1e-5 of sum |w x|; the tensor-core ones, f16 inputs,
2e-3) for 1 and 8 tokens (one-token kernels: 1; tensor-core ones: 16 and
37), one JSON line each, naming the device and the image it loaded.
Without a GPU the test ends as skipped (exit 77) even under CI=true: a CI
machine of this kind has no GPU; the GPU part runs on the device machine
(scripts/gpu-check.sh).
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import harness  # noqa: E402


def cuda_check(art, extra=()):
    return subprocess.run([harness.llmc_rt_bin(), "cuda-check", art, "--json", "--rows", "1024",
                           *extra], capture_output=True, text=True, timeout=600)


def section_offset(art, name):
    m = json.loads(harness.run_llmc(["inspect", art, "--json", "--no-verify"]).stdout)
    header = open(art, "rb").read(64)
    t = next(t for t in m["tensors"] if t["name"] == name)
    return int.from_bytes(header[32:40], "little") + t["offset"]


def main():
    checks = harness.Checks("llmc-rt cuda-check: the artifact's CUDA kernels on the GPU")
    if not os.path.exists(harness.SMOLLM2_GGUF):
        harness.skip(f"{harness.SMOLLM2_GGUF} missing (scripts/setup.sh fetches it)")
    work = harness.work_dir("cuda_device")
    art = os.path.join(work, "smollm2.llmc")
    unsigned = os.path.join(work, "unsigned.llmc")
    for out, extra in ((art, []), (unsigned, ["--no-sign"])):
        p = harness.run_llmc(["compile", harness.SMOLLM2_GGUF, "-o", out, "--target", "cpu,cuda",
                              *extra], check=False, timeout=900)
        if p.returncode != 0 and "nvrtc" in p.stderr.lower():
            harness.skip("NVRTC missing: " + p.stderr.strip()[-200:])
        checks.check(p.returncode == 0, f"compile --target cpu,cuda {' '.join(extra)}",
                     p.stderr.strip()[-200:])
        if p.returncode != 0:
            checks.finish()
    p = cuda_check(unsigned)
    checks.check(p.returncode == 1 and "not run" in p.stderr,
                 "an unsigned artifact's CUDA kernels are refused (exit 1)", p.stderr.strip()[-200:])
    tampered = os.path.join(work, "tampered.llmc")
    b = bytearray(open(art, "rb").read())
    b[section_offset(art, "codegen.cuda.sm_90.cubin") + 100] ^= 0x10
    open(tampered, "wb").write(bytes(b))
    p = cuda_check(tampered)
    checks.check(p.returncode == 1 and "tampered" in p.stderr,
                 "a changed cubin section is refused (exit 1)", p.stderr.strip()[-200:])
    p = cuda_check(art)
    if p.returncode == 4:
        checks.check("no usable CUDA device" in p.stderr, "no GPU: exit 4 with the reason",
                     p.stderr.strip()[-200:])
        if checks.failed:  # the refusals run everywhere: their failures fail the test
            checks.finish()
        print(f"SKIP: no usable CUDA device here ({p.stderr.strip()[-160:]}); the GPU part "
              "runs where there is one")
        sys.exit(harness.SKIP_RETURN_CODE)
    rows = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    kernels = json.loads(harness.run_llmc(["inspect", art, "--json", "--no-verify"]).stdout)[
        "codegen_cuda"]["kernels"]
    # cuda-check's token counts per kind (the op kernels are not products)
    counts = {"matvec": lambda k: (1, k["max_tokens"]), "matvec_decode": lambda k: (1,),
              "matvec_mma": lambda k: (16, 37)}
    want = {(k["symbol"], t) for k in kernels if k.get("kind") in counts
            for t in counts[k["kind"]](k)}
    got = {(r["kernel"], r["tokens"]) for r in rows}
    checks.check(p.returncode == 0 and got == want and all(r["pass"] for r in rows),
                 "every CUDA product kernel matches the CPU: 1 and 8 tokens (the one-token "
                 "kernels: 1; the tensor-core ones: 16 and 37)",
                 "; ".join(f"{r['kernel']} T={r['tokens']} err {r['max_rel_error']:.1e} "
                           f"{r['gbps']:.0f} GB/s" for r in rows) or p.stderr.strip()[-300:])
    checks.finish()


if __name__ == "__main__":
    main()
