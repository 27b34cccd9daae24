"""Generate tiny, seeded, random Hugging Face models (config.json +
safetensors) for the end-to-end tests.

    python make_hf_models.py OUT_DIR        # writes OUT_DIR/<name>/...

Models: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM (q/k/v biases,
tied embeddings) and MixtralForCausalLM (4 experts, top-2), each stored in
float32, float16 and bfloat16; plus a sharded Llama (two safetensors files +
model.safetensors.index.json) and a Llama whose head_dim (32) differs from
hidden/heads (16); and OlmoForCausalLM (LayerNorms without parameters) and
Phi3ForCausalLM (fused qkv_proj and gate_up_proj), one dtype each. Tensor
names and config keys are the real Hugging Face
ones. Weights are drawn in float32 and then rounded to the storage dtype; the
reference reads back the stored values, so it sees exactly what llmc sees.
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

DTYPES = {"f32": ("F32", "float32"), "f16": ("F16", "float16"), "bf16": ("BF16", "bfloat16")}
ARCHS = ["llama", "mistral", "qwen2", "mixtral"]
_ARCH_CLASS = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
               "qwen2": "Qwen2ForCausalLM", "mixtral": "MixtralForCausalLM",
               "olmo": "OlmoForCausalLM", "phi3": "Phi3ForCausalLM"}
_MODEL_TYPE = {a: a for a in _ARCH_CLASS}


def make_config(arch, dtype_name, head_dim=16, layers=None):
    cfg = {
        "architectures": [_ARCH_CLASS[arch]],
        "model_type": _MODEL_TYPE[arch],
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": layers or (3 if arch in ("llama", "qwen2") else 2),
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": head_dim,
        "rms_norm_eps": 1e-5 if arch != "qwen2" else 1e-6,
        "rope_theta": {"llama": 10000.0, "mistral": 1000000.0, "qwen2": 1000000.0,
                       "mixtral": 1000000.0, "olmo": 10000.0, "phi3": 50000.0}[arch],
        "vocab_size": 256,
        "max_position_embeddings": 512,
        "tie_word_embeddings": arch == "qwen2",
        "torch_dtype": DTYPES[dtype_name][1],
        "hidden_act": "silu",
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    if arch == "mistral":
        cfg["sliding_window"] = 4096
    if arch == "qwen2":
        cfg["use_sliding_window"] = False
    if arch == "mixtral":
        cfg["num_local_experts"] = 4
        cfg["num_experts_per_tok"] = 2
    if arch == "olmo":  # OlmoLayerNorm: no parameters, eps fixed at 1e-5
        del cfg["rms_norm_eps"]
        cfg["clip_qkv"] = None
    if arch == "phi3":
        cfg["rope_scaling"] = None
        cfg["original_max_position_embeddings"] = 512
    return cfg


def make_weights(cfg, seed):
    """float32 weights with HF names. Scales chosen so the logits have a
    spread of several units (non-trivial argmax, distinct greedy paths)."""
    rng = np.random.default_rng(seed)
    h, inter, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    arch = cfg["model_type"]

    def mat(out, inp, std):
        return (rng.standard_normal((out, inp)) * std).astype(np.float32)

    def norm_w(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    # A tied head reads the residual stream back through the embedding, so a
    # large embedding makes the model echo its input token: keep the
    # embedding small and let a large final norm weight spread the logits.
    tied = cfg["tie_word_embeddings"]
    w = {"model.embed_tokens.weight": mat(v, h, 0.05 if tied else 1.0)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm_w(h)
        w[p + "self_attn.q_proj.weight"] = mat(nh * hd, h, 0.1)
        w[p + "self_attn.k_proj.weight"] = mat(nkv * hd, h, 0.1)
        w[p + "self_attn.v_proj.weight"] = mat(nkv * hd, h, 0.1)
        w[p + "self_attn.o_proj.weight"] = mat(h, nh * hd, 0.08)
        if arch == "qwen2":
            w[p + "self_attn.q_proj.bias"] = (rng.standard_normal(nh * hd) * 0.1).astype(np.float32)
            w[p + "self_attn.k_proj.bias"] = (rng.standard_normal(nkv * hd) * 0.1).astype(np.float32)
            w[p + "self_attn.v_proj.bias"] = (rng.standard_normal(nkv * hd) * 0.1).astype(np.float32)
        w[p + "post_attention_layernorm.weight"] = norm_w(h)
        if arch == "mixtral":
            m = p + "block_sparse_moe."
            w[m + "gate.weight"] = mat(cfg["num_local_experts"], h, 0.3)
            for e in range(cfg["num_local_experts"]):
                w[m + f"experts.{e}.w1.weight"] = mat(inter, h, 0.1)
                w[m + f"experts.{e}.w2.weight"] = mat(h, inter, 0.08)
                w[m + f"experts.{e}.w3.weight"] = mat(inter, h, 0.1)
        else:
            w[p + "mlp.gate_proj.weight"] = mat(inter, h, 0.1)
            w[p + "mlp.up_proj.weight"] = mat(inter, h, 0.1)
            w[p + "mlp.down_proj.weight"] = mat(h, inter, 0.08)
    w["model.norm.weight"] = norm_w(h) * (8.0 if tied else 1.0)
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = mat(v, h, 0.3)
    if arch == "olmo":
        w = {n: t for n, t in w.items() if "norm" not in n}
    if arch == "phi3":  # rows [q; k; v] and [gate; up] in one matrix each
        for i in range(cfg["num_hidden_layers"]):
            p = f"model.layers.{i}."
            w[p + "self_attn.qkv_proj.weight"] = np.concatenate(
                [w.pop(p + f"self_attn.{x}_proj.weight") for x in "qkv"])
            w[p + "mlp.gate_up_proj.weight"] = np.concatenate(
                [w.pop(p + "mlp.gate_proj.weight"), w.pop(p + "mlp.up_proj.weight")])
    return w


def write_model(folder, cfg, weights, shards=1):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    st_dtype = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}[cfg["torch_dtype"]]
    meta = {"format": "pt"}
    if shards == 1:
        safetensors_io.write(os.path.join(folder, "model.safetensors"), weights, st_dtype, meta)
        return
    names = list(weights)
    per = (len(names) + shards - 1) // shards
    weight_map = {}
    total = 0
    for s in range(shards):
        part = names[s * per : (s + 1) * per]
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        safetensors_io.write(os.path.join(folder, fname), {n: weights[n] for n in part}, st_dtype, meta)
        for n in part:
            weight_map[n] = fname
            total += weights[n].size * (4 if st_dtype == "F32" else 2)
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def model_specs():
    """(name, arch, dtype, head_dim, shards, seed) for every generated model."""
    specs = []
    for ai, arch in enumerate(ARCHS):
        for di, dt in enumerate(DTYPES):
            specs.append((f"{arch}-{dt}", arch, dt, 16, 1, 1000 + 10 * ai + di))
    specs.append(("llama-f32-sharded", "llama", "f32", 16, 2, 2000))
    specs.append(("llama-bf16-headdim32", "llama", "bf16", 32, 1, 2001))
    specs.append(("qwen2-f16-headdim32", "qwen2", "f16", 32, 1, 2002))
    specs.append(("olmo-bf16", "olmo", "bf16", 16, 1, 2003))
    specs.append(("phi3-f16", "phi3", "f16", 16, 1, 2004))
    return specs


def generate_all(out_dir):
    """Writes every model; returns [(name, folder)]."""
    made = []
    for name, arch, dt, head_dim, shards, seed in model_specs():
        cfg = make_config(arch, dt, head_dim=head_dim)
        folder = os.path.join(out_dir, name)
        write_model(folder, cfg, make_weights(cfg, seed), shards=shards)
        made.append((name, folder))
    return made


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_hf_models.py OUT_DIR")
    for name, folder in generate_all(sys.argv[1]):
        print(folder)
