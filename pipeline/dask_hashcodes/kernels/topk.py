"""Merging two top-k lists of the same queries into one: the step every distributed search
(the linear scan, multi-index hashing, the inverted file, re-ranking, the exact Euclidean
neighbours) repeats in its tree of merges, so every one of them breaks ties the same way.

A list is FAISS's (D, I): D (nq, k) distances, I (nq, k) int64 ids, -1 where a part had
fewer than k rows. Hamming distances are small integers, merged through packed (distance,
id) keys; float distances (squared L2, asymmetric scores) by a sort on (distance, id). Both
put the smaller id first among equal distances and the missing entries last.

``smallest_per_row`` is the selection a probe makes: each query's few nearest centroids
among many scores.
"""

from __future__ import annotations

from functools import partial

import numpy as np
from numba import njit

from dask_hashcodes.kernels.hamming import merge_topk
from dask_hashcodes.kernels.l2 import merge_l2_topk


def merge_topk_pair(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray], k: int):
    """(D, I) of the ``k`` smallest (distance, id) among the two lists ``a`` and ``b``."""
    if np.issubdtype(np.asarray(a[0]).dtype, np.integer):
        return merge_topk([a, b], k)
    return merge_l2_topk(a, b, k)


def topk_merger(k: int):
    """``merge_topk_pair`` with ``k`` bound: the binary combine of a tree of merges."""
    return partial(merge_topk_pair, k=int(k))


def smallest_per_row(scores: np.ndarray, count: int) -> np.ndarray:
    """(rows, count) int64: per row, the columns of the ``count`` smallest scores, smallest
    first, ties to the lower column. One pass over each row that keeps a sorted buffer of
    ``count``: a probe's few nearest lists among thousands cost a compare per list, where a
    partition and a sort of every row cost several times more."""
    scores = np.ascontiguousarray(scores)
    if not 1 <= count <= scores.shape[1]:
        raise ValueError(f"count must lie in [1, {scores.shape[1]}]; got {count}")
    out = np.empty((scores.shape[0], count), np.int64)
    _smallest_per_row(scores, out)
    return out


@njit(nogil=True, cache=True)
def _smallest_per_row(scores, out):
    count = out.shape[1]
    best = np.empty(count, scores.dtype)
    for r in range(scores.shape[0]):
        row = scores[r]
        for j in range(count):  # the first count columns, sorted (insertion: equal scores keep column order)
            at = j
            while at > 0 and best[at - 1] > row[j]:
                best[at] = best[at - 1]
                out[r, at] = out[r, at - 1]
                at -= 1
            best[at] = row[j]
            out[r, at] = j
        for j in range(count, row.shape[0]):
            value = row[j]
            if not value < best[count - 1]:  # an equal score never displaces a lower column
                continue
            at = count - 1
            while at > 0 and best[at - 1] > value:
                best[at] = best[at - 1]
                out[r, at] = out[r, at - 1]
                at -= 1
            best[at] = value
            out[r, at] = j
