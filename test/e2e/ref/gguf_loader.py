"""GGUF file -> reference model, via gguf-py (GGUFReader + quants.dequantize).

Architectures "llama" (also Mistral and Mixtral files) and "qwen2". For
"llama", convert_hf_to_gguf permuted the rows of Q and K so that the
interleaved-pair RoPE of llama.cpp matches HF's rotate_half. We undo that
permutation exactly as transformers' GGUF loader does (per head, rows
[pair j][0/1] -> [0/1][j]), so this reference runs rotate_half on HF-order
weights: an independent path from llmc's interleaved RoPE on GGUF order.
"qwen2" files are not permuted (NEOX RoPE == rotate_half).
"""
from __future__ import annotations

import numpy as np
import gguf

from llama_ref import RefConfig, RefModel

_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
    "ffn_gate_inp.weight": "block_sparse_moe.gate.weight",
}
_EXPERT_NAMES = {"ffn_gate_exps.weight": "w1", "ffn_up_exps.weight": "w3", "ffn_down_exps.weight": "w2"}


def reverse_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of llama.cpp's convert permute: rows grouped per head as
    (pair, 2) -> (2, pair)."""
    pair = w.shape[0] // n_head // 2
    return w.reshape(n_head, pair, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def _tensor_f32(t) -> np.ndarray:
    data = gguf.quants.dequantize(t.data, t.tensor_type)
    shape = tuple(int(d) for d in reversed(t.shape))  # numpy order: outermost first
    return np.asarray(data, dtype=np.float32).reshape(shape)


def load_gguf(path, dtype=None) -> RefModel:
    r = gguf.GGUFReader(path)
    arch = _field(r, "general.architecture")
    if arch not in ("llama", "qwen2"):
        raise ValueError(f"{path}: reference supports llama/qwen2 GGUF, not {arch}")
    tensors = {t.name: t for t in r.tensors}
    hidden = int(_field(r, f"{arch}.embedding_length"))
    heads = int(_field(r, f"{arch}.attention.head_count"))
    kv_heads = int(_field(r, f"{arch}.attention.head_count_kv", heads))
    head_dim = int(_field(r, f"{arch}.attention.key_length", hidden // heads))
    experts = int(_field(r, f"{arch}.expert_count", 0) or 0)
    cfg = RefConfig(
        vocab_size=int(tensors["token_embd.weight"].shape[1]),
        hidden_size=hidden,
        intermediate_size=int(_field(r, f"{arch}.feed_forward_length")),
        num_layers=int(_field(r, f"{arch}.block_count")),
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        rope_theta=float(_field(r, f"{arch}.rope.freq_base", 10000.0)),
        rms_eps=float(_field(r, f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)),
        rope_style="half",
        tied_embeddings="output.weight" not in tensors,
        attention_bias="blk.0.attn_q.bias" in tensors,
        num_experts=experts,
        experts_per_token=int(_field(r, f"{arch}.expert_used_count", 0) or 0),
        context_length=int(_field(r, f"{arch}.context_length", 2048)),
    )
    w = {}
    for name, t in tensors.items():
        if name == "token_embd.weight":
            w["model.embed_tokens.weight"] = _tensor_f32(t)
        elif name == "output_norm.weight":
            w["model.norm.weight"] = _tensor_f32(t)
        elif name == "output.weight":
            w["lm_head.weight"] = _tensor_f32(t)
        elif name.startswith("blk."):
            _, idx, rest = name.split(".", 2)
            p = f"model.layers.{idx}."
            arr = _tensor_f32(t)
            if arch == "llama" and rest in ("attn_q.weight", "attn_q.bias"):
                arr = reverse_permute(arr, heads)
            elif arch == "llama" and rest in ("attn_k.weight", "attn_k.bias"):
                arr = reverse_permute(arr, kv_heads)
            if rest in _LAYER_NAMES:
                w[p + _LAYER_NAMES[rest]] = arr
            elif rest in _EXPERT_NAMES:
                for e in range(arr.shape[0]):
                    w[p + f"block_sparse_moe.experts.{e}.{_EXPERT_NAMES[rest]}.weight"] = arr[e]
            # other per-layer tensors (e.g. rope_freqs) are not used
    kwargs = {} if dtype is None else {"dtype": dtype}
    return RefModel(cfg, w, **kwargs)
