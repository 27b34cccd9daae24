"""End-to-end: `llmc compile --target cuda` on a machine with the CUDA
toolkit (NVRTC) and no GPU.

On SmolLM2-135M-Instruct (Q4_1 as shipped: q4_1 and q8_0 products of 576
and 1536) and stories260K (f32; its 172-wide FFN rows get no kernel):
- `--target cpu,cuda` writes one artifact carrying both: the manifest's
  "codegen_cuda" lists a matvec kernel per (format, width) of the model's
  products, the RMSNorm and gate kernels its ops need, the embedding lookup
  and (SmolLM2: heads of 64) RoPE + KV append and split-KV attention, with
  cubin sections for sm_80 and sm_90 (ELF) and a PTX
  section for compute_80 whose entries are the kernels; `llmc inspect`
  prints a "codegen cuda" line; the CUDA source is stored;
- the artifact still runs on the CPU with its generated kernels and gives
  the greedy tokens of a `--target cpu` artifact;
- `--target cuda` alone carries no CPU objects (no "codegen") and still runs
  (library kernels), with the same tokens;
- bad flags: `--target gpu`, `--target cuda --no-kernels`: exit 2, no
  artifact written.
NVRTC missing: skipped (failed under CI=true: this machine kind ships it).
"""
import ctypes.util
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import harness  # noqa: E402

STORIES = os.path.join(harness.shared_dir(), "models", "stories260K.bin")
PROMPT = "1,403,407,261,378,280,250"


def nvrtc_present():
    for name in ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"):
        try:
            ctypes.CDLL(name)
            return True
        except OSError:
            pass
    return os.path.exists("/usr/local/cuda/lib64/libnvrtc.so")


def greedy(art):
    p = harness.run_llmc(["run", art, "--prompt-tokens", PROMPT, "-n", "16", "--print-ids",
                          "--ignore-eos", "-q"], check=False, timeout=300)
    return p.returncode, p.stdout.split()


def manifest(art):
    return json.loads(harness.run_llmc(["inspect", art, "--json", "--no-verify"]).stdout)


