"""Each point's k nearest other points (Euclidean) within one in-memory set: exact, or
searched among the points of nearby k-means cells when the set is too large for an
all-pairs search. Plain numpy (the distances and heaps are l2.py's).

The exact search costs N^2 d: at a million points that is about 10^14 flops and 10^12
heap offers, hours on a small machine. The cell search partitions the points into about
sqrt(N) k-means cells and searches each point among the points of the ``probes`` cells
whose centres lie nearest it, as an inverted file does: about N * probes * sqrt(N) * d
flops. A true neighbour in a cell that was not probed is missed, so the result is
approximate; ``knn_recall`` measures it against the exact search on sampled points.
"""

from __future__ import annotations

import numpy as np

from dask_hashcodes.kernels.kmeans import lloyd_sums, nearest_centres, updated_centres
from dask_hashcodes.kernels.l2 import l2_topk, merge_l2_topk

SEARCHES = ("exact", "cells")
# cells probed per cell: with about sqrt(N) points per cell, each point is compared with
# about CELL_PROBES * sqrt(N) others
CELL_PROBES = 16
# Lloyd steps of the cells' k-means, on a sample of KMEANS_SAMPLE_PER_CELL points per cell:
# the cells only need to keep near points together, not to be a converged clustering
KMEANS_STEPS = 8
KMEANS_SAMPLE_PER_CELL = 32


def nearest_others(X: np.ndarray, k: int, rng: np.random.Generator, search: str = "exact", probes: int = CELL_PROBES):
    """(N, k) int64: each row's k nearest other rows of X, nearest first (ties by index).
    ``search="exact"`` compares every pair; ``"cells"`` only the rows of the ``probes``
    k-means cells nearest the row's own (``rng`` draws the k-means start). N must exceed k."""
    if search not in SEARCHES:
        raise ValueError(f"unknown neighbour search {search!r}; choose from {', '.join(SEARCHES)}")
    n = len(X)
    if n <= k:
        raise ValueError(f"{n} points have no {k} nearest others")
    if search == "exact":
        return without_self(l2_topk(X, np.arange(n, dtype=np.int64), queries=X, k=k + 1)[1], np.arange(n), k)
    return _cell_search(X, k, rng, probes)


def without_self(nearest: np.ndarray, rows: np.ndarray, k: int) -> np.ndarray:
    """Drop each row's own index from its k + 1 nearest (a duplicate point may rank before
    it, so the row itself is removed wherever it stands, else the farthest)."""
    own = nearest == rows[:, None]
    own[~own.any(axis=1), -1] = True
    return nearest[~own].reshape(len(rows), k)


def cell_partition(X: np.ndarray, n_cells: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(centres (n_cells, d), cell of every row): Lloyd's k-means on a sample of the rows,
    started from distinct sampled rows, then every row assigned to its nearest centre."""
    n = len(X)
    sample = X[np.sort(rng.choice(n, min(n, KMEANS_SAMPLE_PER_CELL * n_cells), replace=False))]
    centres = np.asarray(sample[np.sort(rng.choice(len(sample), n_cells, replace=False))], dtype=np.float64)
    for _ in range(KMEANS_STEPS):
        counts, sums, _ = lloyd_sums(sample, centres)
        centres = updated_centres(centres, counts, sums)
    return centres, nearest_centres(X, centres)


def _cell_search(X: np.ndarray, k: int, rng: np.random.Generator, probes: int) -> np.ndarray:
    """Every point is a query of the ``probes`` cells whose centres are nearest it (as an
    inverted file searches): each cell's points are searched once for all the queries that
    probe it, and each query keeps the best k + 1 over its cells."""
    n = len(X)
    n_cells = max(1, min(n // (k + 1), int(round(np.sqrt(n)))))
    probes = min(probes, n_cells)
    centres, cell = cell_partition(X, n_cells, rng)
    members_order = np.argsort(cell, kind="stable")
    member_bounds = np.searchsorted(cell[members_order], np.arange(n_cells + 1))
    probed = nearest_centres(X, centres, probes)  # (n, probes), the own cell first
    flat = probed.ravel()
    query_order = np.argsort(flat, kind="stable")
    query_bounds = np.searchsorted(flat[query_order], np.arange(n_cells + 1))
    best = (np.full((n, k + 1), np.inf), np.full((n, k + 1), -1, np.int64))
    for c in range(n_cells):
        members = members_order[member_bounds[c] : member_bounds[c + 1]]
        queries = query_order[query_bounds[c] : query_bounds[c + 1]] // probes
        if not len(members) or not len(queries):
            continue
        found = l2_topk(X[members], members, queries=X[queries], k=k + 1)
        merged = merge_l2_topk((best[0][queries], best[1][queries]), found, k + 1)
        best[0][queries], best[1][queries] = merged
    nearest = best[1]
    short = (nearest < 0).sum(axis=1) > 1  # fewer than k others in the probed cells: search them all
    if short.any():
        rows = np.flatnonzero(short)
        nearest[rows] = l2_topk(X, np.arange(n, dtype=np.int64), queries=X[rows], k=k + 1)[1]
    return without_self(nearest, np.arange(n), k)


def knn_recall(X: np.ndarray, rows: np.ndarray, found: np.ndarray) -> float:
    """Share of the exact k nearest others of ``rows`` that ``found`` (len(rows), k) holds."""
    k = found.shape[1]
    exact = without_self(l2_topk(X, np.arange(len(X), dtype=np.int64), queries=X[rows], k=k + 1)[1], rows, k)
    return neighbour_recall(found, exact)


def neighbour_recall(found: np.ndarray, exact: np.ndarray) -> float:
    """recall@k: the mean share of each row's exact k neighbours (``exact`` (m, >= k)) among
    its first k results (``found`` (m, k), -1 padding finds nothing)."""
    k = found.shape[1]
    hits = sum(len(np.intersect1d(a[a >= 0], b[:k])) for a, b in zip(found, exact))
    return hits / (k * len(found)) if len(found) else float("nan")
