"""k-means (Lloyd's algorithm) on chunks: one chunk's step statistics, the centres they give,
and the nearest centres of rows. Plain numpy.

Used wherever points are grouped around centres: the anchors of the anchor graph (AGH, DGH),
the coarse quantiser of the inverted file, and the cells of the neighbour search. Only the
per-chunk counts and sums of a step travel; the caller adds them over the chunks.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse

from dask_hashcodes.kernels.codes import row_slabs
from dask_hashcodes.kernels.topk import smallest_per_row


def lloyd_sums(X: np.ndarray, centres: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """One Lloyd step's statistics of a chunk: (rows per centre, sum of the rows assigned to
    each centre, sum of squared distances to the nearest centre). Ties go to the lower centre."""
    m, d = centres.shape
    counts, sums, inertia = np.zeros(m, np.int64), np.zeros((m, d)), 0.0
    centres = np.asarray(centres, dtype=np.float64)
    for rows in row_slabs(X.shape[0]):
        part = np.asarray(X[rows], dtype=np.float64)
        scores = _centre_scores(part, centres)
        nearest = scores.argmin(axis=1)
        counts += np.bincount(nearest, minlength=m)
        # the rows summed per centre as a sparse one-hot product: O(rows x d), several times
        # faster than np.add.at's unbuffered scatter
        one_hot = sparse.csr_matrix((np.ones(len(part)), (nearest, np.arange(len(part)))), shape=(m, len(part)))
        sums += one_hot @ part
        closest = scores[np.arange(len(part)), nearest] + (part * part).sum(axis=1)
        inertia += float(np.maximum(closest, 0.0).sum())
    return counts, sums, inertia


def _centre_scores(part: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """||c||^2 - 2 x.c for every (row, centre): the nearest centre minimises it, and the
    row's own norm is left out (added to the winner only where needed), which saves two
    passes over every (rows x m) block."""
    scores = part @ (-2.0 * centres.T)
    scores += (centres * centres).sum(axis=1)
    return scores


def nearest_centres(X: np.ndarray, centres: np.ndarray, count: int | None = None) -> np.ndarray:
    """Index of every row's nearest centre, int64 (n,); with ``count``, the ``count`` nearest,
    nearest first, (n, count). Ties: the lower index (among the ``count`` nearest)."""
    centres = np.asarray(centres, dtype=np.float64)
    out = np.empty(X.shape[0] if count is None else (X.shape[0], count), np.int64)
    for rows in row_slabs(X.shape[0]):
        scores = _centre_scores(np.asarray(X[rows], dtype=np.float64), centres)
        if count is None:
            out[rows] = scores.argmin(axis=1)
            continue
        out[rows] = smallest_scores(scores, count)
    return out


def smallest_scores(scores: np.ndarray, count: int) -> np.ndarray:
    """Per row, the columns of the ``count`` smallest scores, smallest first (ties: the lower
    column)."""
    return smallest_per_row(scores, min(count, scores.shape[1]))


def updated_centres(centres: np.ndarray, counts: np.ndarray, sums: np.ndarray) -> np.ndarray:
    """Means of the assigned rows; a centre that got no row stays where it was."""
    out = np.array(centres, dtype=np.float64, copy=True)
    filled = counts > 0
    out[filled] = sums[filled] / counts[filled, None]
    return out
