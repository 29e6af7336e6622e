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

A query's probed lists are contiguous slices of the list-ordered codes, scanned in one
compiled loop: the work is nq * nprobe * (n / n_lists) code comparisons, with no call per
(query, list); the top k comes from a histogram of the distances (small integers), as in
the linear scan.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dhash.kernels.agh import nearest_centres
from dhash.kernels.hamming import ID_BITS, _popcount, as_words, empty_topk


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
    probed lists (``probes``, (nq, nprobe)), ties by the smaller id; -1 where those lists
    hold fewer than k rows. ``list_codes``/``list_ids``: the codes and ids in list order,
    ``offsets`` the lists' starts (``list_layout``)."""
    out_d, out_i = empty_topk(len(query_codes), k)
    if len(query_codes) == 0 or len(list_codes) == 0:
        return out_d, out_i
    _probed_topk(
        as_words(query_codes), np.ascontiguousarray(probes, dtype=np.int64), as_words(list_codes),
        np.ascontiguousarray(list_ids, dtype=np.int64), np.asarray(offsets, dtype=np.int64), k, out_d, out_i,
    )  # fmt: skip
    return out_d, out_i


@njit(nogil=True, cache=True)
def _probed_topk(query_words, probes, list_words, list_ids, offsets, k, out_d, out_i):
    """Per query: the distances to its probed lists' codes (contiguous slices), the cut-off
    distance by counting (distances are small integers), then the entries below it and the
    smallest ids at it, sorted by the key (distance, id)."""
    width = 64 * list_words.shape[1] + 1
    counts = np.zeros(width, np.int64)
    for q in range(query_words.shape[0]):
        total = 0
        for p in probes[q]:
            total += offsets[p + 1] - offsets[p]
        dist = np.empty(total, np.int64)
        ids = np.empty(total, np.int64)
        at = 0
        for p in probes[q]:
            for r in range(offsets[p], offsets[p + 1]):
                d = 0
                for w in range(list_words.shape[1]):
                    d += _popcount(query_words[q, w] ^ list_words[r, w])
                dist[at] = d
                ids[at] = list_ids[r]
                at += 1
        kk = min(k, total)
        if kk == 0:
            continue
        counts[:] = 0
        for j in range(total):
            counts[dist[j]] += 1
        cut, before = 0, 0
        while before + counts[cut] < kk:
            before += counts[cut]
            cut += 1
        below = np.empty(before, np.int64)
        at_cut = np.empty(counts[cut], np.int64)
        nb, nc = 0, 0
        for j in range(total):
            if dist[j] < cut:
                below[nb] = (dist[j] << ID_BITS) | ids[j]
                nb += 1
            elif dist[j] == cut:
                at_cut[nc] = (dist[j] << ID_BITS) | ids[j]
                nc += 1
        keys = np.concatenate((below, np.sort(at_cut)[: kk - before]))
        keys.sort()
        for j in range(kk):
            out_d[q, j] = keys[j] >> ID_BITS
            out_i[q, j] = keys[j] & ((1 << ID_BITS) - 1)
