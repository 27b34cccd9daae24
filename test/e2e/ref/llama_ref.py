"""Independent NumPy reference forward pass of a Llama-family decoder.

Hugging Face semantics (LlamaForCausalLM / MistralForCausalLM /
Qwen2ForCausalLM / MixtralForCausalLM): RMSNorm, grouped-query attention with
optional q/k/v biases, "rotate_half" RoPE (or llama2.c's interleaved pairs),
SiLU-gated MLP or a Mixtral mixture of experts, tied or untied LM head.

Weights are a dict keyed by Hugging Face tensor names ([out, in] matrices).
All math runs in float64 by default, so the reference is tighter than the
float32 runtime it checks. Written from the published model definitions; it
shares no code with llmc.
"""
from __future__ import annotations

import dataclasses

import math

import numpy as np


@dataclasses.dataclass
class RefConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5
    rope_style: str = "half"  # "half" (HF rotate_half) or "interleaved" (llama2.c)
    tied_embeddings: bool = False
    attention_bias: bool = False
    num_experts: int = 0  # 0: dense MLP
    experts_per_token: int = 0
    context_length: int = 2048
    activation: str = "silu"  # "silu" or "gelu" (exact, erf)
    norm: str = "rms"  # "rms" or "layer" (LayerNorm: mean removed first; eps is rms_eps)


def _silu(x):
    return x / (1.0 + np.exp(-x))


_erf = np.frompyfunc(math.erf, 1, 1)


def _gelu(x):
    """Exact GELU, x/2 (1 + erf(x / sqrt 2)), in float64."""
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)).astype(np.float64))


def _linear(x, w):
    """x [T, in] times w [out, in] transposed. A single row goes through a
    matrix-vector product, which BLAS runs much faster than a 1-row GEMM."""
    if x.shape[0] == 1:
        return (w @ x[0])[None, :]
    return x @ w.T


def _softmax(x, axis=-1):
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


class KVCache:
    """Keys/values of every layer for the positions seen so far."""

    def __init__(self, num_layers):
        self.k = [None] * num_layers  # [kv_heads, T, head_dim]
        self.v = [None] * num_layers
        self.length = 0


