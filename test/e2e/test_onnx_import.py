"""End-to-end: ONNX import (issue 19) on real exporter output.

Fixtures (test/fixtures/onnx, written by export_onnx_fixtures.py with
torch.onnx.export of transformers models; CI needs neither torch nor
onnxruntime): a tied GQA Llama, a Qwen2 with q/k/v biases, a Llama with an
exact-GELU gated MLP, one exported in float16, a Mixtral (4 experts, top 2;
RoPE as cos/sin caches), and the first Llama
as serving stacks export it (attention_mask, position_ids and past
key/values inputs; reference: a fresh sequence), each with the same weights
as a Hugging Face folder and onnxruntime's logits.

Checks per model:
- `llmc compile model.onnx`: prompt logits against onnxruntime's (the
  exporter's own runtime) and against the independent NumPy reference on
  the same weights, top-1 agreement;
- the ONNX import is the HF import: same manifest (config, tensors,
  kernel plan, codegen) but for the source, bit-identical logits; and so
  after a pipeline (RTN 4-bit + SnapKV), passes behave the same on both.
Quantized exports (onnxruntime's 4-bit quantizer: MatMulNBits with packed
zero points, and symmetric without; QDQ, DequantizeLinear of uint4 codes at
opset 21): logits against onnxruntime's. onnxruntime's transformer
optimizer output (SkipSimplifiedLayerNormalization, RotaryEmbedding): the
same model as the plain export.
Phi-3: fused qkv_proj and gate_up_proj (one MatMul each, its result cut by
Slices) against onnxruntime, the NumPy reference and the HF import.
LayerNorm models: OLMo (parameter-free LayerNorms) exported at opset 17
(LayerNormalization) and at opset 14 (written out: ReduceMean, Sub, Pow,
...), both against onnxruntime, the NumPy reference and the HF import; a
Llama with affine LayerNorms (scale and shift; onnxruntime's logits only,
no transformers family has that shape) and its transformer-optimizer output
(SkipLayerNormalization). onnxruntime-genai's model builder output (packed
qkv into the GroupQueryAttention contrib op, RoPE inside it, weights as
external data): the same model as the plain export. Interleaved RoPE: the optimizer's RotaryEmbedding
with interleaved=1 (onnxruntime's logits). Depth pruning (WRP, one block)
gives the same artifact and logits from the ONNX and the HF import.
Bad input: a tanh-approximated GELU MLP (a pattern llmc does not raise: the
error names the nodes), external data missing or escaping the folder, an initializer of the wrong
size, a cycle, a truncated and a
random-bytes file: each a clean error (exit 1) and no output file.
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import harness  # noqa: E402  (first: pins BLAS threads)
from hf_loader import load_hf  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "onnx")
MODELS = ["llama-tied", "qwen2-bias", "llama-gelu", "llama-f16", "llama-past", "mixtral-moe",
          "olmo", "olmo-opset14", "phi3"]
# Exports with no Hugging Face folder (onnxruntime's logits are the reference).
ORT_ONLY = ["llama-layernorm", "llama-interleaved"]
QUANTIZED = [("llama-q4", "llama-tied"), ("qwen2-q4sym", "qwen2-bias"), ("llama-qdq", "llama-tied")]
OPTIMIZED = [("llama-ortopt", "llama-tied"), ("llama-layernorm-ortopt", "llama-layernorm"),
             ("llama-genai", "llama-tied")]
# llmc float32 vs onnxruntime float32: measured max abs error 1.4e-6 and
# 1.2e-6 with max|logit| 2.2 (6e-7 relative); vs the float64 NumPy
# reference likewise. 1e-5 relative leaves ~15x; a wrong RoPE half, bias or
# transposed weight gives errors of order 1.
REL_TOL = 1e-5
# llama-f16: onnxruntime computes in float16 (llmc in float32 on the same
# float16 weights): measured 7.2e-4 abs at max|logit| 1.87 (3.9e-4
# relative); 2e-3 relative. The NumPy reference (float64 on the same
# weights) keeps REL_TOL.
ORT_REL_TOL = {"llama-f16": 2e-3}
PIPELINE = "llm-quantize{method=rtn bits=4 group=16},llm-kv-policy{method=snapkv budget=0.5}"
PRUNE = "llm-prune-depth{method=wrp drop=1 keep-first=0 keep-last=0}"
# What the raised config must say of these (name: (norm, rope_style)).
EXPECT_CONFIG = {"olmo": ("layer_norm", "half"), "olmo-opset14": ("layer_norm", "half"),
                 "llama-layernorm": ("layer_norm", "half"),
                 "llama-interleaved": ("rms_norm", "interleaved"),
                 "llama-tied": ("rms_norm", "half"), "phi3": ("rms_norm", "half")}


def manifest(art):
    m = json.loads(harness.run_llmc(["inspect", art, "--json", "--no-verify"]).stdout)
    m.pop("source", None)
    return m


def compile_to(checks, model, out, extra=()):
    p = harness.run_llmc(["compile", model, "-o", out, "-q", *extra], check=False)
    if p.returncode == 0 and os.path.exists(out):
        return True
    return checks.check(False, f"compile {model} {' '.join(extra)}", p.stderr.strip()[-300:])


def model_checks(checks, work, name):
    folder = os.path.join(FIXTURES, name)
    ref = np.load(os.path.join(folder, "reference.npz"))
    prompt, ort_logits = [int(t) for t in ref["prompt"]], ref["logits"]
    via_onnx, via_hf = (os.path.join(work, f"{name}.{k}.llmc") for k in ("onnx", "hf"))
    if not (compile_to(checks, os.path.join(folder, "model.onnx"), via_onnx) and
            compile_to(checks, folder, via_hf)):
        return
    got = harness.llmc_logits(via_onnx, prompt, os.path.join(work, f"{name}.onnx.npy"))
    harness.compare_logits(checks, f"{name} (ONNX) vs onnxruntime", got,
                           ort_logits.astype(np.float32), ORT_REL_TOL.get(name, REL_TOL))
    source = json.loads(harness.run_llmc(["inspect", via_onnx, "--json", "--no-verify"]).stdout)
    serving = source["source"]["metadata"].get("onnx.serving_inputs")
    checks.check((serving is not None) == (name == "llama-past"),
                 f"{name}: the manifest records serving inputs raised for a fresh sequence "
                 "exactly when the graph has them", str(serving))
    numpy_ref = load_hf(folder).logits(prompt)
    harness.compare_logits(checks, f"{name} (ONNX) vs NumPy reference", got, numpy_ref, REL_TOL)
    hf = harness.llmc_logits(via_hf, prompt, os.path.join(work, f"{name}.hf.npy"))
    a, b = manifest(via_onnx), manifest(via_hf)
    checks.check(a == b, f"{name}: the ONNX import's manifest equals the HF import's "
                 "(config, tensors, kernel plan, codegen)",
                 "differ in " + ", ".join(k for k in a if a[k] != b.get(k)) if a != b else
                 f"{len(a['tensors'])} tensors, config {a['config']['architecture']}, "
                 f"{a['config']['num_heads']}/{a['config']['num_kv_heads']} heads, "
                 f"rope_theta {a['config']['rope_theta']}")
    checks.check(np.array_equal(got, hf), f"{name}: ONNX and HF imports give bit-identical logits",
                 f"max |diff| {float(np.abs(got - hf).max()):.3g}")
    both = both_imports(checks, work, name, folder, prompt, PIPELINE, "rtn-snapkv")
    if not both:
        return
    pa, pb, la, lb = both
    checks.check(pa == pb and np.array_equal(la, lb),
                 f"{name}: RTN 4-bit + SnapKV give the same artifact and logits from either import",
                 f"passes {[p.split('{')[0] for p in pa['pipeline']['passes']]}, "
                 f"quantized logits differ from float by {float(np.abs(la - got).max()):.3g}")
    if name in EXPECT_CONFIG:
        config_check(checks, name, a)
        prune_checks(checks, work, name, folder, prompt, got)


def both_imports(checks, work, name, folder, prompt, pipeline, tag):
    """The ONNX and the HF import compiled through `pipeline`: their
    manifests and prompt logits (onnx, hf, onnx, hf), or None."""
    arts = [os.path.join(work, f"{name}.{k}.{tag}.llmc") for k in ("onnx", "hf")]
    if not (compile_to(checks, os.path.join(folder, "model.onnx"), arts[0],
                       ["--pipeline", pipeline]) and
            compile_to(checks, folder, arts[1], ["--pipeline", pipeline])):
        return None
    logits = [harness.llmc_logits(a, prompt, a[:-len(".llmc")] + ".npy") for a in arts]
    return manifest(arts[0]), manifest(arts[1]), logits[0], logits[1]


def config_check(checks, name, m):
    want = EXPECT_CONFIG[name]
    have = (m["config"]["norm"], m["config"]["rope_style"])
    checks.check(have == want, f"{name}: raised with norm {want[0]}, RoPE {want[1]}", str(have))


def prune_checks(checks, work, name, folder, prompt, unpruned):
    """Depth pruning sees the same model from either import."""
    both = both_imports(checks, work, name, folder, prompt, PRUNE, "wrp")
    if not both:
        return
    pa, pb, la, lb = both
    checks.check(pa == pb and np.array_equal(la, lb) and pa["config"]["num_layers"] == 1,
                 f"{name}: {PRUNE} gives the same artifact and logits from either import",
                 f"{pa['config']['num_layers']} block left, logits moved by "
                 f"{float(np.abs(la - unpruned).max()):.3g}")


def against_ort(checks, work, name, art_name, label):
    """Compiles fixture `name` to work/`art_name`.llmc and compares its prompt
    logits with onnxruntime's: (logits, artifact, reference), or None."""
    folder = os.path.join(FIXTURES, name)
    ref = np.load(os.path.join(folder, "reference.npz"))
    prompt = [int(t) for t in ref["prompt"]]
    art = os.path.join(work, f"{art_name}.llmc")
    if not compile_to(checks, os.path.join(folder, "model.onnx"), art):
        return None
    got = harness.llmc_logits(art, prompt, os.path.join(work, f"{art_name}.npy"))
    harness.compare_logits(checks, f"{name}{label} vs onnxruntime", got, ref["logits"], REL_TOL)
    return got, art, ref


