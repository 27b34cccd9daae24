#!/usr/bin/env python3
"""The GPU engine on one artifact, for scripts/gpu-check.sh (standard library
only: the device machine has python3 and nothing else of ours).

Runs `llmc-rt run` four times on a seeded prompt of --prompt tokens then
--tokens greedy tokens: --device cuda (decode steps replay a CUDA Graph),
--device cuda --no-graphs, both with the prompt's products in f32
(LLMC_CUDA_MMA=0), the CPU engine with f32 activations and f16 KV rows (the
GPU engine's arithmetic up to summation order), and --device cuda with the
prompt's products on the tensor cores (the default: f16 inputs). Checks
that the f32 runs' greedy tokens agree with the CPU's and their prompt
rows' logits are within KLD 1e-4 (top-1 >= 99%); the tensor-core run's
within KLD 1e-3 (top-1 >= 95%), its tokens compared (reported, not
required: f16 rounding may flip a near tie). Reports prefill and decode
tok/s of the GPU modes. Prints one JSON object; exit 1 when a check fails.

  python3 scripts/gpu_engine_check.py --rt .cache/device/llmc-rt \\
      --artifact .cache/device/smollm2-2blk.llmc --key .cache/device/signing.pub \\
      --out /tmp/out
"""
import argparse
import array
import json
import math
import os
import random
import re
import subprocess
import sys

STATS = re.compile(r"prompt (\d+) tokens, ([\d.]+) tok/s \| generated (\d+) tokens, ([\d.]+) tok/s")
STEPS = re.compile(r"(\d+) graph replays \((\d+) captured\), (\d+) eager")


def read_npy(path):
    """(rows, cols, flat array('f')) of a float32 2-D .npy (llmc's --dump-logits)."""
    with open(path, "rb") as f:
        magic = f.read(8)
        if magic[:6] != b"\x93NUMPY":
            raise ValueError(f"{path}: not a .npy file")
        hlen = int.from_bytes(f.read(2), "little")
        header = f.read(hlen).decode("latin1")
        shape = tuple(int(x) for x in re.search(r"\((\d+), (\d+)\)", header).groups())
        data = array.array("f")
        data.frombytes(f.read())
    return shape[0], shape[1], data


def row_kld(p_row, q_row):
    """KL(p || q) of two logit rows."""
    mp, mq = max(p_row), max(q_row)
    ep = [math.exp(x - mp) for x in p_row]
    eq = [math.exp(x - mq) for x in q_row]
    sp, sq = sum(ep), sum(eq)
    lsp, lsq = math.log(sp), math.log(sq)
    total = 0.0
    for a, b, e in zip(p_row, q_row, ep):
        if e > 0:
            total += (e / sp) * ((a - mp - lsp) - (b - mq - lsq))
    return total


def run(rt, args, env=None):
    p = subprocess.run([rt, "run", *args], capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, **(env or {})))
    return p


def compare(gpu_npy, cpu_npy):
    """Mean KLD(cpu || gpu) over the rows, and the top-1 agreement."""
    rows, cols, g = read_npy(gpu_npy)
    _, _, c = read_npy(cpu_npy)
    klds, top1 = [], 0
    for r in range(rows):
        gr, cr = g[r * cols:(r + 1) * cols], c[r * cols:(r + 1) * cols]
        klds.append(row_kld(cr, gr))
        top1 += max(range(cols), key=gr.__getitem__) == max(range(cols), key=cr.__getitem__)
    return sum(klds) / rows, top1 / rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rt", required=True)
    ap.add_argument("--artifact", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=49152)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    name = os.path.splitext(os.path.basename(a.artifact))[0]
    rng = random.Random(7)
    prompt = ",".join(str(rng.randrange(100, a.vocab)) for _ in range(a.prompt))
    common = ["--prompt-tokens", prompt, "-n", str(a.tokens), "--ignore-eos", "--print-ids",
              "--trusted-key", a.key]
    res = {"artifact": name, "prompt": a.prompt, "tokens": a.tokens, "checks": {}}
    outs = {}
    f32 = {"LLMC_CUDA_MMA": "0"}
    for mode, extra, env in (("graphs", ["--device", "cuda"], f32),
                             ("no_graphs", ["--device", "cuda", "--no-graphs"], f32),
                             ("cpu", ["--exact-activations", "--kv-type", "f16"], None),
                             ("tensor_cores", ["--device", "cuda"], None)):
        npy = os.path.join(a.out, f"{name}-{mode}.npy")
        p = run(a.rt, [a.artifact, *common, *extra, "--dump-logits", npy], env)
        with open(os.path.join(a.out, f"{name}-{mode}.log"), "w") as f:
            f.write(p.stdout + "\n" + p.stderr)
        r = {"exit": p.returncode, "ids": p.stdout.split()}
        m = STATS.search(p.stderr)
        if m:
            r.update(prefill_tok_s=float(m.group(2)), decode_tok_s=float(m.group(4)))
        m = STEPS.search(p.stderr)
        if m:
            r.update(graph_steps=int(m.group(1)), captures=int(m.group(2)), eager_steps=int(m.group(3)))
        dev = re.search(r"engine cuda on (.*?) \|", p.stderr)
        if dev:
            res["device"] = dev.group(1)
        if p.returncode != 0:
            r["error"] = p.stderr.strip()[-500:]
        res[mode] = r
        outs[mode] = npy if p.returncode == 0 else None
    ok = all(res[m]["exit"] == 0 for m in ("graphs", "no_graphs", "cpu", "tensor_cores"))
    res["checks"]["all ran"] = ok
    if ok:
        res["checks"]["greedy tokens equal the CPU's"] = res["graphs"]["ids"] == res["cpu"]["ids"]
        res["checks"]["graphs and no graphs give the same tokens"] = (
            res["graphs"]["ids"] == res["no_graphs"]["ids"])
        res["kld"], res["top1"] = compare(outs["graphs"], outs["cpu"])
        res["checks"]["prompt logits within KLD 1e-4, top-1 >= 99%"] = (
            res["kld"] < 1e-4 and res["top1"] >= 0.99)
        res["tc_kld"], res["tc_top1"] = compare(outs["tensor_cores"], outs["cpu"])
        res["checks"]["tensor cores: prompt logits within KLD 1e-3, top-1 >= 95%"] = (
            res["tc_kld"] < 1e-3 and res["tc_top1"] >= 0.95)
        tc, cpu = res["tensor_cores"]["ids"], res["cpu"]["ids"]
        res["tc_tokens_equal"] = next((i for i, (x, y) in enumerate(zip(tc, cpu)) if x != y),
                                      min(len(tc), len(cpu)))
        tp, fp = res["tensor_cores"].get("prefill_tok_s"), res["graphs"].get("prefill_tok_s")
        if tp and fp:
            res["tensor_core_prefill_speedup"] = tp / fp
        gd, nd = res["graphs"].get("decode_tok_s"), res["no_graphs"].get("decode_tok_s")
        if gd and nd:
            res["graphs_speedup"] = gd / nd
    res["pass"] = all(res["checks"].values())
    print(json.dumps(res))
    sys.exit(0 if res["pass"] else 1)


if __name__ == "__main__":
    main()
