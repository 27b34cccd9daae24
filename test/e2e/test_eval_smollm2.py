"""End-to-end: `llmc eval` on SmolLM2-135M-Instruct (GGUF Q4_1).

Checks that the quality harness is wired correctly on a real model:
- the model against itself (source GGUF vs its compiled .llmc artifact, i.e.
  two independent executors) gives KL divergence exactly 0, a 99th
  percentile of 0 and 100% top-1 agreement, with identical perplexities;
- its perplexity on the shipped default text (data/eval/default.txt, plain
  English prose) is finite and plausible for a 135M-parameter model
  (printed, so regressions are visible in the log);
- --json prints exactly one JSON object on stdout and nothing on stderr;
- on a short passage, eval's perplexity equals one computed here with NumPy
  from `llmc run --dump-logits` over ids tokenized independently with the
  `tokenizers` library from the GGUF's own vocabulary and merges (so the
  windowing, next-token alignment and NLL math are checked, not just run).
"""
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import harness  # noqa: E402  (first: pins BLAS threads)
import numpy as np  # noqa: E402

MAX_TOKENS = 1024
# SmolLM2-135M reaches a perplexity of roughly 10-20 on ordinary English
# prose; anything outside [3, 60] means tokenization, BOS handling, windowing
# or the executor is broken (a uniform guess over 49152 tokens gives 49152).
PPL_RANGE = (3.0, 60.0)


def eval_json(checks, name, args):
    t0 = time.time()
    p = harness.run_llmc(["eval", *args, "--json"], check=False, timeout=600)
    dt = time.time() - t0
    lines = [l for l in p.stdout.splitlines() if l.strip()]
    ok = p.returncode == 0 and len(lines) == 1 and not p.stderr.strip()
    checks.check(ok, f"{name}: exit 0, one JSON line on stdout, quiet stderr",
                 f"exit {p.returncode}, {len(lines)} stdout line(s), stderr {p.stderr.strip()[:300]!r}")
    if not ok:
        return None, dt
    return json.loads(lines[0]), dt


def gguf_byte_level_ids(model, text):
    """Token ids of text from the GGUF's byte-level BPE, via `tokenizers`."""
    import gguf
    from tokenizers import Tokenizer, models, pre_tokenizers

    r = gguf.GGUFReader(model)

    def strings(key):
        f = r.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    tokens = strings("tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in strings("tokenizer.ggml.merges")]
    tok = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    return tok.encode(text).ids


def numpy_ppl(logits, ids):
    """exp(mean NLL) of ids[1:] under rows [0, n-1) of logits, in float64."""
    x = logits[:-1].astype(np.float64)
    x -= x.max(axis=1, keepdims=True)
    logp = x - np.log(np.exp(x).sum(axis=1, keepdims=True))
    return float(np.exp(-logp[np.arange(len(ids) - 1), ids[1:]].mean()))


def main():
    model = os.path.join(harness.SOURCE_DIR, ".cache", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(model):
        harness.skip(f"{model} not found")
    work = harness.work_dir("eval_smollm2")
    checks = harness.Checks(f"llmc eval on SmolLM2-135M Q4_1 ({model})")

    art = os.path.join(work, "smollm2.llmc")
    harness.run_llmc(["compile", model, "-o", art, "-q"])

    j, dt = eval_json(checks, "self-eval", [model, "--ref", art, "--max-tokens", str(MAX_TOKENS)])
    if j is not None:
        keys = {"ppl", "kld_mean", "kld_p99", "top1", "tokens", "ref_ppl", "ctx", "windows"}
        checks.check(keys <= set(j), "JSON keys", ", ".join(sorted(j)))
        checks.check(j["tokens"] == MAX_TOKENS, "scored tokens", f"{j['tokens']} in {j['windows']} "
                     f"window(s) of ctx {j['ctx']}")
        checks.check(j["kld_mean"] == 0.0 and j["kld_p99"] == 0.0, "KL(model || itself) == 0",
                     f"mean {j['kld_mean']}, p99 {j['kld_p99']}")
        checks.check(j["top1"] == 100.0, "top-1 agreement with itself is 100%", f"{j['top1']}")
        checks.check(j["ppl"] == j["ref_ppl"], "GGUF and artifact perplexities identical",
                     f"{j['ppl']} vs {j['ref_ppl']}")
        ppl = j["ppl"]
        ok = ppl is not None and math.isfinite(ppl) and PPL_RANGE[0] <= ppl <= PPL_RANGE[1]
        checks.check(ok, "perplexity on data/eval/default.txt is plausible",
                     f"ppl {ppl:.4f} over {j['tokens']} tokens (expected {PPL_RANGE[0]}..{PPL_RANGE[1]})")
        print(f"SmolLM2-135M-Instruct Q4_1 perplexity on data/eval/default.txt "
              f"({j['tokens']} tokens, ctx {j['ctx']}): {ppl:.4f}")
        print(f"self-eval of {MAX_TOKENS} tokens took {dt:.1f} s (information only: speed "
              "is measured by benchmarks, not asserted)")

    # Perplexity alone from the artifact, with the metrics computed without a
    # reference: must equal the number above.
    solo, _ = eval_json(checks, "artifact alone", [art, "--max-tokens", str(MAX_TOKENS)])
    if solo is not None and j is not None:
        checks.check(solo["kld_mean"] is None and solo["top1"] is None and solo["ref_ppl"] is None,
                     "no --ref: KL / top-1 keys are null")
        checks.check(solo["ppl"] == j["ref_ppl"], "artifact perplexity reproducible",
                     f"{solo['ppl']} vs {j['ref_ppl']}")

    # Independent perplexity on a short passage (one window, no BOS: the
    # SmolLM2 tokenizer does not add one).
    with open(os.path.join(harness.SOURCE_DIR, "data", "eval", "default.txt"), encoding="utf-8") as f:
        passage = f.read()[:1500]
    short = os.path.join(work, "short.txt")
    with open(short, "w", encoding="utf-8") as f:
        f.write(passage)
    ids = gguf_byte_level_ids(model, passage)
    logits = harness.llmc_logits(art, ids, os.path.join(work, "short.npy"))
    want = numpy_ppl(logits, ids)
    got, _ = eval_json(checks, "short passage", [art, "--text", short])
    if got is not None:
        checks.check(got["tokens"] == len(ids) - 1, "short passage: same token count as `tokenizers`",
                     f"eval scored {got['tokens']}, tokenizers gave {len(ids)} ids")
        rel = abs(got["ppl"] - want) / want
        checks.check(rel < 1e-6, "short passage: eval ppl == NumPy ppl from dumped logits",
                     f"eval {got['ppl']:.6f}, NumPy {want:.6f} (rel diff {rel:.2g})")
    checks.finish()


if __name__ == "__main__":
    main()
