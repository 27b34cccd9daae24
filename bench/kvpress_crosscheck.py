#!/usr/bin/env python3
"""Cross-check llmc's SnapKV / StreamingLLM against NVIDIA's kvpress (PyPI `kvpress`).

Issue 15: at a 10% KV budget llmc's SnapKV retrieves 0/10 passkeys at ~4k tokens
while the full cache gets 9/10. The model, or llmc's policy?

- Prompts: those of `llmc eval-long --task passkey --chat --context N --trials K
  --seed S`, rebuilt from tools/cli/LongContext.cpp (std::mt19937_64 keys, depths
  0.85 i/(K-1), the same filler search, SmolLM2's chat template).
- llmc: `eval-long --policies` on its own prompts, and `llmc run --prompt-tokens`
  on this script's ids (full cache, SnapKV at the first budget).
- torch (HF Llama, f32, convert_gguf() of bench/llmcompressor_crosscheck.py): ONE
  forward per prompt records each attention layer's input, RoPE and keys / values;
  each policy compresses them (kvpress: its own `press.compress`, as its forward
  hook does, checked equal to the hook on prompt 1) and decodes greedily at
  positions n, n+1, ... as kvpress's pipeline does. Policies: SnapKVPress with
  llmc's window 32 / pool 7 and with kvpress's defaults 64 / 5, StreamingLLMPress
  (4 sinks), and llmc's selection rule (runtime/src/kv) re-implemented in torch.
  "whole prompt" compresses every prompt token, as llmc does; "split" only
  kvpress pipeline's context, the question and answer prefix fed afterwards.
- Kept-set Jaccard (per layer and KV head) of kvpress vs llmc's rule; share of
  the key's digit tokens kept. llmc's C++ cannot dump its kept positions.

Needs .cache/peer/kvpress-venv (pip install kvpress gguf) and build/bin/llmc.
Usage: .cache/peer/kvpress-venv/bin/python bench/kvpress_crosscheck.py
       [--context 4096] [--trials 10] [--seed 0] [--budgets 0.1 0.25] [--force]
Writes docs/results/kvpress.md; scratch and per-step caches in .cache/peer/kvpress/.
"""

import argparse
import contextlib
import datetime
import importlib.metadata
import json
import math
import os
import re
import shlex
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
import bench_common  # noqa: E402
from bench_common import cpu_model, git_commit  # noqa: E402
import llmcompressor_crosscheck as lcc  # noqa: E402  (convert_gguf)

