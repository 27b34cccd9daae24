#!/usr/bin/env python3
"""FP4 block-format baselines for HBQ (docs/results/hbq.md), by fake
quantization: the source GGUF is rewritten with every matrix weight but the
embedding replaced by its quantize-dequantize image in F32, then scored with
`llmc eval MODEL.gguf --ref SOURCE`. llmc has no storage format for these;
the numbers measure accuracy only.

Kinds:
  mxfp4         FP4 E2M1, a power-of-two (E8M0) scale per 32 (OCP MX: 2^(floor(log2 max) - 2))
  nvfp4         FP4 E2M1, an E4M3 scale per 16 times a per-tensor fp32 scale
  fp4_e5m3_b64  FP4 E2M1, an E5M3 scale per 64: HBQ-A without its L2 level
  hbq_np        HBQ-A (hbq4_b64 mix) by the numpy reference (test/e2e/ref/hbq_ref.py):
                must score exactly like llmc's own hbq4_b64 artifact

Usage (from the repo, with the venv: numpy, gguf):
  .venv/bin/python bench/hbq_fp4_baselines.py mxfp4 /tmp/mxfp4.gguf
  build/bin/llmc eval /tmp/mxfp4.gguf --ref .cache/models/SmolLM2-135M-Instruct.Q4_1.gguf \\
      --json --max-tokens 512
"""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "test", "e2e", "ref"))

import gguf  # noqa: E402
import numpy as np  # noqa: E402
import hbq_ref  # noqa: E402

F32 = np.float32
SOURCE = os.path.join(REPO, ".cache", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def fp4(q):
    """Nearest FP4 E2M1 value (ties away from zero, saturating at 6)."""
    return np.sign(q) * hbq_ref.E2M1[hbq_ref._magnitude_index(np.abs(q))]


def _e4m3_table():
    v = []
    for c in range(127):  # 127 is NaN; largest finite 448
        e, m = c >> 3, c & 7
        v.append((m / 8) * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
    return np.array(v, F32)


E4M3 = _e4m3_table()


def _nearest(table, v):
    c = np.searchsorted(table, v, side="right")
    hi = table[np.minimum(c, len(table) - 1)]
    lo = table[np.maximum(c - 1, 0)]
    return table[np.clip(np.where(v >= (lo + hi) / 2, c, c - 1), 0, len(table) - 1)]


def mxfp4(w):
    R, C = w.shape
    x = w.reshape(R, C // 32, 32)
    amax = np.abs(x).max(-1, keepdims=True)
    s = np.exp2(np.floor(np.log2(np.where(amax > 0, amax, 1))) - 2).astype(F32)
    return (fp4(x / s) * s).reshape(R, C)


def nvfp4(w):
    R, C = w.shape
    x = w.reshape(R, C // 16, 16)
    g = F32(np.abs(w).max() / (6 * 448))
    s = _nearest(E4M3, (np.abs(x).max(-1, keepdims=True) / 6 / g).astype(F32)) * g
    s = np.where(s > 0, s, F32(1))
    return (fp4(x / s) * s).reshape(R, C)


def fp4_e5m3_b64(w):
    R, C = w.shape
    x = w.reshape(R, C // 64, 64)
    amax = np.abs(x).max(-1, keepdims=True)
    s = hbq_ref.E5M3[np.maximum(hbq_ref.scale_encode((amax / F32(6)).astype(F32)), 1)]
    return (fp4(x / s) * s).reshape(R, C)


def hbq_np(w):
    return hbq_ref.quantize(w, 64, "mix")[0]


KINDS = {"mxfp4": mxfp4, "nvfp4": nvfp4, "fp4_e5m3_b64": fp4_e5m3_b64, "hbq_np": hbq_np}


def main(kind, out, source=SOURCE):
    fn = KINDS[kind]
    r = gguf.GGUFReader(source)
    w = gguf.GGUFWriter(out, r.fields["general.architecture"].contents())
    for f in r.fields.values():
        if f.name == "general.architecture" or f.name.startswith("GGUF."):
            continue
        vt = f.types[0]
        w.add_key_value(f.name, f.contents(), vt,
                        sub_type=f.types[-1] if vt == gguf.GGUFValueType.ARRAY else None)
    datas, err, ref = [], 0.0, 0.0
    for t in r.tensors:
        if len(t.shape) == 2 and t.name != "token_embd.weight":
            a = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), F32)
            a = a.reshape(tuple(int(d) for d in reversed(t.shape)))
            q = fn(a).astype(F32)
            err += float(((a - q) ** 2).sum())
            ref += float((a ** 2).sum())
            w.add_tensor_info(t.name, q.shape, q.dtype, q.nbytes, gguf.GGMLQuantizationType.F32)
            datas.append(q)
        else:
            w.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
            datas.append(t.data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for d in datas:
        w.write_tensor_data(d)
    w.close()
    print(f"{kind}: wrote {out}; rel. RMS error over the matrices {(err / ref) ** 0.5:.4f}")


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4) or sys.argv[1] not in KINDS:
        sys.exit(__doc__)
    main(*sys.argv[1:])
