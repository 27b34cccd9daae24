"""End-to-end: HBQ (llm-quantize method=hbq) on SmolLM2-135M-Instruct.

HBQ-A (hbq4_b64: FP4 E2M1 elements, an E5M3 scale per 64 weights, a 2-bit
"mix" significand per 16), everything but the embedding table, data-free.
Checked:
- quality: `llmc eval --ref GGUF` mean KLD below 0.26 and top-1 above 64%
  (measured 0.221 / 69.3%, 512 tokens; RTN gq4a_g64 at 4.5 bpw measures
  0.268 / 65.0%, see docs/results/quantization.md);
- the manifest records method, table, bpw 4.375 and the share of blocks that
  picked FP-10, and the matrices are hbq4_b64 (norms f32);
- the artifact bytes of one matrix, decoded by an independent numpy decoder
  (ref/hbq_ref.py), match an independent numpy HBQ quantization of the
  source weights (gguf-py dequantization), block for block, and their error
  is the manifest's rel_rmse.
"""
import json
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import harness  # noqa: E402
import numpy as np  # noqa: E402
import gguf  # noqa: E402
import hbq_ref  # noqa: E402

GGUF = os.path.join(harness.SOURCE_DIR, ".cache", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
KLD_MAX = 0.26
TOP1_MIN = 64.0
TENSOR = "blk.3.ffn_down.weight"


def tensor_bytes(path, entry):
    with open(path, "rb") as f:
        header = f.read(64)
        data_offset = int.from_bytes(header[32:40], "little")
        f.seek(data_offset + entry["offset"])
        return np.frombuffer(f.read(entry["nbytes"]), dtype=np.uint8)


def source_matrix(name):
    r = gguf.GGUFReader(GGUF)
    t = next(t for t in r.tensors if t.name == name)
    data = gguf.quants.dequantize(t.data, t.tensor_type)
    return np.asarray(data, dtype=np.float32).reshape(tuple(int(d) for d in reversed(t.shape)))


def main():
    if not os.path.exists(GGUF):
        harness.skip(f"{GGUF} not found (run scripts/setup.sh)")
    work = harness.work_dir("quantize_hbq_smollm2")
    checks = harness.Checks("llm-quantize method=hbq (HBQ-A, hbq4_b64 mix) on SmolLM2-135M-Instruct")
    art = os.path.join(work, "hbq4_b64.llmc")
    harness.run_llmc(["compile", GGUF, "-o", art, "-q", "--pipeline",
                      "llm-quantize{method=hbq bits=4 group=64 skip=token_embd.weight}"], timeout=900)
    p = harness.run_llmc(["eval", art, "--ref", GGUF, "--json", "--max-tokens", "512"], timeout=600)
    r = json.loads(p.stdout)
    print(f"hbq4_b64 mix: kld_mean {r['kld_mean']:.4f} kld_p99 {r['kld_p99']:.3f} "
          f"top1 {r['top1']:.1f}% ppl {r['ppl']:.3f} (ref {r['ref_ppl']:.3f})")
    checks.check(all(math.isfinite(r[k]) for k in ("kld_mean", "ppl", "top1")), "metrics are finite")
    checks.check(r["kld_mean"] < KLD_MAX, f"mean KLD below {KLD_MAX}", f"{r['kld_mean']:.4f}")
    checks.check(r["top1"] > TOP1_MIN, f"top-1 above {TOP1_MIN}%", f"{r['top1']:.1f}")

    m = json.loads(harness.run_llmc(["inspect", art, "--json", "--no-verify"]).stdout)
    info = m.get("weight_transforms", {}).get(TENSOR, {})
    checks.check(info.get("method") == "hbq" and info.get("table") == "mix"
                 and info.get("format") == "hbq4_b64" and info.get("calibration_tokens") == 0
                 and abs(info.get("bpw", 0) - 4.375) < 1e-9
                 and 0 < info.get("fp10_share", -1) < 1,
                 "manifest records method, table, format, bpw, FP-10 share", json.dumps(info))
    entries = {t["name"]: t for t in harness.weight_tensors(m)}
    checks.check(entries[TENSOR]["dtype"] == "hbq4_b64"
                 and entries["blk.3.attn_norm.weight"]["dtype"] == "f32"
                 and entries["token_embd.weight"]["dtype"] == "q8_0",
                 "matrices hbq4_b64, norms f32, embedding kept",
                 f"{entries[TENSOR]['dtype']}, {entries['blk.3.attn_norm.weight']['dtype']}, "
                 f"{entries['token_embd.weight']['dtype']}")

    rows, cols = entries[TENSOR]["shape"]
    got, (sc, l2, tbs) = hbq_ref.decode(tensor_bytes(art, entries[TENSOR]), rows, cols, 64)
    src = source_matrix(TENSOR)
    want, (rsc, rl2, rtbs) = hbq_ref.quantize(src, 64, "mix")
    same = (sc == rsc) & (tbs == rtbs) & (l2 == rl2).all(-1)
    share = same.mean()
    checks.check(share > 0.999, "artifact blocks == numpy reference quantizer (scale, table, L2)",
                 f"{share * 100:.3f}% of {same.size} blocks identical")
    vals_same = (got == want).reshape(rows, cols // 64, 64).all(-1)
    checks.check((vals_same | ~same).all() and vals_same.mean() > 0.999,
                 "identical blocks decode to identical values",
                 f"{vals_same.mean() * 100:.3f}% of blocks")
    rel = float(np.sqrt(((src.astype(np.float64) - got) ** 2).sum() / (src.astype(np.float64) ** 2).sum()))
    checks.check(abs(rel - info.get("rel_rmse", -1)) < 1e-4 * rel,
                 "decoded error equals the manifest's rel_rmse", f"{rel:.6f} vs {info.get('rel_rmse')}")
    checks.finish()


if __name__ == "__main__":
    main()
