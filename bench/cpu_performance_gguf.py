"""Random-weight GGUF files for the speed-only rows of bench/cpu_performance.py
(the TinyLlama-1.1B shape) and of the GPU benchmark (scripts/gpu-prepare.sh:
the SmolLM2-135M and TinyLlama-1.1B shapes): written directly by gguf-py, no
F32 file unless F32 is the format asked for.
"""
import os

# llama.cpp's Q4_K_M rule for the tensors it gives 6 bits: the LM head, and
# attn_v / ffn_down of the first and last eighth of the layers and every third
# one between (our reading of its quantize documentation).
def _more_bits(layer, layers):
    return layer < layers // 8 or layer >= 7 * layers // 8 or (layer - layers // 8) % 3 == 2


def random_llama_gguf(path, qtype_name, shape, seed=1234, period_rows=None, tied=False):
    """A llama-architecture GGUF of the given shape whose matrices are random
    blocks of qtype (random codes, fp16 scales of a realistic size; F32:
    normal values of std 0.02), norms ones, and a synthetic SentencePiece-style
    vocabulary of shape["vocab"] pieces. qtype_name "Q4_K_M" is Q4_K with
    Q6_K where llama.cpp's Q4_K_M puts it, and, as llama-quantize falls
    back for rows whose width is not a multiple of 256, Q5_0 for Q4_K and
    Q8_0 for Q6_K there (SmolLM2's 576).

    period_rows=P: each matrix repeats its first P random rows (the rows of a
    width and format come from one pool), so the file compresses to almost
    nothing (xz) and can travel to the device machine; the bytes a kernel
    reads and the arithmetic it does are those of any random matrix.
    tied=True writes no output.weight (the LM head is token_embd, as SmolLM2)."""
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFWriter, GGML_QUANT_SIZES, TokenType

    mix = qtype_name == "Q4_K_M"
    base_name = "Q4_K" if mix else qtype_name
    # Weight std ~0.02: Q8_0 codes are uniform int8 (std ~74), Q4_0 codes
    # uniform in -8..7 (std ~4.6); Q4_K: d * 6-bit scale (mean ~32) * codes
    # 0..15 (std ~4.6) minus dmin * 6-bit min; Q6_K: d * int8 scale (16..48)
    # * codes -32..31 (std ~18.5).
    scales = {"Q8_0": 0.02 / 74.0, "Q4_0": 0.02 / 4.6, "Q5_0": 0.02 / 9.2, "Q4_K": 0.02 / (32 * 4.6),
              "Q6_K": 0.02 / (32 * 18.5)}
    rng = np.random.default_rng(seed)
    H, L, NH, KV = shape["hidden"], shape["layers"], shape["heads"], shape["kv_heads"]
    FF, V, hd = shape["intermediate"], shape["vocab"], shape["hidden"] // shape["heads"]
    pools = {}

    def random_rows(rows, cols, name):
        if name == "F32":
            return rng.normal(0.0, 0.02, size=(rows, cols)).astype(np.float32)
        qtype = GGMLQuantizationType[name]
        block, block_bytes = GGML_QUANT_SIZES[qtype]
        nb = cols // block
        b = rng.integers(0, 256, size=(rows, nb, block_bytes), dtype=np.uint8)
        if name == "Q6_K":  # ql[128] qh[64] int8 scales[16] f16 d
            b[:, :, 192:208] = rng.integers(16, 49, size=(rows, nb, 16), dtype=np.uint8)
            d = (scales[name] * rng.uniform(0.5, 1.5, size=(rows, nb))).astype(np.float16)
            b[:, :, 208:210] = d.view(np.uint8).reshape(rows, nb, 2)
        else:
            d = (scales[name] * rng.uniform(0.5, 1.5, size=(rows, nb))).astype(np.float16)
            b[:, :, 0:2] = d.view(np.uint8).reshape(rows, nb, 2)
        if name == "Q4_K":  # dmin: the mins centre the codes (~7.5 * sc * d)
            dmin = (scales[name] * 7.5 * rng.uniform(0.5, 1.5, size=(rows, nb))).astype(np.float16)
            b[:, :, 2:4] = dmin.view(np.uint8).reshape(rows, nb, 2)
        return b.reshape(rows, nb * block_bytes)

    def qmatrix(rows, cols, name=base_name):
        if name in ("Q4_K", "Q6_K") and cols % 256:
            name = {"Q4_K": "Q5_0", "Q6_K": "Q8_0"}[name]
        if period_rows is None:
            m = random_rows(rows, cols, name)
        else:
            key = (cols, name)
            if key not in pools:
                pools[key] = random_rows(period_rows, cols, name)
            m = np.resize(pools[key], (rows, pools[key].shape[1]))
        return m if name == "F32" else (m, GGMLQuantizationType[name])

    def add(w, tensor_name, m):
        if isinstance(m, tuple):
            w.add_tensor(tensor_name, m[0], raw_dtype=m[1])
        else:
            w.add_tensor(tensor_name, m)

    tmp = path + ".tmp"
    w = GGUFWriter(tmp, "llama")
    w.add_name(shape.get("name", "TinyLlama-1.1B-shape") + "-random")
    w.add_context_length(shape["context"])
    w.add_embedding_length(H)
    w.add_block_count(L)
    w.add_feed_forward_length(FF)
    w.add_head_count(NH)
    w.add_head_count_kv(KV)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type({"F32": 0, "Q8_0": 7, "Q4_0": 2, "Q4_K": 14, "Q4_K_M": 15}[qtype_name])
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
    head6 = "Q6_K" if mix else base_name
    add(w, "token_embd.weight", qmatrix(V, H, head6 if tied else base_name))
    for l in range(L):
        p = f"blk.{l}."
        six = "Q6_K" if mix and _more_bits(l, L) else base_name
        w.add_tensor(p + "attn_norm.weight", ones)
        add(w, p + "attn_q.weight", qmatrix(NH * hd, H))
        add(w, p + "attn_k.weight", qmatrix(KV * hd, H))
        add(w, p + "attn_v.weight", qmatrix(KV * hd, H, six))
        add(w, p + "attn_output.weight", qmatrix(H, NH * hd))
        w.add_tensor(p + "ffn_norm.weight", ones)
        add(w, p + "ffn_gate.weight", qmatrix(FF, H))
        add(w, p + "ffn_up.weight", qmatrix(FF, H))
        add(w, p + "ffn_down.weight", qmatrix(H, FF, six))
    w.add_tensor("output_norm.weight", ones)
    if not tied:
        add(w, "output.weight", qmatrix(V, H, head6))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, path)


def gguf_decode_bytes(path):
    """Bytes one llama.cpp decode step reads from the weights (every tensor
    once; token_embd one row when a separate output.weight exists) and the
    f16 KV cache bytes per cached position."""
    from gguf import GGUFReader
    r = GGUFReader(path)
    names = {t.name for t in r.tensors}
    total = 0
    for t in r.tensors:
        nb = int(t.n_bytes)
        if t.name == "token_embd.weight" and "output.weight" in names:
            nb //= int(t.shape[-1])  # ggml shape: [cols, rows]
        total += nb
    arch = r.fields["general.architecture"].contents()
    get = lambda k: r.fields[f"{arch}.{k}"].contents() if f"{arch}.{k}" in r.fields else None
    layers, heads = int(get("block_count")), int(get("attention.head_count"))
    kv = int(get("attention.head_count_kv") or heads)
    hd = int(get("attention.key_length") or get("embedding_length") // heads)
    return total, 2 * layers * kv * hd * 2
