#!/usr/bin/env python3
"""Cross-check llmc's GPTQ and AWQ against llm-compressor's (PyPI `llmcompressor`).

Both quantize SmolLM2-135M-Instruct with the same calibration tokens and the
same weight grid (asymmetric, groups of 64 along the input dimension, every
linear of the 30 blocks; the tied embedding / LM head stays as in the source),
and both results are scored by the same `llmc eval` against the source model.

1. The source GGUF (Q4_1 matrices, Q8_0 tied embedding) is dequantized into a
   Hugging Face LlamaForCausalLM folder (f32 safetensors, config.json and a
   tokenizer.json built from the GGUF's BPE vocabulary and merges). llama.cpp's
   converter permutes the rows of attn_q / attn_k for its rotary layout; that
   permutation is inverted here. The conversion is checked with
   `llmc eval HF_DIR --ref GGUF` (KLD must be ~0).
2. The calibration tokens are what llmc takes: data/calib/default.txt encoded
   with the model's tokenizer (BOS first only if the tokenizer adds BOS, which
   SmolLM2's does not), the first N tokens, cut into sequences of calib-seq.
   They are checked against llmc's own encoding.
3. llm-compressor's GPTQModifier, and its AWQModifier followed by a
   QuantizationModifier, run oneshot on CPU (weight-only, num_bits 4 or 3,
   group_size 64, symmetric=False, targets Linear, ignore lm_head); every
   other option stays at llm-compressor's default. The result is
   fake-quantized back to plain f32 weights (the grid's values exactly) and
   saved as an HF folder.
4. llmc's own GPTQ / AWQ artifacts are compiled from the GGUF with
   `llm-quantize{method=... bits=B group=64 skip=token_embd.weight
   calib-tokens=N calib-seq=S}`.
5. Everything is scored with `llmc eval MODEL --ref GGUF --text T --json
   --max-tokens M --exact-activations` on the prose and the licences texts.

Needs, in .venv: `pip install llmcompressor gguf` (brings torch, transformers,
compressed-tensors, accelerate; PyPI's torch is a CUDA build, ~4 GB, and runs
here on CPU). Each llm-compressor run takes 15-20 min on 2 cores.

Usage: .venv/bin/python bench/llmcompressor_crosscheck.py [--bits 4 3]
       [--methods gptq awq] [--actorder-swap [IMPL ...]] [--markdown]
Scratch files go to .cache/peer/llmcompressor/ (git-ignored); results are
cached there per configuration (delete the folder, or pass --force, to redo).
"""

import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
from bench_common import cpu_model, git_commit, source_digest  # noqa: E402

