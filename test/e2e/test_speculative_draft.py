"""End-to-end: `llmc run --speculate draft --draft-model SMALL` (a draft
model with the target's vocabulary drafts, the target verifies in one pass,
the draft model's own cache follows the context) and `--speculate self`
(the target's own kernel plan without the blocks llm-spec-attach{method=self}
recorded, chosen by llm-prune-depth's angular scores in a dry run) give
exactly the tokens of plain greedy decoding.

On SmolLM2-135M-Instruct (Q4_1 as shipped, signed: generated kernels, int8
activations) with chat prompts (code, story), 96 tokens, --ignore-eos; the
draft model is the same model with 4 of its 30 blocks removed by
llm-prune-depth{method=angular} on calibration text (its own artifact; 8
removed already drop the acceptance to about 1.1 tokens per pass):
- autoregressive drafting (--draft 4 and 2) and PARD-style parallel
  drafting (--draft-mask: all drafts in one draft-model pass over the
  context and mask tokens; this draft model was not trained for it, so few
  drafts are accepted, but the output must still be exact) equal plain
  greedy decoding;
- a regression floor on the mean accepted length of autoregressive
  drafting on the code prompt: at least 2.0 tokens per drafted pass (2.91
  measured; a drafter proposing unrelated tokens gets about 1.0);
- self-speculation skipping the same 4 blocks: equal to plain greedy
  decoding (--speculate self and auto) with the same floor, and not every
  draft accepted (the drafter is not the target itself);
- a draft model in another weight format: the same model quantized lower
  (the shipped Q4_1) drafting for its Q8_0 requantization
  (llm-quantize-rtn{bits=8}) on the chat prompt: equal to plain greedy
  decoding, with a floor of 3.0 on the mean accepted length (4.8
  measured; a drafter proposing unrelated tokens gets about 1.0);
- on stories260K (f32, token-id prompt) the model drafting for itself (the
  same artifact as draft model) has every draft accepted: mean accepted
  length = 1 + the draft length (after the first pass);
- errors, exit 1 with a message and no tokens: --speculate draft without
  --draft-model, --draft-model without --speculate draft, a draft model
  whose vocabulary differs (stories260K for SmolLM2), a draft model whose
  KV policy cannot drop drafts (H2O), a mask token outside the vocabulary.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import harness  # noqa: E402

STORIES = os.path.join(harness.shared_dir(), "models", "stories260K.bin")
CHAT_PROMPTS = {k: harness.CHAT_PROMPTS[k] for k in ("code", "story")}
run = harness.run_speculative


def first_difference(a, b):
    return next((i for i, (x, y) in enumerate(zip(a or [], b or [])) if x != y), None)


def equal(checks, title, model, prompt_args, n, plain, extra):
    p, ids, st = run(model, prompt_args, n, extra)
    checks.check(ids == plain, f"{title}: equals plain greedy",
                 f"first difference at {first_difference(ids, plain)}; "
                 f"{p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ''}")
    return p, st


def fails(checks, title, model, extra, want):
    p, ids, _ = run(model, ["--prompt-tokens", "1,2,3"], 8, extra)
    checks.check(p.returncode == 1 and not p.stdout.strip() and want in p.stderr,
                 f"{title}: exit 1, no tokens, '{want}'",
                 f"exit {p.returncode}; {p.stderr.strip()[-200:]}")


def smollm2(checks, work):
    target = os.path.join(work, "smollm2.llmc")
    draft = os.path.join(work, "smollm2-drop4.llmc")
    harness.compile_checked(checks, harness.SMOLLM2_GGUF, target, "", "SmolLM2 target")
    harness.compile_checked(checks, harness.SMOLLM2_GGUF, draft,
                            "llm-prune-depth{method=angular drop=4 calib-tokens=1024}",
                            "SmolLM2 draft model: 4 of 30 blocks removed")
    for name, text in CHAT_PROMPTS.items():
        prompt = ["--chat", "-p", text]
        _, plain, _ = run(target, prompt, 96)
        checks.check(plain is not None and len(plain) == 96, f"SmolLM2 {name}: plain greedy runs",
                     f"{len(plain or [])} tokens")
        for d in ((4, 2) if name == "code" else (4,)):
            _, st = equal(checks, f"SmolLM2 {name}, draft model, --draft {d}", target, prompt, 96,
                          plain, ["--speculate", "draft", "--draft-model", draft, "--draft", str(d)])
            checks.check(st is not None and st["passes"] > 0 and st["accepted"] > 0,
                         f"SmolLM2 {name}: drafts scored and accepted (--draft {d})", str(st))
            if name == "code" and d == 4:
                checks.check(st is not None and st["mean"] >= 2.0,
                             "SmolLM2 code: mean accepted length >= 2.0 tokens per pass", str(st))
        _, st = equal(checks, f"SmolLM2 {name}, parallel (PARD-style) drafts", target, prompt, 96,
                      plain, ["--speculate", "draft", "--draft-model", draft, "--draft-mask", "0"])
        checks.check(st is not None and st["passes"] > 0,
                     f"SmolLM2 {name}: parallel drafts scored", str(st))
    self_art = os.path.join(work, "smollm2-self.llmc")
    harness.compile_checked(checks, harness.SMOLLM2_GGUF, self_art,
                            "llm-prune-depth{method=angular drop=4 calib-tokens=1024 dry-run=true},"
                            "llm-spec-attach{method=self}", "SmolLM2 with a self-speculation drafter")
    prompt = ["--chat", "-p", CHAT_PROMPTS["code"]]
    _, plain, _ = run(self_art, prompt, 96)
    for mode in ("self", "auto"):
        _, st = equal(checks, f"SmolLM2 code, --speculate {mode}", self_art, prompt, 96, plain,
                      ["--speculate", mode])
        checks.check(st is not None and st["mean"] >= 2.0 and st["accepted"] < st["drafted"],
                     f"SmolLM2 code, --speculate {mode}: mean accepted length >= 2.0, some "
                     "drafts rejected (the drafter skips blocks)", str(st))
    fails(checks, "--speculate self on an artifact without a self drafter", target,
          ["--speculate", "self"], "no self-speculation drafter")
    fails(checks, "--speculate draft without --draft-model", target, ["--speculate", "draft"],
          "needs --draft-model")
    fails(checks, "--draft-model without --speculate draft", target,
          ["--speculate", "ngram", "--draft-model", draft], "applies to --speculate draft")
    fails(checks, "--draft-mask outside the vocabulary", target,
          ["--speculate", "draft", "--draft-model", draft, "--draft-mask", "49152"],
          "outside the vocabulary")
    if os.path.exists(STORIES):
        fails(checks, "a draft model with another vocabulary", target,
              ["--speculate", "draft", "--draft-model", os.path.join(work, "stories.llmc")],
              "vocabulary has 512 tokens")
    quantized_copy_draft(checks, work, target)
    h2o = os.path.join(work, "smollm2-h2o.llmc")
    harness.compile_checked(checks, harness.SMOLLM2_GGUF, h2o,
                            "llm-prune-depth{method=magnitude drop=15},"
                            "llm-kv-policy{method=h2o budget=0.5}", "SmolLM2 draft with H2O")
    fails(checks, "a draft model whose KV policy cannot drop drafts", target,
          ["--speculate", "draft", "--draft-model", h2o], "cannot drop rejected drafts")


def quantized_copy_draft(checks, work, q4_1):
    """The shipped Q4_1 drafting for its own Q8_0 requantization: another
    weight format in the draft model."""
    q8 = os.path.join(work, "smollm2-q8_0.llmc")
    harness.compile_checked(checks, harness.SMOLLM2_GGUF, q8, "llm-quantize-rtn{bits=8}",
                            "SmolLM2 requantized to Q8_0")
    prompt = ["--chat", "-p", "What are three good reasons to learn to cook at home?"]
    _, plain, _ = run(q8, prompt, 96)
    checks.check(plain is not None and len(plain) == 96, "SmolLM2 Q8_0 chat: plain greedy runs",
                 f"{len(plain or [])} tokens")
    _, st = equal(checks, "SmolLM2 Q8_0 chat, the Q4_1 model as draft model", q8, prompt, 96,
                  plain, ["--speculate", "draft", "--draft-model", q4_1, "--draft", "4"])
    checks.check(st is not None and st["mean"] >= 3.0,
                 "SmolLM2 Q8_0 chat, Q4_1 draft model: mean accepted length >= 3.0 tokens per "
                 "pass", str(st))


def stories(checks, work):
    art = os.path.join(work, "stories.llmc")
    harness.compile_checked(checks, STORIES, art, "", "stories260K")
    prompt = ["--prompt-tokens", "1,365,155,263,431,292,27,471"]
    _, plain, _ = run(art, prompt, 120)
    checks.check(plain is not None and len(plain) == 120, "stories260K: plain greedy runs",
                 f"{len(plain or [])} tokens")
    _, st = equal(checks, "stories260K drafting for itself", art, prompt, 120, plain,
                  ["--speculate", "draft", "--draft-model", art, "--draft", "4"])
    checks.check(st is not None and st["accepted"] == st["drafted"] and st["mean"] > 4.5,
                 "stories260K drafting for itself: every draft accepted, mean accepted length "
                 "near 5", str(st))


def main():
    harness.run_model_parts("llmc run --speculate draft: equal to plain greedy decoding", "speculative_draft", stories, smollm2)


if __name__ == "__main__":
    main()
