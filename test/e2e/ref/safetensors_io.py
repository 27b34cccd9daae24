"""Minimal safetensors reader/writer (F32, F16, BF16) in plain NumPy.

Format: u64 little-endian header length, a JSON header mapping each tensor
name to {dtype, shape, data_offsets: [begin, end)} relative to the end of the
header, then the raw little-endian bytes. NumPy has no bfloat16, so BF16 is
carried as uint16 bit patterns and widened to float32 by shifting into the
high half of a uint32 (exact). Written independently of the `safetensors`
package so the test fixtures do not depend on llmc's reader conventions.
"""
from __future__ import annotations

import json
import struct

import numpy as np

_NP = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2")}


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round to nearest even (as torch does); no NaN inputs expected."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def encode(x: np.ndarray, dtype: str) -> np.ndarray:
    """float32 array -> stored array of the given safetensors dtype."""
    if dtype == "F32":
        return np.ascontiguousarray(x, dtype="<f4")
    if dtype == "F16":
        return np.ascontiguousarray(x, dtype="<f2")
    if dtype == "BF16":
        return f32_to_bf16_bits(x)
    raise ValueError(f"unsupported dtype {dtype}")


def decode(stored: np.ndarray, dtype: str) -> np.ndarray:
    """Stored array -> float32 values (exact)."""
    if dtype == "BF16":
        return bf16_bits_to_f32(stored)
    return stored.astype(np.float32)


def write(path, tensors: dict, dtype: str, metadata: dict | None = None):
    """tensors: name -> float32 array; all stored as `dtype`."""
    header = {}
    blobs = []
    offset = 0
    for name, arr in tensors.items():
        data = encode(arr, dtype).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = metadata
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * ((8 - len(hjson) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for b in blobs:
            f.write(b)


def read(path) -> dict:
    """name -> float32 array (values exactly as stored)."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + hlen])
    base = 8 + hlen
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = info["dtype"]
        if dt not in _NP:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {dt}")
        b, e = info["data_offsets"]
        arr = np.frombuffer(raw, dtype=_NP[dt], count=(e - b) // _NP[dt].itemsize, offset=base + b)
        out[name] = decode(arr.reshape(info["shape"]), dt)
    return out
