"""Exact squared-L2 top-k of a block (ground truth), GEMM-based, ties broken by id.

||q - x||^2 = ||q||^2 - 2 q.x + ||x||^2 in float64: exact for integer data such as SIFT
(every term is an integer below 2**53), so ties are real ties and broken by id.
"""
from __future__ import annotations

import numpy as np

PAIRS_PER_BATCH = 1 << 23


def squared_distances(Q: np.ndarray, X: np.ndarray) -> np.ndarray:
    Q = np.asarray(Q, dtype=np.float64)
    X = np.asarray(X, dtype=np.float64)
    d = (Q * Q).sum(1)[:, None] - 2.0 * (Q @ X.T) + (X * X).sum(1)[None, :]
    return np.maximum(d, 0.0, out=d)


def _rows_topk(dist: np.ndarray, ids: np.ndarray, k: int):
    """Top-k per row by (distance, id); ids increasing along columns."""
    m, n = dist.shape
    kk = min(k, n)
    out_d = np.full((m, k), np.inf)
    out_i = np.full((m, k), -1, np.int64)
    part = np.argpartition(dist, kk - 1, axis=1)[:, :kk] if kk < n else np.broadcast_to(np.arange(n), (m, n))
    kth = np.take_along_axis(dist, part, axis=1).max(axis=1)
    for r in range(m):
        # every column at or below the k-th distance (ties included), in id order
        cols = np.flatnonzero(dist[r] <= kth[r])
        cols = cols[np.argsort(dist[r, cols], kind="stable")[:kk]]
        out_d[r, :kk] = dist[r, cols]
        out_i[r, :kk] = ids[cols]
    return out_d, out_i


def l2_topk(X: np.ndarray, ids: np.ndarray, *, queries: np.ndarray, k: int):
    """Exact top-k of one block: (squared distances float64 (m,k), ids int64 (m,k)), inf/-1 padded."""
    ids = np.asarray(ids, dtype=np.int64)
    m = queries.shape[0]
    if len(X) == 0:
        return np.full((m, k), np.inf), np.full((m, k), -1, np.int64)
    step = max(1, PAIRS_PER_BATCH // len(X))
    parts = [_rows_topk(squared_distances(queries[s:s + step], X), ids, k) for s in range(0, m, step)]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def merge_l2_topk(a, b, k: int):
    dist = np.concatenate([a[0], b[0]], axis=1)
    ids = np.concatenate([a[1], b[1]], axis=1)
    ids_key = np.where(ids < 0, np.iinfo(np.int64).max, ids)
    order = np.lexsort((ids_key, dist), axis=-1)[:, :k]
    return np.take_along_axis(dist, order, axis=1), np.take_along_axis(ids, order, axis=1)
