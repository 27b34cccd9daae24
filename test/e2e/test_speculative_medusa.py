"""End-to-end: Medusa heads attached at compile time
(`llm-spec-attach{method=medusa}`: ridge-fitted maps of the final hidden
state and the fed token's embedding, drafted through the model's own LM
head rows of a draft vocabulary) and verified by the target
(`llmc run --speculate medusa|auto`) give exactly the tokens of plain
greedy decoding.

On SmolLM2-135M-Instruct (Q4_1 as shipped, heads fitted on 8192 tokens of
the default calibration text; signed: generated kernels, int8 activations)
with chat, code and story prompts in the chat template, 96 tokens,
--ignore-eos, and on stories260K (f32, heads fitted on
data/calib/stories260k.ids) with a token-id prompt:
- the token ids equal plain greedy decoding with up to 4 drafts per pass,
  1, prompt lookup with the heads as fallback (--speculate hybrid), and the
  artifact's own drafter (--speculate auto), on the kernel engine and (chat
  prompt and stories260K) the reference engine (each against its own plain
  run: the kernel engine quantizes activations to int8); and with draft
  trees of up to 8 tokens (--tree 8: the heads' likeliest continuations,
  verified with tree attention in one pass), Medusa alone and hybrid, on
  the kernel engine, whose passes must then verify branching trees;
- `llmc inspect` shows the drafter and its fit;
- a regression floor on the mean accepted length over the SmolLM2 prompts:
  at least 1.08 tokens per drafted pass (1.14 measured), and on stories260K
  at least 1.3 (1.42 measured); heads fed the wrong hidden row or token
  fall below both (checked by mutation, see the issue-18 note); with trees
  of 8, at least 1.22 on SmolLM2 (1.32 measured) and 1.55 on stories260K
  (1.69 measured);
- --speculate medusa on an artifact without heads: exit 1, a message.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import harness  # noqa: E402

STORIES = os.path.join(harness.shared_dir(), "models", "stories260K.bin")
STORIES_IDS = os.path.join(harness.SOURCE_DIR, "data", "calib", "stories260k.ids")
CHAT_PROMPTS = {
    "chat": "What are three good reasons to learn to cook at home?",
    "code": "Write a Python function that returns the n-th triangular number, with a docstring.",
    "story": "Write a short story about a fox who opens a bakery.",
}
run = harness.run_speculative
# Floors of the mean accepted length with --tree 8: measured 1.32 on the
# three SmolLM2 prompts (chains: 1.14) and 1.69 on stories260K (chains:
# 1.41); trees that degenerate to chains (one candidate per node) give
# 1.14 and 1.51 and fail both (checked by mutation).
TREE_FLOOR_SMOLLM2 = 1.22
TREE_FLOOR_STORIES = 1.55


def first_difference(a, b):
    return next((i for i, (x, y) in enumerate(zip(a or [], b or [])) if x != y), None)


def equal_checks(checks, title, model, prompt_args, n, reference=True):
    """Plain greedy against each speculative mode; the stats of --draft 4.
    reference: also the reference engine (f32 activations, against its own
    plain run; about 12 tokens/s on SmolLM2 here, so one prompt does it)."""
    _, plain, _ = run(model, prompt_args, n)
    checks.check(plain is not None and len(plain) == n, f"{title}: plain greedy runs",
                 f"{len(plain or [])} tokens")
    plain_ref = run(model, prompt_args, n, ["--engine", "reference"])[1] if reference else None
    stats = tree = None
    modes = [["--speculate", "medusa", "--draft", "4"], ["--speculate", "medusa", "--draft", "1"],
             ["--speculate", "hybrid"], ["--speculate", "auto"],
             ["--speculate", "auto", "--engine", "reference"],
             ["--speculate", "medusa", "--tree", "8"], ["--speculate", "hybrid", "--tree", "8"]]
    for extra in (m for m in modes if reference or "reference" not in m):
        p, ids, st = run(model, prompt_args, n, extra)
        want = plain_ref if "reference" in extra else plain
        checks.check(ids == want, f"{title}: {' '.join(extra)} equals plain greedy",
                     f"first difference at {first_difference(ids, want)}; "
                     f"{p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ''}")
        checks.check(st is not None and st["passes"] > 0, f"{title}: drafts scored ({' '.join(extra)})",
                     str(st))
        if "--tree" in extra:
            checks.check(st is not None and st["tree_passes"] > 0,
                         f"{title}: {' '.join(extra)} verifies branching trees", str(st))
            if extra[1] == "medusa":
                tree = st
        if extra[-1] == "4":
            stats = st
    return stats, tree


def smollm2(checks, work):
    art = os.path.join(work, "smollm2-medusa.llmc")
    harness.compile_checked(checks, harness.SMOLLM2_GGUF, art,
                            "llm-spec-attach{method=medusa heads=4 calib-tokens=8192}",
                            "SmolLM2 + Medusa heads")
    p = harness.run_llmc(["inspect", art], check=False)
    checks.check("speculation:   medusa, drafts of up to 4 tokens, 4 heads" in p.stdout
                 and "held-out top-1 per head" in p.stdout, "inspect shows the heads and their fit",
                 "\n".join(l for l in p.stdout.splitlines() if "specul" in l or "fit:" in l))
    totals = {"chain": [0, 0], "tree": [0, 0]}  # passes, accepted
    for name, text in CHAT_PROMPTS.items():
        for kind, st in zip(("chain", "tree"),
                            equal_checks(checks, f"SmolLM2 {name}", art, ["--chat", "-p", text], 96,
                                         reference=name == "chat")):
            if st:
                totals[kind][0] += st["passes"]
                totals[kind][1] += st["accepted"]
    for kind, floor in (("chain", 1.08), ("tree", TREE_FLOOR_SMOLLM2)):
        passes, accepted = totals[kind]
        mean = (accepted + passes) / passes if passes else 0.0
        checks.check(mean >= floor, f"SmolLM2 ({kind}): mean accepted length >= {floor} tokens per "
                     "pass over the three prompts",
                     f"{mean:.3f} ({accepted} drafts accepted in {passes} passes)")
    plain = os.path.join(work, "smollm2.llmc")
    harness.compile_checked(checks, harness.SMOLLM2_GGUF, plain, "", "SmolLM2 without heads")
    p, ids, _ = run(plain, ["--chat", "-p", CHAT_PROMPTS["chat"]], 8, ["--speculate", "medusa"])
    checks.check(p.returncode == 1 and ids is None and "has no Medusa heads" in p.stderr,
                 "--speculate medusa without heads: exit 1 and a message", p.stderr.strip()[-200:])


def stories(checks, work):
    art = os.path.join(work, "stories-medusa.llmc")
    harness.compile_checked(checks, STORIES, art,
                            f"llm-spec-attach{{method=medusa heads=4 calib={STORIES_IDS} "
                            "calib-tokens=2048 calib-seq=512 holdout=0.25}",
                            "stories260K + Medusa heads")
    prompt = [1, 365, 155, 263, 431, 292, 27, 471]
    st, tree = equal_checks(checks, "stories260K", art,
                            ["--prompt-tokens", ",".join(map(str, prompt))], 200)
    checks.check(st is not None and st["mean"] >= 1.3,
                 "stories260K: mean accepted length >= 1.3 tokens per pass", str(st))
    checks.check(tree is not None and tree["mean"] >= TREE_FLOOR_STORIES,
                 f"stories260K (tree): mean accepted length >= {TREE_FLOOR_STORIES} tokens per pass",
                 str(tree))


def main():
    harness.run_model_parts("llmc run --speculate medusa: equal to plain greedy decoding", "speculative_medusa", stories, smollm2)


if __name__ == "__main__":
    main()
