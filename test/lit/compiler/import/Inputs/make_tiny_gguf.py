"""Writes a tiny llama-architecture GGUF (2 layers, hidden 64, GQA 4/2 heads,
untied output) with weights in several storage types, for importer tests.
Usage: make_tiny_gguf.py OUT.gguf [--tensor-type q8_0|q4_0|q4_1|q5_0|q5_1|f16|f32] [--arch NAME]"""
import argparse

import gguf
import numpy as np

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--tensor-type", default="q8_0")
p.add_argument("--arch", default="llama")
a = p.parse_args()

qtype = getattr(gguf.GGMLQuantizationType, a.tensor_type.upper())
rng = np.random.default_rng(0)
D, F, H, KV, V, L = 64, 128, 4, 2, 96, 2
HD = D // H

w = gguf.GGUFWriter(a.out, a.arch)
w.add_name("tiny")
w.add_block_count(L)
w.add_context_length(256)
w.add_embedding_length(D)
w.add_feed_forward_length(F)
w.add_head_count(H)
w.add_head_count_kv(KV)
w.add_rope_freq_base(10000.0)
w.add_layer_norm_rms_eps(1e-5)
# A SentencePiece-style vocabulary: <unk>, <s>, </s>, then letters and pieces.
w.add_tokenizer_model("llama")
pieces = ["<unk>", "<s>", "</s>"] + ["\u2581" + c for c in "abcdefghijklmnopqrstuvwxyz"]
pieces += list("abcdefghijklmnopqrstuvwxyz") + ["\u2581the", "\u2581a", "he", "th"]
pieces += [f"<0x{i:02X}>" for i in range(V - len(pieces))]
w.add_token_list(pieces)
w.add_token_scores([0.0, 0.0, 0.0] + [-float(i) for i in range(V - 3)])
w.add_token_types([2, 3, 3] + [1] * (V - 3 - sum(p.startswith("<0x") for p in pieces))
                  + [6] * sum(p.startswith("<0x") for p in pieces))
w.add_bos_token_id(1)
w.add_eos_token_id(2)


def add(name, shape, quantize=True):
    x = (rng.standard_normal(shape) * 0.05).astype(np.float32)
    if len(shape) == 1:
        x = (1.0 + x).astype(np.float32)
    if quantize and len(shape) == 2 and qtype not in (gguf.GGMLQuantizationType.F32,):
        if qtype == gguf.GGMLQuantizationType.F16:
            w.add_tensor(name, x.astype(np.float16))
        else:
            q = gguf.quants.quantize(x, qtype)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qtype)
    else:
        w.add_tensor(name, x)


add("token_embd.weight", (V, D))
for l in range(L):
    p_ = f"blk.{l}."
    add(p_ + "attn_norm.weight", (D,))
    add(p_ + "attn_q.weight", (H * HD, D))
    add(p_ + "attn_k.weight", (KV * HD, D))
    add(p_ + "attn_v.weight", (KV * HD, D))
    add(p_ + "attn_output.weight", (D, H * HD))
    add(p_ + "ffn_norm.weight", (D,))
    add(p_ + "ffn_gate.weight", (F, D))
    add(p_ + "ffn_up.weight", (F, D))
    add(p_ + "ffn_down.weight", (D, F))
add("output_norm.weight", (D,))
add("output.weight", (V, D))

w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
