"""Merging two top-k lists of the same queries into one: the step every distributed search
(the linear scan, multi-index hashing, the inverted file, re-ranking, the exact Euclidean
neighbours) repeats in its tree of merges, so every one of them breaks ties the same way.

A list is FAISS's (D, I): D (nq, k) distances, I (nq, k) int64 ids, -1 where a part had
fewer than k rows. Hamming distances are small integers, merged through packed (distance,
id) keys; float distances (squared L2, asymmetric scores) by a sort on (distance, id). Both
put the smaller id first among equal distances and the missing entries last.

``smallest_per_row`` and ``smallest_with_offsets`` are the selections of a nearest-centre
search and of a probe: each row's few smallest among many scores; ``scores_within`` finds
the near ties of a row's smallest score.
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
    return smallest_with_offsets(scores, np.zeros(scores.shape[1], scores.dtype), count)[0]


def smallest_with_offsets(scores: np.ndarray, offsets: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """``smallest_per_row`` of ``scores + offsets`` (one offset per column, added in the
    scores' dtype) without forming that sum: (columns (rows, count) int64, their summed
    scores). A nearest-centre search adds the centres' squared norms to the products this
    way, in the same pass that selects, instead of a pass over the whole score matrix first."""
    scores = np.ascontiguousarray(scores)
    if not 1 <= count <= scores.shape[1]:
        raise ValueError(f"count must lie in [1, {scores.shape[1]}]; got {count}")
    out = np.empty((scores.shape[0], count), np.int64)
    values = np.empty((scores.shape[0], count), scores.dtype)
    _smallest_per_row(scores, np.ascontiguousarray(offsets, dtype=scores.dtype), out, values)
    return out, values


def scores_within(scores: np.ndarray, columns: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """(rows,) int64: per row, how many of its ``scores`` are at most its score in column
    ``columns[row]`` plus ``bounds[row]`` (the chosen one counted). A nearest-centre search
    whose float32 scores may err by a bound finds its near ties this way: one vectorised
    compare per score, where keeping the runner-up in a sorted buffer costs a branch per score."""
    scores = np.ascontiguousarray(scores)
    out = np.empty(scores.shape[0], np.int64)
    _scores_within(scores, np.ascontiguousarray(columns, np.int64), np.ascontiguousarray(bounds, scores.dtype), out)
    return out


@njit(nogil=True, cache=True)
def _scores_within(scores, columns, bounds, out):
    for r in range(scores.shape[0]):
        row = scores[r]
        threshold = row[columns[r]] + bounds[r]
        within = 0
        for j in range(row.shape[0]):
            within += row[j] <= threshold
        out[r] = within


@njit(nogil=True, cache=True)
def _smallest_per_row(scores, offsets, out, values):
    count = out.shape[1]
    for r in range(scores.shape[0]):
        row = scores[r]
        best = values[r]
        for j in range(count):  # the first count columns, sorted (insertion: equal scores keep column order)
            value = row[j] + offsets[j]
            at = j
            while at > 0 and best[at - 1] > value:
                best[at] = best[at - 1]
                out[r, at] = out[r, at - 1]
                at -= 1
            best[at] = value
            out[r, at] = j
        worst = best[count - 1]  # in a register: most columns are rejected by this one compare
        for j in range(count, row.shape[0]):
            value = row[j] + offsets[j]
            if not value < worst:  # an equal score never displaces a lower column
                continue
            at = count - 1
            while at > 0 and best[at - 1] > value:
                best[at] = best[at - 1]
                out[r, at] = out[r, at - 1]
                at -= 1
            best[at] = value
            out[r, at] = j
            worst = best[count - 1]
