"""SmolLM2-135M-Instruct through ONNX (issue 19): export, import, compare.

Not part of the test suite (it needs torch, transformers, onnx and
onnxruntime from PyPI, and writes ~0.6 GB); run by hand in such an
environment:
  python scripts/onnx_smollm2_check.py [--work DIR]

1. transformers loads the GGUF (dequantized to float32; the head tied to
   the embedding, as in the GGUF) and saves it as a
   Hugging Face folder; torch.onnx.export writes model.onnx beside it
   (with config.json and tokenizer.json, as optimum lays a folder out).
2. onnxruntime's logits of a chat prompt are the reference.
3. `llmc compile model.onnx` and `llmc compile` of the HF folder: the
   manifests (but for the source) must be equal, the logits bit-identical,
   and both within tolerance of onnxruntime.
4. Against the GGUF import itself (Q4_1 weights, the same values the
   export dequantized): llmc's logits with --exact-activations (f32
   activations on both) must agree to float rounding; the default (int8
   activations on the GGUF's Q4_1 products) is reported for scale.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GGUF = os.path.join(ROOT, ".cache", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
LLMC = os.path.join(ROOT, "build", "bin", "llmc")


def llmc(*args):
    p = subprocess.run([LLMC, *map(str, args)], capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"llmc {' '.join(map(str, args))} failed:\n{p.stderr[-2000:]}")
    return p


def export(work):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    folder = os.path.join(work, "smollm2-onnx")
    if os.path.exists(os.path.join(folder, "model.onnx")):
        return folder
    os.makedirs(folder, exist_ok=True)
    d, f = os.path.split(GGUF)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, torch_dtype=torch.float32).eval()
    # The GGUF has no output.weight (SmolLM2 ties its head to the embedding);
    # transformers 4.46's GGUF loader leaves tie_word_embeddings false and the
    # head randomly initialised (its own generate() then babbles): tie it.
    model.config.tie_word_embeddings = True
    model.tie_weights()
    AutoTokenizer.from_pretrained(d, gguf_file=f).save_pretrained(folder)
    model.save_pretrained(folder, safe_serialization=True)

    class LogitsOnly(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids):
            return self.m(input_ids=input_ids, use_cache=False).logits

    ids = torch.tensor([[1, 2, 3, 4]], dtype=torch.int64)
    t0 = time.time()
    torch.onnx.export(LogitsOnly(model), (ids,), os.path.join(folder, "model.onnx"),
                      input_names=["input_ids"], output_names=["logits"], opset_version=17,
                      dynamic_axes={"input_ids": {0: "batch", 1: "sequence"},
                                    "logits": {0: "batch", 1: "sequence"}})
    print(f"exported in {time.time() - t0:.1f} s: "
          f"{os.path.getsize(os.path.join(folder, 'model.onnx')) / 2**20:.0f} MiB")
    return folder


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default=os.path.join(ROOT, "build", "onnx-smollm2"))
    a = ap.parse_args()
    import onnxruntime as ort
    import torch
    import transformers
    folder = export(a.work)
    prompt = [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018,
              411, 407, 19712, 8182, 2, 198, 1, 4093, 198, 11716, 314, 260, 3575, 282, 4649, 47,
              2, 198, 1, 520, 9531, 198]
    sess = ort.InferenceSession(os.path.join(folder, "model.onnx"),
                                providers=["CPUExecutionProvider"])
    ref = sess.run(["logits"], {"input_ids": np.array([prompt], dtype=np.int64)})[0][0]
    arts = {}
    for kind, src in (("onnx", os.path.join(folder, "model.onnx")), ("hf", folder)):
        arts[kind] = os.path.join(a.work, f"smollm2.{kind}.llmc")
        t0 = time.time()
        llmc("compile", src, "-o", arts[kind], "-q")
        print(f"llmc compile ({kind}): {time.time() - t0:.1f} s")
    logits, manifests = {}, {}
    for kind, art in arts.items():
        out = os.path.join(a.work, f"{kind}.npy")
        llmc("run", art, "--prompt-tokens", ",".join(map(str, prompt)), "-n", "0",
             "--dump-logits", out, "-q")
        logits[kind] = np.load(out)
        m = json.loads(llmc("inspect", art, "--json", "--no-verify").stdout)
        m.pop("source")
        manifests[kind] = m
    gguf_art = os.path.join(a.work, "smollm2.gguf.llmc")
    llmc("compile", GGUF, "-o", gguf_art, "-q")
    gguf = {}
    for mode, extra in (("exact", ["--exact-activations"]), ("int8", [])):
        outs = []
        for art in (gguf_art, arts["onnx"]):
            out = os.path.join(a.work, f"cmp-{mode}-{len(outs)}.npy")
            llmc("run", art, "--prompt-tokens", ",".join(map(str, prompt)), "-n", "0",
                 "--dump-logits", out, "-q", *extra)
            outs.append(np.load(out))
        gguf[mode] = float(np.abs(outs[0] - outs[1]).max())
    print(f"GGUF import vs ONNX import, f32 activations on both: max |diff| {gguf['exact']:.3g}; "
          f"default (int8 activations on the GGUF's Q4_1 products): {gguf['int8']:.3g}")
    err = np.abs(logits["onnx"].astype(np.float64) - ref).max()
    top1 = np.mean(logits["onnx"].argmax(-1) == ref.argmax(-1))
    same = manifests["onnx"] == manifests["hf"]
    ident = np.array_equal(logits["onnx"], logits["hf"])
    cfg = manifests["onnx"]["config"]
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"onnxruntime {ort.__version__}")
    print(f"raised config: {cfg['num_layers']} layers, hidden {cfg['hidden_size']}, "
          f"{cfg['num_heads']}/{cfg['num_kv_heads']} heads of {cfg['head_dim']}, ffn "
          f"{cfg['intermediate_size']}, rope_theta {cfg['rope_theta']}, eps {cfg['norm_eps']}, "
          f"tied {cfg['tied_embeddings']}, context {cfg['context_length']}")
    print(f"prompt {len(prompt)} tokens: llmc(ONNX) vs onnxruntime max |diff| {err:.3g} "
          f"(max |logit| {np.abs(ref).max():.3g}), top-1 agreement {top1 * 100:.1f}%")
    print(f"ONNX import == HF import: manifest {same}, logits bit-identical {ident}")
    ok = (same and ident and err <= 1e-4 * max(1.0, float(np.abs(ref).max())) and top1 == 1.0
          and gguf["exact"] <= 1e-3 * max(1.0, float(np.abs(ref).max())))
    print("OK" if ok else "FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
