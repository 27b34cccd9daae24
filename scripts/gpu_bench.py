#!/usr/bin/env python3
"""The GPU speed benchmark of scripts/gpu-check.sh (standard library only).

Its models are random-weight GGUFs of real shapes (SmolLM2-135M: F32, Q8_0,
Q4_0, a Q4_K_M-style mix; TinyLlama-1.1B: Q4_0, Q4_K_M-style) and their llmc
artifacts, written by scripts/gpu-prepare.sh and carried xz-compressed
(each matrix repeats a few random rows, so a file of hundreds of MB packs
into kilobytes; the bytes a kernel reads and its arithmetic are those of any
random matrix of that format). Speed only: the accuracy of the CUDA kernels
and of the engine is checked on real weights by cuda-check and
gpu_engine_check.py.

For each model, in one run on one machine:
  llmc-rt bench --device cuda: prefill of -p tokens, decode of -n tokens at
    batch 1 (CUDA Graphs, and --no-graphs) and at batch 16 (both);
  llama.cpp's llama-bench (CUDA, all layers on the GPU): pp and tg, and
    llama-batched-bench at 16 parallel sequences (its S_TG);
then the ratios the issue sets targets for (decode, graphs vs llama.cpp at
batch 1; graphs vs no graphs; the 1.1B shape's decode bytes per second as a
share of the HBM bandwidth: the H200's 4.8 TB/s and a device-to-device copy
measured here by torch when it is installed). Prints one JSON object.
"""
import argparse
import concurrent.futures
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import time

H200_HBM_GBPS = 4800.0  # NVIDIA's H200 SXM figure (HBM3e, 4.8 TB/s)


def unpack(src, dst):
    """xz file -> dst, streamed (the outputs are up to a few GB)."""
    if os.path.exists(dst):
        return dst
    tmp = dst + ".part"
    with lzma.open(src, "rb") as f, open(tmp, "wb") as g:
        shutil.copyfileobj(f, g, 1 << 24)
    os.replace(tmp, dst)
    return dst


def run(cmd, timeout, env=None):
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                           env=dict(os.environ, **(env or {})))
        return p.returncode, p.stdout, p.stderr, time.time() - t0
    except subprocess.TimeoutExpired as e:
        return 124, e.stdout or "", (e.stderr or "") + "\ntimed out", time.time() - t0


def llmc_bench(a, art, flags, env=None):
    rc, out, err, secs = run([a.rt, "bench", art, "-p", str(a.prompt), "-n", str(a.tokens),
                              "-r", str(a.reps), "--json", "-q", "--trusted-key", a.key,
                              "--device", "cuda", *flags], a.step_timeout, env)
    r = {"exit": rc, "seconds": round(secs, 1)}
    try:
        j = json.loads(out.strip().splitlines()[-1])
        r.update(prefill_tok_s=j.get("prefill_tok_s"), decode_tok_s=j.get("decode_tok_s"),
                 batch=j.get("batch", 1), engine=j.get("generated_kernels"),
                 batch_max_abs_diff=j.get("batch_max_abs_diff"))
    except (ValueError, IndexError):
        r["error"] = (err or out).strip()[-400:]
    return r


def llama_bench(a, gguf):
    rc, out, err, secs = run([os.path.join(a.peer, "llama-bench"), "-m", gguf, "-ngl", "99",
                              "-p", str(a.prompt), "-n", str(a.tokens), "-r", str(a.reps),
                              "-o", "json"], a.step_timeout, a.peer_env)
    r = {"exit": rc, "seconds": round(secs, 1)}
    try:
        for t in json.loads(out):
            if t.get("n_prompt", 0) > 0 and t.get("n_gen", 0) == 0:
                r["prefill_tok_s"] = t["avg_ts"]
            elif t.get("n_gen", 0) > 0 and t.get("n_prompt", 0) == 0:
                r["decode_tok_s"] = t["avg_ts"]
        r["build"] = f"{t.get('build_commit')} ({t.get('build_number')})"
        r["backend"] = f"{t.get('backends')} on {t.get('gpu_info')}"
    except (ValueError, KeyError, UnboundLocalError):
        r["error"] = (err or out).strip()[-400:]
    return r