GGUF = os.path.join(REPO, ".cache", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
WORK = os.path.join(REPO, ".cache", "peer", "kvpress")
HF_DIR = os.path.join(WORK, "smollm2-hf-f32")
LLMC = os.path.join(REPO, "build", "bin", "llmc")
OUT_MD = os.path.join(REPO, "docs", "results", "kvpress.md")
WINDOW, POOL, SINKS, MAX_NEW = 32, 7, 4, 8


def log(msg):
    print(f"[kvpress] {msg}", file=sys.stderr, flush=True)



def mt19937_64(seed):
    """std::mt19937_64's outputs (the C++ standard fixes the sequence), as a generator."""
    M, mt = (1 << 64) - 1, [seed & ((1 << 64) - 1)]
    for i in range(1, 312):
        mt.append((6364136223846793005 * (mt[-1] ^ (mt[-1] >> 62)) + i) & M)
    while True:
        for k in range(312):
            x = (mt[k] & 0xFFFFFFFF80000000) | (mt[(k + 1) % 312] & 0x7FFFFFFF)
            mt[k] = mt[(k + 156) % 312] ^ (x >> 1) ^ (0xB5026F5AA96619E9 if x & 1 else 0)
        for y in mt:
            y ^= (y >> 29) & 0x5555555555555555
            y ^= (y << 17) & 0x71D67FFFEDA60000
            y ^= (y << 37) & 0xFFF7EEE000000000
            yield (y ^ (y >> 43)) & M


FILLER = ["The grass is green.", "The sky is blue.", "The sun is yellow.", "Here we go.",
          "There and back again."]
INTRO = ("There is an important piece of information hidden inside a lot of irrelevant text. "
         "Find it and memorize it. I will quiz you about the important information there.")
QUESTION, ANSWER_PREFIX = "What is the pass key?", "The pass key is"


def passkey_trials(k, seed):
    rng, out = mt19937_64(seed), []
    for i in range(k):
        key = str(10000 + next(rng) % 90000)
        depth = 0.85 * (0.5 if k <= 1 else i / (k - 1))
        out.append({"key": key, "depth": depth,
                    "needle": f"The pass key is {key}. Remember it. {key} is the pass key."})
    return out


def user_body(trial, n):
    """intro + "\\n" + filler body with the needle line (promptText without the question)."""
    body, line_start, placed = "", True, False
    at = math.floor(min(max(trial["depth"], 0.0), 1.0) * n + 0.5)  # llround, x >= 0
    for i in range(n + 1):
        if not placed and at <= i:
            body += ("" if line_start else "\n") + trial["needle"] + "\n"
            line_start, placed = True, True
        if i < n:
            body += ("" if line_start else " ") + FILLER[i % len(FILLER)]
            line_start = False
    if not line_start:
        body += "\n"
    return INTRO + "\n" + body


def chat(tok, user):
    return tok.apply_chat_template([{"role": "user", "content": user}], tokenize=False,
                                   add_generation_prompt=True)


def build_prompt(tok, trial, target, slack=16):
    """buildPrompt(): the filler count whose prompt has target - 16 .. target tokens."""
    def encode(n):
        text = chat(tok, user_body(trial, n) + QUESTION) + ANSWER_PREFIX
        return tok.encode(text, add_special_tokens=False)
    best, nbest = encode(0), 0
    base = len(best)
    if base > target:
        raise SystemExit(f"--context {target} is too short ({base} tokens without filler)")
    if base >= target - slack:
        return best, 0
    per = max(1.0, (len(encode(40)) - base) / 40)
    lo, hi, n = 0, -1, max(1, int((target - base) / per))
    for _ in range(64):
        ids = encode(n)
        c = len(ids)
        if c <= target:
            lo, best, nbest = n, ids, n
            if c >= target - slack:
                return best, nbest
            n += max(1, int((target - c) / per))
        else:
            hi = n
            n -= max(1, math.ceil((c - target) / per))
        if hi >= 0:
            if hi - lo <= 1:
                break
            n = min(max(n, lo + 1), hi - 1)
        n = max(n, lo + 1)
    return best, nbest


def first_digits(text):
    return (re.findall(r"[0-9]+", text) or [""])[0]


def key_positions(ids, tok, key):
    """Positions of the key's digit tokens (SmolLM2 splits digits one per token)."""
    digs = [tok.convert_tokens_to_ids(d) for d in key]
    return [p + j for p in range(len(ids) - len(digs) + 1)
            if ids[p:p + len(digs)] == digs for j in range(len(digs))]


def wilson(k, n, z=1.959963984540054):
    if n == 0:
        return 0.0, 1.0
    p = k / n
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, c - h), min(1.0, c + h)



def run(cmd, quiet=False):
    t = time.time()
    p = subprocess.run(["nice", "-n", "19", *cmd], capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"{shlex.join(cmd)[:300]} failed ({p.returncode}): {p.stderr[-2000:]}")
    log(f"{' '.join(cmd[:2])} ... {p.stdout.strip()[:80] if quiet else ''} "
        f"({time.time() - t:.0f} s)")
    return p


def llmc_policy_line(method, b):
    return "method=full" if method == "full" else f"method={method} budget={b}"


def llmc_sweep(args, policies, extra=()):
    pfile = os.path.join(WORK, "policies.txt")
    with open(pfile, "w") as f:
        f.write("\n".join(policies) + "\n")
    cmd = [LLMC, "eval-long", GGUF, "--task", "passkey", "--chat", "--context", str(args.context),
           "--trials", str(args.trials), "--seed", str(args.seed), "--policies", pfile,
           "--json", "-t", "1", *extra]
    p = run(cmd)
    rows = {j["policy"]: j for j in map(json.loads, re.findall(r"^\{.*\}$", p.stdout, re.M))}
    marks = [m.group(1) for m in re.finditer(r"trial \d+/\d+ depth [0-9.]+: ([+-]+) ", p.stderr)]
    per_trial = {pol: [m[i] == "+" for m in marks] for i, pol in enumerate(policies)}
    shown = ["llmc" if c == LLMC else "POLICIES" if c == pfile else os.path.relpath(c, REPO)
             if c == GGUF else c for c in cmd]
    return {"rows": rows, "per_trial": per_trial, "cmd": " ".join(shown)}


