#!/usr/bin/env python3
"""llama.cpp's own quantization presets of SmolLM2-135M-Instruct, scored by
llmc's evaluator, so they sit in the same table as llmc's methods (same
model, same text, same KLD code; see bench/quantization.py).

Steps:
  1. The reference F32 GGUF: every tensor of the source GGUF (Q4_1, embedding
     Q8_0) dequantized with gguf-py, same metadata and tokenizer. The
     dequantized source weights ARE the reference model, as for llmc's rows.
  2. llama-quantize (built by scripts/build_llamacpp.sh) F32 -> each preset
     (Q4_0, Q4_K_M, Q3_K_M, Q2_K), timed.
  2b. The importance matrix, as llama.cpp's users make one: llama-imatrix on
     the F32 model over the first ~N tokens (--imatrix-tokens, default 8192)
     of llmc's own calibration corpus (data/calib/default.txt), cut at a
     paragraph boundary and written to the work directory; then
     llama-quantize --imatrix for the IMATRIX_PRESETS, as separate rows
     named "PRESET+imatrix" (fields "imatrix": true, "imatrix_tokens": the
     tokens llama-imatrix actually processed, chunks x ctx). Cached: the
     matrix is recomputed only when the text prefix, its context or the F32
     model changed.
  3. `llmc eval PRESET.gguf --ref SOURCE.gguf --json --max-tokens N` on each:
     ppl, KLD mean / p99, top-1, plus size, bits per weight (from the tensor
     table) and the tensor-type histogram. Tensor types llmc does not read
     (IQ1/IQ2/IQ3) are dequantized to F32 in an eval copy first (see
     LLMC_GGUF_TYPES; the row's "eval_copy_f32_types" lists them).
  4. With --kl-check: llama-perplexity --kl-divergence for Q4_0 against the
     F32 model on the same text, next to llmc eval over the same text, as a
     cross-check of the two KLD implementations (their context handling
     differs: llama.cpp scores the second half of each 512-token chunk and
     stores the base log-probabilities as 16-bit values; llmc scores every
     position of each 512-token window).

Output: one JSON object on stdout, {"llamacpp": {...}, "imatrix": {...} or
null, "presets": [one object per preset], "kl_check": {...} or null};
--markdown prints a table instead.
Progress goes to stderr. Needs the project venv (numpy, gguf) and build/bin/llmc.

Usage:
  .venv/bin/python bench/llamacpp_quants.py [--json] [--markdown] [--quick] [--kl-check]
      [--imatrix-tokens N] [--imatrix-presets LIST | --no-imatrix]
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL = os.path.join(REPO, ".cache", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
DEFAULT_TEXT = os.path.join(REPO, "data", "eval", "default.txt")
DEFAULT_BIN = os.path.join(REPO, ".cache", "peer", "build", "bin")
DEFAULT_WORK = os.path.join(REPO, ".cache", "peer", "quants")
DEFAULT_CALIB = os.path.join(REPO, "data", "calib", "default.txt")
PRESETS = ("Q4_0", "Q4_K_M", "Q3_K_M", "Q2_K")
# Quantized with the importance matrix. SmolLM2-135M's matrices take 576-wide
# rows except ffn_down (1536 = 6 x 256), so every 256-block type (K and most
# IQ types) lands on ffn_down only, a quarter of the matrix weights, and
# llama-quantize falls back for the other 180 matrices: IQ1/IQ2/IQ3/IQ4_XS ->
# IQ4_NL, Q2_K/Q3_K -> Q4_0, Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0. So no
# K, IQ or TQ preset gets to 3.5 bits per weight on this model. Tried with
# the imatrix (bpw of the quantized matrices, embedding excluded; what
# llama-quantize picked):
#   IQ1_S   3.79  iq4_nl 72%, iq1_s 22%, q4_0 3%, q2_k 2%     (kept: the lowest)
#   IQ1_M   3.82  iq4_nl 72%, iq1_m 22%, q4_0 3%, q2_k 2%
#   TQ1_0   3.79  q4_0 75%, tq1_0 25%      TQ2_0  3.89  q4_0 75%, tq2_0 25%
#   IQ2_XXS 3.90  iq4_nl 72%, iq2_xxs 22%, q4_0 3%, q2_k 2%   (kept)
#   IQ2_S   3.96  iq4_nl 75%, iq2_xs 22%, iq3_s 2%
#   IQ2_M   4.03  iq4_nl 75%, iq2_s 22%, iq3_s 2%
#   Q2_K_S  4.08  q4_0 75%, q2_k 22%, q4_k 2%  (kept: lowest all-K mix; needs an imatrix)
#   IQ3_XXS 4.14  iq4_nl 75%, iq3_xxs 25%  (kept)
#   IQ3_XS / IQ3_S 4.22  iq4_nl 75%, iq3_s 25%     Q3_K_S 4.22  q4_0 75%, q3_k 25%
#   IQ3_M   4.36  iq4_nl 62%, iq3_s 22%, q5_0 12%, q4_k 2%
#   Q2_K    4.23  q4_0 75%, q3_k 25%  (kept, as the plain row's imatrix twin)
# Left out: Q1_0 (group 128) is refused: "no tensor type fallback is defined
# for type q1_0" (576 is not a multiple of 128). Q2_0 (group 64, 576 = 9 x 64)
# is the one preset under 3.5 bpw here (q2_0 on every matrix, 2.28 bpw), but
# it blows up: its quantizer takes the block's absmax as the scale and rounds
# to {-1, 0, 1} x scale, ignoring the imatrix, and llama-perplexity
# --kl-divergence against the F32 model measured KLD 11.4, PPL 2.4e6 (F32:
# 27.1) on 4 chunks of data/eval/default.txt; neither gguf-py 0.19 nor llmc
# reads its type (42) either. TQ1_0 / TQ2_0 are ternary types for
# ternary-trained models, IQ1_M / IQ2_S / IQ2_M / IQ3_S sit between kept rows.
IMATRIX_PRESETS = ("IQ4_NL", "Q4_K_M", "Q3_K_M", "Q2_K", "Q2_K_S", "IQ3_XXS", "IQ2_XXS",
                   "IQ1_S")
# Kept out of "bpw (quantized)", as bench/quantization.py keeps it out of
# llmc's rows (skip=token_embd.weight): the tied embedding / LM head.
EMBEDDING = "token_embd.weight"


def log(msg):
    print(f"[llamacpp {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run(cmd, timeout=3600):
    t0 = time.monotonic()
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    return p, time.monotonic() - t0


def last_error_line(p):
    lines = [l for l in (p.stderr or "").splitlines() + (p.stdout or "").splitlines() if l.strip()]
    return lines[-1][:300] if lines else f"exit status {p.returncode}"


def tool(bin_dir, name):
    path = os.path.join(bin_dir, name)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise RuntimeError(f"{path} not found; build it with scripts/build_llamacpp.sh")
    return path


def llamacpp_version(bin_dir):
    info = {}
    try:
        with open(os.path.join(bin_dir, "LLAMACPP_VERSION.txt")) as f:
            for line in f:
                k, _, v = line.partition(":")
                if v:
                    info[k.strip()] = v.strip()
    except OSError:
        pass
    return info


#===- 1. the reference F32 GGUF -------------------------------------------===#

def make_f32_gguf(src, dst, dequantize_types=None):
    """Dequantize the tensors of src with gguf-py (all of them, or those whose
    ggml type name is in dequantize_types, the others copied byte for byte);
    same metadata otherwise (general.file_type ALL_F32 when all are)."""
    import numpy as np
    from gguf import GGUFReader, GGUFValueType, GGUFWriter, LlamaFileType
    from gguf.quants import dequantize

    r = GGUFReader(src)
    every = dequantize_types is None
    arch = r.fields["general.architecture"].contents()
    tmp = dst + ".tmp"
    w = GGUFWriter(tmp, arch)  # writes general.architecture itself
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vtype = field.types[0]
        if name == "general.file_type" and every:
            w.add_key_value(name, int(LlamaFileType.ALL_F32), GGUFValueType.UINT32)
            continue
        sub = field.types[-1] if vtype == GGUFValueType.ARRAY else None
        if vtype == GGUFValueType.ARRAY and len(field.types) > 2:
            raise RuntimeError(f"{src}: nested array metadata {name} is not supported")
        w.add_key_value(name, field.contents(), vtype, sub_type=sub)
    for t in r.tensors:
        shape = tuple(int(d) for d in reversed(t.shape))  # numpy order
        if not every and t.tensor_type.name not in dequantize_types:
            # t.data is in numpy order already (bytes per row last for a
            # quantized type, which add_tensor turns back into weights)
            w.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
            continue
        data = dequantize(t.data, t.tensor_type).astype(np.float32, copy=False)
        w.add_tensor(t.name, np.ascontiguousarray(data.reshape(shape)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, dst)


#===- 2. tensor table: bits per weight, type histogram ---------------------===#

# The ggml tensor types `llmc eval` reads from a GGUF (the entries of
# compiler/import/gguf/GgufFileReader.cpp's kGgmlTypes that map to an llmc
# DType). A preset with other types (IQ1/IQ2/IQ3 on ffn_down, say) is scored
# on an eval copy: those tensors dequantized to F32 by gguf-py, so the same
# weights, every other tensor byte for byte. Its bits per weight and size
# still come from the real file. (llama.cpp would multiply those tensors
# with 8-bit-quantized activations; the copy keeps them f32, a slight
# advantage to llama.cpp.)
LLMC_GGUF_TYPES = {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K",
                   "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL"}


def eval_copy(path, hist):
    """path itself when llmc reads all its tensor types, else an eval copy
    (written next to it, reused when newer) and the dequantized types."""
    other = sorted(k.upper() for k in hist if k.upper() not in LLMC_GGUF_TYPES)
    if not other:
        return path, []
    out = path.replace(".gguf", ".eval.gguf")
    if not os.path.isfile(out) or os.path.getmtime(out) < os.path.getmtime(path):
        log(f"eval copy of {os.path.basename(path)}: {', '.join(other)} -> F32")
        make_f32_gguf(path, out, dequantize_types=set(other))
    return out, [k.lower() for k in other]


def tensor_stats(path):
    from gguf import GGUFReader
    r = GGUFReader(path)
    total_b = total_n = q_b = q_n = 0
    hist = {}
    for t in r.tensors:
        n, nb = int(t.n_elements), int(t.n_bytes)
        total_b += nb
        total_n += n
        name = t.tensor_type.name.lower()
        h = hist.setdefault(name, {"tensors": 0, "weights": 0, "bytes": 0})
        h["tensors"] += 1
        h["weights"] += n
        h["bytes"] += nb
        if len(t.shape) >= 2 and t.name != EMBEDDING:
            q_b += nb
            q_n += n
    # Types of the quantized matrices, most weights first, with their share.
    mats = {}
    for t in r.tensors:
        if len(t.shape) >= 2 and t.name != EMBEDDING:
            k = t.tensor_type.name.lower()
            mats[k] = mats.get(k, 0) + int(t.n_elements)
    types = ", ".join(f"{k} {100.0 * v / q_n:.0f}%"
                      for k, v in sorted(mats.items(), key=lambda kv: -kv[1]))
    emb = next((t.tensor_type.name.lower() for t in r.tensors if t.name == EMBEDDING), None)
    return {
        "bpw": 8.0 * total_b / total_n,
        "bpw_quantized": 8.0 * q_b / q_n if q_n else None,
        "types": types,
        "embedding_type": emb,
        "type_histogram": hist,
        "weights": total_n,
        "file_bytes": os.path.getsize(path),
    }


#===- 2b. the importance matrix --------------------------------------------===#

def gguf_tokenizer(model):
    """The GGUF's byte-level BPE (tokenizer.ggml.model gpt2) as a `tokenizers`
    Tokenizer, with llama.cpp's "smollm" pre-tokenizer: every digit alone,
    then GPT-2's regex. Only used to count tokens when cutting the
    calibration text; llama-imatrix tokenizes the text itself."""
    from gguf import GGUFReader
    from tokenizers import Tokenizer, models, pre_tokenizers

    r = GGUFReader(model)

    def field(key):
        f = r.fields.get(key)
        return None if f is None else f.contents()

    if field("tokenizer.ggml.model") != "gpt2":
        raise RuntimeError(f"{model}: tokenizer {field('tokenizer.ggml.model')!r} is not "
                           "byte-level BPE; cannot count calibration tokens")
    vocab = {t: i for i, t in enumerate(field("tokenizer.ggml.tokens"))}
    merges = [tuple(m.split(" ", 1)) for m in field("tokenizer.ggml.merges")]
    tok = Tokenizer(models.BPE(vocab, merges))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if field("tokenizer.ggml.pre") in ("smollm", "starcoder", "refact", "command-r"):
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), byte_level])
    else:
        tok.pre_tokenizer = byte_level
    bos = 1 if field("tokenizer.ggml.add_bos_token") else 0
    return lambda text: len(tok.encode(text).ids) + bos


def calib_prefix(calib, model, n_tokens, out):
    """The shortest run of whole paragraphs from the start of calib that
    tokenizes to >= n_tokens, written to out. Returns (tokens, paragraphs)."""
    with open(calib, encoding="utf-8") as f:
        corpus = f.read()
    count = gguf_tokenizer(model)
    # Paragraph ends: offsets just past each blank-line separator's first "\n".
    ends = [m.start() + 1 for m in re.finditer(r"\n\s*\n", corpus)] + [len(corpus)]
    # Estimate with per-paragraph counts, then settle on exact counts of the
    # prefix itself (merges across a paragraph break can differ by a token).
    k, total, start = 0, 0, 0
    while k < len(ends) - 1 and total < n_tokens:
        total += count(corpus[start:ends[k]])
        start, k = ends[k], k + 1
    k = max(k - 1, 0)
    while True:
        text = corpus[:ends[k]].rstrip("\n") + "\n"
        tokens = count(text)
        if tokens >= n_tokens or k == len(ends) - 1:
            break
        k += 1
    while k > 0:
        shorter = corpus[:ends[k - 1]].rstrip("\n") + "\n"
        t = count(shorter)
        if t < n_tokens:
            break
        text, tokens, k = shorter, t, k - 1
    if tokens < n_tokens:
        log(f"calibration corpus {calib} has only {tokens} tokens (< {n_tokens})")
    tmp = out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, out)
    return tokens, k + 1


def parse_imatrix(text):
    out = {}
    m = re.search(r"computing over (\d+) chunks, n_ctx=(\d+), batch_size=(\d+), n_seq=(\d+)",
                  text)
    if m:
        out.update(chunks=int(m.group(1)), ctx=int(m.group(2)), batch=int(m.group(3)),
                   n_seq=int(m.group(4)))
        out["tokens"] = out["chunks"] * out["ctx"]
    m = re.search(r"Final estimate: PPL = ([0-9.eE+-]+)", text)
    out["ppl"] = float(m.group(1)) if m else None
    return out


def make_imatrix(bin_dir, f32, model, calib, n_tokens, ctx, work, threads):
    """llama-imatrix on f32 over the first ~n_tokens of calib (ctx-token
    chunks). Cached in WORK/imatrix-N-cCTX.gguf with a .json beside it that
    records what llama-imatrix reported; recomputed when the text prefix, ctx
    or the F32 model changed."""
    imatrix = tool(bin_dir, "llama-imatrix")
    import hashlib
    text_path = os.path.join(work, f"calib-{n_tokens}.txt")
    text_tokens, paragraphs = calib_prefix(calib, model, n_tokens, text_path)
    with open(text_path, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    out = os.path.join(work, f"imatrix-{n_tokens}-c{ctx}.gguf")
    meta_path = out.replace(".gguf", ".json")
    try:
        with open(meta_path) as f:
            meta = json.load(f)
        if (meta.get("text_sha256") == sha and meta.get("ctx") == ctx and
                os.path.isfile(out) and os.path.getmtime(out) >= os.path.getmtime(f32)):
            log(f"importance matrix cached: {out} ({meta['chunks']} chunks of {ctx})")
            meta["cached"] = True
            return out, meta
    except (OSError, ValueError, KeyError):
        pass
    log(f"llama-imatrix over {text_tokens} tokens ({paragraphs} paragraphs) of "
        f"{os.path.relpath(calib, REPO)}, ctx {ctx}")
    tmp = out + ".tmp.gguf"
    cmd = [imatrix, "-m", f32, "-f", text_path, "-o", tmp, "-c", str(ctx), "-b", str(ctx),
           "-t", str(threads), "--output-frequency", "1000000"]
    p, wall = run(cmd)
    if p.returncode != 0 or not os.path.isfile(tmp):
        raise RuntimeError(f"llama-imatrix failed: {last_error_line(p)}")
    meta = parse_imatrix(p.stdout + p.stderr)
    if "chunks" not in meta:
        raise RuntimeError("llama-imatrix: no 'computing over N chunks' line in its output")
    meta.update({"calib": os.path.relpath(calib, REPO), "text": os.path.relpath(text_path, REPO),
                 "text_sha256": sha, "tokens_requested": n_tokens, "text_tokens": text_tokens,
                 "paragraphs": paragraphs, "seconds": wall, "file": os.path.relpath(out, REPO)})
    os.replace(tmp, out)
    with open(meta_path, "w") as f:
        json.dump(meta, f, indent=1)
    meta["cached"] = False
    log(f"importance matrix: {meta['chunks']} chunks x {meta['ctx']} = {meta['tokens']} tokens "
        f"in {wall:.0f} s (F32 ppl on them {meta['ppl']})")
    return out, meta


#===- 3. llmc eval ---------------------------------------------------------===#

def llmc_eval(llmc, model, ref, text, max_tokens, ctx=None):
    cmd = [llmc, "eval", model, "--ref", ref, "--text", text, "--json",
           "--max-tokens", str(max_tokens)]
    if ctx:
        cmd += ["--ctx", str(ctx)]
    p, wall = run(cmd)
    if p.returncode != 0:
        raise RuntimeError(f"llmc eval {os.path.basename(model)} failed: {last_error_line(p)}")
    out = json.loads(p.stdout)
    out["eval_wall_s"] = wall
    return out


#===- 4. llama-perplexity --kl-divergence ----------------------------------===#

def parse_perplexity(text):
    """The summary llama-perplexity prints after --kl-divergence."""
    pats = {
        "ppl": r"Mean PPL\(Q\)\s*:\s*([0-9.eE+-]+)",
        "ref_ppl": r"Mean PPL\(base\)\s*:\s*([0-9.eE+-]+)",
        "kld_mean": r"Mean\s+KLD:\s*([0-9.eE+-]+)",
        "kld_p99": r"99\.0%\s+KLD:\s*([0-9.eE+-]+)",
        "kld_max": r"Maximum KLD:\s*([0-9.eE+-]+)",
        "kld_median": r"Median\s+KLD:\s*([0-9.eE+-]+)",
        "top1": r"Same top p:\s*([0-9.eE+-]+)",
    }
    out = {}
    for k, pat in pats.items():
        m = re.search(pat, text)
        out[k] = float(m.group(1)) if m else None
    m = re.search(r"computing over (\d+) chunks, n_ctx=(\d+)", text)
    if m:
        out["chunks"], out["ctx"] = int(m.group(1)), int(m.group(2))
        out["tokens"] = out["chunks"] * (out["ctx"] - 1 - out["ctx"] // 2)
    return out


def read_kld_base_tokens(path):
    """(ctx, tokens) from llama-perplexity's --kl-divergence-base file:
    "_logits_", u32 n_ctx, i32 n_vocab, i32 n_chunk, n_chunk * n_ctx i32 tokens."""
    import struct
    with open(path, "rb") as f:
        head = f.read(20)
        if len(head) != 20 or head[:8] != b"_logits_":
            raise RuntimeError(f"{path}: not a llama-perplexity logits file")
        ctx, _, chunks = struct.unpack("<Iii", head[8:])
        raw = f.read(4 * ctx * chunks)
    if len(raw) != 4 * ctx * chunks:
        raise RuntimeError(f"{path}: truncated token list")
    return ctx, list(struct.unpack(f"<{ctx * chunks}i", raw))


def llmc_same_positions(llmc, quant, f32, tokens, ctx, work):
    """llmc eval on exactly llama-perplexity's tokens and scored positions.
    A window is causal and starts from an empty cache, so the logits of
    positions 0..h-1 of a ctx-token chunk equal those of an h-token window.
    With h = ctx/2 + 1: sum over positions ctx/2..ctx-2 = sum over the full
    chunk (ctx-1 positions) - sum over the h-token window (h-1 positions)."""
    chunks = len(tokens) // ctx
    half = ctx // 2 + 1
    full_ids = os.path.join(work, "kl_check_full.ids")
    head_ids = os.path.join(work, "kl_check_head.ids")
    with open(full_ids, "w") as f:
        f.write("# llama-perplexity's chunks\n" + " ".join(map(str, tokens)) + "\n")
    with open(head_ids, "w") as f:
        f.write(f"# first {half} tokens of each chunk\n")
        for c in range(chunks):
            f.write(" ".join(map(str, tokens[c * ctx:c * ctx + half])) + "\n")
    full = llmc_eval(llmc, quant, f32, full_ids, chunks * (ctx - 1), ctx=ctx)
    head = llmc_eval(llmc, quant, f32, head_ids, chunks * (half - 1), ctx=half)
    nf, nh = full["tokens"], head["tokens"]
    if nf != chunks * (ctx - 1) or nh != chunks * (half - 1):
        raise RuntimeError(f"llmc eval scored {nf} and {nh} positions, expected "
                           f"{chunks * (ctx - 1)} and {chunks * (half - 1)}")
    n = nf - nh
    tail = lambda k: (full[k] * nf - head[k] * nh) / n
    import math
    return {"tokens": n, "kld_mean": tail("kld_mean"), "top1": tail("top1"),
            "ppl": math.exp(tail("nll_mean")),
            "ref_ppl": math.exp((math.log(full["ref_ppl"]) * nf -
                                 math.log(head["ref_ppl"]) * nh) / n),
            "kld_p99": None, "kld_max": None}


def kl_check(bin_dir, llmc, f32, quant, text, work, threads, ctx=512):
    perp = tool(bin_dir, "llama-perplexity")
    base = os.path.join(work, "f32.kld")
    common = ["-f", text, "-c", str(ctx), "-b", str(ctx), "-t", str(threads)]
    log("llama-perplexity: base logits of the F32 model")
    p, wall_base = run([perp, "-m", f32, "--kl-divergence-base", base] + common)
    if p.returncode != 0:
        raise RuntimeError(f"llama-perplexity (base) failed: {last_error_line(p)}")
    log("llama-perplexity --kl-divergence: Q4_0 against the F32 model")
    p, wall = run([perp, "-m", quant, "--kl-divergence-base", base, "--kl-divergence"] + common)
    if p.returncode != 0:
        raise RuntimeError(f"llama-perplexity --kl-divergence failed: {last_error_line(p)}")
    theirs = parse_perplexity(p.stdout + p.stderr)
    theirs["seconds"] = wall
    log("llmc eval: Q4_0 against the F32 model, whole text, windows of 512")
    ours = llmc_eval(llmc, quant, f32, text, 1 << 20, ctx=ctx)
    log("llmc eval: the same on llama-perplexity's tokens and scored positions")
    same = llmc_same_positions(llmc, quant, f32, read_kld_base_tokens(base)[1], ctx, work)
    return {
        "preset": "Q4_0",
        "reference": os.path.basename(f32),
        "llama_perplexity": theirs,
        "llmc_eval": {k: ours.get(k) for k in
                      ("ppl", "ref_ppl", "kld_mean", "kld_p99", "kld_max", "top1", "tokens",
                       "ctx", "windows")},
        "llmc_eval_same_positions": same,
        "note": ("llama-perplexity scores positions ctx/2..ctx-2 of each ctx-token chunk "
                 "(first token replaced by BOS when the vocabulary adds one), with base "
                 "log-probabilities stored as 16-bit values; llmc eval scores every position "
                 "of each ctx-token window, each from an empty KV cache; llmc_eval_same_positions is "
                 "llmc on llama-perplexity's own tokens and positions (means only)"),
    }


#===- driver ----------------------------------------------------------------===#

def quantize(bin_dir, f32, preset, work, threads, imatrix=None):
    """llama-quantize F32 -> preset (with --imatrix when given). Returns the
    file, seconds, the count of tensors that needed a fallback type and, with
    an imatrix, how many importance-matrix entries llama-quantize loaded."""
    suffix = ".imatrix" if imatrix else ""
    out = os.path.join(work, f"SmolLM2-135M-Instruct.{preset}{suffix}.gguf")
    log(f"llama-quantize {preset}" + (" --imatrix" if imatrix else ""))
    cmd = [tool(bin_dir, "llama-quantize")]
    if imatrix:
        cmd += ["--imatrix", imatrix]
    p, wall = run(cmd + [f32, out, preset, str(threads)])
    if p.returncode != 0:
        raise RuntimeError(f"llama-quantize {preset}{suffix} failed: {last_error_line(p)}")
    text = p.stdout + p.stderr
    m = re.search(r"(\d+) of (\d+) tensor\(s\) required fallback", text)
    entries = None
    if imatrix:
        e = re.search(r"loaded (\d+) importance matrix entries", text)
        if not e or int(e.group(1)) == 0:
            raise RuntimeError(f"llama-quantize {preset}: the importance matrix was not loaded")
        entries = int(e.group(1))
    return out, wall, (int(m.group(1)) if m else 0), entries


def markdown(result):
    L = []
    im = result.get("imatrix")
    if im and "error" not in im:
        L += [f"Importance matrix: llama-imatrix on the F32 model over {im['text']} "
              f"(first {im['paragraphs']} paragraphs of {im['calib']}, {im['text_tokens']} "
              f"tokens): {im['chunks']} chunks x ctx {im['ctx']} = {im['tokens']} tokens.", ""]
    elif im:
        L += [f"Importance matrix failed: {im['error']}", ""]
    L += ["| Preset | Matrix types (share of weights) | Embedding | bpw (quantized) | bpw (all) "
          "| MiB | Quantize s | PPL | KLD mean | KLD p99 | Top-1 % |",
          "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["presets"]:
        if "error" in r:
            L.append(f"| {r['preset']} | failed: {r['error']} | | | | | | | | | |")
            continue
        L.append(f"| {r['preset']} | {r['types']} | {r['embedding_type']} | "
                 f"{r['bpw_quantized']:.3f} | {r['bpw']:.3f} | {r['file_bytes'] / 2**20:.1f} | "
                 f"{r['quantize_s']:.1f} | {r['ppl']:.3f} | {r['kld_mean']:.4f} | "
                 f"{r['kld_p99']:.4f} | {r['top1']:.2f} |")
    k = result.get("kl_check")
    if k and "error" not in k:
        t, o = k["llama_perplexity"], k["llmc_eval"]
        f = lambda v, s: "—" if v is None else format(v, s)
        L += ["", f"KLD cross-check, {k['preset']} against {k['reference']}:", "",
              "| Evaluator | Scored positions | PPL | ref PPL | KLD mean | KLD p99 | Top-1 % |",
              "|---|---:|---:|---:|---:|---:|---:|",
              f"| llama-perplexity --kl-divergence (2nd half of 512-token chunks) | "
              f"{t.get('tokens', '—')} | "
              f"{f(t['ppl'], '.3f')} | {f(t['ref_ppl'], '.3f')} | {f(t['kld_mean'], '.4f')} | "
              f"{f(t['kld_p99'], '.4f')} | {f(t['top1'], '.2f')} |",
              f"| llmc eval (every position of 512-token windows) | {o['tokens']} | "
              f"{o['ppl']:.3f} | {o['ref_ppl']:.3f} | {o['kld_mean']:.4f} | "
              f"{o['kld_p99']:.4f} | {o['top1']:.2f} |"]
        sp = k.get("llmc_eval_same_positions")
        if sp:
            L.append(f"| llmc eval (llama-perplexity's tokens and positions) | {sp['tokens']} | "
                     f"{sp['ppl']:.3f} | {sp['ref_ppl']:.3f} | {sp['kld_mean']:.4f} | — | "
                     f"{sp['top1']:.2f} |")
    elif k:
        L += ["", f"KLD cross-check failed: {k['error']}"]
    return "\n".join(L)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=DEFAULT_MODEL, help="source GGUF (also the reference)")
    ap.add_argument("--text", default=DEFAULT_TEXT)
    ap.add_argument("--llmc", default=os.path.join(REPO, "build", "bin", "llmc"))
    ap.add_argument("--bin", default=DEFAULT_BIN, help="llama.cpp tools (scripts/build_llamacpp.sh)")
    ap.add_argument("--work", default=DEFAULT_WORK, help="where the GGUF files go (kept)")
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--calib", default=DEFAULT_CALIB,
                    help="text for llama-imatrix (its first --imatrix-tokens tokens)")
    ap.add_argument("--imatrix-tokens", type=int, default=8192,
                    help="calibration tokens for llama-imatrix (whole paragraphs, >= N)")
    ap.add_argument("--imatrix-ctx", type=int, default=512, help="llama-imatrix chunk size")
    ap.add_argument("--imatrix-presets", default=",".join(IMATRIX_PRESETS),
                    help="presets also quantized with the importance matrix ('' for none)")
    ap.add_argument("--no-imatrix", action="store_true", help="plain presets only")
    ap.add_argument("--quick", action="store_true",
                    help="Q4_0 and Q2_K (+ Q4_K_M with the imatrix), 128 tokens")
    ap.add_argument("--kl-check", action="store_true",
                    help="also compare llama-perplexity's KLD with llmc's (Q4_0 vs F32)")
    ap.add_argument("--json", action="store_true", help="JSON on stdout (the default)")
    ap.add_argument("--markdown", action="store_true", help="a table instead of JSON")
    args = ap.parse_args()
    presets = ["Q4_0", "Q2_K"] if args.quick else [p for p in args.presets.split(",") if p]
    im_presets = [] if args.no_imatrix else (
        ["Q4_K_M"] if args.quick else [p for p in args.imatrix_presets.split(",") if p])
    max_tokens = 128 if args.quick else args.max_tokens

    for path, what in ((args.model, "source model"), (args.text, "evaluation text"),
                       (args.llmc, "llmc binary")):
        if not os.path.isfile(path):
            sys.exit(f"bench/llamacpp_quants.py: {what} {path} not found")
    if im_presets and not os.path.isfile(args.calib):
        sys.exit(f"bench/llamacpp_quants.py: calibration text {args.calib} not found")
    try:
        tool(args.bin, "llama-quantize")
        if im_presets:
            tool(args.bin, "llama-imatrix")
    except RuntimeError as e:
        sys.exit(f"bench/llamacpp_quants.py: {e} (or pass --no-imatrix)")
    os.makedirs(args.work, exist_ok=True)

    f32 = os.path.join(args.work, os.path.basename(args.model).replace(".gguf", "") + ".F32.gguf")
    if not os.path.isfile(f32) or os.path.getmtime(f32) < os.path.getmtime(args.model):
        log(f"writing the reference F32 GGUF {f32}")
        make_f32_gguf(args.model, f32)

    result = {"llamacpp": llamacpp_version(args.bin), "model": os.path.basename(args.model),
              "text": os.path.relpath(args.text, REPO), "max_tokens": max_tokens,
              "imatrix": None, "presets": [], "kl_check": None}
    imatrix = None
    if im_presets:
        try:
            imatrix, meta = make_imatrix(args.bin, f32, args.model, args.calib,
                                         args.imatrix_tokens, args.imatrix_ctx, args.work,
                                         args.threads)
            result["imatrix"] = meta
        except (RuntimeError, subprocess.TimeoutExpired, ValueError, OSError) as e:
            result["imatrix"] = {"error": str(e)}
            log(f"importance matrix: FAILED: {e}")
    runs = [(p, False) for p in presets] + [(p, True) for p in im_presets]
    quant_paths = {}
    for preset, with_im in runs:
        name = preset + ("+imatrix" if with_im else "")
        row = {"preset": name, "imatrix": with_im,
               "imatrix_tokens": result["imatrix"].get("tokens") if with_im else None}
        try:
            if with_im and not imatrix:
                raise RuntimeError("no importance matrix (see \"imatrix\")")
            path, secs, fallbacks, entries = quantize(args.bin, f32, preset, args.work,
                                                      args.threads,
                                                      imatrix=imatrix if with_im else None)
            quant_paths[name] = path
            row.update({"quantize_s": secs, "fallback_tensors": fallbacks})
            if entries is not None:
                row["imatrix_entries"] = entries
            row.update(tensor_stats(path))
            scored, dequantized = eval_copy(path, row["type_histogram"])
            if dequantized:
                row["eval_copy_f32_types"] = dequantized
            ev = llmc_eval(args.llmc, scored, args.model, args.text, max_tokens)
            row.update({k: ev.get(k) for k in ("ppl", "ref_ppl", "kld_mean", "kld_p99",
                                                "kld_max", "top1", "tokens", "eval_wall_s")})
            log(f"{name}: {row['types']}; {row['bpw_quantized']:.3f} bpw, "
                f"kld {row['kld_mean']:.4f}, top1 {row['top1']:.2f}%, ppl {row['ppl']:.3f}")
        except (RuntimeError, subprocess.TimeoutExpired, ValueError, KeyError) as e:
            row["error"] = str(e)
            log(f"{name}: FAILED: {e}")
        result["presets"].append(row)

    if args.kl_check:
        try:
            q = quant_paths.get("Q4_0") or quantize(args.bin, f32, "Q4_0", args.work,
                                                    args.threads)[0]
            result["kl_check"] = kl_check(args.bin, args.llmc, f32, q, args.text, args.work,
                                          args.threads)
        except (RuntimeError, subprocess.TimeoutExpired, ValueError, KeyError) as e:
            result["kl_check"] = {"error": str(e)}
            log(f"KLD cross-check: FAILED: {e}")

    if args.markdown:
        print(markdown(result))
    else:
        print(json.dumps(result, indent=1))
    # Failed presets are rows with "error"; fail only when nothing was measured.
    return 1 if all("error" in r for r in result["presets"]) else 0


if __name__ == "__main__":
    sys.exit(main())
