"""Affinities and affinity losses of binary hashing (the MAC paper's setting,
Carreira-Perpinan & Raziperchikolaei, and the losses it optimises). Plain numpy and scipy.

Affinities: for each training point n, ``n_similar`` (kappa+) points m with y_nm = +1 and
``n_dissimilar`` (kappa-) points with y_nm = -1; every other pair is 0 (not in the loss).
With labels, the similar points are drawn at random among the points sharing n's label and
the dissimilar ones among the others; without labels, the similar points are n's exact
Euclidean nearest neighbours (ties by index) and the dissimilar ones are drawn among the
remaining points. Y is an N x N scipy.sparse CSR matrix of int8 with N (kappa+ + kappa-)
entries, never dense; row n holds the pairs chosen for n (Y need not be symmetric: the loss
sums over the listed (n, m) as the paper's sum does).

Losses over codes Z in {-1, +1}^(N x b), summed over Y's entries:

* KSH:   (z_n^T z_m - b y_nm)^2
* eSPLH: exp(-y_nm z_n^T z_m / b)

Both depend on z_n^T z_m only. With every bit but bit i fixed, z_n^T z_m = s_nm + z_ni z_mi
(s_nm: the inner product over the other bits), so each term takes one value l(11) when
z_ni = z_mi and another l(-11) when they differ, and equals
1/2 z_ni z_mi (l(11) - l(-11)) + a constant (Lin et al. 2013): ``bit_coefficients`` gives
those 1/2 (l(11) - l(-11)) as a sparse matrix A, the Z-step's quadratic in bit i.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse

from pipeline.kernels.l2 import l2_topk

LOSSES = ("ksh", "esplh")


def _pair_matrix(rows: np.ndarray, cols: np.ndarray, values: np.ndarray, n: int) -> sparse.csr_matrix:
    Y = sparse.csr_matrix((values.astype(np.int8), (rows, cols)), shape=(n, n))
    Y.sort_indices()
    return Y


def _draw_from(pool: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    return np.sort(rng.choice(pool, count, replace=False))


def label_affinities(labels: np.ndarray, n_similar: int, n_dissimilar: int, rng: np.random.Generator):
    """Y from labels (one class per point): for each point, ``n_similar`` others of its class
    and ``n_dissimilar`` of other classes, drawn without replacement with ``rng`` in point
    order. Every class must hold more than ``n_similar`` points and every class's complement
    at least ``n_dissimilar`` (the caller checks, ``affinity_shortfall``)."""
    labels = np.asarray(labels)
    n = len(labels)
    rows, cols, values = [], [], []
    members = {c: np.flatnonzero(labels == c) for c in np.unique(labels)}
    others = {c: np.flatnonzero(labels != c) for c in members}
    for i in range(n):
        c = labels[i]
        same = members[c][members[c] != i]
        for pool, count, value in ((same, n_similar, 1), (others[c], n_dissimilar, -1)):
            chosen = _draw_from(pool, count, rng)
            rows.append(np.full(count, i))
            cols.append(chosen)
            values.append(np.full(count, value))
    return _pair_matrix(np.concatenate(rows), np.concatenate(cols), np.concatenate(values), n)


def affinity_shortfall(labels: np.ndarray, n_similar: int, n_dissimilar: int) -> str | None:
    """None when ``label_affinities`` can draw its pairs, else what is missing (one line)."""
    classes, counts = np.unique(np.asarray(labels), return_counts=True)
    smallest = int(counts.argmin())
    if counts[smallest] - 1 < n_similar:
        return (
            f"class {classes[smallest].item()!r} has {counts[smallest]} training points, fewer than kappa+ + 1 = "
            f"{n_similar + 1}"
        )
    largest = int(counts.argmax())
    if len(labels) - counts[largest] < n_dissimilar:
        return (
            f"only {len(labels) - counts[largest]} training points lie outside class {classes[largest].item()!r}, "
            f"fewer than kappa- = {n_dissimilar}"
        )
    return None


def knn_affinities(X: np.ndarray, n_similar: int, n_dissimilar: int, rng: np.random.Generator):
    """Y without labels: each point's ``n_similar`` exact Euclidean nearest other points
    (ties by index) are similar; ``n_dissimilar`` drawn among the remaining points are
    dissimilar. N must exceed n_similar + n_dissimilar."""
    n = len(X)
    ids = np.arange(n, dtype=np.int64)
    _, nearest = l2_topk(X, ids, queries=X, k=n_similar + 1)
    rows, cols, values = [], [], []
    for i in range(n):
        neighbours = nearest[i][nearest[i] != i][:n_similar]
        rest = np.setdiff1d(ids, np.append(neighbours, i), assume_unique=True)
        far = _draw_from(rest, n_dissimilar, rng)
        rows.append(np.full(n_similar + n_dissimilar, i))
        cols.append(np.concatenate([np.sort(neighbours), far]))
        values.append(np.concatenate([np.ones(n_similar), -np.ones(n_dissimilar)]))
    return _pair_matrix(np.concatenate(rows), np.concatenate(cols), np.concatenate(values), n)


def _pair_loss(loss: str, inner: np.ndarray, y: np.ndarray, n_bits: int) -> np.ndarray:
    if loss == "ksh":
        return (inner - n_bits * y) ** 2
    if loss == "esplh":
        return np.exp(-y * inner / n_bits)
    raise ValueError(f"unknown loss {loss!r}; choose from {', '.join(LOSSES)}")


def _pair_inner(Z: np.ndarray, Y: sparse.coo_matrix) -> np.ndarray:
    """z_n^T z_m for every listed pair (n, m)."""
    return np.einsum("ij,ij->i", Z[Y.row], Z[Y.col])


def affinity_loss(loss: str, Z: np.ndarray, Y) -> float:
    """The loss of codes Z ({-1, +1}, (N, b)) summed over Y's pairs."""
    Z = np.asarray(Z, dtype=np.float64)
    pairs = sparse.coo_matrix(Y)
    return float(_pair_loss(loss, _pair_inner(Z, pairs), pairs.data.astype(np.float64), Z.shape[1]).sum())


def bit_coefficients(loss: str, Z: np.ndarray, Y, bit: int) -> sparse.csr_matrix:
    """A (N x N, sparse, Y's pattern) with A_nm = 1/2 (l(11) - l(-11)) for bit ``bit``: the
    loss equals sum_nm A_nm z_n,bit z_m,bit + a constant over the codes that differ from Z in
    that bit only (module docstring)."""
    Z = np.asarray(Z, dtype=np.float64)
    pairs = sparse.coo_matrix(Y)
    y = pairs.data.astype(np.float64)
    others = _pair_inner(Z, pairs) - Z[pairs.row, bit] * Z[pairs.col, bit]
    n_bits = Z.shape[1]
    half_gap = 0.5 * (_pair_loss(loss, others + 1.0, y, n_bits) - _pair_loss(loss, others - 1.0, y, n_bits))
    A = sparse.csr_matrix((half_gap, (pairs.row, pairs.col)), shape=Y.shape)
    A.sort_indices()
    return A
