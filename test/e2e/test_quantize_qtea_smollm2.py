"""End-to-end: QTEA (ternary + 1:4 salient FP8 residuals) on SmolLM2-135M-Instruct.

llm-quantize method=qtea group=64 (qtea_g64_s5: about 2.3 bits per weight
with side data) and, for comparison, GPTQ at 2 bits g64 asymmetric (gq2a_g64,
2.5 bits per weight), everything but the embedding table, calibration 256
tokens of data/calib/default.txt in sequences of 128. Both artifacts are
scored with `llmc eval --ref GGUF` on 512 tokens of the default evaluation
text. Asserted:
- every metric is finite and the artifact runs;
- QTEA's mean KLD is below KLD_MAX = 5.5: measured 5.0244 (f32
  activations on both sides, as compile_and_eval scores; top-1 12.5%), so
  the bound is the measurement + ~10%. The compile is deterministic and,
  since Eigen is built without cpuid (EIGEN_NO_CPUID, 2026-12-03), the same
  on every machine: before, Eigen sized its triangular-solve blocks from
  the L1 data cache, and the same sources measured 5.0244 on 32 KiB-L1
  EPYCs (AVX2-only and AVX-512 alike) against 4.3915 on a 48 KiB-L1 Xeon
  (4.7914 on a 32 KiB EPYC told to assume 48 KiB). With 256 calibration
  tokens every Hessian is rank-deficient and QTEA's discrete choices turn
  last-bit differences into ~10% of KLD, hence the margin. A regression of
  that size fails (dropping the FP8 residuals measured 13.5 on the Xeon); dropping the
  group fit's least-squares round moves it only to 5.0301 here, below what
  this test can see (the Qtea unit tests cover the fit). (Older bounds: 5.0
  against 4.07 on 2026-11-29, before the scores moved to f32
  activations.) QTEA's KLD is also below GPTQ's at 2 bits (GPTQ 2-bit g64
  measured 10.478 in the same setting, 2026-12-03): the paper's direction (ternary +
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
KLD_MAX = 5.5  # see the docstring


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
