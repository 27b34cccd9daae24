"""End-to-end: calibrated per-KV-head budgets (llm-kv-policy heads=calibrated)
on SmolLM2-135M-Instruct (30 layers x 3 KV heads), small calibration
settings.

- `llmc compile --pipeline 'llm-kv-policy{method=snapkv budget=0.1
  heads=calibrated calib-context=512 calib-score=16}'` prints one progress
  line per layer and writes on each of the 30 attention layers a
  `head_delta` (3 measured NLL rises, >= 0, as printed) and a `head_scale`
  (3 entries, mean 1 per layer, not all equal) of the documented form
  0.8 * 3 * s_g / sum(s) + 0.2 with s = delta + eps (no clamp binds with 3
  heads).
- The per-head budgets are physically applied: `eval-long --task ppl
  --policies` (one prefill of 495 tokens) with the same policy restricted to
  the layers with the most uneven head_scale (calibrated again inside
  eval-long: the same probes, so the same scales) keeps exactly
  sum over those heads of window + (C - window) * head_scale_g entries
  (C = ceil(0.1 * 495), each head rounded on its own), which is about what
  uniform SnapKV keeps there (the budget is redistributed, not grown).
- The artifact runs `eval-long --task passkey --context 1024`.
"""
import json
import math
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import harness  # noqa: E402

CALIB = "calib-context=512 calib-score=16"
KV, LAYERS, WINDOW = 3, 30, 32
MIX = 0.8


def policies(art):
    p = harness.run_llmc(["inspect", art, "--json"])
    nodes = json.loads(p.stdout)["program"]["nodes"]
    out = {}
    for n in nodes:
        pol = n.get("attrs", {}).get("kv_policy")
        if pol is not None:
            out[n["attrs"]["layer"]] = pol
    return out


def expected_scales(deltas):
    eps = 1e-3 * sum(deltas) / len(deltas) + 1e-9
    s = [d + eps for d in deltas]
    return [MIX * len(s) * v / sum(s) + (1 - MIX) for v in s]


def head_budget(scale, prompt, ratio=0.1):
    """The runtime's kept entries of one head after a prompt (kv_policy contract)."""
    c = math.ceil(ratio * prompt)
    keep = WINDOW + max(0, c - WINDOW) * scale
    return min(prompt, max(int(math.floor(keep + 0.5)), WINDOW + 1))