def ort_only_checks(checks, work, name):
    """An export with no HF folder: llmc's logits against onnxruntime's."""
    res = against_ort(checks, work, name, f"{name}.onnx", "")
    if not res:
        return
    got, art, _ = res
    config_check(checks, name, manifest(art))
    if name == "llama-interleaved":  # the half-rotating original: other logits
        half = np.load(os.path.join(FIXTURES, "llama-ortopt", "reference.npz"))["logits"]
        moved = float(np.abs(half - got).max())
        checks.check(moved > 1e-2, f"{name}: interleaved pairs give other logits than "
                     "rotate-half on the same weights", f"max |diff| {moved:.3g}")


def quantized_checks(checks, work, name, float_name):
    """An onnxruntime-quantized export (MatMulNBits): llmc dequantizes the
    codes exactly as onnxruntime does, so the logits match its run; they
    differ from the float model's (the codes are really read)."""
    res = against_ort(checks, work, name, name, " (quantized weights)")
    if not res:
        return
    got, _, ref = res
    folder = os.path.join(FIXTURES, name)
    float_logits = np.load(os.path.join(FIXTURES, float_name, "reference.npz"))["logits"]
    moved = float(np.abs(float_logits - ref["logits"]).max())
    checks.check(moved > 1e-2, f"{name}: 4-bit logits differ from the float model's",
                 f"max |diff| {moved:.3g}")
    piped = os.path.join(work, f"{name}.rtn.llmc")
    if compile_to(checks, os.path.join(folder, "model.onnx"), piped, ["--pipeline", PIPELINE]):
        checks.check(True, f"{name}: compiles with {PIPELINE}")


