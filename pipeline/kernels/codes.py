"""Sign and pack: real projections -> packed binary codes in FAISS's binary layout.

Bit j of a code is bit (j % 8), least significant first, of byte j // 8 — the layout of
``faiss.real_to_binary`` / ``np.packbits(..., bitorder="little")``, so our codes can be
handed to ``faiss.IndexBinaryFlat`` unchanged. A code length that is not a multiple of 8
is padded with zero bits, which never change a Hamming distance. Sign convention: a
projection >= 0 gives bit 1 (+1), < 0 gives bit 0 (-1); 0 never produces a third value.
"""
from __future__ import annotations

import numpy as np

BIT_ORDER = "little"


def code_bytes(n_bits: int) -> int:
    return (n_bits + 7) // 8


def signs(projections: np.ndarray) -> np.ndarray:
    """{-1, +1} codes as float (for the math of ITQ/DisH); 0 maps to +1."""
    return np.where(projections >= 0, 1.0, -1.0).astype(projections.dtype, copy=False)


def pack_signs(projections: np.ndarray) -> np.ndarray:
    """(n, n_bits) real -> (n, ceil(n_bits/8)) uint8 packed codes."""
    return np.packbits(projections >= 0, axis=1, bitorder=BIT_ORDER)


def unpack_bits(codes: np.ndarray, n_bits: int) -> np.ndarray:
    """(n, n_bytes) uint8 -> (n, n_bits) uint8 in {0, 1}."""
    return np.unpackbits(codes, axis=1, count=n_bits, bitorder=BIT_ORDER)


def project_linear(X: np.ndarray, mean: np.ndarray, components: np.ndarray) -> np.ndarray:
    """(X - mean) @ components in float32 (the chunk is converted once, row by row identical
    whatever the chunking, so codes do not depend on how the data is chunked)."""
    Xc = X.astype(np.float32, copy=True)
    Xc -= mean.astype(np.float32, copy=False)
    return Xc @ components.astype(np.float32, copy=False)


def encode_linear(X: np.ndarray, mean: np.ndarray, components: np.ndarray) -> np.ndarray:
    """Packed codes of sgn((X - mean) W): the encoder of LSH, PCAH and ITQ."""
    return pack_signs(project_linear(X, mean, components))


def encode_linear_grouped(X: np.ndarray, groups: np.ndarray, mean: np.ndarray, components: np.ndarray) -> np.ndarray:
    """Packed codes where row j uses projection ``components[groups[j]]`` (DisH1: each node
    encodes its own rows with its own dictionary)."""
    out = np.empty((X.shape[0], code_bytes(components.shape[2])), np.uint8)
    for g in np.unique(groups):
        rows = np.flatnonzero(groups == g)
        out[rows] = encode_linear(X[rows], mean, components[g])
    return out
