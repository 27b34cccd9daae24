"""End-to-end: calibrated quantization of an MoE model checks expert coverage.

A generated Mixtral (4 experts, top-2, random weights, no tokenizer) is
calibrated from a token-id file (`llmc compile --calib FILE.ids`):
- with a single 2-token sequence at most 4 (token, expert) routes exist and
  the generated router sends both tokens to overlapping experts, so some
  expert sees no calibration token: GPTQ must fail with exit 1, name that
  expert and its weight, and write no artifact (other tools silently fall
  back to data-free rounding here);
- with 96 varied tokens every expert is routed to, the compile succeeds and
  the manifest records gptq for the expert tensors;
- a malformed .ids file fails naming the file and line.
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import harness  # noqa: E402
import make_hf_models  # noqa: E402


def main():
    work = harness.work_dir("quantize_moe_calibration")
    checks = harness.Checks("MoE calibration coverage (llm-quantize gptq on a generated Mixtral)")
    cfg = make_hf_models.make_config("mixtral", "f32")
    model = os.path.join(work, "mixtral")
    make_hf_models.write_model(model, cfg, make_hf_models.make_weights(cfg, 4242))

    def pipeline(tokens):
        return (f"llm-quantize{{method=gptq bits=4 group=16 calib-tokens={tokens} "
                f"calib-seq=32 skip=token_embd.weight}}")

    few = os.path.join(work, "few.ids")
    with open(few, "w") as f:
        f.write("# two tokens: too few to reach every expert\n1 1\n")
    out = os.path.join(work, "few.llmc")
    p = harness.run_llmc(["compile", model, "-o", out, "--calib", few, "--pipeline", pipeline(2)],
                         check=False)
    err = p.stderr
    m = re.search(r"expert (\d+) of '(blk\.\d+\.ffn_gate_exps\.weight)'", err)
    checks.check(p.returncode == 1, "too few calibration tokens: exit 1", f"exit {p.returncode}")
    checks.check(m is not None, "the error names the expert and its weight",
                 err.strip().splitlines()[-3:].__str__())
    checks.check("saw none of the 2 calibration tokens" in err, "the error says why")
    checks.check(not os.path.exists(out), "no artifact written")

    many = os.path.join(work, "many.ids")
    with open(many, "w") as f:
        f.write(" ".join(str((i * 37 + 11) % cfg["vocab_size"]) for i in range(96)) + "\n")
    out = os.path.join(work, "many.llmc")
    p = harness.run_llmc(["compile", model, "-o", out, "--calib", many, "--pipeline",
                          pipeline(96)], check=False)
    checks.check(p.returncode == 0, "enough calibration tokens: compiles",
                 p.stderr.strip().splitlines()[-1] if p.returncode else "")
    if p.returncode == 0:
        man = json.loads(harness.run_llmc(["inspect", out, "--json"]).stdout)
        wt = man.get("weight_transforms", {})
        experts = [n for n in wt if "_exps." in n]
        checks.check(experts and all(wt[n]["method"] == "gptq" for n in experts),
                     "expert tensors are GPTQ-quantized",
                     ", ".join(f"{n}:{wt[n]['method']}" for n in experts[:3]))
        checks.check(all(wt[n]["calibration_tokens"] == 96 for n in experts),
                     "calibration tokens recorded")

    bad = os.path.join(work, "bad.ids")
    with open(bad, "w") as f:
        f.write("1 2 3\n4 five 6\n")
    p = harness.run_llmc(["compile", model, "-o", os.path.join(work, "bad.llmc"), "--calib", bad,
                          "--pipeline", pipeline(4)], check=False)
    checks.check(p.returncode == 1 and "bad.ids:2: 'five'" in p.stderr,
                 "malformed .ids: exit 1 naming file and line", p.stderr.strip()[-200:])
    checks.finish()


if __name__ == "__main__":
    main()
