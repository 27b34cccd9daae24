"""End-to-end: MoE layers on the kernel engine (llmk.norm_moe) against the
reference executor.

Models: a generated Mixtral-style GGUF (Q8_0, 4 experts, top-2, softmax
gating renormalized over the top 2) and SmolLM2-135M-Instruct MoEfied by
llm-moefy into 8 experts of 192 neurons (unit gating) then quantized to Q8_0
by llm-quantize-rtn: with every expert run (top-8: the dense model exactly),
top-2, and top-2 with half the experts pruned by llm-prune-experts and
adaptive activation (each token runs only the experts that carry 90% of its
predicted energy, sometimes fewer than 2). For each:
- `llmc compile` stores a kernel plan with one norm_moe step per layer (the
  norm before the MoE and the residual add after it fused), no dense MLP
  step, the expert tensors as eight-row slabs and the router row-major; the
  slabs read back right (the reference engine's logits on it equal those on
  the same model compiled --no-kernels, stored row-major, within 1e-4);
- the logits of every prompt position and the greedy continuation on the
  kernel engine with f32 activations equal the reference engine's within
  1e-4 of the largest logit, with the library kernels and with the
  generated ones (so routing, adaptive activation included, is the same);
- by default every product but the routers (f32 activations: routing is a
  discrete choice) reads int8 activations through a generated int8 kernel,
  and where routing is not chaotic (Mixtral-style, and the MoEfied model
  with every expert run) the prompt logits stay within a mean KL of 0.05 of
  the reference's. The top-2 MoEfied model is not bounded: its hard top-2
  of 8 unit-gated groups flips experts under int8 rounding anywhere
  upstream (measured mean KL ~4-5 against 0.007 with all 8 experts run), so
  its int8 run is only checked to run.
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import harness  # noqa: E402
import numpy as np  # noqa: E402

PER_LAYER = ["norm_matmul", "rope_kv_append", "attend", "matmul_add", "norm_moe"]


def manifest(art):
    return json.loads(harness.run_llmc(["inspect", art, "--json"]).stdout)


mean_kl = harness.mean_kl
generated_line = harness.generated_kernels_line


def run(art, prompt, n, npy, extra):
    """`llmc run` on the prompt plus n greedy tokens: (logits, ids, stderr's
    generated-kernels line)."""
    p = harness.run_llmc(["run", art, "--prompt-tokens", ",".join(map(str, prompt)), "-n",
                          str(n), "--dump-logits", npy, "--print-ids", "--ignore-eos", *extra],
                         timeout=600)
    return np.load(npy), [int(t) for t in p.stdout.split()], generated_line(p)


def check_moe(checks, work, label, art, plain_art, layers, prompt, n_gen, int8_kl=None):
    m = manifest(art)
    plan = m.get("kernel_plan")
    checks.check(plan is not None, f"{label}: the artifact has a kernel plan")
    if plan is None:
        return
    kinds = [s["kernel"] for s in plan["steps"]]
    want = ["embed"] + PER_LAYER * layers + ["norm_matmul"]
    checks.check(kinds == want, f"{label}: one norm_moe step per layer, no dense MLP",
                 f"{len(kinds)} steps: {kinds[:7]}...")
    moe = [s for s in plan["steps"] if s["kernel"] == "norm_moe"]
    fused = all("norm" in s and len(s["in"]) == 2 and len(s["weights"]) == 4 for s in moe)
    checks.check(fused, f"{label}: each norm_moe fuses the norm and the residual add")
    layouts = {tuple(s.get("layouts", [])) for s in moe}
    gen_dtypes = {(k["dtype"], k["cols"]) for k in m.get("codegen", {}).get("kernels", [])
                  if k.get("kind") == "rows8_int8"}
    checks.check(layouts and all(l[1:] == ("rows8",) * 3 for l in layouts),
                 f"{label}: expert tensors stored as eight-row slabs", str(layouts))

    w = lambda s: os.path.join(work, f"{label}-{s}.npy")  # noqa: E731
    ref, ref_ids, _ = run(art, prompt, n_gen, w("ref"), ["--engine", "reference"])
    # The expert slabs as packed (read back by both engines) against the
    # same model stored row-major (--no-kernels: no plan, nothing packed).
    # (Within float rounding: for rows routed in small groups the library's
    # fused kernels read row-major weights in another summation order.)
    plain, _, _ = run(plain_art, prompt, 0, w("plain"), ["--engine", "reference"])
    harness.compare_logits(checks, f"{label}: packed expert slabs read back (reference engine "
                           f"on the packed and on the row-major artifact)", ref[:len(plain)],
                           plain, rel_tol=1e-4)
    lib, lib_ids, _ = run(art, prompt, n_gen, w("lib"),
                          ["--engine", "kernels", "--exact-activations", "--library-kernels"])
    harness.compare_logits(checks, f"{label}: library kernels (f32 activations) vs reference",
                           lib, ref, rel_tol=1e-4)
    checks.check(lib_ids == ref_ids, f"{label}: {n_gen} greedy tokens equal (library kernels)",
                 f"kernels {lib_ids[:10]}... reference {ref_ids[:10]}...")
    gen, gen_ids, info = run(art, prompt, n_gen, w("gen"),
                             ["--engine", "kernels", "--exact-activations",
                              "--generated-kernels"])
    harness.compare_logits(checks, f"{label}: generated kernels (f32 activations) vs reference",
                           gen, ref, rel_tol=1e-4)
    checks.check(gen_ids == ref_ids, f"{label}: {n_gen} greedy tokens equal (generated kernels)",
                 f"generated {gen_ids[:10]}... reference {ref_ids[:10]}...")
    i8, _, info = run(art, prompt, 1, w("i8"), ["--engine", "kernels"])
    # Every product of the plan (an MoE step: its router and 3 per expert);
    # all but the routers (f32 activations, row-major) read int8 activations
    # and run generated int8 kernels.
    products = sum(1 + 3 * s["attrs"]["num_experts"] if s["kernel"] == "norm_moe"
                   else len(s["weights"]) for s in plan["steps"]
                   if s["kernel"] in ("norm_matmul", "norm_gated_matmul", "matmul_add", "norm_moe"))
    int8 = products - len(moe)
    checks.check(f"for {int8} products" in info and f"activations: int8 in {int8} products" in info,
                 f"{label}: by default generated int8 kernels run all {int8} products but the "
                 f"{len(moe)} routers (f32)", info)
    checks.check(all(l[0] == "row_major" for l in layouts) and
                 any(d != "f32" for d, _ in gen_dtypes), f"{label}: routers row-major; "
                 f"generated int8 kernels for the experts", f"{layouts}, {sorted(gen_dtypes)}")
    kl = mean_kl(i8, ref)
    detail = f"mean KL {kl:.4g}, top-1 {np.mean(i8.argmax(-1) == ref.argmax(-1)) * 100:.0f}%"
    if int8_kl is None:  # routing too fragile for a bound: reported only
        checks.check(bool(np.all(np.isfinite(i8))), f"{label}: int8 activations run", detail)
    else:
        checks.check(kl < int8_kl, f"{label}: int8 activations, mean KL vs reference < {int8_kl}",
                     detail)


def main():
    checks = harness.Checks("MoE on the kernel engine vs the reference executor")
    work = harness.work_dir("kernel_plan_moe")
    import make_gguf_models
    import make_hf_models
    cfg = make_hf_models.make_config("mixtral", "f32", head_dim=16)
    gguf = os.path.join(work, "mixtral-q8_0.gguf")
    make_gguf_models.write_gguf(gguf, cfg, make_hf_models.make_weights(cfg, 3101),
                                make_gguf_models.Q.Q8_0)
    art = os.path.join(work, "mixtral-q8_0.llmc")
    harness.run_llmc(["compile", gguf, "-o", art, "-q"], timeout=300)
    plain = os.path.join(work, "mixtral-q8_0-plain.llmc")
    harness.run_llmc(["compile", gguf, "-o", plain, "-q", "--no-kernels"], timeout=300)
    prompt = [1] + [(37 * i + 11) % 250 + 3 for i in range(24)]
    check_moe(checks, work, "mixtral-q8_0", art, plain, cfg["num_hidden_layers"], prompt, 12,
              int8_kl=0.005)

    sm = harness.SMOLLM2_GGUF
    if not os.path.isfile(sm):
        harness.skip_part(f"{sm} missing (scripts/setup.sh fetches it)")
        checks.finish()
    sm_prompt = [1] + [(7919 * i + 101) % 49000 + 2 for i in range(24)]
    moefy = "llm-moefy{{experts=8 top-k={} calib-tokens=512}}"
    rtn = "llm-quantize-rtn{bits=8 group=32 sym=true}"
    prune = "llm-prune-experts{method=frequency ratio=0.5 adaptive-energy=0.9 calib-tokens=512}"
    for label, pipeline, int8_kl in [
            ("smollm2-moe8-all", f"{moefy.format(8)},{rtn}", 0.05),
            ("smollm2-moe8", f"{moefy.format(2)},{rtn}", None),
            ("smollm2-moe8-adaptive", f"{moefy.format(2)},{prune},{rtn}", None)]:
        art = os.path.join(work, label + ".llmc")
        p = harness.run_llmc(["compile", sm, "-o", art, "-q", "--pipeline", pipeline],
                             check=False, timeout=1200)
        plain = os.path.join(work, label + "-plain.llmc")
        q = harness.run_llmc(["compile", sm, "-o", plain, "-q", "--no-kernels", "--pipeline",
                              pipeline], check=False, timeout=1200)
        if not checks.check(p.returncode == 0 and q.returncode == 0, f"{label}: compiles",
                            f"exit {p.returncode}, {q.returncode}: "
                            f"{(p.stderr + q.stderr).strip()[-300:]}"):
            continue
        check_moe(checks, work, label, art, plain, 30, sm_prompt, 8, int8_kl)
    checks.finish()


if __name__ == "__main__":
    main()