GGUF = os.path.join(REPO, ".cache", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
WORK = os.path.join(REPO, ".cache", "peer", "llmcompressor")
HF_DIR = os.path.join(WORK, "smollm2-hf-f32")
LLMC = os.path.join(REPO, "build", "bin", "llmc")
CALIB_TEXT = os.path.join(REPO, "data", "calib", "default.txt")
EVAL_TEXTS = [("prose", os.path.join(REPO, "data", "eval", "default.txt")),
              ("licences", os.path.join(REPO, "data", "long", "licenses.txt"))]
PY = sys.executable
GROUP = 64


def log(msg):
    print(f"[crosscheck] {msg}", file=sys.stderr, flush=True)


def rel(path):
    return os.path.relpath(path, REPO)


# --------------------------------------------------------------------------
# 1. GGUF -> Hugging Face folder
# --------------------------------------------------------------------------

def _field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def unpermute_rope_rows(w, n_head):
    """Invert llama.cpp's convert_hf_to_gguf row permutation of q / k.

    llama.cpp stores each head's rows as [pairs (0,1), (2,3), ...] interleaved
    (GGML's rope acts on adjacent pairs) where Hugging Face keeps the rotated
    halves [0 .. d/2) and [d/2 .. d). GGUF row (h, i, j) (head h, pair i,
    member j) is HF row (h, j, i)."""
    rows = w.shape[0]
    d = rows // n_head
    return (w.reshape(n_head, d // 2, 2, *w.shape[1:])
             .swapaxes(1, 2)
             .reshape(w.shape))


HF_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def hf_tensor_name(gguf_name):
    if gguf_name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if gguf_name == "output_norm.weight":
        return "model.norm.weight"
    if gguf_name == "output.weight":
        return "lm_head.weight"
    parts = gguf_name.split(".")
    if parts[0] == "blk" and len(parts) == 4 and parts[2] in HF_NAMES:
        return f"model.layers.{parts[1]}.{HF_NAMES[parts[2]]}.{parts[3]}"
    raise ValueError(f"no Hugging Face name for GGUF tensor {gguf_name}")


def write_tokenizer(reader, out_dir):
    """tokenizer.json (+ tokenizer_config.json) from the GGUF's byte-level BPE.

    SmolLM2's GGUF says tokenizer.ggml.pre = "smollm": single digits split
    off, then GPT-2's byte-level pre-tokenizer. Control tokens (type 3) are
    added tokens marked special."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, AddedToken

    model = _field(reader, "tokenizer.ggml.model")
    pre = _field(reader, "tokenizer.ggml.pre")
    if model != "gpt2" or pre != "smollm":
        raise SystemExit(f"unexpected GGUF tokenizer {model}/{pre} (this script knows gpt2/smollm)")
    tokens = _field(reader, "tokenizer.ggml.tokens")
    types = _field(reader, "tokenizer.ggml.token_type")
    merges = _field(reader, "tokenizer.ggml.merges")
    vocab = {t: i for i, t in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise SystemExit("duplicate token strings in the GGUF vocabulary")
    bpe = models.BPE(vocab=vocab, merges=[tuple(m.split(" ", 1)) for m in merges],
                     fuse_unk=False, byte_fallback=False)
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    special = [tokens[i] for i, t in enumerate(types) if int(t) == 3]
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in special])
    tok.save(os.path.join(out_dir, "tokenizer.json"))

    bos = int(_field(reader, "tokenizer.ggml.bos_token_id"))
    eos = int(_field(reader, "tokenizer.ggml.eos_token_id"))
    unk = int(_field(reader, "tokenizer.ggml.unknown_token_id"))
    pad = int(_field(reader, "tokenizer.ggml.padding_token_id", eos))
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": tokens[bos], "eos_token": tokens[eos], "unk_token": tokens[unk],
        "pad_token": tokens[pad],
        "add_bos_token": bool(_field(reader, "tokenizer.ggml.add_bos_token", False)),
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": int(_field(reader, "llama.context_length", 8192)),
    }
    tmpl = _field(reader, "tokenizer.chat_template")
    if tmpl:
        cfg["chat_template"] = tmpl
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    return {"bos": bos, "eos": eos, "unk": unk, "pad": pad}


def convert_gguf(gguf_path, out_dir):
    """Dequantize every tensor of a llama GGUF into an f32 HF checkpoint."""
    import numpy as np
    from gguf import GGUFReader
    from gguf.quants import dequantize
    from safetensors.numpy import save_file

    reader = GGUFReader(gguf_path)
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise SystemExit(f"{gguf_path}: architecture {arch}, expected llama")
    a = lambda k, d=None: _field(reader, f"llama.{k}", d)  # noqa: E731
    n_head, n_kv = int(a("attention.head_count")), int(a("attention.head_count_kv"))
    hidden = int(a("embedding_length"))
    tensors = {}
    for t in reader.tensors:
        w = dequantize(t.data, t.tensor_type).astype(np.float32)
        shape = tuple(int(x) for x in reversed(t.shape))  # GGUF lists ne[0] (innermost) first
        w = w.reshape(shape)
        if t.name.endswith("attn_q.weight"):
            w = unpermute_rope_rows(w, n_head)
        elif t.name.endswith("attn_k.weight"):
            w = unpermute_rope_rows(w, n_kv)
        tensors[hf_tensor_name(t.name)] = np.ascontiguousarray(w)
    tied = "lm_head.weight" not in tensors
    os.makedirs(out_dir, exist_ok=True)
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    ids = write_tokenizer(reader, out_dir)
    vocab = int(a("vocab_size", len(_field(reader, "tokenizer.ggml.tokens"))))
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": int(a("feed_forward_length")),
        "num_hidden_layers": int(a("block_count")),
        "num_attention_heads": n_head,
        "num_key_value_heads": n_kv,
        "head_dim": hidden // n_head,
        "hidden_act": "silu",
        "max_position_embeddings": int(a("context_length")),
        "rms_norm_eps": float(a("attention.layer_norm_rms_epsilon")),
        "rope_theta": float(a("rope.freq_base", 10000.0)),
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "initializer_range": 0.02,
        "pretraining_tp": 1,
        "tie_word_embeddings": tied,
        "vocab_size": vocab,
        "bos_token_id": ids["bos"],
        "eos_token_id": ids["eos"],
        "pad_token_id": ids["pad"],
        "torch_dtype": "float32",
        "use_cache": True,
    }
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    return config


# --------------------------------------------------------------------------
# 2. Calibration tokens
# --------------------------------------------------------------------------

def calibration_sequences(hf_dir, n_tokens, seq_len):
    """What llmc's calibrated passes read: the calibration text encoded with
    the model's tokenizer (here Hugging Face's, from hf_dir), the first
    n_tokens, cut into sequences of seq_len. llmc asks its tokenizer for BOS,
    which it adds only when the model's tokenizer says so (GGUF
    tokenizer.ggml.add_bos_token; false for SmolLM2), so BOS is prepended
    here on the same condition. Returns (sequences, bos_added)."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(hf_dir)
    with open(os.path.join(hf_dir, "tokenizer_config.json")) as f:
        add_bos = bool(json.load(f).get("add_bos_token", False))
    with open(CALIB_TEXT, encoding="utf-8") as f:
        text = f.read()
    ids = ([tok.bos_token_id] if add_bos else []) + tok(text, add_special_tokens=False)["input_ids"]
    ids = ids[:n_tokens]
    return [ids[i:i + seq_len] for i in range(0, len(ids), seq_len)], add_bos


