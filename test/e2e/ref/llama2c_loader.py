"""llama2.c checkpoint (.bin, legacy version 0) -> reference model.

Header: 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size,
seq_len); a negative vocab_size means an untied classifier follows. Then
float32 arrays: token_embedding [vocab, dim], rms_att [L, dim],
wq [L, dim, dim], wk [L, kv_dim, dim], wv [L, kv_dim, dim], wo [L, dim, dim],
rms_ffn [L, dim], w1 [L, hidden, dim], w2 [L, dim, hidden], w3 [L, hidden, dim],
rms_final [dim], freq_cis_real and freq_cis_imag [seq_len, head_size/2]
(unused), and [wcls [vocab, dim]]. run.c rotates interleaved pairs
(2i, 2i+1) with theta 10000 and uses RMSNorm eps 1e-5.
"""
from __future__ import annotations

import numpy as np

from llama_ref import RefConfig, RefModel


def load_llama2c(path, dtype=None) -> RefModel:
    raw = np.fromfile(path, dtype="<i4", count=7)
    dim, hidden, n_layers, n_heads, n_kv, vocab, seq_len = (int(v) for v in raw)
    tied = vocab > 0
    vocab = abs(vocab)
    head = dim // n_heads
    kv_dim = n_kv * head
    data = np.fromfile(path, dtype="<f4", offset=28)
    pos = 0

    def take(*shape):
        nonlocal pos
        n = int(np.prod(shape))
        if pos + n > data.size:
            raise ValueError(f"{path}: truncated llama2.c checkpoint")
        a = data[pos : pos + n].reshape(shape)
        pos += n
        return a

    w = {"model.embed_tokens.weight": take(vocab, dim)}
    rms_att = take(n_layers, dim)
    wq = take(n_layers, dim, dim)
    wk = take(n_layers, kv_dim, dim)
    wv = take(n_layers, kv_dim, dim)
    wo = take(n_layers, dim, dim)
    rms_ffn = take(n_layers, dim)
    w1 = take(n_layers, hidden, dim)
    w2 = take(n_layers, dim, hidden)
    w3 = take(n_layers, hidden, dim)
    w["model.norm.weight"] = take(dim)
    take(seq_len, head // 2)  # freq_cis_real
    take(seq_len, head // 2)  # freq_cis_imag
    if not tied:
        w["lm_head.weight"] = take(vocab, dim)
    for i in range(n_layers):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = rms_att[i]
        w[p + "self_attn.q_proj.weight"] = wq[i]
        w[p + "self_attn.k_proj.weight"] = wk[i]
        w[p + "self_attn.v_proj.weight"] = wv[i]
        w[p + "self_attn.o_proj.weight"] = wo[i]
        w[p + "post_attention_layernorm.weight"] = rms_ffn[i]
        w[p + "mlp.gate_proj.weight"] = w1[i]
        w[p + "mlp.down_proj.weight"] = w2[i]
        w[p + "mlp.up_proj.weight"] = w3[i]
    cfg = RefConfig(vocab_size=vocab, hidden_size=dim, intermediate_size=hidden, num_layers=n_layers,
                    num_heads=n_heads, num_kv_heads=n_kv, head_dim=head, rope_theta=10000.0, rms_eps=1e-5,
                    rope_style="interleaved", tied_embeddings=tied, context_length=seq_len)
    kwargs = {} if dtype is None else {"dtype": dtype}
    return RefModel(cfg, w, **kwargs)
