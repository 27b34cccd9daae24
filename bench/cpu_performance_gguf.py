"""Random-weight GGUF files for bench/cpu_performance.py's speed-only rows
(the TinyLlama-1.1B shape): written directly by gguf-py, no F32 file.
"""
import os


def random_llama_gguf(path, qtype_name, shape, seed=1234):
    """A llama-architecture GGUF of the given shape whose matrices are random
    blocks of qtype (random codes, fp16 scales of a realistic size), norms
    ones, and a synthetic 32000-piece SentencePiece-style vocabulary."""
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFWriter, GGML_QUANT_SIZES, TokenType

    qtype = GGMLQuantizationType[qtype_name]
    block, block_bytes = GGML_QUANT_SIZES[qtype]
    # Weight std ~0.02: Q8_0 codes are uniform int8 (std ~74), Q4_0 codes
    # uniform in -8..7 (std ~4.6); Q4_K: d * 6-bit scale (mean ~32) * codes
    # 0..15 (std ~4.6) minus dmin * 6-bit min.
    scale = {"Q8_0": 0.02 / 74.0, "Q4_0": 0.02 / 4.6, "Q4_K": 0.02 / (32 * 4.6)}[qtype_name]
    rng = np.random.default_rng(seed)
    H, L, NH, KV = shape["hidden"], shape["layers"], shape["heads"], shape["kv_heads"]
    FF, V, hd = shape["intermediate"], shape["vocab"], shape["hidden"] // shape["heads"]

    def qmatrix(rows, cols):
        nb = cols // block
        b = rng.integers(0, 256, size=(rows, nb, block_bytes), dtype=np.uint8)
        d = (scale * rng.uniform(0.5, 1.5, size=(rows, nb))).astype(np.float16)
        b[:, :, 0:2] = d.view(np.uint8).reshape(rows, nb, 2)
        if qtype_name == "Q4_K":  # dmin: the mins centre the codes (~7.5 * sc * d)
            dmin = (scale * 7.5 * rng.uniform(0.5, 1.5, size=(rows, nb))).astype(np.float16)
            b[:, :, 2:4] = dmin.view(np.uint8).reshape(rows, nb, 2)
        return b.reshape(rows, nb * block_bytes)

    tmp = path + ".tmp"
    w = GGUFWriter(tmp, "llama")
    w.add_name("TinyLlama-1.1B-shape-random")
    w.add_context_length(shape["context"])
    w.add_embedding_length(H)
    w.add_block_count(L)
    w.add_feed_forward_length(FF)
    w.add_head_count(NH)
    w.add_head_count_kv(KV)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type({"Q8_0": 7, "Q4_0": 2, "Q4_K": 14}[qtype_name])
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    tokens += [f"\u2581t{i}" for i in range(V - len(tokens))]
    types = ([TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL] + [TokenType.BYTE] * 256
             + [TokenType.NORMAL] * (V - 259))
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([-float(i) for i in range(V)])
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    ones = np.ones(H, dtype=np.float32)
    w.add_tensor("token_embd.weight", qmatrix(V, H), raw_dtype=qtype)
    for l in range(L):
        p = f"blk.{l}."
        w.add_tensor(p + "attn_norm.weight", ones)
        w.add_tensor(p + "attn_q.weight", qmatrix(NH * hd, H), raw_dtype=qtype)
        w.add_tensor(p + "attn_k.weight", qmatrix(KV * hd, H), raw_dtype=qtype)
        w.add_tensor(p + "attn_v.weight", qmatrix(KV * hd, H), raw_dtype=qtype)
        w.add_tensor(p + "attn_output.weight", qmatrix(H, NH * hd), raw_dtype=qtype)
        w.add_tensor(p + "ffn_norm.weight", ones)
        w.add_tensor(p + "ffn_gate.weight", qmatrix(FF, H), raw_dtype=qtype)
        w.add_tensor(p + "ffn_up.weight", qmatrix(FF, H), raw_dtype=qtype)
        w.add_tensor(p + "ffn_down.weight", qmatrix(H, FF), raw_dtype=qtype)
    w.add_tensor("output_norm.weight", ones)
    w.add_tensor("output.weight", qmatrix(V, H), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, path)
