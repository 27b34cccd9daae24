"""Shared helpers for the end-to-end tests: locate llmc and the models, run
llmc, compare its logits and greedy tokens with a reference, and keep a
pass/fail tally so each test script prints what it compared and exits
non-zero on any failure.

Import this module before numpy in a test: it pins OpenBLAS to one thread
(faster for the reference's small matrix-vector products on a shared
machine, and keeps the reference deterministic).

LLMC_E2E_TIMING=1 prints each llmc call's seconds and arguments on stderr
(where a test's time goes, e.g. `LLMC_E2E_TIMING=1 .venv/bin/python
test/e2e/test_x.py`). LLMC_E2E_TIMING_LOG=FILE appends one JSON line per
llmc call (test script, seconds, arguments) to FILE, for a whole suite run.
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
E2E_DIR = os.path.dirname(HERE)
SOURCE_DIR = os.environ.get("LLMC_SOURCE_DIR") or os.path.dirname(os.path.dirname(E2E_DIR))


def llmc_bin() -> str:
    b = os.environ.get("LLMC_BIN") or os.path.join(SOURCE_DIR, "build", "bin", "llmc")
    if not (os.path.isfile(b) and os.access(b, os.X_OK)):
        print(f"FAIL: llmc binary not found at {b} (set LLMC_BIN)")
        sys.exit(1)
    _ensure_signing_key(b)
    return b


def llmc_rt_bin() -> str:
    """The runtime-only binary (no MLIR linked) beside llmc."""
    b = os.environ.get("LLMC_RT_BIN") or os.path.join(os.path.dirname(llmc_bin()), "llmc-rt")
    if not (os.path.isfile(b) and os.access(b, os.X_OK)):
        print(f"FAIL: llmc-rt binary not found at {b} (set LLMC_RT_BIN)")
        sys.exit(1)
    return b


_signing_home = None


def _ensure_signing_key(binary):
    """Once per test process: a private XDG_CONFIG_HOME holding a fresh
    default signing key that is also in its trust store, so artifacts the
    test compiles are signed and run their generated kernels, as on a
    developer's machine after `llmc keygen`. Every llmc started later
    inherits it (the user's own ~/.config is never touched)."""
    global _signing_home
    if _signing_home is not None:
        return
    import tempfile
    base = os.environ.get("LLMC_WORK") or os.path.join(SOURCE_DIR, "build", "e2e-work")
    os.makedirs(base, exist_ok=True)
    _signing_home = tempfile.mkdtemp(prefix="signing-", dir=base)
    os.environ["XDG_CONFIG_HOME"] = _signing_home
    import atexit  # the key dies with the test process (it signed only this test's artifacts)
    atexit.register(shutil.rmtree, _signing_home, ignore_errors=True)
    p = subprocess.run([binary, "keygen", "--comment", "e2e test key"], capture_output=True,
                       text=True, timeout=60)
    if p.returncode != 0:
        print(f"FAIL: llmc keygen for the test's signing key: {p.stderr.strip()}")
        sys.exit(1)


def signing_home() -> str:
    """The XDG_CONFIG_HOME of this test process (see _ensure_signing_key)."""
    llmc_bin()
    return _signing_home


def shared_dir() -> str:
    return os.environ.get("LLMC_SHARED_DIR") or os.path.join(os.path.dirname(SOURCE_DIR), "shared")


def work_dir(test_name: str) -> str:
    """A fresh scratch folder for one test under $LLMC_WORK."""
    base = os.environ.get("LLMC_WORK") or os.path.join(SOURCE_DIR, "build", "e2e-work")
    d = os.path.join(base, test_name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d, exist_ok=True)
    return d


# The exit code of a skipped test: test/e2e/CMakeLists.txt gives every e2e
# test this SKIP_RETURN_CODE, so ctest lists it as skipped, not passed.
SKIP_RETURN_CODE = 77
_skipped_parts = []


def under_ci() -> bool:
    """CI=true: a missing model or fixture fails the run instead of skipping."""
    return os.environ.get("CI") == "true"


def skip(reason: str):
    """Ends the test as skipped (exit SKIP_RETURN_CODE) because an input is
    missing; under CI (CI=true) prints FAIL with the reason and exits 1."""
    if under_ci():
        print(f"FAIL: {reason} (CI=true: a missing input fails the test)")
        sys.exit(1)
    print(f"SKIP: {reason}")
    sys.exit(SKIP_RETURN_CODE)


def skip_part(reason: str):
    """Skips one part of a test whose input is missing and returns; the test
    goes on with its other parts. Under CI it fails at once, as skip() does.
    Checks.finish() ends a test whose every part was skipped as skipped."""
    if under_ci():
        skip(reason)
    print(f"SKIP (part): {reason}")
    _skipped_parts.append(reason)


# Chat prompts the speculative-decoding tests decode (code, a story, a list
# to repeat: prompt lookup finds repeats in the first and the last).
CHAT_PROMPTS = {
    "code": "Write a Python class Person with a getter and a setter method for each of the "
            "fields name, age, email, phone and address.",
    "story": "Once upon a time, there was a little cat named Tom. Tom loved",
    "list": "Repeat the following list exactly three times, one item per line: apple, banana, "
            "cherry, date, elderberry, fig, grape.",
}


def run_model_parts(title, work_name, stories_part, smollm2_part):
    """The usual main of a test with a stories260K part and a SmolLM2 part:
    each runs with (checks, work dir) when its model is there and is
    skipped (skip_part) when not; then the tally ends the test."""
    checks = Checks(title)
    work = work_dir(work_name)
    stories = os.path.join(shared_dir(), "models", "stories260K.bin")
    for path, part, missing in ((stories, stories_part, f"{stories} missing"),
                                (SMOLLM2_GGUF, smollm2_part,
                                 f"{SMOLLM2_GGUF} missing (scripts/setup.sh fetches it)")):
        if os.path.exists(path):
            part(checks, work)
        else:
            skip_part(missing)
    checks.finish()


def run_llmc(args, timeout=300, check=True, env=None):
    """Runs llmc; returns the CompletedProcess. check: exit code must be 0.
    env: variables added to this process's environment."""
    cmd = [llmc_bin()] + [str(a) for a in args]
    t0 = time.time()
    full_env = dict(os.environ, **env) if env else None
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env)
    p.seconds = time.time() - t0
    if os.environ.get("LLMC_E2E_TIMING") == "1":
        print(f"[timing] {p.seconds:7.1f} s  llmc {' '.join(cmd[1:])[:160]}", file=sys.stderr, flush=True)
    if os.environ.get("LLMC_E2E_TIMING_LOG"):
        import json
        with open(os.environ["LLMC_E2E_TIMING_LOG"], "a") as log:
            log.write(json.dumps({"test": os.path.basename(sys.argv[0]), "seconds": round(p.seconds, 2),
                                  "args": cmd[1:]}) + "\n")
    if check and p.returncode != 0:
        raise RuntimeError(f"llmc failed (exit {p.returncode}): {' '.join(cmd)}\n{p.stderr.strip()}")
    return p



