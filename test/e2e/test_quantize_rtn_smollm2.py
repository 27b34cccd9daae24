"""End-to-end: the llm-quantize-rtn pass on SmolLM2-135M-Instruct (GGUF Q4_1).

- 4-bit asymmetric RTN at group 32 (q4_1), embedding kept, reproduces the
  source exactly: its weights already lie on that grid, so requantizing must
  give KL divergence 0 and 100% top-1 against the source (checks the
  dequantize -> quantize path and the pass's byte rewriting end to end);
- 8-bit RTN (q8_0) stays close to the source: mean KLD below 0.01 (measured
  0.0011 on 1024 tokens; threshold ~9x above), top-1 >= 95% (measured 98.4);
- 4-bit symmetric RTN (q4_0) is measurably worse than 8-bit (ordering check)
  and its artifact is smaller;
- the manifest records, per rewritten tensor, the method and its options.
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import harness  # noqa: E402

GGUF = os.path.join(harness.SOURCE_DIR, ".cache", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def main():
    if not os.path.exists(GGUF):
        harness.skip(f"{GGUF} not found (run scripts/setup.sh)")
    work = harness.work_dir("quantize_rtn_smollm2")
    checks = harness.Checks("llm-quantize-rtn on SmolLM2-135M-Instruct")

    _, same = harness.compile_and_eval(work, "q41", "llm-quantize-rtn{bits=4 sym=false skip=token_embd.weight}")
    checks.check(same["kld_mean"] == 0.0 and same["top1"] == 100.0,
                 "q4_1 RTN of a q4_1 model is exact", f"kld {same['kld_mean']}, top1 {same['top1']}")

    a8, q8 = harness.compile_and_eval(work, "q8", "llm-quantize-rtn{bits=8}")
    checks.check(q8["kld_mean"] < 0.01 and q8["top1"] >= 95.0, "q8_0 RTN stays close",
                 f"kld_mean {q8['kld_mean']:.5f}, p99 {q8['kld_p99']:.5f}, top1 {q8['top1']:.1f}, ppl {q8['ppl']:.3f}")

    a4, q4 = harness.compile_and_eval(work, "q4", "llm-quantize-rtn{bits=4}")
    checks.check(q4["kld_mean"] > q8["kld_mean"], "q4_0 is worse than q8_0",
                 f"kld_mean {q4['kld_mean']:.4f} vs {q8['kld_mean']:.5f}, ppl {q4['ppl']:.3f}")
    checks.check(os.path.getsize(a4) < os.path.getsize(a8), "q4_0 artifact is smaller than q8_0",
                 f"{os.path.getsize(a4)} vs {os.path.getsize(a8)} bytes")

    p = harness.run_llmc(["inspect", a4, "--json", "--no-verify"])
    m = json.loads(p.stdout)
    info = m.get("weight_transforms", {}).get("blk.3.ffn_down.weight", {})
    checks.check(info.get("method") == "rtn" and info.get("bits") == 4 and info.get("group") == 32
                 and info.get("sym") is True and info.get("from") == "q4_1",
                 "manifest records the method and options per tensor", json.dumps(info))
    dtypes = {t["name"]: t["dtype"] for t in harness.weight_tensors(m)}
    checks.check(dtypes["blk.3.ffn_down.weight"] == "q4_0" and dtypes["blk.3.attn_norm.weight"] == "f32",
                 "matrices quantized, norms kept",
                 f"{dtypes['blk.3.ffn_down.weight']}, {dtypes['blk.3.attn_norm.weight']}")
    checks.finish()


if __name__ == "__main__":
    main()
