"""Hugging Face folder (config.json + *.safetensors, optionally sharded) ->
reference model. Supports Llama, Mistral, Qwen2, Mixtral, OLMo and Phi-3
configs (OLMo: LayerNorms without scale or shift, eps 1e-5; Phi-3: fused
qkv_proj and gate_up_proj, cut into the Llama names)."""
from __future__ import annotations

import json
import os

import numpy as np

from llama_ref import RefConfig, RefModel
import safetensors_io

_ARCHS = {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "MixtralForCausalLM",
          "OlmoForCausalLM", "Phi3ForCausalLM"}


def config_from_hf(cfg: dict) -> RefConfig:
    arch = (cfg.get("architectures") or ["?"])[0]
    if arch not in _ARCHS:
        raise ValueError(f"reference: unsupported architecture {arch}")
    heads = cfg["num_attention_heads"]
    hidden = cfg["hidden_size"]
    head_dim = cfg.get("head_dim") or hidden // heads
    is_qwen2 = arch == "Qwen2ForCausalLM"
    is_olmo = arch == "OlmoForCausalLM"
    if arch == "Phi3ForCausalLM" and (cfg.get("rope_scaling") or cfg.get("sliding_window")):
        raise ValueError("reference: Phi-3's rope_scaling and sliding_window are not implemented")
    if is_olmo and cfg.get("clip_qkv") is not None:
        raise ValueError("reference: OLMo's clip_qkv is not implemented")
    return RefConfig(
        vocab_size=cfg["vocab_size"],
        hidden_size=hidden,
        intermediate_size=cfg["intermediate_size"],
        num_layers=cfg["num_hidden_layers"],
        num_heads=heads,
        num_kv_heads=cfg.get("num_key_value_heads") or heads,
        head_dim=head_dim,
        rope_theta=float(cfg.get("rope_theta", 10000.0)),
        rms_eps=1e-5 if is_olmo else float(cfg.get("rms_norm_eps", 1e-6)),
        norm="layer" if is_olmo else "rms",
        rope_style="half",
        tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        attention_bias=is_qwen2 or bool(cfg.get("attention_bias", False)),
        num_experts=cfg.get("num_local_experts", 0) if arch == "MixtralForCausalLM" else 0,
        experts_per_token=cfg.get("num_experts_per_tok", 0) if arch == "MixtralForCausalLM" else 0,
        context_length=cfg.get("max_position_embeddings", 2048),
        activation=_activation(cfg.get("hidden_act", "silu")),
    )


def _activation(name):
    if name not in ("silu", "gelu"):
        raise ValueError(f"reference: hidden_act {name!r} not implemented (silu, gelu)")
    return name


def load_weights(folder) -> dict:
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = sorted(n for n in os.listdir(folder) if n.endswith(".safetensors"))
    weights = {}
    for name in files:
        weights.update(safetensors_io.read(os.path.join(folder, name)))
    return weights


def load_hf(folder, dtype=None) -> RefModel:
    with open(os.path.join(folder, "config.json")) as f:
        cfg = config_from_hf(json.load(f))
    weights = load_weights(folder)
    for i in range(cfg.num_layers):  # Phi-3: fused rows [q; k; v] and [gate; up]
        p = f"model.layers.{i}."
        qkv = weights.pop(p + "self_attn.qkv_proj.weight", None)
        if qkv is not None:
            q, k = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
            weights[p + "self_attn.q_proj.weight"] = qkv[:q]
            weights[p + "self_attn.k_proj.weight"] = qkv[q:q + k]
            weights[p + "self_attn.v_proj.weight"] = qkv[q + k:]
        gate_up = weights.pop(p + "mlp.gate_up_proj.weight", None)
        if gate_up is not None:
            weights[p + "mlp.gate_proj.weight"] = gate_up[:cfg.intermediate_size]
            weights[p + "mlp.up_proj.weight"] = gate_up[cfg.intermediate_size:]
    if cfg.norm == "layer":  # OLMo: no norm parameters, a scale of ones
        names = ["model.norm.weight"] + [f"model.layers.{i}.{n}" for i in range(cfg.num_layers)
                                         for n in ("input_layernorm.weight",
                                                   "post_attention_layernorm.weight")]
        for n in names:
            weights.setdefault(n, np.ones(cfg.hidden_size))
    if cfg.tied_embeddings:
        weights.pop("lm_head.weight", None)
    kwargs = {} if dtype is None else {"dtype": dtype}
    return RefModel(cfg, weights, **kwargs)