class RefModel:
    def __init__(self, config: RefConfig, weights: dict, dtype=np.float64):
        self.c = config
        self.dtype = dtype
        self.w = {}
        for name, arr in weights.items():
            self.w[name] = np.ascontiguousarray(arr, dtype=dtype)
        self._check()
        c = config
        if c.rope_style not in ("half", "interleaved"):
            raise ValueError(f"unknown rope style {c.rope_style!r}")
        # inv_freq[i] = theta^(-2i/d), i < d/2 (both conventions use it).
        self.inv_freq = 1.0 / (c.rope_theta ** (np.arange(0, c.head_dim, 2, dtype=np.float64) / c.head_dim))

    # -- weights ----------------------------------------------------------
    def _lw(self, i, name):
        return self.w[f"model.layers.{i}.{name}"]

    def _check(self):
        c = self.c
        need = {"model.embed_tokens.weight": (c.vocab_size, c.hidden_size),
                "model.norm.weight": (c.hidden_size,)}
        if not c.tied_embeddings:
            need["lm_head.weight"] = (c.vocab_size, c.hidden_size)
        qd, kd = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
        for i in range(c.num_layers):
            p = f"model.layers.{i}."
            need[p + "input_layernorm.weight"] = (c.hidden_size,)
            need[p + "post_attention_layernorm.weight"] = (c.hidden_size,)
            need[p + "self_attn.q_proj.weight"] = (qd, c.hidden_size)
            need[p + "self_attn.k_proj.weight"] = (kd, c.hidden_size)
            need[p + "self_attn.v_proj.weight"] = (kd, c.hidden_size)
            need[p + "self_attn.o_proj.weight"] = (c.hidden_size, qd)
            if c.attention_bias:
                need[p + "self_attn.q_proj.bias"] = (qd,)
                need[p + "self_attn.k_proj.bias"] = (kd,)
                need[p + "self_attn.v_proj.bias"] = (kd,)
            if c.num_experts:
                m = p + "block_sparse_moe."
                need[m + "gate.weight"] = (c.num_experts, c.hidden_size)
                for e in range(c.num_experts):
                    need[m + f"experts.{e}.w1.weight"] = (c.intermediate_size, c.hidden_size)
                    need[m + f"experts.{e}.w3.weight"] = (c.intermediate_size, c.hidden_size)
                    need[m + f"experts.{e}.w2.weight"] = (c.hidden_size, c.intermediate_size)
            else:
                need[p + "mlp.gate_proj.weight"] = (c.intermediate_size, c.hidden_size)
                need[p + "mlp.up_proj.weight"] = (c.intermediate_size, c.hidden_size)
                need[p + "mlp.down_proj.weight"] = (c.hidden_size, c.intermediate_size)
        for name, shape in need.items():
            if name not in self.w:
                raise KeyError(f"reference model: missing tensor {name}")
            if tuple(self.w[name].shape) != shape:
                raise ValueError(f"reference model: {name} has shape {self.w[name].shape}, expected {shape}")

    # -- building blocks --------------------------------------------------
    def _rms_norm(self, x, weight):
        if self.c.norm == "layer":
            x = x - np.mean(x, axis=-1, keepdims=True)
        elif self.c.norm != "rms":
            raise ValueError(f"unknown norm {self.c.norm!r}")
        var = np.mean(x * x, axis=-1, keepdims=True)
        return weight * (x / np.sqrt(var + self.c.rms_eps))

    def _rope(self, x, positions):
        """x: [heads, T, head_dim]; positions: [T]."""
        ang = positions[:, None].astype(np.float64) * self.inv_freq[None, :]  # [T, d/2]
        cos, sin = np.cos(ang).astype(self.dtype), np.sin(ang).astype(self.dtype)
        if self.c.rope_style == "half":
            half = self.c.head_dim // 2
            x1, x2 = x[..., :half], x[..., half:]
            # x * cat(cos, cos) + rotate_half(x) * cat(sin, sin), rotate_half = cat(-x2, x1)
            return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
        xe, xo = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = xe * cos - xo * sin
        out[..., 1::2] = xe * sin + xo * cos
        return out

    def _attention(self, i, h, positions, cache):
        c = self.c
        T = h.shape[0]
        q = _linear(h, self._lw(i, "self_attn.q_proj.weight"))
        k = _linear(h, self._lw(i, "self_attn.k_proj.weight"))
        v = _linear(h, self._lw(i, "self_attn.v_proj.weight"))
        if c.attention_bias:
            q = q + self._lw(i, "self_attn.q_proj.bias")
            k = k + self._lw(i, "self_attn.k_proj.bias")
            v = v + self._lw(i, "self_attn.v_proj.bias")
        q = q.reshape(T, c.num_heads, c.head_dim).transpose(1, 0, 2)
        k = k.reshape(T, c.num_kv_heads, c.head_dim).transpose(1, 0, 2)
        v = v.reshape(T, c.num_kv_heads, c.head_dim).transpose(1, 0, 2)
        q = self._rope(q, positions)
        k = self._rope(k, positions)
        if cache.k[i] is not None:
            k = np.concatenate([cache.k[i], k], axis=1)
            v = np.concatenate([cache.v[i], v], axis=1)
        cache.k[i], cache.v[i] = k, v
        S = k.shape[1]
        rep = c.num_heads // c.num_kv_heads
        k = np.repeat(k, rep, axis=0)  # head h uses kv head h // rep
        v = np.repeat(v, rep, axis=0)
        scores = (q @ k.transpose(0, 2, 1)) / np.sqrt(c.head_dim)  # [H, T, S]
        key_pos = np.arange(S)
        mask = key_pos[None, :] > positions[:, None]  # causal
        scores = np.where(mask[None], -np.inf, scores)
        out = _softmax(scores) @ v  # [H, T, d]
        out = out.transpose(1, 0, 2).reshape(T, c.num_heads * c.head_dim)
        return _linear(out, self._lw(i, "self_attn.o_proj.weight"))

    def _mlp(self, i, h):
        gate = _linear(h, self._lw(i, "mlp.gate_proj.weight"))
        up = _linear(h, self._lw(i, "mlp.up_proj.weight"))
        act = _gelu if self.c.activation == "gelu" else _silu
        return _linear(act(gate) * up, self._lw(i, "mlp.down_proj.weight"))

    def _moe(self, i, h):
        c = self.c
        p = "block_sparse_moe."
        router = _linear(h, self._lw(i, p + "gate.weight"))  # [T, E]
        probs = _softmax(router)
        # top-k by probability (stable: ties go to the lower expert index)
        top = np.argsort(-probs, axis=-1, kind="stable")[:, : c.experts_per_token]
        top_p = np.take_along_axis(probs, top, axis=-1)
        top_p = top_p / np.sum(top_p, axis=-1, keepdims=True)
        out = np.zeros_like(h)
        for e in range(c.num_experts):
            rows, slot = np.nonzero(top == e)
            if rows.size == 0:
                continue
            x = h[rows]
            g = _linear(x, self._lw(i, p + f"experts.{e}.w1.weight"))
            u = _linear(x, self._lw(i, p + f"experts.{e}.w3.weight"))
            y = _linear(_silu(g) * u, self._lw(i, p + f"experts.{e}.w2.weight"))
            out[rows] += top_p[rows, slot][:, None] * y
        return out

    # -- public API -------------------------------------------------------
    def forward(self, tokens, cache: KVCache | None = None):
        """Logits [len(tokens), vocab] for tokens appended after the cache."""
        c = self.c
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.ndim != 1 or tokens.size == 0:
            raise ValueError("forward: need a non-empty 1-D token list")
        if tokens.min() < 0 or tokens.max() >= c.vocab_size:
            raise ValueError("forward: token id outside the vocabulary")
        if cache is None:
            cache = KVCache(c.num_layers)
        positions = np.arange(cache.length, cache.length + tokens.size)
        x = self.w["model.embed_tokens.weight"][tokens]
        for i in range(c.num_layers):
            x = x + self._attention(i, self._rms_norm(x, self._lw(i, "input_layernorm.weight")), positions, cache)
            h = self._rms_norm(x, self._lw(i, "post_attention_layernorm.weight"))
            x = x + (self._moe(i, h) if c.num_experts else self._mlp(i, h))
        cache.length += tokens.size
        x = self._rms_norm(x, self.w["model.norm.weight"])
        head = self.w["model.embed_tokens.weight" if c.tied_embeddings else "lm_head.weight"]
        return _linear(x, head)

    def logits(self, tokens):
        return self.forward(tokens)

    def greedy(self, prompt, n):
        """Prompt logits [T, vocab] and n greedily generated ids (no EOS stop)."""
        cache = KVCache(self.c.num_layers)
        prompt_logits = self.forward(prompt, cache)
        last = prompt_logits[-1]
        out = []
        for step in range(n):
            nxt = int(np.argmax(last))
            out.append(nxt)
            if step + 1 < n:
                last = self.forward([nxt], cache)[-1]
        return prompt_logits, out
