"""An inverted file over binary codes: the kernels. Plain numpy (and the Hamming top-k of
kernels/hamming.py).

A coarse quantiser of ``n_lists`` centroids (k-means on the features) puts every database
row in the list of its nearest centroid. A query probes its ``nprobe`` nearest lists and
ranks only their codes by Hamming distance: with the lists sorted by id inside, the answer
is exactly the Hamming top-k of the probed lists' rows, ties by the smaller id, as the
linear scan restricted to those rows would give.

Layout of a built list set: ``order`` holds the database ids grouped by list (ascending
inside each list), ``offsets`` (n_lists + 1) where each list starts in it, and ``codes``
the packed codes in the same order, so that a list is one contiguous slice.

Searching a batch, each list is scanned once for all the queries that probe it (the
inverted probe lists), and each query keeps the best k over its lists: the work is
nq * nprobe * (n / n_lists) code comparisons, in a few large scans rather than one small
scan per (query, list).
"""

from __future__ import annotations

import numpy as np

from dhash.kernels.agh import nearest_centres
from dhash.kernels.hamming import empty_topk, hamming_topk, merge_topk


def list_layout(assignment: np.ndarray, n_lists: int) -> tuple[np.ndarray, np.ndarray]:
    """(order, offsets): the row ids grouped by their list, ascending inside each list, and
    the (n_lists + 1) starts of the lists in ``order``."""
    assignment = np.asarray(assignment, dtype=np.int64)
    if assignment.size and (assignment.min() < 0 or assignment.max() >= n_lists):
        raise ValueError(f"list numbers must lie in [0, {n_lists}); got {assignment.min()}..{assignment.max()}")
    order = np.argsort(assignment, kind="stable")
    offsets = np.searchsorted(assignment[order], np.arange(n_lists + 1))
    return order.astype(np.int64), offsets.astype(np.int64)


def probed_lists(query_vectors: np.ndarray, centroids: np.ndarray, nprobe: int) -> np.ndarray:
    """(nq, nprobe) int64: each query's nprobe nearest centroids (squared L2), nearest first."""
    if not 1 <= nprobe <= len(centroids):
        raise ValueError(f"nprobe must lie in [1, {len(centroids)}] (the number of lists); got {nprobe}")
    return nearest_centres(query_vectors, centroids, nprobe)


def search_lists(
    query_codes: np.ndarray,
    probes: np.ndarray,
    list_codes: np.ndarray,
    list_ids: np.ndarray,
    offsets: np.ndarray,
    k: int,
) -> tuple[np.ndarray, np.ndarray]:
    """(D int32 (nq, k), I int64 (nq, k)): each query's Hamming top-k among the rows of its
    probed lists (``probes``, (nq, nprobe)); -1 where those lists hold fewer than k rows.
    ``list_codes``/``list_ids``: the codes and ids in list order, ``offsets`` the lists'
    starts (``list_layout``)."""
    nq = len(query_codes)
    best = empty_topk(nq, k)
    if nq == 0:
        return best
    flat = probes.ravel()
    by_list = np.argsort(flat, kind="stable")
    starts = np.searchsorted(flat[by_list], np.arange(len(offsets)))
    for lst in np.flatnonzero(np.diff(starts)):
        lo, hi = offsets[lst], offsets[lst + 1]
        if hi == lo:
            continue
        queries = by_list[starts[lst] : starts[lst + 1]] // probes.shape[1]
        found = hamming_topk(list_codes[lo:hi], list_ids[lo:hi], queries=query_codes[queries], k=k)
        merged = merge_topk([(best[0][queries], best[1][queries]), found], k)
        best[0][queries], best[1][queries] = merged
    return best
