"""End-to-end: KV-cache policies compiled into the model and run by the runtime.

- SmolLM2-135M-Instruct, passkey at a 2k-token context, 2 trials (needle at
  depths 0 and 1), one `eval-long --policies` sweep (one prefill per prompt,
  every policy on a copy of the cache):
  * the full cache retrieves both keys;
  * ReST-KV at a 50% budget still retrieves both (the issue's requirement;
    measured at 1k: 3/3 at 50% and at 10%);
  * evicted entries free memory: KV bytes at 50% are at most 60% of the
    full cache's, at 10% at most 20%; PolyKV storage (int8 keys, 3-bit
    rotated values) of the uncompressed cache is at most 25% of f32;
  * every policy of the issue runs and keeps what its budget says
    (kv_entries at 10% well below 50%, which is below the full cache);
  * RDKV (per-entry bit widths, budget = bits relative to fp16) at 10% and
    25% holds at most budget/2 of the f32 cache's bytes plus 2% and the
    observation window's queries
    (measured at 1k, 3 trials: 3/3 retrieved at both).
- A compiled artifact carries its policy: `llmc compile --pipeline
  llm-kv-policy{...}` then `eval-long ARTIFACT` uses it (KV bytes shrink
  without --pipeline or --policies at run time).
- KV peak and chunked prefill (1k context): the full cache's perplexity
  in chunks of 128 is one step's (to 1e-3); under the artifact's SnapKV
  25% policy the KV peak of a one-step prompt is under 40% of the full
  cache's (each layer compressed right after its attention), in chunks no
  higher, the cache after the prompt within 1.2x of one step's; with
  --policies it is refused.
- stories260K (tiny, fast): every method at 25% runs through ppl with the
  shipped token ids, finite perplexity, entries within the budget.
- Errors: --policies with --pipeline, an invalid policy line (names the line).
"""
import json
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import harness  # noqa: E402

METHODS = ("streaming", "h2o", "snapkv", "pyramidkv", "restkv", "laprox", "capkv", "inertiakv",
           "random")


def sweep(checks, name, model, task, context, lines, work, extra=(), timeout=1500):
    path = os.path.join(work, name.replace(" ", "_") + ".txt")
    with open(path, "w") as f:
        f.write("# policies\n" + "\n".join(lines) + "\n")
    p = harness.run_llmc(["eval-long", model, "--task", task, "--context", str(context),
                          "--policies", path, "--json", "-q", *extra], check=False, timeout=timeout)
    rows = {}
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            rows[r["policy"]] = r
    checks.check(p.returncode == 0 and len(rows) == len(lines),
                 f"{name}: one JSON object per policy",
                 f"exit {p.returncode}, {len(rows)} of {len(lines)} rows, {p.seconds:.0f} s; "
                 f"{p.stderr.strip()[-300:]}")
    return rows