def check_calibration_ids(ids_path, n_tokens, seq_len):
    """llmc's encoding of the calibration text against ours: `llmc eval` of
    the source model on the text and on our .ids file (no reference). Its
    windows are [k*ctx, (k+1)*ctx) with ctx = 512, each scoring ctx - 1
    positions, so a budget of n_seq * (ctx - 1) scores the same windows of
    both, all inside the first n_tokens. Equal mean NLL to the last digit
    means the same token ids (llmc's eval encodes the text as its calibration
    does, BOS only where the tokenizer asks for it)."""
    if seq_len != 512:
        raise SystemExit("the token check assumes llmc eval's 512-token windows = calib-seq")
    budget = (n_tokens // seq_len) * (seq_len - 1)
    res = {}
    for label, text in (("llmc tokenizer", CALIB_TEXT), ("our ids", ids_path)):
        p = subprocess.run(["nice", "-n", "19", LLMC, "eval", GGUF, "--text", text, "--json",
                            "--max-tokens", str(budget), "--exact-activations", "-q"],
                           cwd=REPO, capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"llmc eval failed: {p.stderr.strip()[-300:]}")
        res[label] = json.loads(p.stdout)
    a, b = res["llmc tokenizer"], res["our ids"]
    same = a["tokens"] == b["tokens"] and a["nll_mean"] == b["nll_mean"]
    return same, a, b


# --------------------------------------------------------------------------
# 3. llm-compressor (run in a child process: `--worker`)
# --------------------------------------------------------------------------

def llmcompressor_worker(args):
    """Quantize HF_DIR with llm-compressor, fake-quantize the result back to
    f32 and save it as an HF folder in args.out; meta.json records options,
    versions and timing."""
    import shutil
    import torch
    from compressed_tensors.quantization import (QuantizationArgs, QuantizationScheme,
                                                 QuantizationStrategy, QuantizationType)
    from compressed_tensors.quantization.lifecycle.forward import fake_quantize
    from datasets import Dataset
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM
    import llmcompressor
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import GPTQModifier, QuantizationModifier
    from llmcompressor.modifiers.transform.awq import AWQModifier

    torch.set_num_threads(args.threads)
    with open(args.calib_json) as f:
        seqs = json.load(f)
    ds = Dataset.from_dict({"input_ids": seqs, "attention_mask": [[1] * len(s) for s in seqs]})
    model = AutoModelForCausalLM.from_pretrained(HF_DIR, dtype=torch.float32)

    def scheme():
        return QuantizationScheme(
            targets=["Linear"],
            weights=QuantizationArgs(num_bits=args.bits, type=QuantizationType.INT,
                                     symmetric=False, strategy=QuantizationStrategy.GROUP,
                                     group_size=GROUP))
    if args.method == "gptq":
        kw = {"actorder": None} if args.actorder == "none" else {}
        mods = [GPTQModifier(config_groups={"group_0": scheme()}, ignore=["lm_head"], **kw)]
        opts = {"block_size": mods[0].block_size, "dampening_frac": mods[0].dampening_frac,
                "actorder (modifier)": str(mods[0].actorder)}
    else:
        awq = AWQModifier()
        mods = [awq, QuantizationModifier(config_groups={"group_0": scheme()},
                                          ignore=["lm_head"])]
        opts = {"duo_scaling": awq.duo_scaling, "n_grid": awq.n_grid,
                "mappings": "default (inferred from LlamaForCausalLM)"}
    if not torch.cuda.is_available():
        # llm-compressor 0.14's AWQ pins its cached activations for faster
        # host-to-device copies, unconditionally; with the (CUDA) PyPI torch
        # and no NVIDIA driver that raises "Found no NVIDIA driver". Pinning
        # is only a transfer optimisation, so on CPU it is skipped.
        from llmcompressor.pipelines.cache import IntermediatesCache
        IntermediatesCache.pin_memory = lambda self, *a, **k: None
    t0 = time.monotonic()
    oneshot(model=model, dataset=ds, recipe=mods, num_calibration_samples=len(seqs),
            max_seq_length=max(len(s) for s in seqs), shuffle_calibration_samples=False,
            batch_size=1)
    quant_s = time.monotonic() - t0

    # Fake-quantize every quantized linear with its stored grid: the values
    # the compressed checkpoint decompresses to, as plain f32 weights.
    deq, wargs = 0, None
    levels_max = 0
    with torch.no_grad():
        for name, m in model.named_modules():
            qs = getattr(m, "quantization_scheme", None)
            if qs is None or getattr(qs, "weights", None) is None or not hasattr(m, "weight_scale"):
                continue
            wargs = qs.weights
            w = m.weight.data.to(torch.float32)
            q = fake_quantize(w, m.weight_scale.to(torch.float32), m.weight_zero_point, wargs)
            # sanity: at most 2^bits levels per group
            g = q.reshape(q.shape[0], -1, GROUP)
            levels_max = max(levels_max, max(len(torch.unique(g[r, c]))
                                             for r in range(0, g.shape[0], 97)
                                             for c in range(g.shape[1])))
            m.weight.data = q.to(m.weight.dtype)
            deq += 1
    if levels_max > 2 ** args.bits:
        raise SystemExit(f"fake-quantized groups have {levels_max} levels > 2^{args.bits}")
    skip_suffixes = ("weight_scale", "weight_zero_point", "weight_g_idx", "weight_global_scale")
    sd = {k: v.detach().to(torch.float32).contiguous() for k, v in model.state_dict().items()
          if not k.endswith(skip_suffixes) and k != "lm_head.weight"}
    os.makedirs(args.out, exist_ok=True)
    save_file(sd, os.path.join(args.out, "model.safetensors"), metadata={"format": "pt"})
    for fn in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(HF_DIR, fn), os.path.join(args.out, fn))
    if wargs is not None:
        opts["actorder (resolved)"] = str(wargs.actorder)
        opts["observer"] = str(wargs.observer)
        opts["weights"] = (f"int{wargs.num_bits} {wargs.strategy} group_size={wargs.group_size} "
                           f"symmetric={wargs.symmetric}")
    import compressed_tensors
    import transformers
    meta = {"quant_s": quant_s, "dequantized_linears": deq, "levels_max": levels_max,
            "options": opts, "threads": args.threads,
            "versions": {"llmcompressor": llmcompressor.__version__,
                         "compressed-tensors": compressed_tensors.__version__,
                         "torch": torch.__version__, "transformers": transformers.__version__}}
    with open(os.path.join(args.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)


# --------------------------------------------------------------------------
# 4./5. llmc artifacts and evaluation
# --------------------------------------------------------------------------

def run_logged(cmd, **kw):
    log("$ " + " ".join(shlex.quote(c) for c in cmd))
    t0 = time.monotonic()
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, **kw)
    return p, time.monotonic() - t0


