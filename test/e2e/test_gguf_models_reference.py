"""End-to-end: llmc on tiny generated GGUF files versus the independent NumPy
reference (gguf-py dequantization, reverse Q/K permutation, rotate_half).

Storage types: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 (llama arch), a
mixed Q4_K/Q5_K/Q6_K model, qwen2 (NEOX RoPE, biases, tied head), a
Mixtral-style llama MoE and a head_dim 32 != hidden/heads model. Both sides
use exactly the stored (dequantized) weights, so one tight tolerance holds
for every type.

Checks per model: prompt logits within tolerance, top-1 agreement, and 16
greedy tokens identical.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import harness  # noqa: E402  (first: pins BLAS threads)
import make_gguf_models  # noqa: E402
from gguf_loader import load_gguf  # noqa: E402

PROMPT = [5, 17, 200, 33, 9, 81, 140, 2, 77, 250, 64, 12]
N_GEN = 16
# float32 (llmc) vs float64 (reference): measured max abs error 1.3e-6 to
# 1.3e-5 with max|logit| 8 to 19, i.e. <= 7e-7 relative. 2e-5 relative to
# max|logit| leaves a ~30x margin for other summation orders / CPUs, while
# any semantic error (RoPE order, dequantization, bias, expert routing)
# gives errors of order 1.
REL_TOL = 2e-5


def main():
    work = harness.work_dir("gguf_models")
    models = make_gguf_models.generate_all(os.path.join(work, "models"))
    harness.compare_generated_models(work, "tiny GGUF models: llmc vs NumPy reference", models, load_gguf, PROMPT, N_GEN, REL_TOL)


if __name__ == "__main__":
    main()
