"""Independent numpy reference of HBQ (llmc/format/hbq.h): the quantizer
(the authors' per-block algorithm, vectorised over whole matrices) and a
decoder of hbq<bits>_b<block> row bytes as stored in a .llmc artifact.

Only the 4-bit (FP4 E2M1) element set is modelled here: it is the paper's
format. All arithmetic is float32 like llmc's, so blocks come out identical
except where two candidates' squared errors tie to rounding (summation
order differs).
"""
from __future__ import annotations

import numpy as np

F32 = np.float32


def _e5m3_table() -> np.ndarray:
    v = []
    for c in range(256):
        e, m = c >> 3, c & 7
        v.append((m / 8) * 2.0 ** -14 if e == 0 else (1 + m / 8) * 2.0 ** (e - 15))
    return np.array(v, dtype=F32)


E5M3 = _e5m3_table()
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=F32)
E2M1_MIDS = ((E2M1[1:] + E2M1[:-1]) / F32(2)).astype(F32)
FP1 = np.array([1, 1.25, 1.5, 1.75], dtype=F32)
FP10 = np.array([1, 1.125, 1.25, 1.375], dtype=F32)
INT = np.array([1, 2, 3, 4], dtype=F32)
# byte 2 of a block -> its L2 table (bits 1..2 table set, bit 0 choice in "mix")
TABLE_BYTES = {0x00: FP1, 0x01: FP10, 0x02: FP1, 0x04: FP10, 0x06: INT}
OPTION_BYTES = {"mix": (0x00, 0x01), "fp1": (0x02,), "fp10": (0x04,), "int": (0x06,)}


def scale_encode(v: np.ndarray) -> np.ndarray:
    """Nearest E5M3 code, ties away from zero, saturating (v >= 0)."""
    c = np.searchsorted(E5M3, v, side="right")  # first code above v
    hi = E5M3[np.minimum(c, 255)]
    lo = E5M3[np.maximum(c - 1, 0)]
    mid = ((lo + hi) / F32(2)).astype(F32)
    code = np.where(v >= mid, c, c - 1)
    return np.where(c >= 256, 255, code).astype(np.int64)


def _magnitude_index(a: np.ndarray) -> np.ndarray:
    return (a[..., None] >= E2M1_MIDS).sum(-1)


def quantize(w: np.ndarray, block: int, table: str = "mix"):
    """HBQ 4-bit of a [rows, cols] float32 matrix. Returns (dequantized,
    (scale codes [R, nb], l2 indices [R, nb, 4], table bytes [R, nb]))."""
    R, C = w.shape
    sub = block // 4
    x = w.astype(F32).reshape(R, C // block, 4, sub)
    amax = np.abs(x).max(axis=(2, 3))
    best = None
    for tb in OPTION_BYTES[table]:
        t = TABLE_BYTES[tb]
        sc = scale_encode((amax / F32(6 * t[3])).astype(F32))
        sc = np.where((amax > 0) & (sc == 0), 1, sc)
        s1 = E5M3[sc]
        errs, deqs = [], []
        for lv in t:
            st = (s1 * lv).astype(F32)[..., None, None]
            safe = np.where(st > 0, st, F32(1))
            q = (x / safe).astype(F32)
            mag = E2M1[_magnitude_index(np.abs(q))]
            mag = np.where(st > 0, mag, F32(0))
            d = (np.abs(x) - st * mag).astype(F32)
            errs.append((d * d).sum(-1, dtype=F32))
            deqs.append((st * (np.sign(x) * mag)).astype(F32))
        errs = np.stack(errs, -1)  # [R, nb, 4 subs, 4 levels]
        l2 = errs.argmin(-1)
        blk_err = np.take_along_axis(errs, l2[..., None], -1)[..., 0].astype(np.float64).sum(-1)
        deq = np.take_along_axis(np.stack(deqs, -1), l2[..., None, None], -1)[..., 0]
        cand = (blk_err, deq, sc, l2, np.full(sc.shape, tb))
        if best is None:
            best = cand
        else:
            pick = cand[0] < best[0]
            best = (np.where(pick, cand[0], best[0]),
                    np.where(pick[..., None, None], cand[1], best[1]),
                    np.where(pick, cand[2], best[2]),
                    np.where(pick[..., None], cand[3], best[3]),
                    np.where(pick, cand[4], best[4]))
    _, deq, sc, l2, tbs = best
    return deq.reshape(R, C), (sc, l2, tbs)


def decode(raw: np.ndarray, rows: int, cols: int, block: int):
    """Decode hbq4_b<block> bytes of a [rows, cols] matrix. Returns
    (values, (scale codes, l2 indices, table bytes))."""
    nb = cols // block
    b = raw.reshape(rows, nb, 3 + block // 2)
    sc = b[..., 0].astype(np.int64)
    l2 = np.stack([(b[..., 1] >> (2 * k)) & 3 for k in range(4)], -1).astype(np.int64)
    tbs = b[..., 2].astype(np.int64)
    if not set(np.unique(tbs).tolist()) <= set(TABLE_BYTES):
        raise ValueError("invalid table byte in hbq data")
    qs = b[..., 3:]
    codes = np.stack([qs & 0xF, qs >> 4], -1).reshape(rows, nb, block)  # LSB-first nibbles
    val = E2M1[codes & 7] * np.where(codes & 8, F32(-1), F32(1))
    tables = np.zeros((rows, nb, 4), dtype=F32)
    for tb, t in TABLE_BYTES.items():
        tables[tbs == tb] = t
    t_sub = np.take_along_axis(tables, l2, -1)  # [R, nb, 4]
    st = (E5M3[sc][..., None] * t_sub).astype(F32)  # (s1 * t)
    out = (np.repeat(st, block // 4, axis=-1) * val).astype(F32)
    return out.reshape(rows, cols), (sc, l2, tbs)
