"""End-to-end: `llmc compile --target-bpw` flags and a small plan (stories260K).

Bad flags exit 2 and write nothing: a non-positive or non-numeric budget, a
pipeline --target-bpw cannot plan (aaac/qtea/hbq methods, llm-quantize-rtn,
two llm-quantize passes, an override no grid can hold), a budget below what
2-bit weights reach. A weight
whose rows are not whole groups is bad input (exit 1, the weight named).

Then a plan on stories260K (token ids from data/calib/stories260k.ids; its
ffn_down rows of 172 weights fit no group, so they are skipped and stay f32,
and a user override pins the embedding at 8 bits; both count against the
budget): the artifact's matrix weights take at most the target bits per
weight, the manifest records the plan and the user's pins, --dry-run prints
the plan, and a larger budget gives a plan with no larger predicted KLD and
no fewer bits.
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import harness  # noqa: E402

checks = None


def matrix_bpw(manifest):
    params = nbytes = 0
    for t in harness.weight_tensors(manifest):
        if len(t["shape"]) >= 2:
            n = 1
            for d in t["shape"]:
                n *= d
            params += n
            nbytes += t["nbytes"]
    return 8.0 * nbytes / params


def expect_exit(name, args, code, out, must_contain=""):
    p = harness.run_llmc(args, check=False, timeout=300)
    problems = []
    if p.returncode != code:
        problems.append(f"exit {p.returncode}, expected {code}")
    if out and os.path.exists(out):
        problems.append(f"{out} was written")
    if must_contain and must_contain.lower() not in p.stderr.lower():
        problems.append(f"stderr does not mention '{must_contain}'")
    if p.returncode < 0:
        problems.append(f"crashed (signal {-p.returncode})")
    last = (p.stderr.strip().splitlines() or [""])[-1]
    checks.check(not problems, name, "; ".join(problems) if problems else last[:160])


def main():
    global checks
    model = os.path.join(harness.shared_dir(), "models", "stories260K.bin")
    ids = os.path.join(harness.SOURCE_DIR, "data", "calib", "stories260k.ids")
    if not os.path.exists(model) or not os.path.exists(ids):
        harness.skip(f"{model} or {ids} not found")
    work = harness.work_dir("target_bpw_errors")
    checks = harness.Checks("llmc compile --target-bpw: flags and a small plan")
    out = os.path.join(work, "bad.llmc")
    base = ["compile", model, "-o", out, "--calib", ids, "-q"]
    ok_pipe = "llm-quantize{method=rtn group=32 skip=blk.*.ffn_down.weight}"

    expect_exit("--target-bpw 0 is a bad flag", base + ["--target-bpw", "0"], 2, out)
    expect_exit("--target-bpw -3 is a bad flag", base + ["--target-bpw", "-3"], 2, out)
    expect_exit("--target-bpw abc is a bad flag", base + ["--target-bpw", "abc"], 2, out)
    for method in ("aaac", "qtea", "hbq"):
        expect_exit(f"method={method} is rejected", base + [
            "--target-bpw", "4", "--pipeline", f"llm-quantize{{method={method} group=32}}"],
            2, out, f"method={method}")
    expect_exit("llm-quantize-rtn is rejected",
                base + ["--target-bpw", "4", "--pipeline", "llm-quantize-rtn{bits=4}"], 2, out,
                "llm-quantize-rtn")
    expect_exit("two llm-quantize passes are rejected", base + [
        "--target-bpw", "4", "--pipeline", f"{ok_pipe},{ok_pipe}"], 2, out, "at most one")
    expect_exit("a bad user override is rejected", base + [
        "--target-bpw", "4", "--pipeline",
        "llm-quantize{method=rtn group=32 skip=blk.*.ffn_down.weight override=token_embd.weight:9}"],
        2, out, "bad override")
    expect_exit("a budget below the all-2-bit size is rejected",
                base + ["--target-bpw", "3", "--pipeline", ok_pipe], 2, out, "smallest size")
    expect_exit("rows that are not whole groups: bad input naming the weight",
                base + ["--target-bpw", "4", "--pipeline", "llm-quantize{method=rtn group=32}"],
                1, out, "ffn_down.weight")

    # A plan: ffn_down skipped (f32), the embedding pinned at 8 bits by the user.
    pipe = ("llm-quantize{method=rtn group=32 skip=blk.*.ffn_down.weight "
            "override=token_embd.weight:8}")
    plans = {}
    for target in ("11", "12.5"):
        path = os.path.join(work, f"plan-{target}.llmc")
        p = harness.run_llmc(["compile", model, "-o", path, "--calib", ids, "--target-bpw", target,
                              "--pipeline", pipe], timeout=600)
        m = json.loads(harness.run_llmc(["inspect", path, "--json", "--no-verify"]).stdout)
        plans[target] = m
        mp = m.get("mixed_precision", {})
        bpw = matrix_bpw(m)
        checks.check(bpw <= float(target) and abs(mp.get("achieved_bpw", -1) - bpw) < 1e-9,
                     f"target {target}: matrix weights within the budget",
                     f"{bpw:.4f} bits per weight, manifest says {mp.get('achieved_bpw')}")
        dtypes = {t["name"]: t["dtype"] for t in harness.weight_tensors(m)}
        checks.check(dtypes["blk.0.ffn_down.weight"] == "f32"
                     and dtypes["token_embd.weight"] == "gq8a_g32"
                     and mp.get("fixed", {}).get("token_embd.weight", {}).get("format") == "gq8a_g32"
                     and mp.get("fixed", {}).get("blk.0.ffn_down.weight", {}).get("by") == "skip",
                     f"target {target}: skipped and user-pinned weights stay as the user said",
                     f"{dtypes['blk.0.ffn_down.weight']}, {dtypes['token_embd.weight']}")
        planned = mp.get("bits", {})
        agree = all(dtypes[n] == f"gq{b}a_g32" for n, b in planned.items())
        checks.check(len(planned) == 30 and agree and "[llmc] target-bpw" in p.stderr,
                     f"target {target}: every free weight has the planned width, progress shown",
                     json.dumps(mp.get("histogram")))
    lo, hi = plans["11"]["mixed_precision"], plans["12.5"]["mixed_precision"]
    mean_bits = lambda mp: sum(mp["bits"].values()) / len(mp["bits"])  # noqa: E731
    checks.check(hi["predicted_kld"] <= lo["predicted_kld"] and mean_bits(hi) > mean_bits(lo),
                 "a larger budget: no larger predicted KLD, more bits",
                 f"{lo['predicted_kld']:.4g} -> {hi['predicted_kld']:.4g}, "
                 f"{mean_bits(lo):.2f} -> {mean_bits(hi):.2f} bits")

    p = harness.run_llmc(["compile", model, "--dry-run", "--calib", ids, "--target-bpw", "11",
                          "--pipeline", pipe, "-q"], timeout=600)
    checks.check("target-bpw 11.000" in p.stdout and "predicted KLD" in p.stdout,
                 "--dry-run prints the plan", (p.stdout.strip().splitlines() or [""])[-1][:160])
    checks.finish()


if __name__ == "__main__":
    main()
