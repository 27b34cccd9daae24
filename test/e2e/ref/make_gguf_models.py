"""Generate tiny, seeded GGUF models (via gguf-py's GGUFWriter) for the
end-to-end tests, from the same random Hugging Face weights as
make_hf_models.py.

Covers llmc's GGUF path on more storage types than the SmolLM2 file: F32,
F16, BF16 and the legacy block quants Q8_0/Q4_0/Q4_1/Q5_0/Q5_1 (quantized by
gguf-py), K-quants Q4_K/Q5_K/Q6_K (block bytes generated directly, since
gguf-py has no K-quant quantizer; any valid block is a valid weight), the
qwen2 architecture (NEOX RoPE, q/k/v biases, tied head) and a Mixtral-style
llama MoE (stacked ffn_*_exps tensors). For arch "llama" the Q/K rows are
permuted exactly as llama.cpp's convert_hf_to_gguf does, so the file is in
the interleaved-RoPE convention real GGUFs use. No tokenizer is written.

The reference reads these files back with gguf_loader (gguf-py dequantize),
so it sees exactly the stored values.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import gguf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_hf_models  # noqa: E402

Q = gguf.GGMLQuantizationType


def permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's HF -> GGUF Q/K row order (rotate_half -> interleaved)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _f16_bytes(x):
    return np.asarray(x, dtype="<f2").reshape(-1, 1).view(np.uint8)


def _pack_k_scales(sc: np.ndarray, m: np.ndarray) -> np.ndarray:
    """8 six-bit scales and mins per block -> the 12-byte K-quant layout."""
    sc = sc.astype(np.uint8)
    m = m.astype(np.uint8)
    out = np.zeros((sc.shape[0], 12), dtype=np.uint8)
    out[:, 0:4] = (sc[:, 0:4] & 0x3F) | ((sc[:, 4:8] >> 4) << 6)
    out[:, 4:8] = (m[:, 0:4] & 0x3F) | ((m[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (sc[:, 4:8] & 0x0F) | ((m[:, 4:8] & 0x0F) << 4)
    return out


def random_kquant(rng, rows: int, cols: int, qtype, std: float) -> np.ndarray:
    """Random, roughly zero-mean blocks of a K-quant type, [rows, row_bytes]
    uint8. Sub-block mins are matched to the scales so weights centre on 0;
    `std` sets the overall magnitude."""
    nb = rows * cols // 256
    if qtype in (Q.Q4_K, Q.Q5_K):
        levels = 16 if qtype == Q.Q4_K else 32
        sc = rng.integers(4, 17, size=(nb, 8))
        dmin_ratio = 2.0
        m = np.clip(np.round(sc * (levels - 1) / 2 / dmin_ratio), 0, 63)
        # weight ~ d*sc*(q - (levels-1)/2): std ~ d * E[sc] * levels/sqrt(12)
        d = np.float16(std / (10.0 * levels / np.sqrt(12.0)))
        parts = [_f16_bytes(np.full(nb, d)), _f16_bytes(np.full(nb, np.float16(float(d) * dmin_ratio))),
                 _pack_k_scales(sc, m)]
        if qtype == Q.Q5_K:
            parts.append(rng.integers(0, 256, size=(nb, 32), dtype=np.uint8))  # qh
        parts.append(rng.integers(0, 256, size=(nb, 128), dtype=np.uint8))  # qs
        blocks = np.concatenate(parts, axis=1)
    elif qtype == Q.Q6_K:
        scales = rng.integers(-24, 25, size=(nb, 16)).astype(np.int8).view(np.uint8)
        # weight = d*scale*(q-32), q uniform in 0..63: std ~ d * 14 * 18.5
        d = np.float16(std / (14.0 * 18.5))
        blocks = np.concatenate([rng.integers(0, 256, size=(nb, 128), dtype=np.uint8),
                                 rng.integers(0, 256, size=(nb, 64), dtype=np.uint8),
                                 scales, _f16_bytes(np.full(nb, d))], axis=1)
    else:
        raise ValueError(qtype)
    return blocks.reshape(rows, -1)


def _add(writer, name, arr, qtype):
    """Adds a float32 tensor stored as qtype (1-D tensors stay F32)."""
    if arr.ndim == 1 or qtype == Q.F32:
        writer.add_tensor(name, np.ascontiguousarray(arr, dtype=np.float32))
    elif qtype == Q.F16:
        writer.add_tensor(name, np.ascontiguousarray(arr, dtype=np.float16))
    else:
        data = gguf.quants.quantize(np.ascontiguousarray(arr, dtype=np.float32), qtype)
        writer.add_tensor(name, data, raw_dtype=qtype)


def write_gguf(path, cfg: dict, w: dict, qtype, kquant_seed=None):
    """HF config + HF-named float32 weights -> GGUF file. With kquant_seed,
    2-D weights are replaced by random K-quant blocks (Q6_K embedding and
    head, Q5_K o/down projections, Q4_K the rest)."""
    model_type = cfg["model_type"]
    arch = "qwen2" if model_type == "qwen2" else "llama"
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    writer = gguf.GGUFWriter(path, arch)
    writer.add_name(os.path.basename(path))
    writer.add_block_count(cfg["num_hidden_layers"])
    writer.add_context_length(cfg["max_position_embeddings"])
    writer.add_embedding_length(cfg["hidden_size"])
    writer.add_feed_forward_length(cfg["intermediate_size"])
    writer.add_head_count(nh)
    writer.add_head_count_kv(nkv)
    if hd != cfg["hidden_size"] // nh:
        writer.add_key_length(hd)
        writer.add_value_length(hd)
    writer.add_rope_dimension_count(hd)
    writer.add_rope_freq_base(cfg["rope_theta"])
    writer.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    if model_type == "mixtral":
        writer.add_expert_count(cfg["num_local_experts"])
        writer.add_expert_used_count(cfg["num_experts_per_tok"])
    rng = np.random.default_rng(kquant_seed) if kquant_seed is not None else None

    def add(name, arr, kq=Q.Q4_K):
        if rng is not None and arr.ndim == 2:
            writer.add_tensor(name, random_kquant(rng, arr.shape[0], arr.shape[1], kq, float(arr.std())),
                              raw_dtype=kq)
        else:
            _add(writer, name, arr, qtype)

    add("token_embd.weight", w["model.embed_tokens.weight"], Q.Q6_K)
    for i in range(cfg["num_hidden_layers"]):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        q, k = w[p + "self_attn.q_proj.weight"], w[p + "self_attn.k_proj.weight"]
        if arch == "llama":
            q, k = permute(q, nh), permute(k, nkv)
        add(b + "attn_norm.weight", w[p + "input_layernorm.weight"])
        add(b + "attn_q.weight", q)
        add(b + "attn_k.weight", k)
        add(b + "attn_v.weight", w[p + "self_attn.v_proj.weight"])
        add(b + "attn_output.weight", w[p + "self_attn.o_proj.weight"], Q.Q5_K)
        for s in ("q", "k", "v"):
            if p + f"self_attn.{s}_proj.bias" in w:
                add(b + f"attn_{s}.bias", w[p + f"self_attn.{s}_proj.bias"])
        add(b + "ffn_norm.weight", w[p + "post_attention_layernorm.weight"])
        if model_type == "mixtral":
            m = p + "block_sparse_moe."
            E = cfg["num_local_experts"]
            add(b + "ffn_gate_inp.weight", w[m + "gate.weight"])
            for gname, hname in (("ffn_gate_exps", "w1"), ("ffn_up_exps", "w3"), ("ffn_down_exps", "w2")):
                stacked = np.stack([w[m + f"experts.{e}.{hname}.weight"] for e in range(E)])
                _add(writer, b + gname + ".weight", stacked, qtype)
        else:
            add(b + "ffn_gate.weight", w[p + "mlp.gate_proj.weight"])
            add(b + "ffn_up.weight", w[p + "mlp.up_proj.weight"])
            add(b + "ffn_down.weight", w[p + "mlp.down_proj.weight"], Q.Q5_K)
    add("output_norm.weight", w["model.norm.weight"])
    if "lm_head.weight" in w and not cfg["tie_word_embeddings"]:
        add("output.weight", w["lm_head.weight"], Q.Q6_K)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def model_specs():
    """(name, arch, qtype, hf-config overrides, seed, kquants)."""
    specs = []
    for qt in (Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1):
        specs.append((f"gguf-llama-{qt.name.lower()}", "llama", qt, {}, 3000 + int(qt), False))
    specs.append(("gguf-qwen2-q8_0", "qwen2", Q.Q8_0, {}, 3100, False))
    specs.append(("gguf-mixtral-q8_0", "mixtral", Q.Q8_0, {}, 3101, False))
    specs.append(("gguf-llama-headdim32-f16", "llama", Q.F16, {"head_dim": 32}, 3102, False))
    # K-quants need rows that are multiples of 256.
    specs.append(("gguf-llama-kquants", "llama", Q.F32,
                  {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "head_dim": 64}, 3103, True))
    return specs


def generate_all(out_dir):
    """Writes every model; returns [(name, path)]."""
    os.makedirs(out_dir, exist_ok=True)
    made = []
    for name, arch, qt, overrides, seed, kquants in model_specs():
        cfg = make_hf_models.make_config(arch, "f32", head_dim=overrides.get("head_dim", 16))
        cfg.update(overrides)
        weights = make_hf_models.make_weights(cfg, seed)
        path = os.path.join(out_dir, name + ".gguf")
        write_gguf(path, cfg, weights, qt, kquant_seed=seed if kquants else None)
        made.append((name, path))
    return made


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_gguf_models.py OUT_DIR")
    for name, path in generate_all(sys.argv[1]):
        print(path)