SMOLLM2_GGUF = os.path.join(SOURCE_DIR, ".cache", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def compile_and_eval(work, name, pipeline, model=None, eval_tokens=512, compile_timeout=1200):
    """Compile `model` (default SmolLM2) with `pipeline` into work/name.llmc and
    score it with `llmc eval --ref model --json`; returns (artifact path, the
    eval JSON with compile_s added)."""
    import json
    import time
    model = model or SMOLLM2_GGUF
    out = os.path.join(work, name + ".llmc")
    t0 = time.time()
    run_llmc(["compile", model, "-o", out, "-q", "--pipeline", pipeline], timeout=compile_timeout)
    secs = time.time() - t0
    # f32 activations on both sides: the score is the weight method's alone
    # (not the kernel engine's int8 activations, test_kernel_plan covers those).
    p = run_llmc(["eval", out, "--ref", model, "--json", "--max-tokens", str(eval_tokens),
                  "--exact-activations"], timeout=600)
    r = json.loads(p.stdout)
    r["compile_s"] = secs
    return out, r


def compile_checked(checks, model, out, pipeline, name, timeout=900):
    """`llmc compile model -o out --pipeline pipeline` as a check named
    `name`; ends the test (checks.finish) when it fails. Returns the run."""
    p = run_llmc(["compile", model, "-o", out, "--pipeline", pipeline], check=False,
                 timeout=timeout)
    checks.check(p.returncode == 0 and os.path.exists(out), name,
                 f"exit {p.returncode}, {p.seconds:.0f} s; {p.stderr.strip()[-300:]}")
    if p.returncode != 0:
        checks.finish()
    return p


def check_passkey_runs(checks, artifact, trials, context=1024):
    """`llmc eval-long ARTIFACT --task passkey` runs and reports its trials."""
    import json
    p = run_llmc(["eval-long", artifact, "--task", "passkey", "--context", str(context),
                  "--trials", str(trials), "--json", "-q"], check=False, timeout=900)
    try:
        r = json.loads(p.stdout)
    except ValueError:
        r = {}
    checks.check(p.returncode == 0 and r.get("trials") == trials and "accuracy" in r,
                 f"the artifact runs passkey at {context // 1024}k",
                 f"exit {p.returncode}, accuracy {r.get('accuracy')}, kv {r.get('kv_bytes')} bytes, "
                 f"{p.seconds:.0f} s; {p.stderr.strip()[-200:]}")
    return r

def llmc_logits(model, prompt, out_npy, extra=()):
    run_llmc(["run", model, "--prompt-tokens", ",".join(map(str, prompt)), "-n", "0",
              "--dump-logits", out_npy, "-q", *extra])
    return np.load(out_npy)


def llmc_greedy(model, prompt, n, extra=()):
    p = run_llmc(["run", model, "--prompt-tokens", ",".join(map(str, prompt)), "-n", str(n),
                  "--print-ids", "-q", "--ignore-eos", *extra])
    return [int(t) for t in p.stdout.split()]


def llmc_logits_and_greedy(model, prompt, n, out_npy, extra=()):
    """One invocation: prompt logits dumped and n greedy ids printed."""
    p = run_llmc(["run", model, "--prompt-tokens", ",".join(map(str, prompt)), "-n", str(n),
                  "--dump-logits", out_npy, "--print-ids", "-q", "--ignore-eos", *extra])
    return np.load(out_npy), [int(t) for t in p.stdout.split()]


class Checks:
    """Collects named pass/fail results and prints one line per check."""

    def __init__(self, title):
        self.title = title
        self.failed = []
        self.count = 0
        self.t0 = time.time()
        print(f"== {title}")

    def check(self, ok: bool, name: str, detail: str = ""):
        self.count += 1
        print(f"{'PASS' if ok else 'FAIL'}: {name}{(' - ' + detail) if detail else ''}")
        if not ok:
            self.failed.append(name)
        return ok

    def finish(self):
        dt = time.time() - self.t0
        if self.count == 0 and _skipped_parts:
            skip(f"{self.title}: every part skipped ({'; '.join(_skipped_parts)})")
        if self.failed:
            print(f"== {self.title}: {len(self.failed)} of {self.count} checks FAILED ({dt:.1f} s): "
                  + ", ".join(self.failed))
            sys.exit(1)
        print(f"== {self.title}: all {self.count} checks passed ({dt:.1f} s)")
        sys.exit(0)


def mean_kl(got: np.ndarray, ref: np.ndarray) -> float:
    """Mean over positions of KL(softmax(ref) || softmax(got))."""
    def logp(z):
        z = z.astype(np.float64) - z.max(-1, keepdims=True)
        return z - np.log(np.exp(z).sum(-1, keepdims=True))
    lr, lg = logp(ref), logp(got)
    return float(np.mean(np.sum(np.exp(lr) * (lr - lg), -1)))


def generated_kernels_line(p) -> str:
    """The last "generated kernels:" line `llmc run` printed (or its stderr's tail)."""
    info = [l for l in p.stderr.splitlines() if "generated kernels:" in l]
    return info[-1] if info else p.stderr.strip()[-200:]


def logit_stats(got: np.ndarray, ref: np.ndarray) -> dict:
    err = np.abs(got.astype(np.float64) - ref.astype(np.float64))
    return {
        "max_abs": float(err.max()),
        "mean_abs": float(err.mean()),
        "max_logit": float(np.abs(ref).max()),
        "top1": float(np.mean(np.argmax(got, -1) == np.argmax(ref, -1))),
    }


def compare_logits(checks: Checks, name, got, ref, rel_tol, abs_floor=1.0):
    """Passes if shapes match, everything is finite and
    max|got - ref| <= rel_tol * max(abs_floor, max|ref|). Top-1 agreement is
    reported; a top-1 disagreement only passes where the reference's top-2
    gap is within the same tolerance (a near tie)."""
    if got.shape != ref.shape:
        checks.check(False, f"{name}: logits shape", f"llmc {got.shape} vs reference {ref.shape}")
        return None
    if not np.all(np.isfinite(got)):
        checks.check(False, f"{name}: logits finite", "llmc produced NaN/Inf")
        return None
    s = logit_stats(got, ref)
    tol = rel_tol * max(abs_floor, s["max_logit"])
    ok = s["max_abs"] <= tol
    detail = (f"max abs err {s['max_abs']:.3g} (tol {tol:.3g}), mean abs err {s['mean_abs']:.3g}, "
              f"max |logit| {s['max_logit']:.3g}, top-1 agreement {s['top1'] * 100:.1f}%")
    checks.check(ok, f"{name}: logits [{got.shape[0]}x{got.shape[1]}]", detail)
    disagree = np.nonzero(np.argmax(got, -1) != np.argmax(ref, -1))[0]
    srt = np.sort(ref, axis=-1)
    gaps = srt[:, -1] - srt[:, -2]
    bad = [int(i) for i in disagree if gaps[i] > tol]
    checks.check(not bad, f"{name}: top-1 agreement",
                 f"{len(ref) - len(disagree)}/{len(ref)} positions agree"
                 + (f"; near ties at {list(map(int, disagree))}" if disagree.size and not bad else "")
                 + (f"; real disagreement at positions {bad}" if bad else ""))
    return s


def compare_greedy(checks: Checks, name, got, ref_model, prompt, ref_ids, tie_tol):
    """llmc's greedy ids must equal the reference's. If they diverge, the
    divergence is accepted only when, at that step, llmc's choice is within
    tie_tol of the reference's best logit (a near tie that float32 rounding
    may break either way); the rest is then checked by teacher forcing:
    each of llmc's tokens must be a (near-)argmax of the reference logits
    given llmc's own prefix."""
    if got == ref_ids:
        return checks.check(True, f"{name}: greedy {len(got)} tokens identical", " ".join(map(str, got)))
    if len(got) != len(ref_ids):
        return checks.check(False, f"{name}: greedy tokens",
                            f"llmc gave {len(got)} tokens, reference {len(ref_ids)}: {got} vs {ref_ids}")
    logits = ref_model.logits(list(prompt) + got[:-1])[len(prompt) - 1:]
    worst = 0.0
    for step, tok in enumerate(got):
        worst = max(worst, float(logits[step].max() - logits[step][tok]))
    first = next(i for i in range(len(got)) if got[i] != ref_ids[i])
    return checks.check(worst <= tie_tol, f"{name}: greedy tokens",
                        f"diverge at step {first}: llmc {got} vs reference {ref_ids}; worst teacher-forced "
                        f"gap {worst:.3g} (near-tie tolerance {tie_tol:.3g})")


def compare_generated_models(work, title, models, load_ref, prompt, n_gen, rel_tol):
    """For each (name, path) model: llmc's prompt logits and n_gen greedy
    tokens against the reference that load_ref(path) builds; prints a summary
    and exits through Checks.finish()."""
    checks = Checks(title)
    summary = []
    for name, path in models:
        ref = load_ref(path)
        ref_logits, ref_ids = ref.greedy(prompt, n_gen)
        try:
            got_logits, got_ids = llmc_logits_and_greedy(
                path, prompt, n_gen, os.path.join(work, f"{name}.npy"), ["--exact-activations"])
        except RuntimeError as e:
            checks.check(False, f"{name}: llmc run", str(e).splitlines()[-1])
            continue
        stats = compare_logits(checks, name, got_logits, ref_logits, rel_tol)
        tol = rel_tol * max(1.0, stats["max_logit"]) if stats else 1e-3
        compare_greedy(checks, name, got_ids, ref, prompt, ref_ids, tol)
        if stats:
            summary.append((name, stats))
    print("summary (model: max abs err / max |logit|, top-1):")
    for name, s in summary:
        print(f"  {name:26s} {s['max_abs']:.3g} / {s['max_logit']:.3g}, {s['top1'] * 100:.0f}%")
    checks.finish()


# What a manifest's tensors hold, weights stored packed mapped back to
# themselves: one definition, shared with the benchmarks.
sys.path.insert(0, os.path.join(SOURCE_DIR, "bench"))
from bench_common import weight_tensors  # noqa: E402,F401


_SPEC_STATS = None


def run_speculative(model, prompt_args, n, extra=()):
    """`llmc run MODEL PROMPT_ARGS -n N --print-ids --ignore-eos -t 2 EXTRA`:
    the run, its token ids (None on failure) and the speculative statistics
    line as {passes, accepted, drafted, mean, tree_passes} (None without
    one; tree_passes: passes that verified a branching draft tree)."""
    import re
    global _SPEC_STATS
    if _SPEC_STATS is None:
        _SPEC_STATS = re.compile(r"(\d+) target passes with a draft, (\d+) of (\d+) drafts "
                                 r"accepted, mean accepted length ([\d.]+)")
    p = run_llmc(["run", model, *prompt_args, "-n", str(n), "--print-ids", "--ignore-eos",
                  "-t", "2", *extra], timeout=600, check=False)
    ids = [int(t) for t in p.stdout.split()] if p.returncode == 0 else None
    m = _SPEC_STATS.search(p.stderr)
    tree = re.search(r"(\d+) passes over a branching tree", p.stderr)
    return p, ids, (m and {"passes": int(m[1]), "accepted": int(m[2]), "drafted": int(m[3]),
                           "mean": float(m[4]), "tree_passes": int(tree[1]) if tree else 0})
