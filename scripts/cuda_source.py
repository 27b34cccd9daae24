#!/usr/bin/env python3
"""Writes an artifact's CUDA source section (codegen.cuda.kernels.cu) to a
file: what the stand-in CUDA driver (build/lib/libllmc_fakecuda.so) runs
on the host, named by LLMC_FAKECUDA_SOURCE.

  python3 scripts/cuda_source.py ARTIFACT OUT.cu [--llmc build/bin/llmc]
"""
import argparse
import json
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("artifact")
    ap.add_argument("out")
    ap.add_argument("--llmc", default="build/bin/llmc")
    a = ap.parse_args()
    p = subprocess.run([a.llmc, "inspect", a.artifact, "--json", "--no-verify"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"cuda_source.py: {p.stderr.strip()}")
    m = json.loads(p.stdout)
    if "codegen_cuda" not in m:
        sys.exit(f"cuda_source.py: {a.artifact} has no CUDA kernels (compile with --target cuda)")
    t = {x["name"]: x for x in m["tensors"]}[m["codegen_cuda"]["source"]]
    with open(a.artifact, "rb") as f:
        data_offset = int.from_bytes(f.read(64)[32:40], "little")  # the header's
        f.seek(data_offset + t["offset"])
        data = f.read(t["nbytes"])
    with open(a.out, "wb") as f:
        f.write(data)


if __name__ == "__main__":
    main()