def optimized_checks(checks, work, name, plain):
    """onnxruntime's transformer optimizer output (fused skip-norms and
    RotaryEmbedding contrib ops) raises to the same model as the plain
    export: same manifest, bit-identical logits, and onnxruntime's."""
    res = against_ort(checks, work, name, name, " (fused ops)")
    if not res:
        return
    got, art, _ = res
    plain_art = os.path.join(work, f"{plain}.onnx.llmc")
    plain_logits = np.load(os.path.join(work, f"{plain}.onnx.npy"))
    a, b = manifest(art), manifest(plain_art)
    for m in (a, b):
        m["config"].pop("name", None)
    checks.check(a == b and np.array_equal(got, plain_logits),
                 f"{name}: raises to the same model as {plain} (manifest but for the name, "
                 "bit-identical logits)",
                 "differ in " + ", ".join(k for k in a if a[k] != b.get(k)) if a != b else
                 f"max |diff| {float(np.abs(got - plain_logits).max()):.3g}")


def refused(checks, work, path, label, must_name=()):
    out = os.path.join(work, "refused.llmc")
    if os.path.exists(out):
        os.remove(out)
    p = harness.run_llmc(["compile", path, "-o", out, "-q"], check=False)
    err = p.stderr.strip()
    ok = p.returncode == 1 and not os.path.exists(out) and "error:" in err and \
        all(s in err for s in must_name) and "Traceback" not in err
    checks.check(ok, f"{label}: a clean error, no output", f"exit {p.returncode}: {err[-300:]}")


