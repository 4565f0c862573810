#!/usr/bin/env python3
"""K-quant encoders (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K), an IQ4_NL encoder, and the test vectors of Corolla's
dequantization.

gguf-py dequantizes these types but has no quantizer for them.  The encoders here follow the block layouts of
ggml's format (kernels/dtype.hpp describes them) with a plain fit: each sub-block spans its own [min(0, lowest),
highest] range (Q6_K, Q3_K: a symmetric range per 16 values; Q2_K: per 16 values), the sub-block steps and mins
become 6-bit (Q6_K: 8-bit, Q2_K: 4-bit) multiples of the super-block's f16 scales; IQ4_NL maps a block's value of
largest magnitude to its grid's end and refits the scale by least squares.  They match Corolla's from_f32.  It is
a valid encoding, not llama-quantize's search for the least error; what the engine must reproduce is its
dequantized values, which gguf.quants.dequantize gives.

Run from the repository root to write the test vectors (random block bytes and gguf-py's dequantization of them,
for the K-quants, Q5_0 / Q5_1 and IQ4_NL) that tests/unit/test_dtype.cpp compares Corolla's dequantization with:

    python3 tools/kquants.py --out tests/data/dequant
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import gguf
from gguf import GGMLQuantizationType

QK_K = 256


def _f16(v: np.ndarray) -> np.ndarray:
    return v.astype(np.float16)


def _pack_scales(sc: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Eight 6-bit scales and mins per block ([n, 8] each) into ggml's 12 bytes ([n, 12])."""
    sc = sc.astype(np.uint8)
    m = m.astype(np.uint8)
    out = np.empty((sc.shape[0], 12), dtype=np.uint8)
    out[:, 0:4] = (sc[:, 0:4] & 63) | ((sc[:, 4:8] >> 4) << 6)
    out[:, 4:8] = (m[:, 0:4] & 63) | ((m[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (sc[:, 4:8] & 15) | ((m[:, 4:8] & 15) << 4)
    return out


def _quantize_q45_k(x: np.ndarray, levels: int) -> np.ndarray:
    n = x.shape[0]
    xs = x.reshape(n, 8, 32).astype(np.float32)
    lo = np.minimum(xs.min(axis=-1), 0)
    hi = np.maximum(xs.max(axis=-1), 0)
    step = (hi - lo) / levels
    d = _f16(step.max(axis=-1) / 63)
    dmin = _f16((-lo).max(axis=-1) / 63)
    df = d.astype(np.float32)[:, None]
    dminf = dmin.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(df > 0, np.clip(np.rint(step / df), 0, 63), 0)
        m = np.where(dminf > 0, np.clip(np.rint(-lo / dminf), 0, 63), 0)
        ds = (df * sc)[:, :, None]
        dm = (dminf * m)[:, :, None]
        q = np.where(ds > 0, np.clip(np.rint((xs + dm) / ds), 0, levels), 0).astype(np.uint8)  # [n, 8, 32]
    # bytes 32i..32i+31 of qs: sub-block 2i in the low nibbles, 2i + 1 in the high ones
    qs = ((q[:, 0::2] & 15) | ((q[:, 1::2] & 15) << 4)).reshape(n, 128)
    parts = [d.view(np.uint8).reshape(n, 2), dmin.view(np.uint8).reshape(n, 2), _pack_scales(sc, m)]
    if levels == 31:  # bit j of qh[l] is the fifth bit of value l of sub-block j
        qh = np.zeros((n, 32), dtype=np.uint8)
        for j in range(8):
            qh |= ((q[:, j] >> 4) & 1) << j
        parts.append(qh)
    parts.append(qs)
    return np.concatenate(parts, axis=-1)


def _quantize_q6_k(x: np.ndarray) -> np.ndarray:
    n = x.shape[0]
    xs = x.reshape(n, 16, 16).astype(np.float32)
    step = np.abs(xs).max(axis=-1) / 31
    d = _f16(step.max(axis=-1) / 127)
    df = d.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(df > 0, np.clip(np.rint(step / df), 0, 127), 0)
        ds = (df * sc)[:, :, None]
        q = (np.where(ds > 0, np.clip(np.rint(xs / ds), -32, 31), 0) + 32).astype(np.uint8).reshape(n, 2, 4, 32)
    # half h, quarter t, value l: ql[64h + 32(t & 1) + l] nibble t >> 1, qh[32h + l] bits 2t, 2t + 1
    ql = np.concatenate([(q[:, :, 0] & 15) | ((q[:, :, 2] & 15) << 4),
                         (q[:, :, 1] & 15) | ((q[:, :, 3] & 15) << 4)], axis=-1).reshape(n, 128)
    qh = np.zeros((n, 2, 32), dtype=np.uint8)
    for t in range(4):
        qh |= (q[:, :, t] >> 4) << (2 * t)
    return np.concatenate([ql, qh.reshape(n, 64), sc.astype(np.int8).view(np.uint8), d.view(np.uint8).reshape(n, 2)],
                          axis=-1)


def _signed_max(x: np.ndarray) -> np.ndarray:
    """The value of largest magnitude along the last axis, with its sign."""
    return np.take_along_axis(x, np.abs(x).argmax(axis=-1)[..., None], axis=-1)[..., 0]


def _low_bits(q: np.ndarray) -> np.ndarray:
    """Levels [n, 256] (< 4 after masking) into qs [n, 64]: value 128h + 32t + l at qs[32h + l] >> 2t."""
    q = (q & 3).astype(np.uint8).reshape(q.shape[0], 2, 4, 32)
    qs = np.zeros((q.shape[0], 2, 32), dtype=np.uint8)
    for t in range(4):
        qs |= q[:, :, t] << (2 * t)
    return qs.reshape(q.shape[0], 64)


def _quantize_q2_k(x: np.ndarray) -> np.ndarray:
    n = x.shape[0]
    xs = x.reshape(n, 16, 16).astype(np.float32)
    lo = np.minimum(xs.min(axis=-1), 0)
    step = (np.maximum(xs.max(axis=-1), 0) - lo) / 3
    d = _f16(step.max(axis=-1) / 15)
    dmin = _f16((-lo).max(axis=-1) / 15)
    df = d.astype(np.float32)[:, None]
    dminf = dmin.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(df > 0, np.clip(np.rint(step / df), 0, 15), 0).astype(np.uint8)
        m = np.where(dminf > 0, np.clip(np.rint(-lo / dminf), 0, 15), 0).astype(np.uint8)
        ds = (df * sc)[:, :, None]
        dm = (dminf * m)[:, :, None]
        q = np.where(ds > 0, np.clip(np.rint((xs + dm) / ds), 0, 3), 0).astype(np.uint8).reshape(n, 256)
    return np.concatenate([sc | (m << 4), _low_bits(q), d.view(np.uint8).reshape(n, 2),
                           dmin.view(np.uint8).reshape(n, 2)], axis=-1)


def _quantize_q3_k(x: np.ndarray) -> np.ndarray:
    n = x.shape[0]
    xs = x.reshape(n, 16, 16).astype(np.float32)
    step = _signed_max(xs) / -4
    d = _f16(_signed_max(step) / -32)
    df = d.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(df != 0, np.clip(np.rint(step / df), -32, 31), 0)
        ds = (df * sc)[:, :, None]
        q = (np.where(ds != 0, np.clip(np.rint(xs / ds), -4, 3), 0) + 4).astype(np.uint8).reshape(n, 256)
    stored = (sc + 32).astype(np.uint8)  # [n, 16]
    scales = np.zeros((n, 12), dtype=np.uint8)
    scales[:, 0:8] = (stored[:, 0:8] & 15) | ((stored[:, 8:16] & 15) << 4)
    for j in range(16):
        scales[:, 8 + j % 4] |= (stored[:, j] >> 4) << (2 * (j // 4))
    hmask = np.zeros((n, 32), dtype=np.uint8)
    for b in range(8):  # bit b of hmask[l]: the third bit of value 32b + l
        hmask |= ((q[:, 32 * b:32 * b + 32] >> 2) & 1) << b
    return np.concatenate([hmask, _low_bits(q), scales, d.view(np.uint8).reshape(n, 2)], axis=-1)


IQ4_NL_VALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.float32)


def _quantize_iq4_nl(x: np.ndarray) -> np.ndarray:
    """Blocks of 32: d maps the value of largest magnitude to -127, each value takes the nearest level, then d is
    refitted by least squares to those levels where that lowers the error."""
    xs = x.reshape(-1, 32).astype(np.float32)

    def fit(d):
        with np.errstate(divide="ignore", invalid="ignore"):
            v = np.where(d[:, None] != 0, xs / d[:, None], 0)
        q = np.abs(v[:, :, None] - IQ4_NL_VALUES).argmin(axis=-1)
        err = ((xs - _f16(d).astype(np.float32)[:, None] * IQ4_NL_VALUES[q]) ** 2).sum(axis=-1)
        return q, err

    d = _signed_max(xs) / -127
    q, err = fit(d)
    vals = IQ4_NL_VALUES[q]
    vv = (vals * vals).sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        refit = np.where(vv > 0, (xs * vals).sum(axis=-1) / vv, d).astype(np.float32)
    q2, err2 = fit(refit)
    better = err2 < err
    d = np.where(better, refit, d)
    q = np.where(better[:, None], q2, q).astype(np.uint8)
    qs = q[:, :16] | (q[:, 16:] << 4)
    return np.concatenate([_f16(d).view(np.uint8).reshape(-1, 2), qs], axis=-1)


ENCODERS = {
    GGMLQuantizationType.Q2_K: _quantize_q2_k,
    GGMLQuantizationType.Q3_K: _quantize_q3_k,
    GGMLQuantizationType.Q4_K: lambda x: _quantize_q45_k(x, 15),
    GGMLQuantizationType.Q5_K: lambda x: _quantize_q45_k(x, 31),
    GGMLQuantizationType.Q6_K: _quantize_q6_k,
    GGMLQuantizationType.IQ4_NL: _quantize_iq4_nl,
}


def quantize(data: np.ndarray, qtype: GGMLQuantizationType) -> np.ndarray:
    """Like gguf.quants.quantize: rows of `data` (whole blocks: 256 values, 32 for IQ4_NL) to uint8 rows of blocks."""
    if qtype not in ENCODERS:
        return gguf.quants.quantize(data, qtype)
    block = gguf.GGML_QUANT_SIZES[qtype][0]
    if data.shape[-1] % block != 0:
        raise ValueError(f"rows of {data.shape[-1]} values do not fill {qtype.name} blocks of {block}")
    blocks = ENCODERS[qtype](data.reshape(-1, block))
    return blocks.reshape(*data.shape[:-1], data.shape[-1] // block * blocks.shape[-1])


def write_vectors(out: Path, blocks_per_type: int = 6, seed: int = 26) -> None:
    """Random block bytes (finite f16 scales) and gguf-py's dequantization of them, per type:
    <type>.blocks (raw blocks) and <type>.f32 (little-endian f32 values)."""
    rng = np.random.default_rng(seed)
    out.mkdir(parents=True, exist_ok=True)
    for qtype, name in [(GGMLQuantizationType.Q4_K, "q4_K"), (GGMLQuantizationType.Q5_K, "q5_K"),
                        (GGMLQuantizationType.Q6_K, "q6_K"), (GGMLQuantizationType.Q5_0, "q5_0"),
                        (GGMLQuantizationType.Q5_1, "q5_1"), (GGMLQuantizationType.Q2_K, "q2_K"),
                        (GGMLQuantizationType.Q3_K, "q3_K"), (GGMLQuantizationType.IQ4_NL, "iq4_nl")]:
        values_per_block, size = gguf.GGML_QUANT_SIZES[qtype]
        n = blocks_per_type * QK_K // values_per_block
        raw = rng.integers(0, 256, size=(n, size), dtype=np.uint8)
        halves = _f16(rng.normal(0, 0.05, size=(n, 2))).view(np.uint8)
        if qtype in (GGMLQuantizationType.Q6_K, GGMLQuantizationType.Q3_K):
            raw[:, size - 2:] = halves[:, 0:2]  # d at the end
        elif qtype == GGMLQuantizationType.Q2_K:
            raw[:, size - 4:] = halves  # d and dmin at the end
        elif qtype in (GGMLQuantizationType.Q5_0, GGMLQuantizationType.IQ4_NL):
            raw[:, 0:2] = halves[:, 0:2]  # d
        else:
            raw[:, 0:4] = halves  # d and dmin (K-quants) or d and m (Q5_1) at the start
        # and one encoded block (gguf-py's encoder for Q5_0 / Q5_1, ours for the others), so the encoder's layout
        # is checked as well
        x = rng.normal(0, 1, size=(1, values_per_block)).astype(np.float32)
        raw = np.concatenate([raw, quantize(x, qtype)], axis=0)
        values = np.asarray(gguf.quants.dequantize(raw, qtype), dtype="<f4").reshape(-1)
        assert np.all(np.isfinite(values))
        err = np.abs(values[-values_per_block:] - x.reshape(-1)).max()
        limit = 1.0 if qtype == GGMLQuantizationType.Q2_K else 0.5  # half of Q2_K's step over a range of 3
        assert err < limit, f"{name}: the encoder's block dequantizes {err} away from its input"
        (out / f"{name}.blocks").write_bytes(raw.tobytes())
        (out / f"{name}.f32").write_bytes(values.tobytes())
        print(f"{name}: {raw.shape[0]} blocks, encoder error {err:.4f}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("tests/data/dequant"))
    write_vectors(p.parse_args().out)
