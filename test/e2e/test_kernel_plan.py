"""End-to-end: the kernel plan (llm-lower-to-kernels + llmk-plan-buffers,
run by the runtime's kernel engine) against the reference executor.

For stories260K (f32) and SmolLM2-135M-Instruct (Q4_1 as shipped; Q8_0,
Q4_0, Q5_0 and Q5_1 by llm-quantize-rtn; and with a SnapKV 50% KV policy):
- `llmc compile` stores a kernel plan of 6 kernels per layer plus the
  embedding and the LM head, with the arena the buffer planner predicts
  (residual + q/k/v + rotated q floats per token);
- the logits of every prompt position (a prompt longer than the decode
  kernels' row limit, so prefill takes the blocked path) and the greedy
  continuation of `llmc run --engine kernels --exact-activations
  --library-kernels` (the runtime's library kernels) equal `--engine
  reference`;
- by default the kernel engine quantizes the activations of products with
  32-weight block formats to int8 (all SmolLM2 rows): `run` says so, and
  the prompt logits stay within a mean KL of 0.05 of the reference's
  (measured 0.005-0.006 on this random-token prompt); stories260K (f32) keeps
  f32 activations and the reference logits;
- with the artifact's generated kernels (the default; --generated-kernels
  says so explicitly) and --exact-activations every op of the plan runs
  generated code: the products (prefill in token groups
  of 4) and the 5 per layer + 2 others (embedding, fused and final RMSNorms,
  SiLU gate, RoPE with the K/V split, attention over the f32 cache); `run`
  says "N of N other ops", and the logits and greedy tokens equal the
  reference's within 1e-4;
- `--no-kernels` artifacts have no plan, run on the reference engine under
  --engine auto, and `--engine kernels` on them is a clean error (exit 1).

Generated kernels (codegen) on SmolLM2 Q4_1: the manifest lists an f32
(matvec) and an int8 (eight-row) kernel per (format, width) of the plan's
products, the op kernels of its shapes (RMSNorm of 576, SiLU gate, RoPE of
9/3 heads of 64 at theta 1e5, attention of head_dim 64, the q8_0
embedding) and an object for every x86-64 level (x86-64 to v4-vnni); with
`--cpu-levels host` only this CPU's level's object, which a run loads
(LLMC_ISA=x86-64 then runs the library kernels); a bad --cpu-levels or
LLMC_CPU_LEVELS exits 2 with a message and no file; with
--generated-kernels all 211 products and 152 other ops run generated code,
and a 9-token prompt (prefill on token groups of 4, 4, 1) plus 16 greedy
tokens stay within int8 noise (mean KL < 0.05: the generated norms and exp
round last bits differently, which flips some int8 roundings) of the
library int8 kernels at this CPU's level (stored object), forced to
LLMC_ISA=x86-64 (the stored baseline object) and to x86-64-v2 (its stored
object); with no compiler on PATH (an empty folder as
PATH) the run is the same, since the runtime compiles nothing. With
--exact-activations the generated kernels match the reference
engine within 1e-4. SmolLM2 in llmc's gq4s_g32 (llm-quantize rtn) runs the
generated Q4_0 int8 kernel (its eight-row layout) for all 211 products and a
generated gq4s embedding lookup, within int8 noise of the library kernels.
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import harness  # noqa: E402
import numpy as np  # noqa: E402

# The suite compiles for this CPU's level only (LLMC_CPU_LEVELS=host, see
# test/e2e/CMakeLists.txt); check_codegen's artifact has the default, every
# level.
ALL_LEVELS = {"LLMC_CPU_LEVELS": "all"}

STORIES = os.path.join(harness.shared_dir(), "models", "stories260K.bin")


def manifest(art):
    return json.loads(harness.run_llmc(["inspect", art, "--json"]).stdout)


generated_info = harness.generated_kernels_line


def run_default(work, art, prompt, npy):
    """`llmc run` with the defaults (generated kernels, int8 activations) on
    the prompt plus 4 tokens: (logits, its generated-kernels line)."""
    p = harness.run_llmc(["run", art, "--prompt-tokens", ",".join(map(str, prompt)), "-n", "4",
                          "--dump-logits", npy, "--ignore-eos"],
                         timeout=300)
    return np.load(npy), generated_info(p)


PRODUCTS = ("norm_matmul", "norm_gated_matmul", "matmul_add")


def generated_counts(m, exact):
    """(products, ops, of ops) the generated kernels back, from the plan and
    how the compiler stored the weights: with int8 activations every product;
    with f32 ones (--exact-activations) only products whose weights are
    stored row-major (weights stored only in the eight-row layout have no
    rows for the f32 kernels: the library unpacks them row by row); every
    other op, except the embedding lookup of a table stored only packed (a
    tied LM head's: the library reads its rows)."""
    names = {t["name"] for t in m["tensors"]}
    only = {n for n in m.get("packed_weights", {}) if n not in names}
    steps = m["kernel_plan"]["steps"]
    others = [s for s in steps if s["kernel"] not in PRODUCTS]
    # Op kernels per step: the fused norm, the gate, rope, attend, embed, add.
    ops = sum(("norm" in s) + (s["kernel"] == "norm_gated_matmul") for s in steps
              if s["kernel"] in PRODUCTS) + len(others)
    gen_ops = ops - sum(1 for s in others if s["kernel"] == "embed" and s["weights"][0] in only)
    products = sum(len(s["weights"]) for s in steps if s["kernel"] in PRODUCTS and
                   (not exact or not any(w in only for w in s["weights"])))
    return products, gen_ops, ops


mean_kl = harness.mean_kl


def check_model(checks, work, label, source, pipeline, layers, arena, prompt, n_gen,
                int8_kl=None):
    art = os.path.join(work, label + ".llmc")
    args = ["compile", source, "-o", art, "-q"] + (["--pipeline", pipeline] if pipeline else [])
    harness.run_llmc(args, timeout=900, env=ALL_LEVELS if label == "smollm2-q4_1" else None)
    plan = manifest(art).get("kernel_plan")
    checks.check(plan is not None, f"{label}: the artifact has a kernel plan")
    if plan is None:
        return
    kinds = [s["kernel"] for s in plan["steps"]]
    per_layer = ["norm_matmul", "rope_kv_append", "attend", "matmul_add", "norm_gated_matmul",
                 "matmul_add"]
    want = ["embed"] + per_layer * layers + ["norm_matmul"]
    checks.check(kinds == want and plan["arena_floats_per_token"] == arena,
                 f"{label}: {len(want)} fused kernels, arena {arena} floats per token",
                 f"got {len(kinds)} kernels, arena {plan['arena_floats_per_token']}")
    got, got_ids = harness.llmc_logits_and_greedy(
        art, prompt, n_gen, os.path.join(work, label + "-k.npy"),
        ["--engine", "kernels", "--exact-activations", "--library-kernels"])
    ref, ref_ids = harness.llmc_logits_and_greedy(
        art, prompt, n_gen, os.path.join(work, label + "-r.npy"), ["--engine", "reference"])
    harness.compare_logits(checks, f"{label}: library kernels (f32 activations) vs reference", got, ref,
                           rel_tol=1e-4)
    checks.check(got_ids == ref_ids, f"{label}: {n_gen} greedy tokens equal",
                 f"kernels {got_ids[:12]}... reference {ref_ids[:12]}...")
    # Generated kernels for every op: the products (prefill in token groups
    # of 4) and the embedding, norms, gated activations, RoPE, attention.
    npy = os.path.join(work, label + "-g.npy")
    p = harness.run_llmc(["run", art, "--prompt-tokens", ",".join(map(str, prompt)), "-n",
                          str(n_gen), "--dump-logits", npy, "--print-ids", "--ignore-eos",
                          "--engine", "kernels", "--exact-activations", "--generated-kernels"],
                         timeout=300)
    info = generated_info(p)
    m = manifest(art)
    products, gen_ops, ops = generated_counts(m, exact=True)
    checks.check(f"for {products} products and {gen_ops} of {ops} other ops" in info,
                 f"{label}: f32 activations: generated kernels back {products} products (the "
                 f"ones stored row-major) and {gen_ops} of {ops} other ops", info)
    gen = np.load(npy)
    harness.compare_logits(checks, f"{label}: generated kernels (f32 activations) vs reference",
                           gen, ref, rel_tol=1e-4)
    gen_ids = [int(t) for t in p.stdout.split()]
    checks.check(gen_ids == ref_ids, f"{label}: generated kernels, {n_gen} greedy tokens equal",
                 f"generated {gen_ids[:12]}... reference {ref_ids[:12]}...")
    # The default: int8 activations for products with 32-weight block formats.
    npy = os.path.join(work, label + "-i8.npy")
    p = harness.run_llmc(["run", art, "--prompt-tokens", ",".join(map(str, prompt)), "-n", "1",
                          "--dump-logits", npy, "--ignore-eos", "--engine", "kernels"])
    acts = [l for l in p.stderr.splitlines() if "activations:" in l]
    acts = acts[-1].split("activations:")[-1].strip() if acts else "?"
    info = generated_info(p)
    products, gen_ops, ops = generated_counts(m, exact=False)
    checks.check(products == 7 * layers + 1 and
                 f"for {products} products and {gen_ops} of {ops} other ops" in info,
                 f"{label}: by default, generated kernels run all {products} products and "
                 f"{gen_ops} of {ops} other ops", info)
    i8 = np.load(npy)
    if int8_kl is None:  # no block-format weights: the f32 products, as above
        checks.check(acts == "f32", f"{label}: default activations are f32", acts)
        harness.compare_logits(checks, f"{label}: kernels (default) vs reference", i8, ref,
                               rel_tol=1e-4)
        return
    checks.check(acts.startswith("int8"), f"{label}: default activations are int8", acts)
    kl = mean_kl(i8, ref)
    checks.check(kl < int8_kl, f"{label}: int8 activations, mean KL vs reference < {int8_kl}",
                 f"mean KL {kl:.4g}, top-1 {np.mean(i8.argmax(-1) == ref.argmax(-1)) * 100:.0f}%")


def check_codegen(checks, work, sm):
    art = os.path.join(work, "smollm2-q4_1.llmc")  # compiled by check_model
    cg = manifest(art).get("codegen", {})
    entries = cg.get("kernels", [])
    kernels = sorted((k["dtype"], k["cols"], k["kind"]) for k in entries
                     if k.get("kind") in ("matvec", "rows8_int8"))
    want = sorted((d, c, k) for d, c in [("q4_1", 576), ("q4_1", 1536), ("q8_0", 576)]
                  for k in ("matvec", "rows8_int8"))
    levels = ["x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v3-vnni", "x86-64-v4", "x86-64-v4-vnni"]
    checks.check(kernels == want and sorted(cg.get("objects", {})) == sorted(levels),
                 "codegen: an f32 and an int8 kernel per (format, width), an object for every "
                 "x86-64 level",
                 f"kernels {kernels}, objects {sorted(cg.get('objects', {}))}")
    ops = {k["kind"]: k for k in entries if k.get("kind") not in ("matvec", "rows8_int8")}
    rope = ops.get("rope", {})
    checks.check(sorted(ops) == ["attend_f16_rows_group", "attend_f32", "attend_f32_group",
                                 "attend_f32_rows", "attend_f32_rows_group",
                                 "attend_q8_0_rows_group", "embed", "gate", "rms_norm",
                                 "rope"] and
                 ops["rms_norm"]["cols"] == 576 and ops["gate"]["activation"] == "silu" and
                 (rope.get("num_heads"), rope.get("num_kv_heads"), rope.get("head_dim"),
                  rope.get("rope_theta")) == (9, 3, 64, 100000.0) and
                 ops["attend_f32"]["head_dim"] == 64 and
                 ops["attend_f32_rows"]["head_dim"] == 64 and
                 all((ops[k]["head_dim"], ops[k]["group"]) == (64, 3)
                     for k in ("attend_f32_group", "attend_f32_rows_group",
                               "attend_f16_rows_group", "attend_q8_0_rows_group")) and
                 (ops["embed"]["dtype"], ops["embed"]["cols"]) == ("q8_0", 576),
                 "codegen: op kernels for SmolLM2's norm width, SiLU, RoPE (9/3 heads of 64, "
                 "theta 1e5), attention (head_dim 64, contiguous and paged rows, per head and "
                 "per GQA group of 3, paged f16 and q8_0 rows per group) and its q8_0 embedding",
                 json.dumps(list(ops.values()))[:400])
    # 9 tokens: prefill runs the int8 kernels on token groups of 4, 4 and 1.
    prompt = [1, 504, 3458, 314, 2817, 28, 253, 1345, 30]
    ref, ref_ids = harness.llmc_logits_and_greedy(
        art, prompt, 16, os.path.join(work, "cg-ref.npy"), ["--engine", "reference"])
    lib, lib_ids = harness.llmc_logits_and_greedy(
        art, prompt, 16, os.path.join(work, "cg-lib.npy"), ["--engine", "kernels", "--library-kernels"])
    # The runtime compiles nothing: every level is a stored object, and a
    # run with no compiler on PATH loads this CPU's object as usual.
    bare = os.path.join(work, "bare-bin")
    os.makedirs(bare, exist_ok=True)
    runs = [("this CPU's level", {}, "stored x86-64-v", []),
            ("this CPU's level, f32 activations", {}, "stored x86-64-v", ["--exact-activations"]),
            ("LLMC_ISA=x86-64", {"LLMC_ISA": "x86-64"}, "stored x86-64 object", []),
            ("LLMC_ISA=x86-64-v2", {"LLMC_ISA": "x86-64-v2"}, "stored x86-64-v2 object", []),
            ("no compiler on PATH", {"PATH": bare},
             "stored x86-64-v", [])]
    for label, env, how, extra in runs:
        npy = os.path.join(work, "cg.npy")
        p = harness.run_llmc(["run", art, "--prompt-tokens", ",".join(map(str, prompt)), "-n",
                              "16", "--dump-logits", npy, "--print-ids", "--ignore-eos",
                              "--generated-kernels", *extra], env=env, check=False, timeout=300)
        info = [l for l in p.stderr.splitlines() if "generated kernels:" in l]
        products, gen_ops, ops = generated_counts(manifest(art), exact=bool(extra))
        ok = (p.returncode == 0 and info and how in info[-1] and
              f"for {products} products and {gen_ops} of {ops} other ops" in info[-1])
        checks.check(bool(ok), f"codegen {label}: loads, {products} products and {gen_ops} of "
                     f"{ops} other ops generated",
                     (info[-1] if info else p.stderr.strip()[-200:]))
        if p.returncode != 0:
            continue
        ids = [int(t) for t in p.stdout.split()]
        got = np.load(npy)
        if extra:
            # f32 activations: the reference engine's logits.
            harness.compare_logits(checks, f"codegen {label} vs reference", got, ref, rel_tol=1e-4)
            checks.check(ids == ref_ids, f"codegen {label}: 16 greedy tokens equal",
                         f"{ids[:10]} vs {ref_ids[:10]}")
            continue
        # int8 activations: the generated op kernels (norms, exp) round their
        # last bits differently from the library's, and the portable int8
        # kernels (x86-64 / v2) sum floats in another order. A last-bit
        # difference in an activation can flip its int8 rounding, so the runs
        # drift apart at the int8 noise level (as library int8 vs f32 does),
        # not to 1e-4.
        kl = mean_kl(got, lib)
        checks.check(kl < 0.05, f"codegen {label}: within int8 noise of the library int8 kernels",
                     f"mean KL {kl:.4g}, top-1 {np.mean(got.argmax(-1) == lib.argmax(-1)) * 100:.0f}%, "
                     f"greedy {ids[:6]} vs {lib_ids[:6]}")


def check_cpu_levels(checks, work):
    """--cpu-levels host stores only the object of the level this CPU runs
    (which a run loads); LLMC_ISA=x86-64 then finds no object it may run and
    takes the library kernels; a bad --cpu-levels or LLMC_CPU_LEVELS is a
    usage error (exit 2, no file)."""
    prompt = "1,504,3458,314"
    art = os.path.join(work, "smollm2-host-level.llmc")
    harness.run_llmc(["compile", harness.SMOLLM2_GGUF, "-o", art, "--cpu-levels", "host", "-q"])
    objects = sorted(manifest(art).get("codegen", {}).get("objects", {}))
    p = harness.run_llmc(["run", art, "--prompt-tokens", prompt, "-n", "2"], check=False)
    info = [l for l in p.stderr.splitlines() if "generated kernels:" in l]
    checks.check(p.returncode == 0 and len(objects) == 1 and bool(info) and
                 f"stored {objects[0]} object" in info[-1],
                 "--cpu-levels host: one object, this CPU's level, and a run loads it",
                 f"objects {objects}; {info[-1] if info else p.stderr.strip()[-200:]}")
    if objects != ["x86-64"]:
        p = harness.run_llmc(["run", art, "--prompt-tokens", prompt, "-n", "2"], check=False,
                             env={"LLMC_ISA": "x86-64"})
        info = [l for l in p.stderr.splitlines() if "generated kernels:" in l]
        checks.check(p.returncode == 0 and bool(info) and
                     "the artifact has no object this CPU runs" in info[-1],
                     "--cpu-levels host, run at LLMC_ISA=x86-64: no object below, the library "
                     "kernels run", info[-1] if info else p.stderr.strip()[-200:])
    for label, extra, env in (("--cpu-levels avx9", ["--cpu-levels", "avx9"], None),
                              ("--cpu-levels out of order",
                               ["--cpu-levels", "x86-64-v3,x86-64"], None),
                              ("LLMC_CPU_LEVELS=native", [], {"LLMC_CPU_LEVELS": "native"})):
        bad = os.path.join(work, "bad-levels.llmc")
        p = harness.run_llmc(["compile", harness.SMOLLM2_GGUF, "-o", bad, "-q", *extra],
                             check=False, env=env)
        checks.check(p.returncode == 2 and not os.path.exists(bad) and "levels" in p.stderr.lower(),
                     f"{label}: exit 2, a message, no file",
                     f"exit {p.returncode}: {p.stderr.strip()[-200:]}")


def check_grouped(checks, work, sm):
    """llmc's grouped integers (gq4s_g32 from llm-quantize rtn) are written
    in the Q4_0 eight-row layout at compile time: the generated Q4_0 int8
    kernel runs all 211 products."""
    art = os.path.join(work, "smollm2-gq4s.llmc")
    harness.run_llmc(["compile", sm, "-o", art, "-q", "--pipeline",
                      "llm-quantize{method=rtn bits=4 group=32 sym=true}"], timeout=900)
    prompt = [1, 504, 3458, 314, 2817, 28, 253, 1345, 30]
    lib, _ = harness.llmc_logits_and_greedy(art, prompt, 4, os.path.join(work, "gq-lib.npy"),
                                            ["--library-kernels"])
    gen, info = run_default(work, art, prompt, os.path.join(work, "gq-gen.npy"))
    products, gen_ops, ops = generated_counts(manifest(art), exact=False)
    checks.check(products == 211 and f"for 211 products and {gen_ops} of {ops} other ops" in info
                 and "activations: int8" in info,
                 f"gq4s_g32: generated int8 kernels for all 211 products, {gen_ops} of {ops} other "
                 "ops generated", info)
    kl = mean_kl(gen, lib)
    checks.check(kl < 0.05, "gq4s_g32: generated within int8 noise of the library kernels",
                 f"mean KL {kl:.4g}")


def check_kquants(checks, work):
    """The tiny generated K-quant GGUF (hidden 256: Q4_K q/k/v/gate/up, Q5_K
    o/down, Q6_K head): the generated Q4_K int8 kernel (eight-row layout with
    unpacked sub-block scales) runs its 10 Q4_K products by default; the Q5_K
    and Q6_K ones keep the library kernels. Logits stay within int8 noise of
    the reference engine's."""
    import make_gguf_models
    name, arch, qt, overrides, seed, _ = [m for m in make_gguf_models.model_specs()
                                          if m[0] == "gguf-llama-kquants"][0]
    import make_hf_models
    cfg = make_hf_models.make_config(arch, "f32", head_dim=overrides.get("head_dim", 16))
    cfg.update(overrides)
    gguf = os.path.join(work, name + ".gguf")
    make_gguf_models.write_gguf(gguf, cfg, make_hf_models.make_weights(cfg, seed), qt,
                                kquant_seed=seed)
    art = os.path.join(work, name + ".llmc")
    harness.run_llmc(["compile", gguf, "-o", art, "-q"], timeout=300)
    kinds = {k.get("dtype") for k in manifest(art)["codegen"]["kernels"]
             if k.get("kind") == "rows8_int8"}
    checks.check("q4_k" in kinds, "kquants: the artifact has a generated q4_K int8 kernel",
                 str(sorted(kinds)))
    prompt = [5, 17, 200, 33, 9, 81, 140, 2, 77, 250, 64, 12]
    ref, _ = harness.llmc_logits_and_greedy(art, prompt, 4, os.path.join(work, "kq-ref.npy"),
                                            ["--engine", "reference"])
    gen, info = run_default(work, art, prompt, os.path.join(work, "kq-gen.npy"))
    checks.check("for 10 products" in info and "activations: int8" in info,
                 "kquants: the 10 Q4_K products run the generated int8 kernel", info)
    kl = mean_kl(gen, ref)
    checks.check(kl < 0.05, "kquants: generated int8 logits within int8 noise of the reference",
                 f"mean KL {kl:.4g}, top-1 {np.mean(gen.argmax(-1) == ref.argmax(-1)) * 100:.0f}%")


def main():
    checks = harness.Checks("kernel plan vs reference executor")
    work = harness.work_dir("kernel_plan")
    prompt = [1] + [(37 * i + 11) % 500 + 3 for i in range(40)]
    check_model(checks, work, "stories260k", STORIES, "", 5, 64 + 128 + 64, prompt, 24)

    sm = harness.SMOLLM2_GGUF
    if not os.path.isfile(sm):
        harness.skip(f"{sm} missing (scripts/setup.sh fetches it)")
    arena = 576 + (576 + 2 * 192) + 576
    sm_prompt = [1] + [(7919 * i + 101) % 49000 + 2 for i in range(40)]
    for label, pipeline in [("smollm2-q4_1", ""),
                            ("smollm2-q8_0", "llm-quantize-rtn{bits=8 group=32 sym=true}"),
                            ("smollm2-q4_0", "llm-quantize-rtn{bits=4 group=32 sym=true}"),
                            ("smollm2-q5_0", "llm-quantize-rtn{bits=5 group=32 sym=true}"),
                            ("smollm2-q5_1", "llm-quantize-rtn{bits=5 group=32 sym=false}"),
                            ("smollm2-snapkv", "llm-kv-policy{method=snapkv budget=0.5 window=8}")]:
        check_model(checks, work, label, sm, pipeline, 30, arena, sm_prompt, 16, int8_kl=0.05)

    check_codegen(checks, work, sm)
    check_cpu_levels(checks, work)
    check_grouped(checks, work, sm)
    check_kquants(checks, work)

    # Without a plan: the reference engine, and a clean error when kernels are forced.
    art = os.path.join(work, "nokernels.llmc")
    harness.run_llmc(["compile", STORIES, "-o", art, "-q", "--no-kernels"])
    checks.check("kernel_plan" not in manifest(art), "--no-kernels stores no plan")
    p = harness.run_llmc(["bench", art, "-p", "8", "-n", "4", "-r", "1", "--json", "-q"])
    checks.check(json.loads(p.stdout).get("engine") == "reference",
                 "--engine auto runs a plan-less artifact on the reference engine")
    p = harness.run_llmc(["run", art, "--prompt-tokens", "1,2,3", "-n", "2", "--engine",
                          "kernels", "-q"], check=False)
    checks.check(p.returncode == 1 and "has no kernel plan" in p.stderr,
                 "--engine kernels without a plan is a clean error",
                 f"exit {p.returncode}: {p.stderr.strip()[-160:]}")
    p = harness.run_llmc(["run", art, "--prompt-tokens", "1", "--engine", "fast"], check=False)
    checks.check(p.returncode != 0 and "--engine" in p.stderr, "an unknown --engine is rejected",
                 p.stderr.strip()[-160:])
    checks.finish()


if __name__ == "__main__":
    main()
