"""Exact squared-L2 top-k of a block (ground truth), GEMM-based, ties broken by id.

||q - x||^2 = ||q||^2 - 2 q.x + ||x||^2. The ranking term ||x||^2 - 2 q.x comes from a
BLAS GEMM over slabs of SLAB_ROWS database rows; a numba loop keeps a bounded max-heap of
(distance, id) per query, entered only by distances strictly below the heap's top (rows
are scanned in id order, so an equal distance never displaces a smaller id: ties by id).

Exactness: for integer data whose products and sums stay below 2**24 (e.g. SIFT: 128-d
uint8, d * 255**2 < 2**24) every float32 term is an exact integer, so the float32 GEMM is
exact and ties are real ties — this is the fast path, the one FAISS uses (FAISS always
uses float32). Any other data uses float64 (exact below 2**53 for integers).
"""
from __future__ import annotations

import numpy as np
from numba import njit

SLAB_ROWS = 2048
FLOAT32_EXACT = 2 ** 24


def exact_dtype(X: np.ndarray, queries: np.ndarray) -> type:
    """float32 when every GEMM term is an integer below 2**24, else float64."""
    if not (np.issubdtype(X.dtype, np.integer) and np.issubdtype(queries.dtype, np.integer)):
        return np.float64
    peak = max(abs(int(np.iinfo(X.dtype).min)), int(np.iinfo(X.dtype).max))
    qpeak = int(np.abs(queries.astype(np.int64)).max(initial=0))
    d = X.shape[1]
    bound = d * max(peak, qpeak) ** 2 * 2   # ||x||^2 + 2|q.x|, both bounded by d * peak^2
    return np.float32 if bound < FLOAT32_EXACT else np.float64


def squared_distances(Q: np.ndarray, X: np.ndarray) -> np.ndarray:
    Q = np.asarray(Q, dtype=np.float64)
    X = np.asarray(X, dtype=np.float64)
    d = (Q * Q).sum(1)[:, None] - 2.0 * (Q @ X.T) + (X * X).sum(1)[None, :]
    return np.maximum(d, 0.0, out=d)


@njit(nogil=True, cache=True)
def _heap_less(da, ia, db, ib):
    return da < db or (da == db and ia < ib)


@njit(nogil=True, cache=True)
def _heap_replace_top(heap_d, heap_i, d, i):
    """Replace the max of a (distance, id) max-heap and sift down."""
    k = heap_d.shape[0]
    pos = 0
    while True:
        child = 2 * pos + 1
        if child >= k:
            break
        if child + 1 < k and _heap_less(heap_d[child], heap_i[child], heap_d[child + 1], heap_i[child + 1]):
            child += 1
        if not _heap_less(d, i, heap_d[child], heap_i[child]):
            break
        heap_d[pos] = heap_d[child]
        heap_i[pos] = heap_i[child]
        pos = child
    heap_d[pos] = d
    heap_i[pos] = i


@njit(nogil=True, cache=True)
def _push_slab(dots, x_norms, ids, heap_d, heap_i):
    """Offer ||x||^2 - 2 q.x of a slab (queries x rows) to each query's heap."""
    for q in range(dots.shape[0]):
        top = heap_d[q, 0]
        for j in range(dots.shape[1]):
            d = x_norms[j] - 2.0 * dots[q, j]
            if d < top:
                _heap_replace_top(heap_d[q], heap_i[q], d, ids[j])
                top = heap_d[q, 0]


def l2_topk(X: np.ndarray, ids: np.ndarray, *, queries: np.ndarray, k: int):
    """Exact top-k of one block: (squared distances float64 (m,k), ids int64 (m,k)), inf/-1
    padded; ids must ascend along the rows of X (ties by id)."""
    ids = np.asarray(ids, dtype=np.int64)
    queries = np.asarray(queries)
    m = queries.shape[0]
    if len(X) == 0:
        return np.full((m, k), np.inf), np.full((m, k), -1, np.int64)
    dtype = exact_dtype(X, queries)
    Q = queries.astype(dtype)
    heap_d = np.full((m, k), np.inf, dtype)
    heap_i = np.full((m, k), np.iinfo(np.int64).max, np.int64)
    for start in range(0, len(X), SLAB_ROWS):
        slab = np.asarray(X[start:start + SLAB_ROWS], dtype=dtype)
        x_norms = np.einsum("ij,ij->i", slab, slab)
        _push_slab(Q @ slab.T, x_norms, ids[start:start + SLAB_ROWS], heap_d, heap_i)
    q_norms = np.einsum("ij,ij->i", queries.astype(np.float64), queries.astype(np.float64))
    dist = heap_d.astype(np.float64) + q_norms[:, None]
    order = np.lexsort((heap_i, dist), axis=-1)
    dist, out_i = np.take_along_axis(dist, order, axis=1), np.take_along_axis(heap_i, order, axis=1)
    empty = np.isinf(dist)
    out_i[empty] = -1
    return np.maximum(dist, 0.0), out_i


def merge_l2_topk(a, b, k: int):
    dist = np.concatenate([a[0], b[0]], axis=1)
    ids = np.concatenate([a[1], b[1]], axis=1)
    ids_key = np.where(ids < 0, np.iinfo(np.int64).max, ids)
    order = np.lexsort((ids_key, dist), axis=-1)[:, :k]
    return np.take_along_axis(dist, order, axis=1), np.take_along_axis(ids, order, axis=1)