def llmc_run_ids(ids, pipeline=None):
    cmd = [LLMC, "run", GGUF, "--prompt-tokens", ",".join(map(str, ids)), "-n", str(MAX_NEW),
           "-c", str(len(ids) + MAX_NEW + 16), "-t", "1", "--print-ids", "-q"]
    if pipeline:
        cmd += ["--pipeline", pipeline]
    return [int(x) for x in run(cmd, quiet=True).stdout.split()]



def llmc_budget(b, n):
    """headBudget(): window + (ceil(b n) - window), at least window + 1, at most n."""
    c = math.ceil(b * n)
    return min(n, max(int(math.floor(WINDOW + max(0.0, c - WINDOW) + 0.5)), WINDOW + 1))


def llmc_rule_keep(torch, module, h, keys, pe, method, b):
    """llmc's kept positions per KV head ([KV, C] ascending), from runtime/src/kv."""
    from transformers.models.llama.modeling_llama import repeat_kv, rotate_half
    n, KV = keys.shape[2], keys.shape[1]
    C = llmc_budget(b, n)
    if method == "streaming":
        idx = list(range(SINKS)) + list(range(n - (C - SINKS), n))
        return torch.tensor([sorted(set(idx))] * KV)
    H, d = module.config.num_attention_heads, module.head_dim
    q = module.q_proj(h[:, -WINDOW:]).view(1, WINDOW, H, d).transpose(1, 2)
    cos, sin = pe[0][:, -WINDOW:].unsqueeze(1), pe[1][:, -WINDOW:].unsqueeze(1)
    q = q * cos + rotate_half(q) * sin
    s = q @ repeat_kv(keys, H // KV).transpose(2, 3) / math.sqrt(d)  # [1, H, W, n]
    qpos = torch.arange(n - WINDOW, n).view(WINDOW, 1)
    s = s.masked_fill(torch.arange(n).view(1, n) > qpos, float("-inf"))
    score = torch.softmax(s.float(), dim=-1).sum(2).view(1, KV, H // KV, n).mean(2)
    score = torch.nn.functional.avg_pool1d(score, POOL, stride=1, padding=POOL // 2,
                                           count_include_pad=False)[0]
    out = []
    for g in range(KV):
        rest = score[g, :n - WINDOW]
        order = torch.sort(-rest, stable=True).indices[:C - WINDOW]  # ties: the older entry
        out.append(torch.sort(torch.cat([order, torch.arange(n - WINDOW, n)])).values)
    return torch.stack(out)


def kvpress_keep(torch, press, module, h, keys, values, pe):
    """press.compress() (kvpress's code), with the kept indices read from its scores."""
    from kvpress.utils import compute_n_kept
    seen, orig = {}, press.score
    press.score = lambda *a, **kw: seen.setdefault("s", orig(*a, **kw))
    try:
        k2, v2 = press.compress(module, h, keys, values, None, {"position_embeddings": pe})
    finally:
        del press.score
    idx = seen["s"].topk(compute_n_kept(keys.shape[2], press.compression_ratio), dim=-1).indices[0]
    g = idx.unsqueeze(-1).expand(-1, -1, keys.shape[3])
    assert torch.equal(keys[0].gather(1, g), k2[0]), "kept indices do not reproduce kvpress's keys"
    return torch.sort(idx, dim=-1).values, k2, v2


def greedy(torch, model, kv, first_logits, pos0, stops, feed=None):
    """Greedy decode from a cache [(k, v)] per layer; `feed` ids (uncompressed) go first."""
    from transformers import DynamicCache
    cache = DynamicCache()
    for layer, (k, v) in enumerate(kv):
        cache.update(k, v, layer)
    pos, logits = pos0, first_logits
    if feed:
        out = model(input_ids=torch.tensor([feed]), past_key_values=cache,
                    position_ids=torch.arange(pos, pos + len(feed)).unsqueeze(0), logits_to_keep=1)
        pos, logits = pos + len(feed), out.logits[0, -1]
    gen = []
    while len(gen) < MAX_NEW:
        nxt = int(logits.argmax())
        if nxt in stops:
            break
        gen.append(nxt)
        if len(gen) == MAX_NEW:
            break
        out = model(input_ids=torch.tensor([[nxt]]), past_key_values=cache,
                    position_ids=torch.tensor([[pos]]))
        pos, logits = pos + 1, out.logits[0, -1]
    return gen


def torch_trial(torch, model, ids, n_ctx, q_ids, budgets, key_pos, stops, check):
    """One recorded forward of `ids`, then every policy's kept set and greedy answer."""
    from kvpress import SnapKVPress, StreamingLLMPress
    from transformers import DynamicCache
    rec, layers = {}, model.model.layers

    def hook(module, a, kw, out):
        layer = kw["past_key_values"].layers[module.layer_idx]
        rec[module.layer_idx] = (kw["hidden_states"], kw["position_embeddings"], layer.keys,
                                 layer.values)
    hooks = [l.self_attn.register_forward_hook(hook, with_kwargs=True) for l in layers]
    cache, chk, t = DynamicCache(), SnapKVPress(1 - budgets[0], WINDOW, POOL), time.time()
    try:  # kvpress's own hook runs after ours (prompt 1), so `rec` holds the full cache
        with torch.no_grad(), (chk(model) if check else contextlib.nullcontext()):
            logits = model(input_ids=torch.tensor([ids]), past_key_values=cache,
                           logits_to_keep=1).logits[0, -1]
    finally:
        for hk in hooks:
            hk.remove()
    res = {"prefill_s": time.time() - t, "gen": {}, "jac": {}, "needle": {}, "kept": {}}
    n, kept_sets = len(ids), {}
    with torch.no_grad():
        res["gen"]["full"] = greedy(torch, model, [r[2:] for _, r in sorted(rec.items())],
                                    logits, n, stops)
        for b in budgets:
            pols = [(f"kvpress snapkv w32 p7 {b}", SnapKVPress(1 - b, WINDOW, POOL), "all"),
                    (f"kvpress snapkv w32 p7 {b} split", SnapKVPress(1 - b, WINDOW, POOL), "split"),
                    (f"kvpress snapkv w64 p5 {b}", SnapKVPress(1 - b), "all"),
                    (f"kvpress streaming {b}", StreamingLLMPress(1 - b, SINKS), "all"),
                    (f"kvpress streaming {b} split", StreamingLLMPress(1 - b, SINKS), "split"),
                    (f"llmc-rule snapkv {b}", "snapkv", "all"),
                    (f"llmc-rule streaming {b}", "streaming", "all")]
            for key, press, span in pols:
                m, kv, kept = n if span == "all" else n_ctx, [], []
                for L, layer in enumerate(layers):
                    h, pe, k, v = rec[L]
                    if isinstance(press, str):
                        idx = llmc_rule_keep(torch, layer.self_attn, h, k, pe, press, b)
                        g = idx.unsqueeze(-1).expand(-1, -1, k.shape[3]).unsqueeze(0)
                        k2, v2 = k.gather(2, g), v.gather(2, g)
                    else:
                        idx, k2, v2 = kvpress_keep(torch, press, layer.self_attn, h[:, :m],
                                                   k[:, :, :m], v[:, :, :m],
                                                   (pe[0][:, :m], pe[1][:, :m]))
                        if check and key == pols[0][0] and b == budgets[0]:
                            assert torch.equal(cache.layers[L].keys, k2), \
                                f"layer {L}: kvpress's hook kept other keys than press.compress"
                    kv.append((k2, v2))
                    kept.append(idx)
                res["gen"][key] = greedy(torch, model, kv, logits, m, stops,
                                         None if span == "all" else q_ids)
                kept_sets[key] = kept
    kp = set(key_pos)
    for key, kept in kept_sets.items():
        res["needle"][key] = sum(len(kp & set(r.tolist())) for K in kept for r in K) / \
            max(1, len(kp) * sum(len(K) for K in kept))
        res["kept"][key] = int(kept[0].shape[1])
        if key.startswith("kvpress") and not key.endswith("split"):
            ref = "llmc-rule " + ("streaming" if "streaming" in key else "snapkv") + \
                " " + key.split()[-1]
            js = [len(set(a.tolist()) & set(r.tolist())) / len(set(a.tolist()) | set(r.tolist()))
                  for K, R in zip(kept, kept_sets[ref]) for a, r in zip(K, R)]
            res["jac"][key] = (sum(js) / len(js), min(js))
    return res


def cell(answers, keys):
    """correct/asked [Wilson 95%]; "+p": wrong answers that start with the key's 2 first digits."""
    ok = [a == k for a, k in zip(answers, keys)]
    part = sum(a != k and len(a) >= 2 and a[:2] == k[:2] for a, k in zip(answers, keys))
    lo, hi = wilson(sum(ok), len(ok))
    return f"{sum(ok)}/{len(ok)} [{lo:.2f}, {hi:.2f}]" + (f" +{part}p" if part else "")


def report(args, meta, trials, llmc, tres, started, hits):
    B, keys, tx = args.budgets, [t["key"] for t in trials], meta["tok"].decode
    ans_t = lambda k: [first_digits(tx(r["gen"][k])) for r in tres]  # noqa: E731
    ans_r = lambda pol: [first_digits(tx(g)) for g in llmc["run_gen"][pol]]  # noqa: E731
    sw, n1 = llmc["sweep"]["per_trial"], len(meta["prompts"][0]["ids"])
    sw_cell = lambda pol, sw=sw: cell([k if ok else "" for ok, k in zip(sw[pol], keys)], keys)  # noqa
    ex_cell = lambda pol: sw_cell(pol, llmc["exact"]["per_trial"])  # noqa: E731
    v = meta["v"]
    L = ["# kvpress cross-check: SnapKV and StreamingLLM, llmc vs NVIDIA kvpress", "",
         "Generated by `bench/kvpress_crosscheck.py`; do not edit by hand, rerun it.", "",
         "- Command: `" + " ".join([".cache/peer/kvpress-venv/bin/python",
                                    "bench/kvpress_crosscheck.py", *sys.argv[1:]]) + "`",
         f"- CPU: {cpu_model()}; 2 cores shared with a build, everything at nice 19 on 1 thread",
         f"- Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; this run "
         f"took {(time.time() - started) / 60:.1f} min ({hits} of {3 + len(tres)} steps read from "
         f"the caches in .cache/peer/kvpress/); torch prefill "
         f"{sum(r['prefill_s'] for r in tres) / len(tres):.0f} s per prompt",
         f"- Git commit: {git_commit(REPO)}; build/bin/llmc built "
         f"{datetime.datetime.fromtimestamp(os.path.getmtime(LLMC), datetime.timezone.utc):%H:%M} UTC",
         f"- Versions: kvpress {v['kvpress']}, transformers {v['transformers']}, torch {v['torch']}",
         f"- Model: SmolLM2-135M-Instruct `{os.path.relpath(GGUF, REPO)}`; llmc runs the GGUF "
         "(default engine, int8 activation dots); torch runs it dequantized to f32",
         f"- Task: passkey, chat template, context {args.context}, {args.trials} prompts, seed "
         f"{args.seed}, needle depths 0..0.85, prompts {meta['lens'][0]}-{meta['lens'][1]} tokens; "
         f"greedy, at most {MAX_NEW} new tokens; correct = the answer's first digit run is the key",
         f"- llmc on its own prompts: `{llmc['sweep']['cmd']}`, POLICIES = one line per llmc row; "
         "again with `--exact-activations` (f32 activations everywhere, as torch)",
         f"- Same ids on both sides: `llmc run --prompt-tokens` (full cache) on this script's ids "
         f"gives torch's greedy tokens on {meta['same_full']}/{args.trials} prompts and llmc "
         f"eval-long's full-cache verdict on {meta['same_verdict']}/{args.trials}; kvpress "
         f"pipeline's own tokenization of context + question is these ids on "
         f"{meta['split_same']}/{args.trials}",
         "- kvpress check: on prompt 1 the cache that `with SnapKVPress(...)(model)` leaves is "
         "equal, layer by layer, to `press.compress` on the recorded layer inputs", "",
         "*whole prompt*: every prompt token is compressed (system, user turn with the question, "
         "chat suffix, answer prefix), as llmc does. *split*: kvpress pipeline's default, only "
         "its context (system + user turn up to the filler's end) is compressed; the question, "
         "chat suffix and answer prefix are fed afterwards, uncompressed. Budgets: llmc keeps "
         "ceil(b n) entries per (layer, KV head), its 32-query window included; kvpress keeps "
         "int(n (1 - ratio)), its window included. `+Np`: N more answers began with the key's "
         "first two digits (e.g. 156 for 15694).", "",
         "## Retrieval: correct/asked [95% Wilson interval]", ""]
    hdr = ["Policy", "llmc eval-long (own prompts)", "same, --exact-activations",
           "llmc run (these ids)", "torch, llmc's rule",
           "kvpress, whole prompt", "kvpress, split", f"kept per head, prompt 1 (llmc, kvpress)"]
    L += ["| " + " | ".join(hdr) + " |", "|---" * len(hdr) + "|",
          f"| full | {sw_cell('method=full')} | {ex_cell('method=full')} | "
          f"{cell(ans_r('method=full'), keys)} | "
          f"{cell(ans_t('full'), keys)} | {cell(ans_t('full'), keys)} | — | {n1}, {n1} |"]
    for b in B:
        for m, kv, label in (("snapkv", f"kvpress snapkv w32 p7 {b}", "window 32, pool 7"),
                             ("streaming", f"kvpress streaming {b}", "4 sinks"),
                             ("snapkv", f"kvpress snapkv w64 p5 {b}", "kvpress defaults: "
                              "window 64, pool 5")):
            pol, w64 = llmc_policy_line(m, b), "w64" in kv
            cells = ["—"] * 4 if w64 else [
                sw_cell(pol), ex_cell(pol), cell(ans_r(pol), keys) if pol in llmc["run_gen"] else "—",
                cell(ans_t(f"llmc-rule {m} {b}"), keys)]
            cells += [cell(ans_t(kv), keys), "—" if w64 else cell(ans_t(kv + " split"), keys),
                      f"{'—' if w64 else llmc_budget(b, n1)}, {tres[0]['kept'][kv]}"]
            L.append(f"| {m} {b:.0%} ({label}) | " + " | ".join(cells) + " |")
    L += ["", "## Kept positions: kvpress vs llmc's rule in torch (whole prompt)", "",
          "Jaccard of the kept sets per (layer, KV head), mean and min over 30 layers x 3 KV "
          "heads x prompts. *key kept*: share of the key's 10 digit tokens (it occurs twice in "
          "the needle) kept, over layers, heads and prompts. llmc's C++ has no way to dump its "
          "kept positions; its rule is re-implemented in torch instead.", "",
          "| kvpress policy | Jaccard mean | Jaccard min | key kept: llmc rule | key kept: kvpress |",
          "|---|---:|---:|---:|---:|"]
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    for b in B:
        for kv in (f"kvpress snapkv w32 p7 {b}", f"kvpress snapkv w64 p5 {b}",
                   f"kvpress streaming {b}"):
            rule = f"llmc-rule {'streaming' if 'streaming' in kv else 'snapkv'} {b}"
            L.append(f"| {kv[8:]} | {mean([r['jac'][kv][0] for r in tres]):.3f} | "
                     f"{min(r['jac'][kv][1] for r in tres):.3f} | "
                     f"{mean([r['needle'][rule] for r in tres]):.1%} | "
                     f"{mean([r['needle'][kv] for r in tres]):.1%} |")
    b0 = B[0]
    cols = [("llmc full", ans_r("method=full")), ("torch full", ans_t("full")),
            (f"llmc snapkv {b0:.0%}", ans_r(llmc_policy_line("snapkv", b0))),
            (f"torch, llmc's rule, snapkv {b0:.0%}", ans_t(f"llmc-rule snapkv {b0}")),
            (f"kvpress snapkv {b0:.0%}", ans_t(f"kvpress snapkv w32 p7 {b0}")),
            (f"kvpress snapkv {b0:.0%} split", ans_t(f"kvpress snapkv w32 p7 {b0} split"))]
    L += ["", "## Per prompt: the answer's first digit run (✓ = the key)", "",
          "| # | depth | key | tokens | " + " | ".join(c for c, _ in cols) + " |",
          "|---:|---:|---|---:|" + "---|" * len(cols)]
    for i, t in enumerate(trials):
        L.append(f"| {i + 1} | {t['depth']:.2f} | {t['key']} | {len(meta['prompts'][i]['ids'])} | "
                 + " | ".join((a[i] or "-") + (" ✓" if a[i] == t["key"] else "") for _, a in cols)
                 + " |")
    with open(OUT_MD, "w") as f:
        f.write("\n".join(L) + "\n")
    log(f"wrote {os.path.relpath(OUT_MD, REPO)}")


HITS = []


def cached(name, force, make):
    path = os.path.join(WORK, name)
    if os.path.exists(path) and not force:
        HITS.append(name)
        with open(path) as f:
            return json.load(f)
    val = make()
    with open(path + ".tmp", "w") as f:
        json.dump(val, f)
    os.replace(path + ".tmp", path)
    return val


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budgets", type=float, nargs="+", default=[0.1, 0.25])
    ap.add_argument("--force", action="store_true", help="ignore cached results")
    args = ap.parse_args()
    started = time.time()
    os.makedirs(WORK, exist_ok=True)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import torch
    import transformers
    import kvpress
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    transformers.utils.logging.disable_progress_bar()
    from transformers import AutoModelForCausalLM, AutoTokenizer
    if not os.path.exists(os.path.join(HF_DIR, "model.safetensors")):
        log("converting the GGUF to an HF folder")
        lcc.convert_gguf(GGUF, HF_DIR)
    tok = AutoTokenizer.from_pretrained(HF_DIR)
    model = AutoModelForCausalLM.from_pretrained(HF_DIR, dtype=torch.float32).eval()
    eos = model.generation_config.eos_token_id
    stops = {*([eos] if isinstance(eos, int) else eos), tok.convert_tokens_to_ids("<|im_end|>")}
    tag = f"c{args.context}-k{args.trials}-s{args.seed}-b{'_'.join(map(str, args.budgets))}"

    trials = passkey_trials(args.trials, args.seed)
    pipe = kvpress.KVPressTextGenerationPipeline(model=model, tokenizer=tok, device="cpu")
    prompts = []
    for t in trials:
        ids, nfill = build_prompt(tok, t, args.context)
        pre = pipe.preprocess(user_body(t, nfill), [QUESTION], ANSWER_PREFIX, 10 ** 9)
        ctx, q = pre["context_ids"][0].tolist(), pre["questions_ids"][0][0].tolist()
        prompts.append({"ids": ids, "n_ctx": len(ctx), "q": q, "split_same": ctx + q == ids,
                        "key_pos": key_positions(ids, tok, t["key"])})
    lens = (min(ls := [len(p["ids"]) for p in prompts]), max(ls))
    log(f"{len(prompts)} prompts, {lens[0]}-{lens[1]} tokens; needle key tokens found: "
        f"{[len(p['key_pos']) for p in prompts]}")

    tres = []  # torch / kvpress
    for i, p in enumerate(prompts):
        r = cached(f"torch-{tag}-{i}.json", args.force, lambda: torch_trial(
            torch, model, p["ids"], p["n_ctx"], p["q"], args.budgets, p["key_pos"], stops, i == 0))
        log(f"torch prompt {i + 1}/{len(prompts)} (prefill {r['prefill_s']:.0f} s): " +
            ", ".join(f"{k}={first_digits(tok.decode(g)) or '-'}" for k, g in r["gen"].items()))
        tres.append(r)

    while not os.path.exists(LLMC):
        log(f"waiting for {os.path.relpath(LLMC, REPO)} (the lead's build)")
        time.sleep(120)
    policies = ["method=full"] + [llmc_policy_line(m, b) for b in args.budgets
                                  for m in ("snapkv", "streaming")]
    # llmc's rows are reused only while the sources they depend on are unchanged.
    ltag = tag + "-" + bench_common.source_digest(
        REPO, ("runtime", "compiler", "passes", "dialects", "tools", "data/long"))
    sweep = cached(f"llmc-sweep-{ltag}.json", args.force, lambda: llmc_sweep(args, policies))
    exact = cached(f"llmc-sweep-exact-{ltag}.json", args.force,
                   lambda: llmc_sweep(args, policies, ["--exact-activations"]))
    snap = llmc_policy_line("snapkv", args.budgets[0])
    run_pols = {"method=full": None, snap: "llm-kv-policy{" + snap + "}"}
    run_gen = cached(f"llmc-run-{ltag}.json", args.force, lambda: {
        pol: [llmc_run_ids(p["ids"], pipe_) for p in prompts] for pol, pipe_ in run_pols.items()})
    llmc = {"sweep": sweep, "exact": exact, "run_gen": run_gen}
    full_r = run_gen["method=full"]
    same_full = sum(full_r[i] == tres[i]["gen"]["full"] for i in range(len(prompts)))
    same_verdict = sum((first_digits(tok.decode(g)) == t["key"]) == ok for g, t, ok in
                       zip(full_r, trials, sweep["per_trial"]["method=full"]))
    meta = {"tok": tok, "prompts": prompts, "lens": lens, "same_full": same_full,
            "same_verdict": same_verdict, "split_same": sum(p["split_same"] for p in prompts),
            "v": {"kvpress": importlib.metadata.version("kvpress"),
                  "transformers": transformers.__version__, "torch": torch.__version__}}
    report(args, meta, trials, llmc, tres, started, len(HITS))


if __name__ == "__main__":
    main()