def bad_input_checks(checks, work):
    bad = os.path.join(FIXTURES, "bad")
    refused(checks, work, os.path.join(bad, "gelu-tanh-mlp.onnx"),
            "a tanh-GELU MLP (not raised)", ["gate_proj/MatMul' (MatMul)", "tanh GELU"])
    refused(checks, work, os.path.join(bad, "missing-external.onnx"),
            "external data file missing", ["missing-weights.bin not found"])
    refused(checks, work, os.path.join(bad, "escaping-external.onnx"),
            "external data outside the model's folder", ["not a file name inside"])
    refused(checks, work, os.path.join(bad, "wrong-size.onnx"),
            "an initializer whose bytes do not match its shape", ["holds 8 bytes", "needs 64"])
    refused(checks, work, os.path.join(bad, "cycle.onnx"),
            "a graph with a cycle", ["node 'loop_add' (Add) reads 'back' before any node"])
    with open(os.path.join(FIXTURES, "llama-tied", "model.onnx"), "rb") as f:
        data = f.read()
    for label, blob in (("a truncated ONNX file", data[: len(data) // 2]),
                        ("random bytes named .onnx", np.random.default_rng(0).bytes(4096))):
        path = os.path.join(work, "broken.onnx")
        with open(path, "wb") as f:
            f.write(blob)
        refused(checks, work, path, label, ["not a valid ONNX model"])


def main():
    checks = harness.Checks("ONNX import: exported Llama, Qwen2, Mixtral, OLMo and Phi-3 against onnxruntime")
    for name in MODELS + ORT_ONLY + [q for q, _ in QUANTIZED + OPTIMIZED]:
        if not os.path.exists(os.path.join(FIXTURES, name, "model.onnx")):
            harness.skip(f"{FIXTURES}/{name}/model.onnx not found (committed fixture)")
    work = harness.work_dir("onnx_import")
    for name in MODELS:
        model_checks(checks, work, name)
    for name in ORT_ONLY:
        ort_only_checks(checks, work, name)
    for name, float_name in QUANTIZED:
        quantized_checks(checks, work, name, float_name)
    for name, plain in OPTIMIZED:
        optimized_checks(checks, work, name, plain)
    bad_input_checks(checks, work)
    checks.finish()


if __name__ == "__main__":
    main()
