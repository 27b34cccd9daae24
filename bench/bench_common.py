"""Helpers shared by the bench scripts (standard library only)."""

import hashlib
import os
import subprocess


def source_digest(repo, sources):
    """Digest of the working tree's files under `sources` (paths relative to
    `repo`, tracked or untracked-but-not-ignored): cached results are reused
    only while none of them changed."""
    h = hashlib.sha256()
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard",
                            *sources], cwd=repo, capture_output=True, text=True,
                           check=True).stdout.split()
    for rel in sorted(files):
        path = os.path.join(repo, rel)
        if os.path.isfile(path):
            h.update(rel.encode() + b"\0")
            with open(path, "rb") as f:
                h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()[:16]


def git_commit(repo):
    """Short HEAD of `repo`, marked when tracked files have uncommitted changes
    (the result documents under docs/results/ are outputs, not inputs: a
    table written by an earlier run does not mark the next one)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo,
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--",
                                ".", ":!docs/results"],
                               cwd=repo, capture_output=True, text=True).stdout.strip()
        return (head or "unknown") + (" (with uncommitted changes)" if dirty else "")
    except OSError:
        return "unknown"


def wilson95(k, n, z=1.959963984540054):
    """95% Wilson score interval of k successes in n (as eval-long reports it)."""
    if n <= 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * (p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5
    return max(0.0, centre - half), min(1.0, centre + half)


def weight_tensors(manifest):
    """The manifest's tensors, with every weight the compiler stored in its
    kernels' layout (manifest "packed_weights": "<name>.rows8", u8) listed as
    the weight itself: its name, dtype, shape and the bytes its own format
    takes ("nbytes"; "stored_nbytes" is what the artifact holds)."""
    packed = manifest.get("packed_weights", {})
    by_tensor = {p["tensor"]: (n, p) for n, p in packed.items()}
    names = {t["name"] for t in manifest["tensors"]}
    out = []
    for t in manifest["tensors"]:
        if t["name"] not in by_tensor:
            out.append(t)
            continue
        name, p = by_tensor[t["name"]]
        if name in names:  # also stored row-major: listed under its own entry
            continue
        out.append(dict(t, name=name, dtype=p["dtype"], shape=p["shape"],
                        nbytes=p["dtype_nbytes"], stored_nbytes=t["nbytes"]))
    return out


def cpu_model():
    """The CPU's model name and its widest vector extensions, from /proc/cpuinfo
    (every table records the CPU it was measured on)."""
    name, flags = "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, val = line.partition(":")
                if key.strip() == "model name" and name == "unknown CPU":
                    name = val.strip()
                elif key.strip() == "flags" and not flags:
                    flags = set(val.split())
    except OSError:
        pass
    simd = [n for n, f in (("AVX-512", "avx512f"), ("VNNI", "avx512_vnni"), ("AMX", "amx_tile"),
                           ("AVX2", "avx2")) if f in flags]
    return f"{name} ({', '.join(simd) or 'no AVX2'})"
