"""End-to-end: `llmc bench` on stories260K (context 512, so small -p / -n).

Checks the --json object (exactly one object on stdout; the keys
prefill_tok_s, decode_tok_s, load_s, peak_rss_mb, threads; positive finite
rates; one sample per repetition; the model statistics consistent with an
all-f32 model), the human table, benchmarking a compiled artifact as well as
a source model, skipping a test with -p 0, and the exit codes: 1 for bad
input (missing or malformed model, a test longer than the context), 2 for
bad flags. Speed itself is never asserted.

--speculate (SmolLM2, whose tokenizer reads the --prompt-file, --chat):
prompt lookup after a code-edit prompt reports plain and speculative runs per
repetition, tokens identical to plain greedy decoding (bench fails
otherwise), a mean accepted length above a floor of 1.5 tokens per pass
(measured 2.4 on such text: a broken drafter or verifier falls below it),
and drafted >= accepted; --speculate without --prompt-file, --prompt-file
without --speculate and --speculate with --device cuda exit 2; a prompt
file for a model with no tokenizer (stories260K) exits 1.
"""
import json
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import harness  # noqa: E402

REQUIRED = ("prefill_tok_s", "decode_tok_s", "load_s", "peak_rss_mb", "threads")


def positive(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def bench_json(checks, name, args, reps):
    """Runs `llmc bench ... --json`; returns the object or None."""
    p = harness.run_llmc(["bench", *args, "--json", "-q", "-r", reps], check=False)
    if not checks.check(p.returncode == 0, f"{name}: exit 0",
                        f"exit {p.returncode}: {p.stderr.strip()[-200:]}"):
        return None
    try:
        j = json.loads(p.stdout)  # the whole stdout must be one JSON value
    except json.JSONDecodeError as e:
        checks.check(False, f"{name}: stdout is one JSON object", str(e))
        return None
    checks.check(isinstance(j, dict), f"{name}: stdout is one JSON object", type(j).__name__)
    return j if isinstance(j, dict) else None


def expect_exit(checks, name, args, code):
    p = harness.run_llmc(["bench", *args], check=False, timeout=120)
    crashed = p.returncode < 0 or "Segmentation" in p.stderr
    line = next((l for l in p.stderr.splitlines() if l.startswith("llmc: error:")), "")
    ok = p.returncode == code and not crashed and (code != 1 or bool(line))
    shown = line or (p.stderr.strip().splitlines() or [""])[-1]
    checks.check(ok, name, f"exit {p.returncode} (expected {code}): {shown[:160]}")


CODE_EDIT = """Rename the variable `total` to `running_sum` in this Python function, keeping everything else the same:

def accumulate(values, start=0):
    total = start
    for value in values:
        if value is None:
            continue
        total = total + value
        if total > 1000:
            total = 1000
    return total
"""


def speculation_checks(checks, work, stories_art):
    prompt = os.path.join(work, "code_edit.txt")
    with open(prompt, "w") as f:
        f.write(CODE_EDIT)
    for name, args in (("--speculate without --prompt-file", ["--speculate", "ngram"]),
                       ("--prompt-file without --speculate", ["--prompt-file", prompt]),
                       ("--chat without --speculate", ["--chat"]),
                       ("--speculate with --device cuda",
                        ["--speculate", "ngram", "--prompt-file", prompt, "--device", "cuda"])):
        expect_exit(checks, f"{name}: exit 2", [stories_art, "-n", 8, *args], 2)
    expect_exit(checks, "--prompt-file for a model without a tokenizer: exit 1",
                [stories_art, "-n", 8, "--speculate", "ngram", "--prompt-file", prompt], 1)
    if not os.path.exists(harness.SMOLLM2_GGUF):
        harness.skip_part(f"{harness.SMOLLM2_GGUF} missing (scripts/setup.sh fetches it)")
        return
    art = os.path.join(work, "smollm2.llmc")
    harness.run_llmc(["compile", harness.SMOLLM2_GGUF, "-o", art, "-q"])
    j = bench_json(checks, "SmolLM2 --speculate ngram --json",
                   [art, "-p", 0, "-n", 64, "-t", 2, "--speculate", "ngram", "--chat",
                    "--prompt-file", prompt], 2)
    if j is None:
        return
    s = j.get("speculative") or {}
    checks.check(s.get("tokens_identical") is True and s.get("drafter") == "prompt lookup",
                 "--speculate ngram: prompt lookup, tokens identical to plain greedy", str(s)[:300])
    runs_ok = all(len(s.get(k, [])) == 2 and all(positive(x) for x in s.get(k, []))
                  for k in ("plain_runs", "speculative_runs"))
    same = len(j.get("decode_runs", [])) == 2 and runs_ok and all(
        math.isclose(a, b, rel_tol=1e-5) for a, b in zip(j["decode_runs"], s["plain_runs"]))
    checks.check(same and positive(s.get("speedup")),
                 "one plain and one speculative rate per repetition; decode_runs are the plain ones",
                 f"{s.get('plain_runs')} {s.get('speculative_runs')} speedup {s.get('speedup')}")
    mean = s.get("mean_accepted", 0)
    checks.check(isinstance(mean, (int, float)) and mean >= 1.5 and
                 0 < s.get("accepted", -1) <= s.get("drafted", -1) and s.get("passes", 0) > 0,
                 "mean accepted length above the 1.5 floor on a code edit; accepted <= drafted",
                 f"mean accepted {mean}, {s.get('accepted')} of {s.get('drafted')} drafts in "
                 f"{s.get('passes')} passes, speedup {s.get('speedup')}")


def main():
    stories = os.path.join(harness.shared_dir(), "models", "stories260K.bin")
    if not os.path.exists(stories):
        harness.skip(f"{stories} not found")
    work = harness.work_dir("bench_cli")
    checks = harness.Checks("llmc bench: JSON, table, exit codes")

    # 1. JSON from the source model (compiled in memory).
    j = bench_json(checks, "source model --json", [stories, "-p", 64, "-n", 32, "-t", 1], 2)
    if j is not None:
        missing = [k for k in REQUIRED if k not in j]
        checks.check(not missing, "JSON has the required keys", f"missing {missing}" if missing
                     else ", ".join(REQUIRED))
        bad = [k for k in ("prefill_tok_s", "decode_tok_s", "load_s", "peak_rss_mb")
               if not positive(j.get(k))]
        checks.check(not bad, "rates, load time and peak RSS are positive finite numbers",
                     f"bad: {[(k, j.get(k)) for k in bad]}" if bad else
                     f"pp {j['prefill_tok_s']:.0f} tok/s, tg {j['decode_tok_s']:.0f} tok/s, "
                     f"load {j['load_s']:.3f} s, {j['peak_rss_mb']:.1f} MiB")
        checks.check(j.get("threads") == 1, "threads echoes -t", str(j.get("threads")))
        checks.check(j.get("prompt_tokens") == 64 and j.get("gen_tokens") == 32 and j.get("reps") == 2,
                     "test sizes echo -p / -n / -r",
                     f"{j.get('prompt_tokens')}, {j.get('gen_tokens')}, {j.get('reps')}")
        runs = j.get("prefill_runs", []), j.get("decode_runs", [])
        checks.check(all(len(r) == 2 and all(positive(x) for x in r) for r in runs),
                     "one positive sample per repetition", str(runs))
        med = [sorted(r)[0] + (sorted(r)[1] - sorted(r)[0]) / 2 for r in runs if len(r) == 2]
        checks.check(len(med) == 2 and all(math.isclose(m, j[k], rel_tol=1e-4) for m, k in
                                           zip(med, ("prefill_tok_s", "decode_tok_s"))),
                     "reported rates are the medians of the samples", f"{med}")
        # stories260K is all f32: 4 bytes per parameter, 32 bits per weight.
        size, params = j.get("size_bytes"), j.get("params")
        checks.check(positive(size) and positive(params) and size == 4 * params
                     and math.isclose(j.get("bpw", 0), 32.0, rel_tol=1e-6),
                     "size and bpw of an all-f32 model", f"{size} bytes, {params} params, "
                     f"{j.get('bpw')} bpw, types {j.get('bytes_by_type')}")
        dec = j.get("decode_weight_bytes_per_token")
        checks.check(positive(dec) and dec <= size and positive(j.get("kv_bytes_per_position")),
                     "decode bytes per token within the model size", f"{dec} of {size}")

    # 2. The table, on a compiled artifact.
    art = os.path.join(work, "stories.llmc")
    harness.run_llmc(["compile", stories, "-o", art])
    p = harness.run_llmc(["bench", art, "-p", 32, "-n", 16, "-r", 1, "-t", 1], check=False)
    checks.check(p.returncode == 0 and "pp32" in p.stdout and "tg16" in p.stdout
                 and "peak RSS" in p.stdout, "artifact: table with pp32 / tg16 rows",
                 (p.stdout.strip() or p.stderr.strip())[-300:].replace("\n", " / "))
    j = bench_json(checks, "artifact --json", [art, "-p", 16, "-n", 8, "-t", 1], 1)
    if j is not None:
        checks.check(all(positive(j.get(k)) for k in ("prefill_tok_s", "decode_tok_s", "load_s")),
                     "artifact: positive rates and load time", str({k: j.get(k) for k in REQUIRED}))

    # 3. -p 0 skips the prefill test (null), decode still measured.
    j = bench_json(checks, "-p 0 --json", [art, "-p", 0, "-n", 8, "-t", 1], 1)
    if j is not None:
        checks.check(j.get("prefill_tok_s", "absent") is None and positive(j.get("decode_tok_s")),
                     "-p 0: prefill null, decode measured",
                     f"{j.get('prefill_tok_s')}, {j.get('decode_tok_s')}")

    # 4. Bad input: exit 1 with an 'llmc: error:' line.
    garbage = os.path.join(work, "garbage.bin")
    with open(garbage, "wb") as f:
        f.write(bytes(range(256)) * 8)
    expect_exit(checks, "missing model: exit 1", [os.path.join(work, "nope.llmc")], 1)
    expect_exit(checks, "malformed model: exit 1", [garbage], 1)
    expect_exit(checks, "test longer than the context: exit 1", [art, "-p", 600], 1)
    expect_exit(checks, "--pipeline on an artifact: exit 1",
                [art, "--pipeline", "llm-quantize-rtn{bits=8}"], 1)

    # 5. Bad flags: exit 2.
    for name, args in (("-p not a number", [art, "-p", "x"]), ("-r 0", [art, "-r", 0]),
                       ("negative -t", [art, "-t", -1]), ("unknown flag", [art, "--bogus"]),
                       ("-p 0 -n 0", [art, "-p", 0, "-n", 0]),
                       ("--ctx below the test", [art, "-p", 64, "-n", 8, "-c", 32]),
                       ("no model", [])):
        expect_exit(checks, f"{name}: exit 2", args, 2)
    speculation_checks(checks, work, art)
    checks.finish()


if __name__ == "__main__":
    main()
