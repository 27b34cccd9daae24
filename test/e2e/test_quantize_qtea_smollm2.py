"""End-to-end: QTEA (ternary + 1:4 salient FP8 residuals) on SmolLM2-135M-Instruct.

llm-quantize method=qtea group=64 (qtea_g64_s5: about 2.3 bits per weight
with side data) and, for comparison, GPTQ at 2 bits g64 asymmetric (gq2a_g64,
2.5 bits per weight), everything but the embedding table, calibration 256
tokens of data/calib/default.txt in sequences of 128. Both artifacts are
scored with `llmc eval --ref GGUF` on 512 tokens of the default evaluation
text. Asserted:
- every metric is finite and the artifact runs;
- QTEA's mean KLD is below KLD_MAX = 4.85 (5.5 on CPUs without AVX-512,
  where it measured 5.0244 on 2026-12-02: why the ISA moves it is open,
  issue 15): measured 4.3915 on 2026-12-01
  (f32 activations on both sides, as compile_and_eval scores; top-1 12.5%;
  the eval ran on the runtime's library kernels), so the bound is the
  measurement + 10%. The run is deterministic (4.3915 on every run), so the
  margin is for kernel and float-order changes, not noise. A regression of
  that size fails: dropping the group fit's least-squares round measured
  5.11, dropping the FP8 residuals 13.5. (The older bound, 5.0, was set
  against 4.07, measured on 2026-11-29, before the scores moved to f32
  activations.) QTEA's KLD is also below GPTQ's at 2 bits (GPTQ 2-bit g64
  measured 12.73 in the same setting): the paper's direction (ternary +
  residual beats 2-bit GPTQ). With so little calibration data both are far
  from the reference; 1024 tokens brought QTEA to 2.60 (2026-11-29).
- the manifest records method qtea, format, out_rel_err and the .aux side
  data of every quantized matrix, and the QTEA matrices take fewer bytes
  than the 2-bit GPTQ ones.
"""
import json
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import harness  # noqa: E402

GGUF = os.path.join(harness.SOURCE_DIR, ".cache", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
CALIB = "calib-tokens=256 calib-seq=128 skip=token_embd.weight"
# Measured 4.3915 on an AVX-512 Xeon (2026-12-01) and 5.0244 on an AVX2-only
# AMD EPYC (2026-12-02, at b25a009 and fa2425a alike): the result depends on
# the ISA (an open finding, issue 15). Each bound is its machine's figure + ~10%.
def _has_avx512():
    try:
        with open("/proc/cpuinfo") as f:
            return " avx512f" in f.read()
    except OSError:
        return True


KLD_MAX = 4.85 if _has_avx512() else 5.5  # see the docstring


def matrix_bytes(manifest):
    """Bytes of the quantized block matrices (and their side data)."""
    return sum(t["nbytes"] for t in harness.weight_tensors(manifest)
               if t["name"].startswith("blk.") and ".weight" in t["name"]
               and "norm" not in t["name"])


def main():
    if not os.path.exists(GGUF):
        harness.skip(f"{GGUF} not found (run scripts/setup.sh)")
    work = harness.work_dir("quantize_qtea_smollm2")
    checks = harness.Checks("llm-quantize method=qtea on SmolLM2-135M-Instruct")

    art_q, qtea = harness.compile_and_eval(work, "qtea-g64",
                                   f"llm-quantize{{method=qtea group=64 {CALIB}}}")
    art_g, gptq = harness.compile_and_eval(work, "gptq2-g64",
                                   f"llm-quantize{{method=gptq bits=2 group=64 sym=false {CALIB}}}")
    print(f"{'method':<12} {'kld_mean':>9} {'kld_p99':>8} {'top1%':>6} {'ppl':>10} {'compile_s':>9}")
    for label, r in (("qtea g64", qtea), ("gptq2 g64", gptq)):
        print(f"{label:<12} {r['kld_mean']:9.4f} {r['kld_p99']:8.3f} {r['top1']:6.1f} "
              f"{r['ppl']:10.3f} {r['compile_s']:9.1f}")

    checks.check(all(math.isfinite(qtea[k]) for k in ("kld_mean", "ppl", "top1")),
                 "QTEA: KLD / ppl / top-1 finite")
    checks.check(qtea["kld_mean"] < KLD_MAX, f"QTEA g64 mean KLD below {KLD_MAX}",
                 f"{qtea['kld_mean']:.4f}")
    checks.check(qtea["kld_mean"] < gptq["kld_mean"], "QTEA g64 KLD below GPTQ 2-bit g64",
                 f"qtea {qtea['kld_mean']:.4f} vs gptq {gptq['kld_mean']:.4f}")

    p = harness.run_llmc(["run", art_q, "-p", "The capital of France is", "-n", "8"], check=False)
    checks.check(p.returncode == 0 and "generated 8 tokens" in p.stderr,
                 "the QTEA artifact generates text", p.stderr.strip()[-200:])

    mq = json.loads(harness.run_llmc(["inspect", art_q, "--json", "--no-verify"]).stdout)
    mg = json.loads(harness.run_llmc(["inspect", art_g, "--json", "--no-verify"]).stdout)
    info = mq.get("weight_transforms", {}).get("blk.3.ffn_down.weight", {})
    checks.check(info.get("method") == "qtea" and info.get("format") == "qtea_g64_s5"
                 and info.get("calibration_tokens") == 256 and "out_rel_err" in info
                 and info.get("hessian") == "calibration",
                 "manifest records method, format, calibration and output error", json.dumps(info))
    dtypes = {t["name"]: t["dtype"] for t in harness.weight_tensors(mq)}
    mats = [n for n in dtypes if n.startswith("blk.") and n.endswith(".weight") and "norm" not in n]
    checks.check(len(mats) == 30 * 7 and all(dtypes[n] == "qtea_g64_s5" for n in mats)
                 and all(dtypes.get(n + ".aux") == "u8" for n in mats),
                 "every block matrix is qtea_g64_s5 with a u8 .aux side data tensor",
                 f"{len(mats)} matrices")
    bq, bg = matrix_bytes(mq), matrix_bytes(mg)
    checks.check(0 < bq < bg, "QTEA matrices (with side data) smaller than 2-bit GPTQ's",
                 f"{bq} vs {bg} bytes")
    checks.finish()


if __name__ == "__main__":
    main()