def main():
    checks = harness.Checks("per-KV-head calibration end to end")
    model = harness.SMOLLM2_GGUF
    if not os.path.exists(model):
        harness.skip(f"{model} not found")
    work = harness.work_dir("kv_headwise")
    art = os.path.join(work, "heads.llmc")

    p = harness.compile_checked(checks, model, art, f"llm-kv-policy{{method=snapkv budget=0.1 heads=calibrated {CALIB}}}",
                                "compile with heads=calibrated")
    printed = {int(m.group(1)): [float(x) for x in m.group(2).split()] for m in re.finditer(
        r"\[llmc\] heads layer (\d+) \(\d+/30\): delta ([0-9. ]+), head_scale", p.stderr)}
    checks.check(len(printed) == LAYERS, "one progress line per layer", f"{len(printed)} lines")
    checks.check("(90 probes, delta = nll rise)" in p.stderr, "30 x 3 probes announced")

    pol = policies(art)
    layers = sorted(pol)
    checks.check(layers == list(range(LAYERS)), "a kv_policy on all 30 attention layers",
                 str(layers))
    if layers != list(range(LAYERS)):
        checks.finish()
    checks.check(all(pol[l]["method"] == "snapkv" and pol[l]["budget"] == 0.1 and
                     pol[l]["layer_scale"] == 1.0 for l in layers),
                 "method snapkv, budget 0.1, layer_scale 1 on every layer")
    shaped = all(len(pol[l].get("head_scale", [])) == KV and len(pol[l].get("head_delta", [])) == KV
                 for l in layers)
    checks.check(shaped, "head_scale and head_delta with 3 entries on every layer")
    if not shaped:
        checks.finish()
    scales = {l: pol[l]["head_scale"] for l in layers}
    deltas = {l: pol[l]["head_delta"] for l in layers}
    worst = max(abs(sum(v) / KV - 1) for v in scales.values())
    checks.check(worst <= 1e-9, "head_scale mean is 1 in every layer", f"max |mean - 1| {worst:.2e}")
    spread = {l: max(v) - min(v) for l, v in scales.items()}
    checks.check(max(spread.values()) > 0.5, "head_scale is not uniform",
                 f"{sum(s > 1e-6 for s in spread.values())} of 30 layers uneven, largest spread "
                 f"{max(spread.values()):.3f}")
    flat = [d for v in deltas.values() for d in v]
    checks.check(all(d >= 0 and math.isfinite(d) for d in flat) and max(flat) > 0,
                 "deltas finite, >= 0, some positive", f"max {max(flat):.5f}")
    checks.check(all(all(abs(a - b) <= 1e-5 for a, b in zip(printed.get(l, []), deltas[l])) and
                     len(printed.get(l, [])) == KV for l in layers),
                 "printed deltas are the recorded ones")
    form = max(abs(a - b) for l in layers for a, b in zip(scales[l], expected_scales(deltas[l])))
    checks.check(form <= 1e-9, "head_scale = 0.8 * KV * s / sum(s) + 0.2, s = delta + eps",
                 f"max deviation {form:.2e}")

    # The per-head budgets in the runtime: the most uneven layers only (their
    # calibration inside eval-long repeats the same probes).
    top = sorted(sorted(layers, key=lambda l: -spread[l])[:4])
    only = "only-layers=" + ",".join(map(str, top))
    lines = ["method=full", f"method=snapkv budget=0.1 {only}",
             f"method=snapkv budget=0.1 heads=calibrated {CALIB} {only}"]
    sweep = os.path.join(work, "policies.txt")
    with open(sweep, "w") as f:
        f.write("\n".join(lines) + "\n")
    calib_text = os.path.join(harness.SOURCE_DIR, "data", "calib", "default.txt")
    p = harness.run_llmc(["eval-long", model, "--task", "ppl", "--context", "512",
                          "--text", calib_text, "--score-tokens", "17", "--policies", sweep,
                          "--json", "-q"], check=False, timeout=900)
    rows = {}
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            rows[r["policy"]] = r
    checks.check(p.returncode == 0 and len(rows) == len(lines), "eval-long ppl sweep",
                 f"exit {p.returncode}, {len(rows)} rows, {p.seconds:.0f} s; "
                 f"{p.stderr.strip()[-300:]}")
    if len(rows) == len(lines):
        full, snap, heads = (rows[l] for l in lines)
        prompt = 512 - 17
        per_head = {l: [head_budget(s, prompt) for s in scales[l]] for l in top}
        want = sum(b - prompt for v in per_head.values() for b in v)
        uniform = len(top) * KV * (head_budget(1.0, prompt) - prompt)
        got = heads["kv_entries"] - full["kv_entries"]
        checks.check(got == want, "kept entries = sum of the per-head budgets",
                     f"{got} vs {want} (per head {per_head})")
        checks.check(snap["kv_entries"] - full["kv_entries"] == uniform,
                     "uniform SnapKV keeps its budget in every head", f"{uniform}")
        checks.check(abs(got - uniform) <= len(top) * KV, "calibrated total ~ uniform total",
                     f"{heads['kv_entries']} vs {snap['kv_entries']} entries "
                     f"(full {full['kv_entries']})")
        print(f"  ppl@512 (layers {top} compressed): full {full['ppl']:.4f}, snapkv@0.1 "
              f"{snap['ppl']:.4f}, snapkv@0.1 heads=calibrated {heads['ppl']:.4f}")

    harness.check_passkey_runs(checks, art, 1)
    checks.finish()


if __name__ == "__main__":
    main()
