"""Self-check of the NumPy reference and fixture writers (does not run llmc).

  * GGUF loader: a float32 GGUF written with llama.cpp's Q/K permutation and
    read back with the reverse permutation + rotate_half gives the same
    logits as the Hugging Face weights it came from (llama, qwen2, mixtral).
  * RoPE conventions: the interleaved-pair RoPE (llama2.c) on GGUF-order Q/K
    equals rotate_half on HF-order Q/K, i.e. the two reference RoPE paths and
    the permutation agree with each other.
  * KV cache: incremental decoding equals a full recompute.
  * safetensors writer/reader agree with the `safetensors` package; bf16
    rounding/widening is exact.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import harness  # noqa: E402
import numpy as np  # noqa: E402
import make_gguf_models  # noqa: E402
import make_hf_models  # noqa: E402
import safetensors_io  # noqa: E402
from gguf_loader import load_gguf, reverse_permute  # noqa: E402
from hf_loader import config_from_hf, load_hf  # noqa: E402
from llama_ref import KVCache, RefModel  # noqa: E402

PROMPT = [5, 17, 200, 33, 9, 81, 140, 2, 77, 250, 64, 12]
TIGHT = 1e-9  # float64 vs float64: only summation order differs


def maxdiff(a, b):
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


def main():
    work = harness.work_dir("reference_selfcheck")
    checks = harness.Checks("NumPy reference self-check")
    gguf_q = make_gguf_models.Q

    for arch, head_dim in (("llama", 16), ("llama", 32), ("qwen2", 16), ("mixtral", 16)):
        cfg = make_hf_models.make_config(arch, "f32", head_dim=head_dim)
        w = make_hf_models.make_weights(cfg, 42)
        hf_dir = os.path.join(work, f"hf-{arch}-{head_dim}")
        make_hf_models.write_model(hf_dir, cfg, w)
        hf = load_hf(hf_dir)
        path = os.path.join(work, f"{arch}-{head_dim}.gguf")
        make_gguf_models.write_gguf(path, cfg, w, gguf_q.F32)
        g = load_gguf(path)
        d = maxdiff(g.logits(PROMPT), hf.logits(PROMPT))
        checks.check(d < TIGHT, f"GGUF {arch} head_dim {head_dim} ({'NEOX order' if arch == 'qwen2' else 'permuted Q/K'}) == HF weights", f"max diff {d:.3g}")

        if arch != "qwen2":
            # interleaved RoPE on GGUF-order Q/K == rotate_half on HF order
            nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
            wi = dict(w)
            for i in range(cfg["num_hidden_layers"]):
                p = f"model.layers.{i}.self_attn."
                wi[p + "q_proj.weight"] = make_gguf_models.permute(w[p + "q_proj.weight"], nh)
                wi[p + "k_proj.weight"] = make_gguf_models.permute(w[p + "k_proj.weight"], nkv)
                back = reverse_permute(wi[p + "q_proj.weight"], nh)
                if not np.array_equal(back, w[p + "q_proj.weight"]):
                    checks.check(False, "reverse_permute inverts permute")
            c = config_from_hf(cfg)
            c.rope_style = "interleaved"
            inter = RefModel(c, wi)
            d = maxdiff(inter.logits(PROMPT), hf.logits(PROMPT))
            checks.check(d < TIGHT, f"{arch} head_dim {head_dim}: interleaved RoPE on permuted Q/K == rotate_half",
                         f"max diff {d:.3g}")

        # KV cache vs full recompute
        cache = KVCache(hf.c.num_layers)
        parts = [hf.forward(PROMPT[:5], cache)] + [hf.forward([t], cache) for t in PROMPT[5:]]
        d = maxdiff(np.concatenate(parts), hf.logits(PROMPT))
        checks.check(d < TIGHT, f"{arch} head_dim {head_dim}: KV-cache decoding == full recompute", f"max diff {d:.3g}")

    # safetensors writer/reader vs the safetensors package
    from safetensors.numpy import load_file
    rng = np.random.default_rng(0)
    x = {"a": rng.standard_normal((7, 5)).astype(np.float32), "b": rng.standard_normal(3).astype(np.float32)}
    for dt in ("F32", "F16"):
        p = os.path.join(work, f"t-{dt}.safetensors")
        safetensors_io.write(p, x, dt)
        pkg = load_file(p)
        mine = safetensors_io.read(p)
        ok = all(np.array_equal(pkg[k].astype(np.float32), mine[k]) for k in x)
        checks.check(ok, f"safetensors {dt}: own reader == safetensors package")
    bits = safetensors_io.f32_to_bf16_bits(np.array([1.0, -2.5, 1.00390625, 1.01171875, 3.0e-3], np.float32))
    back = safetensors_io.bf16_bits_to_f32(bits)
    # 1.00390625 is halfway between bf16 1.0 and 1.0078125: ties to even -> 1.0;
    # 1.01171875 is halfway between 1.0078125 and 1.015625: ties to even -> up
    want = np.array([1.0, -2.5, 1.0, 1.015625, 0.0030059814453125], np.float32)
    checks.check(np.allclose(back, want, rtol=0, atol=1e-9), "bf16 round-to-nearest-even and widening",
                 f"{back.tolist()}")
    checks.finish()


if __name__ == "__main__":
    main()
