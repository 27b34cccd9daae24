"""End-to-end: signed artifacts and the runtime-only binary (stories260K).

- `llmc keygen` (the harness gives each test process its own
  XDG_CONFIG_HOME) writes the default signing key and trusts it;
  `llmc compile` signs with it; `llmc inspect` and `llmc verify` say
  "signed by ed25519:... (trusted)" and verify every section's SHA-256.
- `llmc-rt` (no MLIR linked: checked with ldd) runs the artifact with its
  generated kernels and gives the same greedy tokens and logits as `llmc run`;
  it refuses a source model with a clean error.
- Where the key is not trusted (an empty trust store), the artifact runs the
  runtime's built-in kernels with one warning line and the same tokens;
  `--require-signed` refuses it (exit 1); `--trusted-key KEY.pub` trusts it.
- Unsigned (`--no-sign`) and tampered (a byte of the signature, a byte of a
  kernel object) artifacts never run their native code, and verify fails.
- A secret key readable by others is refused by `llmc compile --sign`.
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import harness  # noqa: E402

# The suite compiles for this CPU's level only (LLMC_CPU_LEVELS=host, see
# test/e2e/CMakeLists.txt); this test loads the x86-64-v3 object by name.
os.environ["LLMC_CPU_LEVELS"] = "all"
import numpy as np  # noqa: E402

STORIES = os.path.join(harness.shared_dir(), "models", "stories260K.bin")
PROMPT = [1, 403, 407, 261, 378, 280, 250]


def run(binary, args, env=None, check=False):
    full = dict(os.environ, **(env or {}))
    return subprocess.run([binary] + [str(a) for a in args], capture_output=True, text=True,
                          timeout=300, env=full, check=check)


def generate(binary, art, npy, extra=(), env=None):
    """(process, greedy ids, logits) of 12 tokens after PROMPT."""
    p = run(binary, ["run", art, "--prompt-tokens", ",".join(map(str, PROMPT)), "-n", "12",
                     "--print-ids", "--ignore-eos", "--dump-logits", npy, *extra], env=env)
    ids = [int(t) for t in p.stdout.split()] if p.returncode == 0 else []
    logits = np.load(npy) if p.returncode == 0 and os.path.exists(npy) else None
    return p, ids, logits


def info(p):
    lines = [l for l in p.stderr.splitlines() if "generated kernels:" in l]
    return lines[-1] if lines else p.stderr.strip()[-300:]


def flip_byte(src, dst, offset_from_end=None, offset=None):
    b = bytearray(open(src, "rb").read())
    i = len(b) - offset_from_end if offset_from_end is not None else offset
    b[i] ^= 0x10
    open(dst, "wb").write(bytes(b))


def section_offset(art, name):
    """Where tensor `name`'s bytes start: the header's data offset plus its own."""
    m = json.loads(harness.run_llmc(["inspect", art, "--json", "--no-verify"]).stdout)
    header = open(art, "rb").read(64)
    data_offset = int.from_bytes(header[32:40], "little")
    t = next(t for t in m["tensors"] if t["name"] == name)
    return data_offset + t["offset"]


def main():
    checks = harness.Checks("signed artifacts and llmc-rt")
    if not os.path.exists(STORIES):
        harness.skip(f"{STORIES} not found")
    work = harness.work_dir("signing")
    llmc, rt = harness.llmc_bin(), harness.llmc_rt_bin()
    art = os.path.join(work, "stories.llmc")
    p = harness.run_llmc(["compile", STORIES, "-o", art])
    checks.check("signed by ed25519:" in p.stderr, "compile signs with the default key",
                 p.stderr.strip()[-200:])
    p = harness.run_llmc(["inspect", art])
    checks.check("signature:     signed by ed25519:" in p.stdout and "(trusted)" in p.stdout,
                 "inspect: signed by a trusted key", p.stdout[:300])
    p = run(llmc, ["verify", art])
    checks.check(p.returncode == 0 and "sections: " in p.stdout and "match" in p.stdout,
                 "verify: trusted signature, every section's SHA-256 matches", p.stdout.strip())

    # llmc-rt: the runtime alone runs the artifact, generated kernels and all.
    ref, ref_ids, ref_logits = generate(llmc, art, os.path.join(work, "llmc.npy"))
    got, ids, logits = generate(rt, art, os.path.join(work, "rt.npy"))
    checks.check(got.returncode == 0 and "stored x86-64" in info(got) and
                 "27 of 27 other ops" in info(got),
                 "llmc-rt runs the artifact's generated kernels (stored object, every op)",
                 info(got))
    checks.check(ids == ref_ids and ids and np.array_equal(logits, ref_logits),
                 "llmc-rt: the same greedy tokens and logits as llmc run",
                 f"{ids} vs {ref_ids}")
    ldd = subprocess.run(["ldd", rt], capture_output=True, text=True).stdout
    checks.check("MLIR" not in ldd and "LLVM" not in ldd, "llmc-rt links no MLIR or LLVM",
                 ldd.strip()[:300])
    print(f"binary sizes: llmc {os.path.getsize(llmc) / 2**20:.1f} MiB, "
          f"llmc-rt {os.path.getsize(rt) / 2**20:.1f} MiB")
    p = run(rt, ["run", STORIES, "-p", "x"])
    checks.check(p.returncode == 1 and "not an .llmc artifact" in p.stderr,
                 "llmc-rt refuses a source model with a clean error (exit 1)",
                 f"exit {p.returncode}: {p.stderr.strip()[-200:]}")

    # A machine that does not trust the key: built-in kernels, one warning.
    empty = os.path.join(work, "empty-config")
    os.makedirs(empty, exist_ok=True)
    untrusted = {"XDG_CONFIG_HOME": empty}
    p, u_ids, _ = generate(rt, art, os.path.join(work, "u.npy"), env=untrusted)
    warnings = [l for l in p.stderr.splitlines() if l.startswith("llmc: warning:")]
    checks.check(p.returncode == 0 and len(warnings) == 1 and "not trusted" in warnings[0] and
                 "not run" in info(p),
                 "untrusted signer: one warning, generated kernels not run",
                 f"exit {p.returncode}: {warnings} | {info(p)}")
    checks.check(bool(u_ids) and u_ids == ref_ids, "untrusted signer: the built-in kernels give the same tokens",
                 f"{u_ids} vs {ref_ids}")
    p, _, _ = generate(rt, art, os.path.join(work, "r.npy"), ["--require-signed"], env=untrusted)
    checks.check(p.returncode == 1 and "--require-signed" in p.stderr,
                 "untrusted signer with --require-signed: refused (exit 1)",
                 f"exit {p.returncode}: {p.stderr.strip()[-200:]}")
    pub = os.path.join(harness.signing_home(), "llmc", "signing.key.pub")
    p, t_ids, _ = generate(rt, art, os.path.join(work, "t.npy"),
                           ["--trusted-key", pub, "--require-signed"], env=untrusted)
    checks.check(p.returncode == 0 and "stored x86-64" in info(p) and t_ids == ref_ids,
                 "--trusted-key KEY.pub: trusted, generated kernels run", info(p))

    # Unsigned and tampered artifacts.
    unsigned = os.path.join(work, "unsigned.llmc")
    harness.run_llmc(["compile", STORIES, "-o", unsigned, "--no-sign", "-q"])
    p, _, _ = generate(rt, unsigned, os.path.join(work, "n.npy"))
    checks.check(p.returncode == 0 and "unsigned" in info(p) and "not run" in info(p),
                 "unsigned: generated kernels not run", info(p))
    p = run(llmc, ["verify", unsigned])
    checks.check(p.returncode == 1 and "unsigned" in p.stdout, "verify: unsigned fails",
                 p.stdout.strip())
    bad_sig = os.path.join(work, "bad-sig.llmc")
    flip_byte(art, bad_sig, offset_from_end=128 - 48 - 3)
    p, _, _ = generate(rt, bad_sig, os.path.join(work, "b.npy"), ["--require-signed"])
    checks.check(p.returncode == 1 and "bad signature" in p.stderr,
                 "tampered signature: refused under --require-signed",
                 p.stderr.strip()[-200:])
    p = run(llmc, ["verify", bad_sig])
    checks.check(p.returncode == 1 and "bad signature" in p.stdout, "verify: tampered signature",
                 p.stdout.strip())
    bad_obj = os.path.join(work, "bad-object.llmc")
    flip_byte(art, bad_obj, offset=section_offset(art, "codegen.x86-64-v3.so") + 4000)
    # The object a run would load (LLMC_ISA picks the x86-64-v3 one, which
    # this CPU runs) is checked against its signed SHA-256 before it maps.
    p, _, _ = generate(rt, bad_obj, os.path.join(work, "o.npy"), env={"LLMC_ISA": "x86-64-v3"})
    checks.check(p.returncode == 1 and "tampered" in p.stderr,
                 "tampered kernel object: the artifact is refused", p.stderr.strip()[-200:])
    p = run(llmc, ["verify", bad_obj])
    checks.check(p.returncode == 1 and "codegen.x86-64-v3.so" in p.stdout + p.stderr,
                 "verify: names the tampered kernel object", (p.stdout + p.stderr).strip()[-200:])

    # Keys: a secret key readable by others is refused; keys never overwritten.
    key = os.path.join(work, "team.key")
    p = run(llmc, ["keygen", "-o", key])
    checks.check(p.returncode == 0 and os.path.exists(key + ".pub"), "keygen -o writes a pair",
                 p.stdout + p.stderr)
    p = run(llmc, ["keygen", "-o", key])
    checks.check(p.returncode == 1 and "overwrite" in p.stderr, "keygen never overwrites a key",
                 p.stderr.strip())
    os.chmod(key, 0o644)
    out = os.path.join(work, "leaky.llmc")
    p = run(llmc, ["compile", STORIES, "-o", out, "--sign", key, "-q"])
    checks.check(p.returncode == 1 and "chmod 600" in p.stderr and not os.path.exists(out),
                 "compile --sign refuses a world-readable key and writes nothing",
                 p.stderr.strip()[-200:])
    shutil.rmtree(empty, ignore_errors=True)
    checks.finish()


if __name__ == "__main__":
    main()
