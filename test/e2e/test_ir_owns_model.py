"""End-to-end: the IR owns the model (issue 14, part 1).

`llmc import MODEL --emit-resources` writes IR that carries every weight (as
dense_resource blobs), the tokenizer, the provenance and the pass history;
`llmc-opt` runs passes on it, reading and rewriting weights only through the
IR; `llmc compile IR` then writes the same artifact, byte for byte, as
`llmc compile MODEL --pipeline P`:

- SmolLM2-135M with llm-quantize{method=gptq bits=4 group=64 calib-tokens=512} (calibrated:
  the pass runs the model through the runtime on the IR's own weights; one
  512-token sequence is enough to show both paths compute the same thing,
  the quality of the calibration is test_quantize_calibrated_smollm2's);
- stories260K with two llmc-opt runs (RTN, then a KV policy) against one
  compile with both passes, and the text form (.mlir) of the IR;
- bad input: a types-only IR, a truncated bytecode file, a calibrated method
  on a types-only module: each a clean error, no output file.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import harness  # noqa: E402

STORIES = os.path.join(harness.shared_dir(), "models", "stories260K.bin")
GPTQ = "llm-quantize{method=gptq bits=4 group=64 calib-tokens=512}"


def llmc_opt():
    return os.path.join(os.path.dirname(harness.llmc_bin()), "llmc-opt")


def run(args, timeout=900):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout)


def same_bytes(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


def passes_of(art):
    m = json.loads(harness.run_llmc(["inspect", art, "--json", "--no-verify"]).stdout)
    return m["pipeline"]["passes"]


def reproduce(checks, work, model, name, pipelines, label):
    """compile MODEL with the joined pipelines == import, llmc-opt once per
    pipeline, compile the IR."""
    direct = os.path.join(work, name + ".direct.llmc")
    harness.run_llmc(["compile", model, "-o", direct, "-q", "--pipeline", ",".join(pipelines)],
                     timeout=1200)
    ir = os.path.join(work, name + ".mlirbc")
    harness.run_llmc(["import", model, "--emit-resources", "-o", ir])
    for i, p in enumerate(pipelines):
        out = os.path.join(work, f"{name}.{i}.mlirbc")
        r = run([llmc_opt(), ir, f"--pass-pipeline=builtin.module({p})", "--emit-bytecode",
                 "-o", out], timeout=1200)
        if r.returncode != 0:
            checks.check(False, f"{label}: llmc-opt runs {p}", r.stderr.strip()[-400:])
            return
        ir = out
    via_ir = os.path.join(work, name + ".via-ir.llmc")
    harness.run_llmc(["compile", ir, "-o", via_ir, "-q"])
    checks.check(same_bytes(direct, via_ir),
                 f"{label}: import --emit-resources + llmc-opt + compile IR == compile "
                 f"(same artifact bytes, {os.path.getsize(direct)} bytes)",
                 f"{direct} vs {via_ir}")
    recorded = passes_of(via_ir)
    checks.check(len(recorded) == len(pipelines) and
                 all(r.split("{")[0] == p.split("{")[0] for r, p in zip(recorded, pipelines)),
                 f"{label}: the manifest records the passes the IR went through, in order",
                 str(recorded)[:300])


def main():
    checks = harness.Checks("the IR owns the model")
    if not os.path.exists(STORIES):
        harness.skip(f"{STORIES} not found")
    if not os.path.exists(harness.SMOLLM2_GGUF):
        harness.skip(f"{harness.SMOLLM2_GGUF} not found (scripts/setup.sh fetches it)")
    work = harness.work_dir("ir_owns_model")

    reproduce(checks, work, harness.SMOLLM2_GGUF, "smollm2-gptq", [GPTQ], "SmolLM2 GPTQ 4-bit")
    reproduce(checks, work, STORIES, "stories-rtn-kv",
              ["llm-quantize-rtn{bits=8 skip=blk.*.ffn_down.weight}",
               "llm-kv-policy{method=snapkv budget=0.25}"],
              "stories260K RTN then SnapKV, two llmc-opt runs")

    # The text form carries the same model (blobs as hex).
    text = os.path.join(work, "stories.mlir")
    harness.run_llmc(["import", STORIES, "--emit-resources", "-o", text])
    a, b = os.path.join(work, "stories.text.llmc"), os.path.join(work, "stories.plain.llmc")
    harness.run_llmc(["compile", text, "-o", a, "-q"])
    harness.run_llmc(["compile", STORIES, "-o", b, "-q"])
    checks.check(same_bytes(a, b), "stories260K: compile of the .mlir text == compile of the .bin")

    # Bad input: clean errors, nothing written.
    types_only = os.path.join(work, "types-only.mlir")
    harness.run_llmc(["import", STORIES, "-o", types_only])
    out = os.path.join(work, "bad.llmc")
    p = harness.run_llmc(["compile", types_only, "-o", out], check=False)
    checks.check(p.returncode == 1 and "--emit-resources" in p.stderr and not os.path.exists(out),
                 "compile of a types-only IR: a clean error naming --emit-resources, no output",
                 f"exit {p.returncode}: {p.stderr.strip()[-300:]}")
    ir = os.path.join(work, "stories-rtn-kv.mlirbc")
    truncated = os.path.join(work, "truncated.mlirbc")
    with open(ir, "rb") as f:
        data = f.read()
    with open(truncated, "wb") as f:
        f.write(data[: len(data) // 2])
    p = harness.run_llmc(["compile", truncated, "-o", out], check=False)
    checks.check(p.returncode == 1 and "truncated.mlirbc" in p.stderr and not os.path.exists(out),
                 "compile of a truncated bytecode file: a clean error, no output",
                 f"exit {p.returncode}: {p.stderr.strip()[-300:]}")
    gptq = "llm-quantize{method=gptq bits=4 group=32 skip=blk.*.ffn_down.weight}"
    p = run([llmc_opt(), types_only, f"--pass-pipeline=builtin.module({gptq})"])
    checks.check(p.returncode != 0 and "needs the weights in the IR" in p.stderr,
                 "llmc-opt: GPTQ on a types-only module says it needs the weights in the IR",
                 p.stderr.strip()[-300:])
    checks.finish()


if __name__ == "__main__":
    main()