def model_checks(checks, title, model, work, want, want_ops):
    """want: the (format, width) pairs the model's products must have kernels
    for; want_ops: op kernel symbols it must have."""
    both = os.path.join(work, f"{title}-both.llmc")
    cpu = os.path.join(work, f"{title}-cpu.llmc")
    cuda = os.path.join(work, f"{title}-cuda.llmc")
    for art, target in ((both, "cpu,cuda"), (cpu, "cpu"), (cuda, "cuda")):
        p = harness.run_llmc(["compile", model, "-o", art, "--target", target], check=False,
                             timeout=900)
        checks.check(p.returncode == 0 and os.path.exists(art),
                     f"{title}: compile --target {target}",
                     f"exit {p.returncode}; {p.stderr.strip()[-300:]}")
        if p.returncode != 0:
            return
    m = manifest(both)
    cg = m.get("codegen_cuda", {})
    kernels = {(k["dtype"], k["cols"]) for k in cg.get("kernels", []) if k["kind"] == "matvec"}
    checks.check(kernels == want, f"{title}: a CUDA matvec kernel per (format, width) product",
                 f"kernels {sorted(kernels)}, want {sorted(want)}")
    decode = {(k["dtype"], k["cols"]) for k in cg.get("kernels", [])
              if k["kind"] == "matvec_decode" and k.get("max_tokens") == 1}
    checks.check(decode == want, f"{title}: a one-token (decode) matvec kernel per product too",
                 f"kernels {sorted(decode)}, want {sorted(want)}")
    ops = {k["symbol"] for k in cg.get("kernels", []) if k["kind"] not in ("matvec", "matvec_decode")}
    checks.check(want_ops <= ops, f"{title}: the op kernels its norms and gates need",
                 f"ops {sorted(ops)}, want at least {sorted(want_ops)}")
    tensors = {t["name"]: t for t in m.get("tensors", [])}
    sections = dict(cg.get("cubin", {}), **cg.get("ptx", {}))
    checks.check(sorted(sections) == ["compute_80", "sm_80", "sm_90"] and
                 all(s in tensors for s in sections.values()) and
                 cg.get("source") in tensors and "codegen" in m,
                 f"{title}: cubin for sm_80 and sm_90, PTX for compute_80, the source, and "
                 "the CPU objects, in one artifact", json.dumps(cg)[:300])
    out = harness.run_llmc(["inspect", both]).stdout
    checks.check("codegen cuda:" in out and "sm_90 cubin" in out and "codegen cpu:" in out,
                 f"{title}: llmc inspect prints both backends",
                 "\n".join(l for l in out.splitlines() if l.startswith("codegen")))
    # The PTX section's kernels: read its bytes through the artifact's offsets.
    ptx_name = cg.get("ptx", {}).get("compute_80")
    if ptx_name in tensors:
        t = tensors[ptx_name]
        with open(both, "rb") as f:
            data_offset = int.from_bytes(f.read(64)[32:40], "little")  # the header's
            f.seek(data_offset + t["offset"])
            ptx = f.read(t["nbytes"]).decode("ascii", "replace")
        entries = {k["symbol"] for k in cg["kernels"]}
        checks.check(all(f".entry {e}" in ptx for e in entries),
                     f"{title}: the PTX defines every listed kernel",
                     f"{len(entries)} kernels, {len(ptx)} bytes of PTX")
    rc_both, ids_both = greedy(both)
    rc_cpu, ids_cpu = greedy(cpu)
    rc_cuda, ids_cuda = greedy(cuda)
    checks.check(rc_both == 0 and rc_cpu == 0 and ids_both == ids_cpu and len(ids_cpu) == 16,
                 f"{title}: the cpu,cuda artifact runs on the CPU with the cpu artifact's tokens",
                 f"{ids_both[:8]} vs {ids_cpu[:8]}")
    mc = manifest(cuda)
    checks.check(rc_cuda == 0 and "codegen" not in mc and "codegen_cuda" in mc,
                 f"{title}: --target cuda alone carries no CPU objects and still runs",
                 f"exit {rc_cuda}; keys {sorted(k for k in mc if k.startswith('codegen'))}")


def main():
    checks = harness.Checks("llmc compile --target cuda: CUDA kernels built by NVRTC, no GPU")
    if not nvrtc_present():
        harness.skip("libnvrtc (the CUDA toolkit's NVRTC) not found")
    work = harness.work_dir("cuda_codegen")
    if os.path.exists(harness.SMOLLM2_GGUF):
        model_checks(checks, "SmolLM2", harness.SMOLLM2_GGUF, work,
                     {("q4_1", 576), ("q4_1", 1536), ("q8_0", 576)},
                     {"llmc_cu_rms_norm_576", "llmc_cu_gate_silu", "llmc_cu_embed_q8_0_576",
                      "llmc_cu_rope_kv_9_3_64_interleaved_100000", "llmc_cu_attend_9_3_64",
                      "llmc_cu_attend_combine_9_64"})
    else:
        harness.skip_part(f"{harness.SMOLLM2_GGUF} missing (scripts/setup.sh fetches it)")
    if os.path.exists(STORIES):
        # Its FFN down projection reads 172-wide rows: no kernel (widths % 32 only);
        # its heads of 8 have no attention kernels (head sizes % 32 only).
        model_checks(checks, "stories260K", STORIES, work, {("f32", 64)},
                     {"llmc_cu_rms_norm_64", "llmc_cu_gate_silu", "llmc_cu_embed_f32_64"})
        for extra, what in ((["--target", "gpu"], "--target gpu"),
                            (["--target", "cuda", "--no-kernels"], "--target cuda --no-kernels")):
            art = os.path.join(work, "bad.llmc")
            p = harness.run_llmc(["compile", STORIES, "-o", art, *extra], check=False)
            checks.check(p.returncode == 2 and not os.path.exists(art),
                         f"{what}: exit 2, nothing written",
                         f"exit {p.returncode}; {p.stderr.strip()[-200:]}")
    else:
        harness.skip_part(f"{STORIES} missing")
    checks.finish()


if __name__ == "__main__":
    main()
