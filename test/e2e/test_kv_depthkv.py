"""End-to-end: DepthKV's calibrated per-layer KV budgets (llm-kv-policy
method=depthkv) on SmolLM2-135M-Instruct, small calibration settings.

- `llmc compile --pipeline 'llm-kv-policy{method=depthkv budget=0.1
  calib-context=512 calib-score=16}'` prints one progress line per layer and
  writes a depthkv kv_policy on each of the 30 attention layers with a
  measured `depthkv_delta` (>= 0, as printed) and a `layer_scale`:
  mean 1 +- 1e-6 over the layers, within [0.05, 4], not all equal, and of
  the documented form clamp(c * (delta + eps), 0.05, 4) for one c.
- The delta is what it says: `eval-long --task ppl --policies` (the runtime's
  own sweep, one prefill) on the same text with SnapKV at 10% in the most
  sensitive layer alone reproduces that layer's NLL rise. Its 495-token
  prefill and scored tokens match the calibration's (context 512, 17
  scored: the first of them is predicted by the prefill itself, identical
  under every policy, so 17 * rise(eval-long) = 16 * delta).
- The same sweep with a depthkv line (calibrated again inside eval-long):
  the budget is redistributed, not grown: cache entries within 5% of uniform
  SnapKV at the same ratio, well below the full cache.
- The artifact runs `eval-long --task passkey --context 1024 --trials 2`.
"""
import json
import math
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import harness  # noqa: E402

CALIB = "calib-context=512 calib-score=16"
LO, HI = 0.05, 4.0


def policies(art):
    p = harness.run_llmc(["inspect", art, "--json"])
    nodes = json.loads(p.stdout)["program"]["nodes"]
    out = {}
    for n in nodes:
        pol = n.get("attrs", {}).get("kv_policy")
        if pol is not None:
            out[n["attrs"]["layer"]] = pol
    return out


def allocation_form(checks, deltas, scales):
    """scale_l = clamp(c * (delta_l + eps), LO, HI) for a single c."""
    eps = 1e-3 * sum(deltas) / len(deltas) + 1e-9
    s = [d + eps for d in deltas]
    free = [sc / v for sc, v in zip(scales, s) if LO * (1 + 1e-9) < sc < HI * (1 - 1e-9)]
    if not free:  # every layer clamped: only possible if both ends meet the mean
        checks.check(False, "some layer_scale is strictly inside the clamp range", str(scales))
        return
    c = sum(free) / len(free)
    ok = all(abs(x / c - 1) < 1e-6 for x in free)
    for sc, v in zip(scales, s):
        if sc <= LO * (1 + 1e-9):
            ok = ok and c * v <= LO * (1 + 1e-6)
        elif sc >= HI * (1 - 1e-9):
            ok = ok and c * v >= HI * (1 - 1e-6)
    checks.check(ok, "layer_scale = clamp(c * (delta + eps), 0.05, 4) with one c",
                 f"c = {c:.6g}, {len(free)} unclamped layers")


def main():
    checks = harness.Checks("DepthKV calibration end to end")
    model = harness.SMOLLM2_GGUF
    if not os.path.exists(model):
        harness.skip(f"{model} not found")
    work = harness.work_dir("kv_depthkv")
    art = os.path.join(work, "depthkv.llmc")

    p = harness.compile_checked(checks, model, art, f"llm-kv-policy{{method=depthkv budget=0.1 {CALIB}}}",
                                "compile with method=depthkv")
    printed = {int(m.group(1)): float(m.group(2)) for m in re.finditer(
        r"\[llmc\] depthkv layer (\d+) \(\d+/30\): delta ([0-9.]+)", p.stderr)}
    checks.check(len(printed) == 30, "one progress line per layer", f"{len(printed)} lines")

    pol = policies(art)
    layers = sorted(pol)
    checks.check(layers == list(range(30)), "a kv_policy on all 30 attention layers", str(layers))
    if layers != list(range(30)):
        checks.finish()
    checks.check(all(pol[l]["method"] == "depthkv" and pol[l]["budget"] == 0.1 and
                     pol[l]["budget_tokens"] == 0 for l in layers),
                 "method depthkv, budget 0.1 on every layer")
    scales = [pol[l]["layer_scale"] for l in layers]
    has_delta = all("depthkv_delta" in pol[l] for l in layers)
    checks.check(has_delta, "depthkv_delta recorded on every layer")
    if not has_delta:
        checks.finish()
    deltas = [pol[l]["depthkv_delta"] for l in layers]
    mean = sum(scales) / len(scales)
    checks.check(abs(mean - 1) <= 1e-6, "layer_scale mean is 1", f"{mean:.12f}")
    checks.check(all(LO * (1 - 1e-9) <= x <= HI * (1 + 1e-9) for x in scales),
                 "layer_scale within [0.05, 4]", f"{min(scales):.4f}..{max(scales):.4f}")
    checks.check(max(scales) - min(scales) > 0.1, "layer_scale is not uniform",
                 " ".join(f"{x:.2f}" for x in scales))
    checks.check(all(d >= 0 and math.isfinite(d) for d in deltas) and max(deltas) > 0,
                 "deltas finite, >= 0, some positive", " ".join(f"{d:.4f}" for d in deltas))
    checks.check(all(abs(printed.get(l, -1) - deltas[l]) <= 1e-5 for l in layers),
                 "printed deltas are the recorded ones")
    allocation_form(checks, deltas, scales)

    top = max(layers, key=lambda l: deltas[l])
    lines = ["method=full", f"method=snapkv budget=0.1 only-layers={top}", "method=snapkv budget=0.1",
             f"method=depthkv budget=0.1 {CALIB}"]
    sweep = os.path.join(work, "policies.txt")
    with open(sweep, "w") as f:
        f.write("\n".join(lines) + "\n")
    calib_text = os.path.join(harness.SOURCE_DIR, "data", "calib", "default.txt")
    p = harness.run_llmc(["eval-long", model, "--task", "ppl", "--context", "512",
                          "--text", calib_text, "--score-tokens", "17", "--policies", sweep,
                          "--json", "-q", "--exact-activations"],  # as the compile's calibration
                         check=False, timeout=900)
    rows = {}
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            rows[r["policy"]] = r
    checks.check(p.returncode == 0 and len(rows) == len(lines), "eval-long ppl sweep",
                 f"exit {p.returncode}, {len(rows)} rows, {p.seconds:.0f} s; {p.stderr.strip()[-300:]}")
    if len(rows) == len(lines):
        full, one, snap, depth = (rows[l] for l in lines)
        rise = 17 * (math.log(one["ppl"]) - math.log(full["ppl"])) / 16
        checks.check(abs(rise - deltas[top]) <= 1e-4 + 1e-3 * deltas[top],
                     f"layer {top}'s delta matches eval-long's NLL rise with that layer compressed",
                     f"{deltas[top]:.6f} vs {rise:.6f}")
        checks.check(abs(depth["kv_entries"] - snap["kv_entries"]) <= 0.05 * snap["kv_entries"]
                     and depth["kv_entries"] < 0.5 * full["kv_entries"],
                     "depthkv keeps as many entries as uniform SnapKV (within 5%)",
                     f"depthkv {depth['kv_entries']}, snapkv {snap['kv_entries']}, "
                     f"full {full['kv_entries']}")
        print(f"  ppl@512 on the calibration tokens (data/calib/default.txt): full {full['ppl']:.4f}, snapkv@0.1 {snap['ppl']:.4f}, "
              f"depthkv@0.1 {depth['ppl']:.4f}")

    harness.check_passkey_runs(checks, art, 2)
    checks.finish()


if __name__ == "__main__":
    main()
