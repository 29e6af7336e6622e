"""Gram blocks of sign codes against the data they code, and the row sums of a chunk. Plain
numpy and numba.

``gram_chunk`` gives B^T (X - mean) for B = sgn((X - mean) C), in one read of the chunk: the
term every sign-quantisation method alternating codes and a projection needs (ITQ's rotation
step, DisH's dictionary step). ``row_sums`` gives the counts, column sums and sum of squares
from which the mean and ||X - mean||^2 of any set of chunks follow (``centred_sq_norm``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dask_hashcodes.kernels.codes import SLAB_ROWS, code_size, pack_signs, project_slabs

BIT_OF_BYTE = ((np.arange(256)[:, None] >> np.arange(8)) & 1).astype(np.float64)  # (byte value, bit)
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


@njit(nogil=True, cache=True)
def _byte_group_sums(codes, X, sums, counts, wide, flush_every):
    """For each code byte b and value v: sums[b, v] += rows of X whose byte b is v.
    Byte-major order: one byte's 256-row table stays in cache while the slab streams by.

    Narrow accumulators are flushed: with ``flush_every`` > 0 each bin is added into the
    int64 ``wide`` and cleared every ``flush_every`` rows, before it could wrap. uint8
    features go into uint16 sums this way: a 64 KiB table per byte at d = 128 stays in L1/L2
    where int32 sums would not. (Signing inside this
    loop instead of np.packbits is slower: the bit loop is not vectorised.)"""
    d = X.shape[1]
    for b in range(codes.shape[1]):
        for i in range(X.shape[0]):
            v = codes[i, b]
            counts[b, v] += 1
            target = sums[b, v]
            for c in range(d):
                target[c] += X[i, c]
            if flush_every > 0 and counts[b, v] % flush_every == 0:
                flushed = wide[b, v]
                for c in range(d):
                    flushed[c] += target[c]
                    target[c] = 0


NO_FLUSH = np.zeros((0, 0, 0), np.int64)  # ``wide`` of _byte_group_sums when nothing is flushed


def _accumulator(X: np.ndarray) -> tuple[type, int]:
    """(accumulator dtype, rows per accumulation) for the byte-grouped sums of ``X``.

    Integer sums are exact: int32 accumulators (half the vector width of int64, so faster)
    while ``rows x max|x|`` of this block fits in int32, restarted before it could overflow;
    int64 when only that fits; float64 (numpy's own accumulation) for values so large that
    even 2048 rows could overflow int64. The bound comes from the block's actual values,
    not its dtype's range: int64 features of 1e7-4e8 would overflow int32 within 2048 rows
    (its dtype range would say "any row may be 2^63"). Float features: float64."""
    if not np.issubdtype(X.dtype, np.integer) or X.size == 0:
        return np.float64, X.shape[0] or 1
    peak = max(abs(int(X.min())), abs(int(X.max())), 1)
    for acc, limit in ((np.int32, INT32_MAX), (np.int64, INT64_MAX)):
        rows = limit // peak
        if rows >= SLAB_ROWS:
            return acc, int(rows // SLAB_ROWS * SLAB_ROWS)
    return np.float64, X.shape[0]


def gram_from_byte_sums(sums: np.ndarray, counts: np.ndarray, n: int, n_bits: int, mean: np.ndarray) -> np.ndarray:
    """B^T (X - mean) (n_bits x d) from per-byte-value row sums. With B in {-1, +1}, row j of
    B^T X is 2 (sum of rows whose bit j is 1) - (sum of all rows), and the rows whose bit j
    is 1 are those whose byte j // 8 has bit j % 8 set: 256-bin sums give every bit."""
    sums = sums.astype(np.float64, copy=False)
    col_sum = sums[0].sum(axis=0)
    # (bit of byte)^T x (byte value sums) as one batched BLAS product: every term and partial
    # sum is an integer below 2^53, so the result is exact, the same bits as any other order
    plus = np.matmul(BIT_OF_BYTE.T, sums).reshape(-1, sums.shape[2])[:n_bits]
    plus_rows = (counts @ BIT_OF_BYTE).reshape(-1)[:n_bits]
    return (2.0 * plus - col_sum) - np.outer(2.0 * plus_rows - n, mean)


# Below this many rows a uint8 block's B^T X comes from one float32 GEMM instead of the
# byte-value tables: zeroing and converting 256 bins per code byte costs more than the GEMM's
# extra work per row there (node pieces of a by-label partition are this small). Both give
# the same integers, so the same bits: float32 holds every partial sum exactly while rows x
# 255 < 2^24, i.e. up to 65,793 rows.
SMALL_BLOCK_ROWS = 4096


def gram_chunk(X: np.ndarray, mean: np.ndarray, C: np.ndarray) -> np.ndarray:
    """One read of a chunk: B^T Xc (r x d) with B = sgn(Xc C), Xc = X - mean.

    B comes from the float32 projection of the encoder (so training and encoding agree);
    B^T X from byte-grouped row sums instead of a second GEMM: r/8 vector adds of a row per
    row instead of r multiply-adds (small uint8 blocks: one exact float32 GEMM)."""
    X = np.asarray(X)
    n, d = X.shape
    r = C.shape[1]
    if X.dtype == np.uint8 and n < SMALL_BLOCK_ROWS:
        return _small_block_gram(X, mean, C)
    counts = np.zeros((code_size(r), 256), np.int64)
    if X.dtype == np.uint8:
        total = np.zeros((code_size(r), 256, d), np.int64)
        sums16 = np.zeros((code_size(r), 256, d), np.uint16)
        for rows, projected in project_slabs(X, mean, C):
            _byte_group_sums(pack_signs(projected), X[rows], sums16, counts, total, 256)
        total += sums16
        return gram_from_byte_sums(total, counts, n, r, np.asarray(mean, dtype=np.float64))
    acc_dtype, rows_per_acc = _accumulator(X)
    total = np.zeros((code_size(r), 256, d), np.float64)
    sums = np.zeros_like(total, dtype=acc_dtype)
    for rows, projected in project_slabs(X, mean, C):
        if rows.start % rows_per_acc == 0 and rows.start:
            total += sums
            sums[:] = 0
        _byte_group_sums(pack_signs(projected), X[rows], sums, counts, NO_FLUSH, 0)
    total += sums
    return gram_from_byte_sums(total, counts, n, r, np.asarray(mean, dtype=np.float64))


def _small_block_gram(X: np.ndarray, mean: np.ndarray, C: np.ndarray) -> np.ndarray:
    """gram_chunk of a uint8 block of fewer than SMALL_BLOCK_ROWS rows: the row sums of each
    bit's set rows by one float32 GEMM (exact integers), then gram_from_byte_sums' formula."""
    n, r = X.shape[0], C.shape[1]
    bits = np.empty((n, r + 1), np.float32)
    bits[:, r] = 1.0  # a column of ones: the same product gives the column sums
    for rows, projected in project_slabs(X, mean, C):
        bits[rows, :r] = projected >= 0
    sums = (bits.T @ X.astype(np.float32)).astype(np.float64)
    plus, col_sum = sums[:r], sums[r]
    plus_rows = bits[:, :r].sum(axis=0, dtype=np.float64)
    return (2.0 * plus - col_sum) - np.outer(2.0 * plus_rows - n, np.asarray(mean, dtype=np.float64))


@njit(nogil=True, cache=True)
def _column_sums_and_squares(X, col_sum, col_sq):
    for i in range(X.shape[0]):
        for j in range(X.shape[1]):
            v = np.float64(X[i, j])
            col_sum[j] += v
            col_sq[j] += v * v


def row_sums(X: np.ndarray):
    """(rows, column sums, sum of squares): the mean and ||X - mean||^2 of any row set follow.
    One pass without a float64 copy of the chunk (sums of integer data are exact)."""
    X = np.asarray(X)
    col_sum, col_sq = np.zeros(X.shape[1]), np.zeros(X.shape[1])
    _column_sums_and_squares(X, col_sum, col_sq)
    return X.shape[0], col_sum, float(col_sq.sum())


def centred_sq_norm(n: int, col_sum: np.ndarray, sq_sum: float, mean: np.ndarray) -> float:
    """||X - mean||_F^2 from row_sums: sum ||x||^2 - 2 mean . sum x + n ||mean||^2."""
    return float(sq_sum - 2.0 * mean @ col_sum + n * mean @ mean)