def llmc_pipeline(method, bits, n_tokens, seq_len, extra=""):
    return (f"llm-quantize{{method={method} bits={bits} group={GROUP} skip=token_embd.weight "
            f"calib-tokens={n_tokens} calib-seq={seq_len}{' ' + extra if extra else ''}}}")


def llmc_compile(pipeline, out):
    import re
    cmd = ["nice", "-n", "19", LLMC, "compile", GGUF, "-o", out, "--no-ir",
           f"--pipeline={pipeline}"]
    p, wall = run_logged(cmd)
    if p.returncode != 0:
        raise SystemExit(f"llmc compile failed: {p.stderr.strip()[-400:]}")
    m = re.search(r"ran pipeline .* in ([0-9.]+) s", p.stderr)
    return {"quant_s": float(m.group(1)) if m else wall, "compile_wall_s": wall}


def llmc_eval(model, text, max_tokens):
    cmd = ["nice", "-n", "19", LLMC, "eval", model, "--ref", GGUF, "--text", text, "--json",
           "--max-tokens", str(max_tokens), "--exact-activations", "-q"]
    p, _ = run_logged(cmd)
    if p.returncode != 0:
        raise SystemExit(f"llmc eval failed: {p.stderr.strip()[-400:]}")
    return json.loads(p.stdout)


