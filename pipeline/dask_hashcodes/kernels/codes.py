"""Sign and pack: real projections -> packed binary codes in FAISS's binary layout.

Bit j of a code is bit (j % 8), least significant first, of byte j // 8 — the layout of
``faiss.real_to_binary`` / ``np.packbits(..., bitorder="little")``, so our codes can be
handed to ``faiss.IndexBinaryFlat`` unchanged. A code length that is not a multiple of 8
is padded with zero bits, which never change a Hamming distance. Sign convention: a
projection >= 0 gives bit 1 (+1), < 0 gives bit 0 (-1); 0 never produces a third value.
Also the random {-1, +1} codes that the discrete methods start from (``random_codes``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

BIT_ORDER = "little"


def code_size(n_bits: int) -> int:
    return (n_bits + 7) // 8


def pack_signs(projections: np.ndarray) -> np.ndarray:
    """(n, n_bits) real -> (n, ceil(n_bits/8)) uint8 packed codes."""
    return np.packbits(projections >= 0, axis=1, bitorder=BIT_ORDER)


def unpack_bits(codes: np.ndarray, n_bits: int) -> np.ndarray:
    """(n, n_bytes) uint8 -> (n, n_bits) uint8 in {0, 1}."""
    return np.unpackbits(codes, axis=1, count=n_bits, bitorder=BIT_ORDER)


START_BLOCK_ROWS = 4096  # the random start is drawn in blocks of this many training rows


def random_codes(seed: int, start: int, n_rows: int, n_bits: int) -> np.ndarray:
    """B's start for the training rows ``start`` .. ``start + n_rows`` (int8, +-1): random signs,
    as the authors' codes of SDH and COSDISH start (sign(randn(n, L))). The rows are cut into
    fixed blocks of START_BLOCK_ROWS counted from the first training row, and block b is drawn
    from ``default_rng([seed, b])``, so a row's start depends on the seed and its row number
    only: the same on any split of the rows into chunks."""
    if n_rows <= 0:
        return np.zeros((0, n_bits), dtype=np.int8)
    first, last = start // START_BLOCK_ROWS, (start + n_rows - 1) // START_BLOCK_ROWS
    blocks = [
        np.random.default_rng([seed, b]).integers(0, 2, (START_BLOCK_ROWS, n_bits), dtype=np.int8)
        for b in range(first, last + 1)
    ]
    offset = start - first * START_BLOCK_ROWS
    return (np.concatenate(blocks)[offset : offset + n_rows] * 2 - 1).astype(np.int8)


SLAB_ROWS = 2048  # rows converted to float32 at a time: the slab stays in L2 for the GEMM


def read_only(array: np.ndarray) -> np.ndarray:
    """A read-only view of ``array`` (no copy). numba compiles a kernel once per argument
    type, and a read-only array (a file memory-mapped with mode "r") is another type than a
    writeable one: an argument a kernel only reads is passed read-only either way, so one
    compiled version serves both."""
    view = array.view()
    view.flags.writeable = False
    return view


def row_slabs(n_rows: int, slab_rows: int = SLAB_ROWS):
    """Yield slices of ``slab_rows`` consecutive rows (the last one shorter) covering ``n_rows``:
    the unit a kernel converts and multiplies at a time, so a chunk is never copied whole."""
    for start in range(0, n_rows, slab_rows):
        yield slice(start, min(start + slab_rows, n_rows))


@njit(nogil=True, cache=True)
def _centre_into(X, mean, out):
    """out = float32(X) - mean, in one pass (numpy's astype then subtract makes two and its
    uint8 -> float32 cast is unvectorised)."""
    for i in range(X.shape[0]):
        for j in range(X.shape[1]):
            out[i, j] = np.float32(X[i, j]) - mean[j]


def project_slabs(X: np.ndarray, mean: np.ndarray, components: np.ndarray):
    """Yield (row slice, (X[rows] - mean) @ components in float32) slab by slab.

    Each row is converted and projected on its own (a GEMM row does not depend on the other
    rows), so codes do not depend on how the data is chunked; a cache-sized float32 slab
    instead of a converted copy of the whole chunk keeps the pass at memory-read speed."""
    X = np.asarray(X)
    mean32 = np.asarray(mean, dtype=np.float32)
    W32 = np.asarray(components, dtype=np.float32)
    slab = np.empty((min(SLAB_ROWS, X.shape[0]), X.shape[1]), np.float32)
    for rows in row_slabs(X.shape[0]):
        part = slab[: rows.stop - rows.start]
        _centre_into(X[rows], mean32, part)
        yield rows, part @ W32


def project_linear(X: np.ndarray, mean: np.ndarray, components: np.ndarray) -> np.ndarray:
    """(X - mean) @ components in float32."""
    out = np.empty((X.shape[0], np.shape(components)[1]), np.float32)
    for rows, projected in project_slabs(X, mean, components):
        out[rows] = projected
    return out


def encode_linear(X: np.ndarray, mean: np.ndarray, components: np.ndarray) -> np.ndarray:
    """Packed codes of sgn((X - mean) W): the encoder of LSH, PCAH, ITQ and DisH."""
    out = np.empty((X.shape[0], code_size(np.shape(components)[1])), np.uint8)
    for rows, projected in project_slabs(X, mean, components):
        out[rows] = pack_signs(projected)
    return out


def encode_linear_grouped(X: np.ndarray, groups: np.ndarray, mean: np.ndarray, components: np.ndarray) -> np.ndarray:
    """Packed codes where row j uses projection ``components[groups[j]]`` (DisH1: each node
    encodes its own rows with its own dictionary)."""
    out = np.empty((X.shape[0], code_size(components.shape[2])), np.uint8)
    for g in np.unique(groups):
        rows = np.flatnonzero(groups == g)
        out[rows] = encode_linear(X[rows], mean, components[g])
    return out