def smollm2_checks(checks, work):
    model = os.path.join(harness.SOURCE_DIR, ".cache", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(model):
        harness.skip_part(f"{model} not found (run scripts/setup.sh); SmolLM2 checks skipped")
        return
    lines = ["method=full", "method=restkv budget=0.5", "method=snapkv budget=0.5",
             "method=restkv budget=0.1", "method=streaming budget=1.0 kv-quant=polykv",
             "method=snapkv budget=0.1 kv-quant=polykv", "method=rdkv budget=0.1",
             "method=rdkv budget=0.25"]
    rows = sweep(checks, "smollm2 passkey 2k", model, "passkey", 2048, lines, work,
                 ["--trials", "2"])
    if len(rows) != len(lines):
        return
    for l, r in rows.items():
        print(f"  {l:45s} accuracy {r['accuracy']:.2f}  kv {r['kv_bytes'] / 2**20:7.1f} MiB  "
              f"entries {r['kv_entries']}  decode {r['decode_tok_s']:.1f} tok/s  "
              f"compress {1000 * r['compress_s']:.0f} ms")
    full = rows["method=full"]
    checks.check(full["accuracy"] == 1.0, "full cache retrieves both keys", str(full["accuracy"]))
    r50 = rows["method=restkv budget=0.5"]
    checks.check(r50["accuracy"] == 1.0, "ReST-KV at 50% retrieves both keys at 2k",
                 str(r50["accuracy"]))
    checks.check(r50["kv_bytes"] <= 0.6 * full["kv_bytes"], "50% budget: KV bytes <= 60% of full",
                 f"{r50['kv_bytes']} vs {full['kv_bytes']}")
    r10 = rows["method=restkv budget=0.1"]
    checks.check(r10["kv_bytes"] <= 0.2 * full["kv_bytes"], "10% budget: KV bytes <= 20% of full",
                 f"{r10['kv_bytes']} vs {full['kv_bytes']}")
    q = rows["method=streaming budget=1.0 kv-quant=polykv"]
    checks.check(q["kv_bytes"] <= 0.25 * full["kv_bytes"] and q["kv_entries"] >= full["kv_entries"] - 64,
                 "PolyKV keeps every entry in <= 25% of the f32 bytes",
                 f"{q['kv_bytes']} vs {full['kv_bytes']}, entries {q['kv_entries']} vs {full['kv_entries']}")
    checks.check(q["accuracy"] == 1.0, "PolyKV full cache still retrieves", str(q["accuracy"]))
    for budget in (0.1, 0.25):
        r = rows[f"method=rdkv budget={budget}"]
        # budget = bits relative to fp16, i.e. budget/2 of the f32 cache, plus
        # positions, widths, row headroom and the sweep's attention statistics
        # (2%), and the window's f32 queries (32 rows of 9 heads x 64 per layer).
        window = 30 * 32 * (9 * 64 * 4 + 4)
        limit = full["kv_bytes"] * (budget * 16 / 32 + 0.02) + window
        checks.check(r["kv_bytes"] <= limit and 0 < r["kv_entries"] < full["kv_entries"] and
                     math.isfinite(r["accuracy"]),
                     f"RDKV at {budget:.0%} of the fp16 bits: KV bytes <= f32 x (budget/2 + 2%) + window",
                     f"{r['kv_bytes']} vs limit {limit:.0f} (full {full['kv_bytes']}), entries "
                     f"{r['kv_entries']}, accuracy {r['accuracy']}")

    # A compiled artifact carries its policy.
    art = os.path.join(work, "snapkv.llmc")
    p = harness.run_llmc(["compile", model, "-o", art, "--pipeline",
                          "llm-kv-policy{method=snapkv budget=0.25}"], check=False, timeout=600)
    checks.check(p.returncode == 0 and os.path.exists(art), "compile with llm-kv-policy",
                 p.stderr.strip()[-200:])
    if p.returncode == 0:
        p = harness.run_llmc(["eval-long", art, "--task", "ppl", "--context", "512",
                              "--score-tokens", "16", "--json", "-q"], check=False, timeout=600)
        ok = p.returncode == 0
        j = json.loads(p.stdout.strip().splitlines()[-1]) if ok else {}
        full_bytes = 30 * 3 * 64 * 2 * 4 * 512  # f32 K and V of 512 entries, every head
        checks.check(ok and j["kv_bytes"] < 0.5 * full_bytes and math.isfinite(j["ppl"]),
                     "the artifact's policy shrinks the cache at run time",
                     f"kv_bytes {j.get('kv_bytes')} (full ~{full_bytes}), ppl {j.get('ppl')}")
        chunked_prefill_checks(checks, model, art)


def eval_long_json(args, timeout=900):
    p = harness.run_llmc(["eval-long", *args, "--json", "-q"], check=False, timeout=timeout)
    if p.returncode != 0:
        return None, p.stderr.strip()[-240:]
    return json.loads(p.stdout.strip().splitlines()[-1]), ""


def chunked_prefill_checks(checks, model, art):
    """--prefill-chunk: the full cache computes the same perplexity. Under the
    artifact's SnapKV 25% policy every layer is compressed right after its
    attention, so even a prompt in one step peaks at the budget plus one
    layer's prompt (measured at 2k: 27.9 MiB against the full cache's 94.9),
    and in chunks at no more than that, while the cache after the prompt
    stays within budget. At 1k with chunks of 128 (8 chunks, as 256 at 2k):
    the same checks in half the time."""
    ppl = ["--task", "ppl", "--context", "1024", "--score-tokens", "32"]
    prompt = 1024 - 32
    full, err1 = eval_long_json([model, *ppl])
    chunked, err2 = eval_long_json([model, *ppl, "--prefill-chunk", "128"])
    ok = full is not None and chunked is not None
    checks.check(ok and chunked["prefill_chunk"] == 128 and full["prefill_chunk"] == prompt
                 and abs(chunked["ppl"] - full["ppl"]) <= 1e-3 * full["ppl"],
                 "full cache: a prompt in chunks of 128 gives one step's perplexity",
                 f"{chunked and chunked['ppl']} vs {full and full['ppl']}, chunks "
                 f"{chunked and chunked['prefill_chunk']} / {full and full['prefill_chunk']}; "
                 f"{err1}{err2}")
    if not ok:
        return
    checks.check(full["kv_peak_bytes"] >= full["kv_bytes"] > 0,
                 "full cache: the peak is at least what the cache holds",
                 f"peak {full['kv_peak_bytes']}, after {full['kv_bytes']}")
    one, err1 = eval_long_json([art, *ppl])
    chunked, err2 = eval_long_json([art, *ppl, "--prefill-chunk", "128"])
    ok = one is not None and chunked is not None
    checks.check(ok and one["kv_peak_bytes"] < 0.4 * full["kv_peak_bytes"] and
                 one["prefill_chunk"] == prompt,
                 "SnapKV 25%, one step: the KV peak stays under 40% of the full cache's",
                 f"peak {one and one['kv_peak_bytes']} vs full {full['kv_peak_bytes']}; {err1}")
    checks.check(ok and chunked["prefill_chunk"] == 128 and
                 chunked["kv_peak_bytes"] <= one["kv_peak_bytes"] and
                 chunked["kv_bytes"] <= 1.2 * one["kv_bytes"] and math.isfinite(chunked["ppl"]),
                 "SnapKV 25%, chunks of 128: peak no higher than one step's, cache within budget",
                 f"peak {chunked and chunked['kv_peak_bytes']} vs {one and one['kv_peak_bytes']}, "
                 f"after {chunked and chunked['kv_bytes']} vs {one and one['kv_bytes']}, ppl "
                 f"{chunked and chunked['ppl']} vs {one and one['ppl']}; {err2}")
    p = harness.run_llmc(["eval-long", model, *ppl, "--prefill-chunk", "128", "--policies",
                          os.devnull], check=False)
    checks.check(p.returncode != 0 and "--prefill-chunk does not combine" in p.stderr,
                 "--prefill-chunk with --policies is refused", p.stderr.strip()[-200:])


def stories_checks(checks, work):
    stories = os.path.join(harness.shared_dir(), "models", "stories260K.bin")
    if not os.path.exists(stories):
        harness.skip_part(f"{stories} not found; stories260K checks skipped")
        return
    ids = os.path.join(harness.SOURCE_DIR, "data", "eval", "stories260k.ids")
    lines = ["method=full"] + [f"method={m} budget=0.25" for m in METHODS]
    rows = sweep(checks, "stories260K ppl, every method", stories, "ppl", 512, lines, work,
                 ["--text", ids, "--score-tokens", "64"], timeout=600)
    if len(rows) != len(lines):
        return
    full = rows["method=full"]
    for l in lines[1:]:
        r = rows[l]
        checks.check(r["ppl"] is not None and math.isfinite(r["ppl"]) and
                     r["kv_entries"] < 0.6 * full["kv_entries"],
                     f"stories260K {l}: finite ppl, entries within budget",
                     f"ppl {r['ppl']}, entries {r['kv_entries']} vs full {full['kv_entries']}")
    p = harness.run_llmc(["eval-long", stories, "--task", "ppl", "--context", "256", "--text", ids,
                          "--policies", os.path.join(work, "none.txt"), "--pipeline",
                          "llm-kv-policy{method=snapkv budget=0.5}"], check=False)
    checks.check(p.returncode != 0 and "do not combine" in p.stderr, "--policies with --pipeline",
                 p.stderr.strip()[-200:])
    bad = os.path.join(work, "bad.txt")
    with open(bad, "w") as f:
        f.write("method=full\nmethod=snapkv budget=2\n")
    p = harness.run_llmc(["eval-long", stories, "--task", "ppl", "--context", "256", "--text", ids,
                          "--policies", bad], check=False)
    checks.check(p.returncode != 0 and "bad.txt:2" in p.stderr and "Segmentation" not in p.stderr,
                 "an invalid policy line is named", p.stderr.strip()[-240:])


def main():
    checks = harness.Checks("KV-cache policies end to end")
    work = harness.work_dir("kv_policies")
    stories_checks(checks, work)
    smollm2_checks(checks, work)
    checks.finish()


if __name__ == "__main__":
    main()