def cached(path, force, make):
    """JSON result at `path`, computed by make() unless already there."""
    if not force and os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    r = make()
    with open(path + ".tmp", "w") as f:
        json.dump(r, f, indent=1)
    os.replace(path + ".tmp", path)
    return r


def fmt(x, nd=4):
    return "—" if x is None else f"{x:.{nd}f}"


def build_report(args, conv, tokcheck, rows, versions, commands, started):
    with open(os.path.join(HF_DIR, "tokenizer_config.json")) as f:
        bos = bool(json.load(f).get("add_bos_token", False))
    bos_note = (", BOS first" if bos else
                ", no BOS (llmc encodes calibration text with BOS only when the tokenizer "
                "adds one, and SmolLM2's GGUF says tokenizer.ggml.add_bos_token = false)")
    L = ["# GPTQ and AWQ: llmc against llm-compressor", "",
         "Generated by `bench/llmcompressor_crosscheck.py --markdown`; do not edit by hand, "
         "rerun it.", "",
         f"- Machine: {cpu_model()}, {os.cpu_count()} CPU cores, {platform.machine()}, "
         f"Linux {platform.release()}; shared with other jobs, so times are indicative",
         f"- Date: {started:%Y-%m-%d %H:%M} UTC",
         f"- Git commit: {git_commit(REPO)}",
         "- Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()),
         f"- Model and reference: `{rel(GGUF)}` (Q4_1 matrices, Q8_0 tied embedding), "
         "dequantized",
         f"- Calibration: first {args.calib_tokens} tokens of `data/calib/default.txt`"
         f"{bos_note}, {args.calib_tokens // args.calib_seq} sequences of {args.calib_seq}, "
         "identical for both (checked below)",
         f"- Evaluation: `llmc eval MODEL --ref GGUF --text T --json --max-tokens "
         f"{args.max_tokens} --exact-activations` (f32 activations on both sides: llm-compressor's "
         "results are dense f32 checkpoints, llmc's are gq artifacts whose default kernels "
         "would quantize activations to int8), T = `data/eval/default.txt` (prose) and "
         "`data/long/licenses.txt` (licences)",
         f"- Grid: {GROUP} weights per (scale, zero point / minimum) along the input dimension, "
         "asymmetric, every linear of the 30 blocks; the tied embedding / LM head stays Q8_0 "
         "as in the source (llmc `skip=token_embd.weight`, llm-compressor `ignore=[lm_head]`)",
         "",
         "## Conversion check", "",
         f"The GGUF, dequantized to an f32 Hugging Face LlamaForCausalLM folder (q/k rows "
         f"un-permuted from llama.cpp's rotary layout), against the GGUF itself: KLD mean "
         f"{conv['kld_mean']:.3g}, max {conv['kld_max']:.3g}, top-1 {conv['top1']:.2f}% over "
         f"{conv['tokens']} positions of `data/eval/default.txt` (`--exact-activations`; "
         f"without it the reference's int8 activations alone give "
         f"{conv.get('kld_mean_int8', float('nan')):.4f}).",
         "",
         f"Calibration tokens: {'identical' if tokcheck['same'] else 'DIFFERENT'} — llmc's "
         f"own encoding of the text and our Hugging Face tokenizer's ids give mean NLL "
         f"{tokcheck['llmc']['nll_mean']:.12f} and {tokcheck['ours']['nll_mean']:.12f} over "
         f"{tokcheck['ours']['tokens']} positions.", "",
         "## Results", "",
         "| Method | Bits | Implementation | KLD prose | KLD licences | Top-1 % prose | "
         "Top-1 % licences | PPL prose | Quantize s |",
         "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        L.append(f"| {r['method'].upper()} | {r['bits']} | {r['impl']} | "
                 f"{fmt(r['prose']['kld_mean'])} | {fmt(r['licences']['kld_mean'])} | "
                 f"{fmt(r['prose']['top1'], 2)} | {fmt(r['licences']['top1'], 2)} | "
                 f"{fmt(r['prose']['ppl'], 3)} | {fmt(r['quant_s'], 1)} |")
    if rows:
        L += ["", "Reference (the GGUF itself) PPL: prose "
              f"{rows[0]['prose']['ref_ppl']:.3f}, licences {rows[0]['licences']['ref_ppl']:.3f}."]
    L += ["", "- **Quantize s**: llmc: the pass pipeline inside `llmc compile` (calibration "
          "included); llm-compressor: its `oneshot` call (calibration included, model load "
          f"and save excluded), torch on {args.threads} threads.",
          "- llmc's defaults (act-order=true static-groups=true) do what llm-compressor's "
          "actorder=static does: columns by decreasing diag H, every group's grid fixed from the "
          "original weights first. `static-groups=false` computes each grid from the "
          "error-updated weights when its group's first column comes up; `act-order=false "
          "static-groups=false` is GPTQ in natural column order (llmc's default before this "
          "comparison); `actorder=None` is llm-compressor without act-order.",
          "- llm-compressor 0.14's AWQModifier pins its cached activations in memory "
          "unconditionally, which fails on a machine without an NVIDIA driver (PyPI's torch is "
          "a CUDA build): the script makes that pinning a no-op on CPU (it only speeds up "
          "host-to-device copies).",
          "- Dequantization: each quantized linear's weight is replaced by compressed-tensors' "
          "`fake_quantize(weight, weight_scale, weight_zero_point)` (what its compressed "
          "checkpoint decompresses to), checked to hold at most 2^bits levels per group, and "
          "saved as plain f32 with the (AWQ-rescaled) norms.", "",
          "## What each implementation does", "",
          "| | llmc | llm-compressor |", "|---|---|---|"]
    L += [f"| {a} | {b} | {c} |" for a, b, c in METHOD_NOTES]
    L += ["", "## Commands", ""] + [f"    {c}" for c in commands]
    return "\n".join(L) + "\n"


