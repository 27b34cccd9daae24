"""End-to-end: llmc on tiny random Hugging Face models (config.json +
safetensors) versus the independent NumPy reference.

Models (generated here, seeded): Llama, Mistral, Qwen2 (q/k/v biases, tied
embeddings) and Mixtral (4 experts, top-2) in float32, float16 and bfloat16,
plus a sharded Llama (index.json + 2 files) and head_dim 32 != hidden/heads
variants. The reference reads the same stored f16/bf16 values widened to
float and computes in float64, so one tight tolerance serves every dtype.

Checks per model: prompt logits within tolerance, top-1 agreement, and 16
greedy tokens identical (one llmc invocation dumps logits and generates).
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import harness  # noqa: E402  (first: pins BLAS threads)
import make_hf_models  # noqa: E402
from hf_loader import load_hf  # noqa: E402

PROMPT = [5, 17, 200, 33, 9, 81, 140, 2, 77, 250, 64, 12]
N_GEN = 16
# float32 (llmc) vs float64 (reference), 2-3 layers of width 64: measured
# max abs error 1.2e-6 to 4.4e-6 with max|logit| 8 to 12.5, i.e. <= 4e-7
# relative (same for f32, f16 and bf16 storage: both sides read the same
# stored values). 2e-5 relative to max|logit| leaves a ~50x margin for other
# summation orders / CPUs, while any semantic error (wrong RoPE half, bias,
# expert routing, dtype decode) gives errors of order 1.
REL_TOL = 2e-5


def main():
    work = harness.work_dir("hf_models")
    models = make_hf_models.generate_all(os.path.join(work, "models"))
    harness.compare_generated_models(work, "tiny Hugging Face models: llmc vs NumPy reference", models, load_hf, PROMPT, N_GEN, REL_TOL)


if __name__ == "__main__":
    main()
