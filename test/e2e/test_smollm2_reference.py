"""End-to-end: llmc on SmolLM2-135M-Instruct (GGUF, Q4_1/Q8_0, llama arch)
versus the independent NumPy reference.

The reference dequantizes with gguf-py, undoes llama.cpp's Q/K row
permutation (as transformers' GGUF loader does) and runs HF rotate_half RoPE
in float64; llmc runs interleaved RoPE on the stored order in float32, so the
two RoPE paths are independent. Quantized weights are dequantized exactly
in both, so the only differences are float32 rounding.

Checks: prompt logits within tolerance, top-1 agreement, 32 greedy tokens
identical, and identical logits/tokens through a compiled .llmc artifact.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import harness  # noqa: E402  (first: pins BLAS threads)
import numpy as np  # noqa: E402

# "The quick brown fox jumps over the lazy dog. Once upon a time," tokenized
# once with the GGUF's own BPE (tokenizers.models.BPE over
# tokenizer.ggml.tokens/merges, byte-level pre-tokenizer), no BOS.
PROMPT = [504, 2365, 6354, 16438, 27003, 690, 260, 23790, 2767, 30, 4027, 1980, 253, 655, 28]
N_GEN = 32
# float32 (llmc) vs float64 (reference), 30 layers: measured max abs error
# 3.6e-5 (mean 5.6e-6) with max|logit| 32.7, i.e. 1.1e-6 relative. 5e-5
# relative to max|logit| (1.6e-3 here) leaves a ~45x margin for other
# summation orders / thread counts / CPUs, while any semantic error (RoPE,
# GQA mapping, dequantization) gives errors of order the logits.
REL_TOL = 5e-5


def main():
    model_path = os.path.join(harness.SOURCE_DIR, ".cache", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(model_path):
        harness.skip(f"{model_path} not found")
    from gguf_loader import load_gguf

    work = harness.work_dir("smollm2")
    checks = harness.Checks(f"SmolLM2-135M Q4_1: llmc vs NumPy reference ({model_path})")

    # f32 activations: the reference computes in f32 (the kernel engine's
    # default int8 activations are checked by test_kernel_plan).
    exact = ["--exact-activations"]
    got_logits = harness.llmc_logits(model_path, PROMPT, os.path.join(work, "direct.npy"), exact)
    got_ids = harness.llmc_greedy(model_path, PROMPT, N_GEN, exact)

    ref = load_gguf(model_path)
    ref_logits, ref_ids = ref.greedy(PROMPT, N_GEN)

    stats = harness.compare_logits(checks, "direct", got_logits, ref_logits, REL_TOL)
    tol = REL_TOL * max(1.0, stats["max_logit"]) if isinstance(stats, dict) else 1e-1
    harness.compare_greedy(checks, "direct", got_ids, ref, PROMPT, ref_ids, tol)

    art = os.path.join(work, "smollm2.llmc")
    harness.run_llmc(["compile", model_path, "-o", art, "-q"])
    checks.check(os.path.isfile(art), "compile writes the artifact", f"{os.path.getsize(art) / 2**20:.1f} MiB")
    insp = harness.run_llmc(["inspect", art], check=False)
    checks.check(insp.returncode == 0 and "llama" in insp.stdout.lower(), "inspect the artifact",
                 f"exit {insp.returncode}")
    art_logits, art_ids = harness.llmc_logits_and_greedy(art, PROMPT, N_GEN,
                                                         os.path.join(work, "artifact.npy"), exact)
    diff = (float(np.abs(art_logits.astype(np.float64) - got_logits).max())
            if art_logits.shape == got_logits.shape else float("inf"))
    checks.check(diff == 0.0, "artifact logits identical to the direct run", f"max abs diff {diff:.3g}")
    checks.check(art_ids == got_ids, "artifact greedy tokens identical to the direct run",
                 " ".join(map(str, art_ids)))
    checks.finish()


if __name__ == "__main__":
    main()
