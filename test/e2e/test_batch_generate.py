"""End-to-end: `llmc generate` (continuous batching, Executor::forwardBatch)
gives every request the tokens `llmc run` gives it alone.

On SmolLM2-135M-Instruct (Q4_1 as shipped, signed: generated kernels, int8
activations) and stories260K (f32):
- 16 prompts of 1 to ~120 tokens (chat, code, story, lists), greedy, in one
  batch of 16 with a step budget of 40 tokens, so long prompts are fed in
  chunks mixed into other sequences' decode steps; each request's tokens
  equal `llmc run --prompt-tokens ... --print-ids` (one sequence, the
  prompt in one step), and the stats line says 16 requests;
- the same with --max-batch 3 (requests wait, join as others leave);
- the reference engine (`--engine reference`: entries one after another)
  gives the same tokens;
- sampling (--temp 0.8 --top-k 40 --seed 7): request i equals `llmc run
  --seed 7+i`;
- an artifact with a prefill KV policy (SnapKV 50%, compiled in), with a
  step budget larger than all prompts together (each prompt in one step, as `run`
  feeds it): the policy applies per sequence and the tokens equal `run`'s;
- --kv-type f16 (the pool's rows in f16), and on SmolLM2 --kv-type q8_0
  (int8 codes, an f16 scale per 32): a batch of 16 with chunked prompts
  gives each request its tokens alone (--max-batch 1);
- errors: a line that is not token ids, --step-tokens not above
  --max-batch, a token outside the vocabulary, --kv-type f16 with
  --contiguous-kv, --kv-type q8_0 on stories260K (head_dim 8): exit 1 with
  a message, no output lines.
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import harness  # noqa: E402

STORIES = os.path.join(harness.shared_dir(), "models", "stories260K.bin")


def prompt_ids(n, seed, vocab):
    """A deterministic prompt of n token ids in [3, vocab)."""
    out, s = [], seed
    for _ in range(n):
        s = (s * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        out.append(3 + (s >> 33) % (vocab - 3))
    return out


def generate(model, path, extra, timeout=900):
    p = harness.run_llmc(["generate", model, "--prompts", path, "--ids", *extra],
                         check=False, timeout=timeout)
    rows = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    return p, rows


def run_alone(model, ids, n, extra=()):
    p = harness.run_llmc(["run", model, "--prompt-tokens", ",".join(map(str, ids)), "-n", str(n),
                          "--print-ids", "-q", *extra], timeout=600)
    return [int(t) for t in p.stdout.split()]


def compare(checks, name, model, prompts, n, gen_extra, run_extra_of=lambda i: ()):
    path = os.path.join(os.path.dirname(model), name.replace(" ", "_") + ".ids")
    with open(path, "w") as f:
        f.write("\n".join(",".join(map(str, p)) for p in prompts) + "\n")
    p, rows = generate(model, path, ["-n", str(n), *gen_extra])
    ok = p.returncode == 0 and len(rows) == len(prompts)
    checks.check(ok, f"{name}: one JSON line per request",
                 f"exit {p.returncode}, {len(rows)} of {len(prompts)}; {p.stderr.strip()[-300:]}")
    if not ok:
        return None
    same = 0
    for i, (ids, row) in enumerate(zip(prompts, rows)):
        ref = run_alone(model, ids, n, run_extra_of(i))
        if row["tokens"] == ref and row["index"] == i:
            same += 1
        else:
            print(f"  request {i} ({len(ids)} prompt tokens): batch {row['tokens'][:12]}... "
                  f"alone {ref[:12]}...")
    checks.check(same == len(prompts), f"{name}: every request's tokens equal `llmc run` alone",
                 f"{same} of {len(prompts)} equal")
    return p


def model_checks(checks, title, model, vocab, work, source=None, policy_pipeline=None):
    lengths = [1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 120, 7, 40, 41, 39, 64]
    prompts = [prompt_ids(n, 1000 + i, vocab) for i, n in enumerate(lengths)]
    n = 20
    p = compare(checks, f"{title} batch 16", model, prompts, n,
                ["--max-batch", "16", "--step-tokens", "40"])
    if p is not None:
        checks.check("16 requests" in p.stderr and "mean batch" in p.stderr,
                     f"{title}: the stats line names the requests and the mean batch",
                     p.stderr.strip().splitlines()[-1])
    compare(checks, f"{title} batch 3", model, prompts, n,
            ["--max-batch", "3", "--step-tokens", "40"])
    compare(checks, f"{title} reference engine", model, prompts[:6], n,
            ["--max-batch", "6", "--step-tokens", "40", "--engine", "reference"],
            lambda i: ("--engine", "reference"))
    compare(checks, f"{title} sampling", model, prompts[:8], n,
            ["--max-batch", "8", "--step-tokens", "64", "--temp", "0.8", "--top-k", "40",
             "--seed", "7"],
            lambda i: ("--temp", "0.8", "--top-k", "40", "--seed", str(7 + i)))
    row_type_checks(checks, title, model, prompts, n, "f16")
    if title == "SmolLM2":  # head_dim 64; stories260K's 8 is refused (error_checks)
        row_type_checks(checks, title, model, prompts, n, "q8_0")
    if policy_pipeline:
        art = os.path.join(work, "policy.llmc")
        harness.compile_checked(checks, source, art, policy_pipeline, f"{title} KV policy")
        if os.path.exists(art):
            compare(checks, f"{title} snapkv 50%", art, prompts, n,
                    ["--max-batch", "16", "--step-tokens", "1024"])


def row_type_checks(checks, title, model, prompts, n, kv):
    """--kv-type f16 or q8_0 (paged rows in f16, or int8 codes with an f16
    scale per 32): a batch of 16 with chunked prompts gives each request the
    tokens it gets alone (--max-batch 1, whole prompts), as f32 rows do; how
    often they agree with f32 rows is printed."""
    path = os.path.join(os.path.dirname(model), title.replace(" ", "_") + f"_{kv}.ids")
    with open(path, "w") as f:
        f.write("\n".join(",".join(map(str, p)) for p in prompts) + "\n")
    runs = {}
    for name, extra in ((f"{kv} batch 16", ["--kv-type", kv, "--max-batch", "16",
                                             "--step-tokens", "40"]),
                        (f"{kv} alone", ["--kv-type", kv, "--max-batch", "1",
                                         "--step-tokens", "256"]),
                        ("f32 batch 16", ["--max-batch", "16", "--step-tokens", "40"])):
        p, rows = generate(model, path, ["-n", str(n), *extra])
        ok = p.returncode == 0 and len(rows) == len(prompts)
        checks.check(ok, f"{title} {name}: one JSON line per request",
                     f"exit {p.returncode}, {len(rows)} of {len(prompts)}; {p.stderr.strip()[-300:]}")
        runs[name] = [r["tokens"] for r in rows] if ok else None
    batch, alone = runs[f"{kv} batch 16"], runs[f"{kv} alone"]
    if batch is not None and alone is not None:
        same = sum(a == b for a, b in zip(batch, alone))
        checks.check(same == len(prompts),
                     f"{title} --kv-type {kv}: every request's tokens in a batch of 16 equal "
                     "its tokens alone", f"{same} of {len(prompts)} equal")
    if batch is not None and runs["f32 batch 16"] is not None:
        agree = sum(x == y for a, b in zip(batch, runs["f32 batch 16"]) for x, y in zip(a, b))
        print(f"  {title}: {kv} rows agree with f32 rows on {agree} of {len(prompts) * n} "
              "greedy tokens (position by position)")


def error_checks(checks, model, work):
    """Each bad input: exit 1, the expected words in the message, no output lines."""
    cases = (("bad.ids", "1,2,3\n4,x,5\n", ["-n", "4"], "line 2",
              "a line that is not token ids: exit 1 naming the line"),
             ("good.ids", "1,2,3\n", ["-n", "4", "--max-batch", "8", "--step-tokens", "8"],
              "step_tokens", "--step-tokens not above --max-batch: exit 1"),
             ("oov.ids", "1,2,99999999\n", ["-n", "4"], "vocabulary",
              "a token outside the vocabulary: exit 1"),
             ("good.ids", "1,2,3\n", ["-n", "4", "--contiguous-kv", "--kv-type", "f16"], "paged",
              "--kv-type f16 with --contiguous-kv: exit 1 (f16 rows live in the pool)"),
             ("good.ids", "1,2,3\n", ["-n", "4", "--kv-type", "q8_0"], "multiple of 32",
              "--kv-type q8_0 on stories260K (head_dim 8): exit 1 naming the head_dim rule"))
    for name, text, extra, words, what in cases:
        path = os.path.join(work, name)
        with open(path, "w") as f:
            f.write(text)
        p, rows = generate(model, path, extra)
        checks.check(p.returncode == 1 and words in p.stderr and not rows, what,
                     p.stderr.strip()[-200:])


def main():
    checks = harness.Checks("llmc generate: continuous batching equals one sequence at a time")
    work = harness.work_dir("batch_generate")
    if os.path.exists(STORIES):
        art = os.path.join(work, "stories.llmc")
        harness.compile_checked(checks, STORIES, art, "", "stories260K")
        if os.path.exists(art):
            model_checks(checks, "stories260K", art, 512, work)
            error_checks(checks, art, work)
    else:
        harness.skip_part(f"{STORIES} missing")
    if os.path.exists(harness.SMOLLM2_GGUF):
        art = os.path.join(work, "smollm2.llmc")
        harness.compile_checked(checks, harness.SMOLLM2_GGUF, art, "", "SmolLM2")
        if os.path.exists(art):
            model_checks(checks, "SmolLM2", art, 49152, work, harness.SMOLLM2_GGUF,
                         "llm-kv-policy{method=snapkv budget=0.5}")
    else:
        harness.skip_part(f"{harness.SMOLLM2_GGUF} missing (scripts/setup.sh fetches it)")
    checks.finish()


if __name__ == "__main__":
    main()
