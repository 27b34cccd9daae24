#!/usr/bin/env python3
"""Write the fuzz targets' seed inputs into test/fuzz/corpus/ (committed, so
the fuzz tests need neither Python nor a model): a tiny random Llama as GGUF
(F32, F16), as a Hugging Face safetensors file and config.json, as a
llama2.c checkpoint and as llmc artifacts (with and without a kernel plan,
unsigned), and OpenAI request bodies. Every seed is small (the largest is a
few hundred KB), so mutations stay fast.

Usage: .venv/bin/python test/fuzz/make_seeds.py [--llmc build/bin/llmc]
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "test", "e2e", "ref"))

import numpy as np  # noqa: E402
import gguf  # noqa: E402
import make_gguf_models  # noqa: E402
import make_hf_models  # noqa: E402


def tiny_config():
    cfg = make_hf_models.make_config("llama", "f32", head_dim=4, layers=1)
    cfg.update(hidden_size=8, intermediate_size=16, num_attention_heads=2,
               num_key_value_heads=1, vocab_size=16, max_position_embeddings=64)
    return cfg


def tiny_moe_config():
    """Mixtral-style, 2 experts of 8 rows, top-1: Q8_0 blocks of 32, so the
    expert slabs are packed in the eight-row layout."""
    cfg = make_hf_models.make_config("mixtral", "f32", head_dim=16, layers=1)
    cfg.update(hidden_size=32, intermediate_size=32, num_attention_heads=2,
               num_key_value_heads=1, vocab_size=16, max_position_embeddings=64,
               num_local_experts=2, num_experts_per_tok=1)
    return cfg


def llama2c_bytes(rng, dim=8, hidden=16, layers=1, heads=2, kv_heads=1, vocab=16, seq=16):
    head = dim // heads
    kvd = kv_heads * head
    sizes = [vocab * dim, layers * dim, layers * dim * dim, layers * dim * kvd,
             layers * dim * kvd, layers * dim * dim, layers * dim, layers * hidden * dim,
             layers * dim * hidden, layers * hidden * dim, dim, seq * head // 2, seq * head // 2]
    out = struct.pack("<7i", dim, hidden, layers, heads, kv_heads, vocab, seq)
    for n in sizes:
        out += rng.standard_normal(n).astype("<f4").tobytes()
    return out


REQUESTS = [
    {"prompt": [1, 2, 3], "max_tokens": 4},
    {"prompt": [5, 6], "max_tokens": 8, "temperature": 0.7, "top_p": 0.9, "top_k": 5,
     "seed": 3, "stop": ["\n", "END"], "stream": True, "stream_options": {"include_usage": True}},
    {"messages": [{"role": "system", "content": "Be brief."},
                  {"role": "user", "content": "Hi"}], "max_tokens": 2},
    {"model": "m", "prompt": ["text"], "n": 1, "echo": False},
]


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llmc", default=os.path.join(REPO, "build", "bin", "llmc"))
    args = ap.parse_args()
    corpus = os.path.join(HERE, "corpus")
    for t in ("gguf", "hf", "llama2c", "onnx", "artifact", "request"):
        os.makedirs(os.path.join(corpus, t), exist_ok=True)
        for f in os.listdir(os.path.join(corpus, t)):
            if not f.startswith("regress-"):  # inputs that once failed stay
                os.remove(os.path.join(corpus, t, f))
    cfg = tiny_config()
    weights = make_hf_models.make_weights(cfg, seed=7)
    with tempfile.TemporaryDirectory() as tmp:
        for name, q in (("f32", gguf.GGMLQuantizationType.F32),
                        ("f16", gguf.GGMLQuantizationType.F16)):
            path = os.path.join(tmp, f"tiny-{name}.gguf")
            make_gguf_models.write_gguf(path, cfg, weights, q)
            shutil.copy(path, os.path.join(corpus, "gguf", f"tiny-{name}.gguf"))
        hf = os.path.join(tmp, "hf")
        make_hf_models.write_model(hf, cfg, weights)
        with open(os.path.join(hf, "model.safetensors"), "rb") as f:
            write(os.path.join(corpus, "hf", "safetensors"), b"\x00" + f.read())
        with open(os.path.join(hf, "config.json"), "rb") as f:
            write(os.path.join(corpus, "hf", "config"), b"\x01" + f.read())
        write(os.path.join(corpus, "llama2c", "tiny.bin"),
              llama2c_bytes(np.random.default_rng(3)))
        for name, extra in (("plan", []), ("reference", ["--no-kernels"])):
            out = os.path.join(corpus, "artifact", f"tiny-{name}.llmc")
            subprocess.run([args.llmc, "compile", os.path.join(tmp, "tiny-f32.gguf"), "-o", out,
                            "--no-sign", "--no-ir", *extra], check=True, capture_output=True)
        # An MoE model's kernel plan (norm_moe steps, expert slabs).
        moe = tiny_moe_config()
        path = os.path.join(tmp, "tiny-moe.gguf")
        make_gguf_models.write_gguf(path, moe, make_hf_models.make_weights(moe, seed=11),
                                    gguf.GGMLQuantizationType.Q8_0)
        subprocess.run([args.llmc, "compile", path, "-o",
                        os.path.join(corpus, "artifact", "tiny-moe-plan.llmc"), "--no-sign",
                        "--no-ir"], check=True, capture_output=True)
    # ONNX: the committed exporter fixtures under max_len (a GELU Llama the
    # raiser refuses late, and the external-data graphs), and tiny exports of
    # the raised patterns (Phi-3's fused projections, OLMo's LayerNorms).
    for sub in ("bad", "seeds"):
        onnx_dir = os.path.join(REPO, "test", "fixtures", "onnx", sub)
        for f in sorted(os.listdir(onnx_dir)):
            shutil.copy(os.path.join(onnx_dir, f), os.path.join(corpus, "onnx", f))
    for i, r in enumerate(REQUESTS):
        write(os.path.join(corpus, "request", f"body{i}.json"), json.dumps(r).encode())
    for root, _, files in os.walk(corpus):
        for f in sorted(files):
            p = os.path.join(root, f)
            print(f"{os.path.relpath(p, REPO)}: {os.path.getsize(p)} bytes")


if __name__ == "__main__":
    main()
