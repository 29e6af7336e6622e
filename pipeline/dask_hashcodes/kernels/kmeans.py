"""k-means (Lloyd's algorithm) on chunks: one chunk's step statistics, the centres they give,
and the nearest centres of rows. Plain numpy.

Used wherever points are grouped around centres: the anchors of the anchor graph (AGH, DGH),
the coarse quantiser of the inverted file, and the cells of the neighbour search. Only the
per-chunk counts and sums of a step travel; the caller adds them over the chunks.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dask_hashcodes.kernels.codes import row_slabs
from dask_hashcodes.kernels.topk import scores_within, smallest_with_offsets

# rows scored at a time in a Lloyd step: float32 scores against thousands of centres that keep
# the GEMM near its peak rate without a chunk-sized score matrix. The slab also fixes the order
# of the step's float sums, so the centres (and the anchors learned from them) depend on it.
ASSIGN_SLAB_ROWS = 4096
# rows scored at a time when only the nearest centres are wanted (the answer is exact whatever
# the slab): a smaller score matrix (1024 x 4096 float32 scores, 16 MB) is selected from while
# it is still in the cache, which costs less than the GEMM's lower rate on shorter slabs
NEAREST_SLAB_ROWS = 1024


def lloyd_sums(X: np.ndarray, centres: np.ndarray, transform=None) -> tuple[np.ndarray, np.ndarray, float]:
    """One Lloyd step's statistics of a chunk: (rows per centre, sum of the rows assigned to
    each centre, sum of squared distances to the nearest centre). Ties go to the lower centre.
    ``transform``: a function of a row slab giving the rows the centres live among (float64;
    e.g. a projection), applied one slab at a time so the transformed chunk is never whole."""
    m, d = centres.shape
    counts, sums, inertia = np.zeros(m, np.int64), np.zeros((m, d)), 0.0
    scorer = CentreScorer(centres)
    slab_sums = np.empty((m, d))  # reused: a fresh one per slab would be faulted in each time on a worker
    for rows in row_slabs(X.shape[0], ASSIGN_SLAB_ROWS):
        part = np.ascontiguousarray(X[rows] if transform is None else transform(X[rows]), dtype=np.float64)
        # the nearest centres in shorter slabs, whose score matrix stays in the cache while it is
        # selected from; the sums keep the longer slab (their order fixes the centres' floats)
        nearest = np.concatenate([scorer.nearest(part[s], 1)[:, 0] for s in row_slabs(len(part), NEAREST_SLAB_ROWS)])
        counts += np.bincount(nearest, minlength=m)
        inertia += _add_slab(part, nearest, scorer.centres, slab_sums, sums)
    return counts, sums, inertia


@njit(nogil=True, cache=True)
def _add_slab(part, nearest, centres, slab_sums, sums):
    """Adds a slab's rows per nearest centre into ``sums`` and returns their squared distances'
    sum. The slab's sums start from zero and take the rows in order, as a one-hot product
    would, before they join the chunk's: the same floats whatever the slab's neighbours."""
    slab_sums[:] = 0.0
    inertia = 0.0
    for r in range(part.shape[0]):
        c = nearest[r]
        for j in range(part.shape[1]):
            slab_sums[c, j] += part[r, j]
            gap = part[r, j] - centres[c, j]
            inertia += gap * gap
    sums += slab_sums
    return inertia


class CentreScorer:
    """The nearest centres of rows, found with float32 BLAS and made exact where float32 could
    err. The scores are ||c||^2 - 2 x.c: the nearest centre minimises them, and the row's own
    norm is left out. One float32 product gives them whole: each row gets a trailing 1 and the
    centres' matrix a row of their squared norms, so the norms are added inside the GEMM, not in
    a pass over the score matrix of their own. Each score errs by at most about (d + 12) * 2^-24
    times (||x||^2 + 2 ||c||^2) whatever the order of the product's sums (the rounding of the
    inputs, of the norms and of the threshold compared against included). A row whose chosen
    scores lie within twice that bound of each other has its candidates measured again as
    float64 squared differences, so every answer is the exact order (ties to the lower centre)
    at float32's speed, two to three times float64's on the same cores."""

    def __init__(self, centres: np.ndarray):
        self.centres = np.asarray(centres, dtype=np.float64)
        norms = (self.centres * self.centres).sum(axis=1)
        self._scores_by = np.ascontiguousarray(np.vstack([-2.0 * self.centres.T, norms[None]]).astype(np.float32))
        self._no_offsets = np.zeros(len(self.centres), np.float32)
        self._slack = 2.0 * (self.centres.shape[1] + 12) * 2.0**-24
        self._twice_largest_norm = 2.0 * float(norms.max(initial=0.0))
        self._buffers = {}

    def scores(self, part: np.ndarray) -> np.ndarray:
        """(rows, centres) float32: ||c||^2 - 2 x.c for every row of ``part`` and centre. The
        result is a buffer the next call with as many rows overwrites: a slab's score matrix
        is megabytes, and a Dask worker returns freed memory to the system at once
        (MALLOC_TRIM_THRESHOLD_), so a fresh one per slab would be faulted in again each time."""
        d = self.centres.shape[1]
        if len(part) not in self._buffers:
            ones = np.empty((len(part), d + 1), np.float32)
            ones[:, d] = 1.0
            self._buffers[len(part)] = (ones, np.empty((len(part), len(self.centres)), np.float32))
        rows, out = self._buffers[len(part)]
        rows[:, :d] = part
        return np.matmul(rows, self._scores_by, out=out)

    def nearest(self, part: np.ndarray, count: int) -> np.ndarray:
        """(rows, count) int64: each row's ``count`` nearest centres, nearest first."""
        scores = self.scores(part)
        bound = self._slack * (np.einsum("ij,ij->i", part, part, dtype=np.float64) + self._twice_largest_norm)
        if count == 1:
            # the common case (an assignment, a Lloyd step): numpy's vectorised argmin, then one
            # count per row of the scores within the bound of the smallest; a second one is a near tie
            columns = scores.argmin(axis=1)[:, None]
            chosen = np.take_along_axis(scores, columns, axis=1).astype(np.float64)
            unsure = np.flatnonzero(scores_within(scores, columns[:, 0], bound.astype(np.float32)) > 1)
        else:
            taken = min(count + 1, scores.shape[1])  # one more: the order must hold at the cut too
            columns, chosen = smallest_with_offsets(scores, self._no_offsets, taken)
            chosen = chosen.astype(np.float64)
            unsure = np.flatnonzero((np.diff(chosen, axis=1) <= bound[:, None]).any(axis=1))
            columns = np.ascontiguousarray(columns[:, :count])
        for row in unsure:  # rare: near ties, or data whose norms dwarf its distances
            # every centre of the true top count scores within the bound of float32's count-th
            near = np.flatnonzero(scores[row] <= chosen[row, count - 1] + bound[row])
            squared = ((np.asarray(part[row], np.float64) - self.centres[near]) ** 2).sum(axis=1)
            columns[row] = near[np.lexsort((near, squared))[:count]]
        return columns


def nearest_centres(X: np.ndarray, centres: np.ndarray, count: int | None = None, transform=None) -> np.ndarray:
    """Index of every row's nearest centre, int64 (n,); with ``count``, the ``count`` nearest,
    nearest first, (n, count). Ties: the lower index (among the ``count`` nearest). Rows are
    converted a slab at a time, never the whole array to float64; ``transform`` (as in
    ``lloyd_sums``) maps each slab to the space the centres live in first."""
    scorer = CentreScorer(centres)
    wanted = 1 if count is None else min(count, len(scorer.centres))
    out = np.empty((X.shape[0], wanted), np.int64)
    for rows in row_slabs(X.shape[0], NEAREST_SLAB_ROWS):
        out[rows] = scorer.nearest(np.asarray(X[rows] if transform is None else transform(X[rows])), wanted)
    return out[:, 0] if count is None else out


def updated_centres(centres: np.ndarray, counts: np.ndarray, sums: np.ndarray) -> np.ndarray:
    """Means of the assigned rows; a centre that got no row stays where it was."""
    out = np.array(centres, dtype=np.float64, copy=True)
    filled = counts > 0
    out[filled] = sums[filled] / counts[filled, None]
    return out