# How the two implementations differ, read from their sources (llmc: passes/quant,
# compiler/quant; llm-compressor 0.14 / compressed-tensors 0.19) and from the
# options this script passes (everything else at llm-compressor's defaults).
METHOD_NOTES = [
    ("Group layout", "64 consecutive input columns per (fp16 scale d, fp16 minimum m), "
     "w = d*q + m, q in 0..2^b-1; m is the group's minimum itself",
     "64 consecutive input columns per (scale, integer zero point), w = s*(q - z); "
     "the min-max range is first widened to include 0, z = round(-min/s)"),
    ("Layer order", "block by block; block l calibrated on the outputs of blocks 0..l-1 "
     "already quantized", "sequential pipeline by decoder layer, propagate_error=True: "
     "the same"),
    ("GPTQ Hessian / damping", "H = 2/N sum x x^T, damp 0.01 x mean(diag H) (x10 retries if "
     "not PD), blocks of 128 columns", "H = 2/n sum x x^T, dampening_frac 0.01 x mean(diag H) "
     "(RTN fallback if not PD), block_size 128"),
    ("GPTQ act-order", "on (act-order=true default)", "actorder=static (default): columns "
     "processed by decreasing diag H, groups stay 64 consecutive columns"),
    ("GPTQ group grids", "static-groups=true (default): from the original weights, all "
     "before the first column; false: when the group's first column comes up, from the "
     "error-updated weights (as in the GPTQ paper's code)", "computed once before GPTQ from the "
     "original weights (memoryless_minmax observer) and kept fixed"),
    ("AWQ scales", "s = mean(abs x)^a, a on a grid of 20, loss = output MSE of the group's "
     "linears on awq-samples=512 calibration tokens", "duo_scaling (default): s = "
     "mean(abs x)^r / mean(abs w)^(1-r), n_grid 20, loss = output MSE of the parent module "
     "(attention / MLP / down_proj) on all calibration tokens"),
    ("AWQ mappings", "norm->q,k,v; v->o only if heads = kv heads (not here: 9 vs 3); "
     "norm->gate,up; up->down", "the same four, v->o skipped for the same shape reason"),
    ("AWQ clipping", "per (row, group) clip-ratio search (not for q, k), then RTN",
     "none: min-max RTN (QuantizationModifier) after scaling"),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bits", type=int, nargs="+", default=[4, 3])
    ap.add_argument("--methods", nargs="+", default=["gptq", "awq"], choices=["gptq", "awq"])
    ap.add_argument("--impls", nargs="+", default=["llmc", "llm-compressor"],
                    choices=["llmc", "llm-compressor"])
    ap.add_argument("--calib-tokens", type=int, default=8192)
    ap.add_argument("--calib-seq", type=int, default=512)
    ap.add_argument("--max-tokens", type=int, default=1024, help="scored positions per text")
    ap.add_argument("--threads", type=int, default=2, help="torch threads for llm-compressor")
    ap.add_argument("--actorder-swap", nargs="*", default=None, choices=["llmc", "llm-compressor"],
                    metavar="IMPL",
                    help="also run GPTQ without these implementations' defaults (llmc "
                         "static-groups=false, and act-order=false static-groups=false; "
                         "llm-compressor actorder=None); no IMPL: both")
    ap.add_argument("--force", action="store_true", help="recompute cached results")
    ap.add_argument("--markdown", action="store_true",
                    help="also write docs/results/llmcompressor.md")
    # internal: the llm-compressor child process
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--method", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--calib-json", help=argparse.SUPPRESS)
    ap.add_argument("--actorder", choices=["default", "none"], default="default",
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        args.bits = args.bits[0]
        llmcompressor_worker(args)
        return

    started = datetime.datetime.now(datetime.timezone.utc)
    os.makedirs(WORK, exist_ok=True)
    me = os.path.relpath(__file__, REPO)
    commands = [f".venv/bin/python {me} " + " ".join(shlex.quote(a) for a in sys.argv[1:])]

    # 1. conversion and its check
    if args.force or not os.path.exists(os.path.join(HF_DIR, "model.safetensors")):
        log(f"converting {rel(GGUF)} -> {rel(HF_DIR)}")
        convert_gguf(GGUF, HF_DIR)

    def conversion_check():
        r = llmc_eval(HF_DIR, EVAL_TEXTS[0][1], 512)
        cmd = ["nice", "-n", "19", LLMC, "eval", HF_DIR, "--ref", GGUF, "--json",
               "--max-tokens", "512", "-q"]
        p, _ = run_logged(cmd)
        r["kld_mean_int8"] = json.loads(p.stdout)["kld_mean"] if p.returncode == 0 else None
        return r
    conv = cached(os.path.join(WORK, "conversion_check.json"), args.force, conversion_check)
    log(f"conversion check: KLD mean {conv['kld_mean']:.3g}, top-1 {conv['top1']}%")
    if not conv["kld_mean"] < 1e-3:
        raise SystemExit("the HF conversion does not reproduce the GGUF (KLD >= 1e-3)")
    commands.append(f"llmc eval {rel(HF_DIR)} --ref {rel(GGUF)} --json --max-tokens 512 "
                    "--exact-activations")

    # 2. calibration tokens, checked against llmc's own encoding
    tag = f"t{args.calib_tokens}_s{args.calib_seq}"
    calib_json = os.path.join(WORK, f"calib_{tag}.json")
    ids_path = os.path.join(WORK, f"calib_{tag}.ids")
    if args.force or not os.path.exists(calib_json):
        seqs, bos = calibration_sequences(HF_DIR, args.calib_tokens, args.calib_seq)
        with open(calib_json, "w") as f:
            json.dump(seqs, f)
        with open(ids_path, "w") as f:
            f.write(f"# {'BOS + ' if bos else ''}the first tokens of data/calib/default.txt "
                    "(Hugging Face tokenizer)\n")
            f.write("\n".join(" ".join(map(str, s)) for s in seqs) + "\n")

    def token_check():
        same, a, b = check_calibration_ids(ids_path, args.calib_tokens, args.calib_seq)
        return {"same": same, "llmc": a, "ours": b}
    tokcheck = cached(os.path.join(WORK, f"token_check_{tag}.json"), args.force, token_check)
    log(f"calibration ids identical to llmc's: {tokcheck['same']}")
    if not tokcheck["same"]:
        log("WARNING: the calibration token ids differ from llmc's")

    # 3./4./5. quantize and evaluate
    plan = []  # (method, bits, impl, variant): variant "" = defaults
    for bits in args.bits:
        for method in args.methods:
            for impl in args.impls:
                plan.append((method, bits, impl, ""))
            if method == "gptq" and args.actorder_swap is not None:
                swap = args.actorder_swap or ["llmc", "llm-compressor"]
                plan += [(method, bits, impl, v) for impl, v in
                         (("llmc", "static-groups=false"),
                          ("llmc", "act-order=false static-groups=false"),
                          ("llm-compressor", "actorder=None"))
                         if impl in args.impls and impl in swap]
    rows, versions = [], {}
    for method, bits, impl, variant in plan:
        vtag = "" if not variant else "-" + variant.replace("=", "_").replace(" ", "-").lower()
        key = f"{impl}-{method}-w{bits}-g{GROUP}-{tag}-m{args.max_tokens}{vtag}"
        if impl == "llmc":
            # llmc's rows are reused only while the sources they depend on are unchanged.
            key += "-" + source_digest(REPO, ("compiler", "passes", "dialects", "runtime",
                                              "codegen", "tools", "data/calib"))
            art = os.path.join(WORK, f"llmc-{method}-w{bits}-{tag}{vtag}.llmc")
            pipe = llmc_pipeline(method, bits, args.calib_tokens, args.calib_seq,
                                 extra=variant)

            def make(art=art, pipe=pipe):
                r = llmc_compile(pipe, art)
                for label, text in EVAL_TEXTS:
                    r[label] = llmc_eval(art, text, args.max_tokens)
                return r
            commands.append(f"llmc compile {rel(GGUF)} -o {rel(art)} --no-ir --pipeline='{pipe}'")
            model_path = art
        else:
            out = os.path.join(WORK, f"lc-{method}-w{bits}-{tag}{vtag}")
            cmd = ["nice", "-n", "19", PY, __file__, "--worker", "--method", method,
                   "--bits", str(bits), "--out", out, "--calib-json", calib_json,
                   "--threads", str(args.threads)]
            if variant == "actorder=None":
                cmd += ["--actorder", "none"]

            def make(method=method, bits=bits, out=out, cmd=cmd):
                logf = out + ".log"
                log("$ " + " ".join(cmd) + f"  (log: {rel(logf)})")
                with open(logf, "w") as lf:
                    p = subprocess.run(cmd, cwd=REPO, stdout=lf, stderr=subprocess.STDOUT)
                if p.returncode != 0:
                    raise SystemExit(f"llm-compressor {method} w{bits} failed; see {logf}")
                with open(os.path.join(out, "meta.json")) as f:
                    r = json.load(f)
                for label, text in EVAL_TEXTS:
                    r[label] = llmc_eval(out, text, args.max_tokens)
                return r
            commands.append(" ".join(shlex.quote(rel(c) if c.startswith(REPO) else c)
                                     for c in cmd[3:]))
            model_path = out
        label = impl + (f", {variant}" if variant else "")
        log(f"{label} {method} {bits}-bit")
        r = cached(os.path.join(WORK, key + ".json"), args.force, make)
        r.update(method=method, bits=bits, impl=label, model=rel(model_path))
        versions.update(r.get("versions", {}))
        rows.append(r)
        print(f"{method:5s} w{bits} {label:30s} KLD prose {fmt(r['prose']['kld_mean'])} "
              f"licences {fmt(r['licences']['kld_mean'])} top1 {r['prose']['top1']:.2f} "
              f"quant {r['quant_s']:.1f}s", flush=True)
    commands.append(f"llmc eval MODEL --ref {rel(GGUF)} --text T --json --max-tokens "
                    f"{args.max_tokens} --exact-activations   (T: "
                    + ", ".join(rel(t) for _, t in EVAL_TEXTS) + ")")
    if not versions:
        try:
            from importlib.metadata import version
            versions = {k: version(k) for k in ("llmcompressor", "compressed-tensors", "torch",
                                                 "transformers")}
        except Exception:  # noqa: BLE001
            versions = {}
    report = build_report(args, conv, tokcheck, rows, versions, commands, started)
    print(report)
    if args.markdown:
        path = os.path.join(REPO, "docs", "results", "llmcompressor.md")
        with open(path, "w") as f:
            f.write(report)
        log(f"wrote {rel(path)}")


if __name__ == "__main__":
    main()