def llama_batched(a, gguf, batch):
    # -npp 1: each sequence starts from one token, as llmc-rt bench --batch.
    ctx = batch * (a.tokens + 8)
    rc, out, err, secs = run([os.path.join(a.peer, "llama-batched-bench"), "-m", gguf,
                              "-ngl", "99", "-c", str(ctx), "-b", "2048", "-ub", "512",
                              "-npp", "1", "-ntg", str(a.tokens), "-npl", str(batch),
                              "--output-format", "jsonl"], a.step_timeout, a.peer_env)
    r = {"exit": rc, "seconds": round(secs, 1)}
    for line in out.splitlines():
        if line.startswith("{"):
            try:
                j = json.loads(line)
                r["decode_tok_s"] = j.get("speed_tg")
            except ValueError:
                pass
    if "decode_tok_s" not in r:
        r["error"] = (err or out).strip()[-400:]
    return r


def copy_bandwidth_gbps():
    """Device-to-device copy through torch (bytes read + written), if installed."""
    code = ("import torch,time\n"
            "x=torch.empty(2**30,dtype=torch.uint8,device='cuda');y=torch.empty_like(x)\n"
            "for _ in range(3): y.copy_(x)\n"
            "torch.cuda.synchronize();t=time.time()\n"
            "for _ in range(20): y.copy_(x)\n"
            "torch.cuda.synchronize();print(2*20*x.numel()/(time.time()-t)/1e9)\n")
    rc, out, err, _ = run([sys.executable, "-c", code], 120)
    try:
        return float(out.strip().splitlines()[-1]) if rc == 0 else None
    except (ValueError, IndexError):
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", required=True, help="folder of MODEL.llmc.xz / MODEL.gguf.xz and shapes.json")
    ap.add_argument("--rt", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--peer", default="", help="llama.cpp CUDA bin folder (llama-bench, llama-batched-bench)")
    ap.add_argument("--peer-ld", default="", help="LD_LIBRARY_PATH entries for the peer (cudart, cuBLAS)")
    ap.add_argument("--work", default="/tmp/gpu-bench")
    ap.add_argument("--md", default="", help="also write the markdown table here")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--step-timeout", type=int, default=120)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    shapes = json.load(open(os.path.join(a.dir, "shapes.json")))
    # The peer links the toolkit's cudart and cuBLAS: --peer-ld names their folders there.
    a.peer_env = {"LD_LIBRARY_PATH": ":".join(
        x for x in (a.peer, a.peer_ld, os.environ.get("LD_LIBRARY_PATH", "")) if x)}
    if not (a.peer and os.path.isfile(os.path.join(a.peer, "llama-bench"))):
        a.peer = ""
    t0 = time.time()
    jobs = {}
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for m in shapes["models"]:
            for kind in ("llmc", "gguf"):
                src = os.path.join(a.dir, f"{m['name']}.{kind}.xz")
                jobs[(m["name"], kind)] = pool.submit(unpack, src, os.path.join(a.work, f"{m['name']}.{kind}"))
        paths = {k: f.result() for k, f in jobs.items()}
    res = {"unpack_s": round(time.time() - t0, 1), "prompt": a.prompt, "tokens": a.tokens,
           "reps": a.reps, "batch": a.batch, "hbm_spec_gbps": H200_HBM_GBPS,
           "copy_gbps": copy_bandwidth_gbps(), "models": []}
    for m in shapes["models"]:
        art, gguf = paths[(m["name"], "llmc")], paths[(m["name"], "gguf")]
        row = dict(m)
        print(f"[gpu-bench {time.strftime('%H:%M:%S')}] {m['name']}", file=sys.stderr, flush=True)
        # graphs_mv: decode products by the general kernel at T = 1 instead of
        # llmc_cu_mv1_* (LLMC_CUDA_MV1=0), the A/B of the one-token kernel.
        row["llmc"] = {"graphs": llmc_bench(a, art, []),
                       "graphs_mv": llmc_bench(a, art, [], {"LLMC_CUDA_MV1": "0"}),
                       # prompt products in f32 (LLMC_CUDA_MMA=0), the A/B of the tensor cores
                       "graphs_f32_prefill": llmc_bench(a, art, [], {"LLMC_CUDA_MMA": "0"}),
                       "no_graphs": llmc_bench(a, art, ["--no-graphs"]),
                       f"graphs_b{a.batch}": llmc_bench(a, art, ["--batch", str(a.batch)]),
                       f"no_graphs_b{a.batch}": llmc_bench(a, art, ["--no-graphs", "--batch", str(a.batch)])}
        if a.peer:
            row["llamacpp"] = {"b1": llama_bench(a, gguf), f"b{a.batch}": llama_batched(a, gguf, a.batch)}
        g, n = row["llmc"]["graphs"], row["llmc"]["no_graphs"]
        ratio = lambda x, y: (x / y) if x and y else None
        row["graphs_vs_no_graphs"] = ratio(g.get("decode_tok_s"), n.get("decode_tok_s"))
        row["mv1_vs_mv"] = ratio(g.get("decode_tok_s"), row["llmc"]["graphs_mv"].get("decode_tok_s"))
        row["mma_vs_f32_prefill"] = ratio(g.get("prefill_tok_s"),
                                          row["llmc"]["graphs_f32_prefill"].get("prefill_tok_s"))
        if a.peer:
            row["graphs_vs_llamacpp_b1"] = ratio(g.get("decode_tok_s"), row["llamacpp"]["b1"].get("decode_tok_s"))
            row["prefill_vs_llamacpp"] = ratio(g.get("prefill_tok_s"), row["llamacpp"]["b1"].get("prefill_tok_s"))
            row[f"graphs_vs_llamacpp_b{a.batch}"] = ratio(
                row["llmc"][f"graphs_b{a.batch}"].get("decode_tok_s"),
                row["llamacpp"][f"b{a.batch}"].get("decode_tok_s"))
        if g.get("decode_tok_s"):
            row["decode_gbps"] = g["decode_tok_s"] * m["decode_bytes"] / 1e9
            row["hbm_share"] = row["decode_gbps"] / H200_HBM_GBPS
        res["models"].append(row)
    print(json.dumps(res, indent=1))
    if a.md:
        open(a.md, "w").write(markdown(res))


def fmt(x, spec=".0f"):
    return "-" if x is None else format(x, spec)


def markdown(res):
    B = res["batch"]
    L = ["## Speed on random-weight models of real shapes (scripts/gpu_bench.py)", "",
         f"- prefill: {res['prompt']} tokens; decode: {res['tokens']} tokens from an empty cache; "
         f"median of {res['reps']}; batch {B}: {B} sequences decoded together (llama.cpp: "
         f"llama-batched-bench -npp 1 -npl {B}, its S_TG)",
         f"- HBM: {res['hbm_spec_gbps']:.0f} GB/s (H200 spec); device-to-device copy measured here: "
         f"{fmt(res['copy_gbps'])} GB/s (bytes read + written)", "",
         "| Model | llmc prefill tok/s | llama.cpp prefill tok/s | llmc decode, graphs | "
         "llmc decode, no graphs | llama.cpp decode | graphs / no graphs | graphs / llama.cpp | "
         "mv1 / general kernel (decode) | tensor cores / f32 (prefill) | "
         f"llmc b{B}, graphs | llmc b{B}, no graphs | llama.cpp b{B} | llmc / llama.cpp b{B} | "
         "decode GB/s (share of HBM) |",
         "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for m in res["models"]:
        l, p = m["llmc"], m.get("llamacpp", {})
        pb1, pbB = p.get("b1", {}), p.get(f"b{B}", {})
        L.append(
            f"| {m['name']} | {fmt(l['graphs'].get('prefill_tok_s'))} | {fmt(pb1.get('prefill_tok_s'))} | "
            f"{fmt(l['graphs'].get('decode_tok_s'))} | {fmt(l['no_graphs'].get('decode_tok_s'))} | "
            f"{fmt(pb1.get('decode_tok_s'))} | {fmt(m.get('graphs_vs_no_graphs'), '.2f')} | "
            f"{fmt(m.get('graphs_vs_llamacpp_b1'), '.2f')} | {fmt(m.get('mv1_vs_mv'), '.2f')} | "
            f"{fmt(m.get('mma_vs_f32_prefill'), '.2f')} | "
            f"{fmt(l[f'graphs_b{B}'].get('decode_tok_s'))} | {fmt(l[f'no_graphs_b{B}'].get('decode_tok_s'))} | "
            f"{fmt(pbB.get('decode_tok_s'))} | {fmt(m.get(f'graphs_vs_llamacpp_b{B}'), '.2f')} | "
            f"{fmt(m.get('decode_gbps'))} ({fmt(100 * m['hbm_share'] if m.get('hbm_share') else None, '.1f')}%) |")
    errs = []
    for m in res["models"]:
        for side in ("llmc", "llamacpp"):
            for mode, r in m.get(side, {}).items():
                if r.get("error") or r.get("exit"):
                    errs.append(f"- {m['name']} {side} {mode}: exit {r.get('exit')}: {r.get('error', '')[-200:]}")
    if errs:
        L += ["", "Failures:", ""] + errs
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    main()
