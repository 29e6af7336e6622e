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

from dhash.kernels.l2 import l2_topk

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
            f"{n_similar + 1} (kappa+ can be at most {counts[smallest] - 1} here)"
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


def _check_loss(loss: str) -> None:
    if loss not in LOSSES:
        raise ValueError(f"unknown loss {loss!r}; choose from {', '.join(LOSSES)}")


def _pair_loss(loss: str, inner: np.ndarray, y: np.ndarray, n_bits: int) -> np.ndarray:
    _check_loss(loss)
    if loss == "ksh":
        return (inner - n_bits * y) ** 2
    return np.exp(-y * inner / n_bits)


def penalty_scale(loss: str, n_bits: int) -> float:
    """The weight that puts MAC's penalty mu ||Z - h(X)||^2 against a loss normalised to
    O(1) per pair: b^2 for KSH, i.e. mu is measured against Liu et al.'s (z_n^T z_m / b -
    y_nm)^2 rather than eq. 3's (z_n^T z_m - b y_nm)^2 (the same minimisers for a fixed mu
    scale); 1 for eSPLH, already O(1) per pair. On this scale the MAC paper's mu_1 = 0.3 and
    alpha = 1.4 reach Z = h(X) in 10-15 iterations (MACcut), as the paper reports (10-20);
    against eq. 3's raw scale the same schedule took 32-35 on Fashion-MNIST, the first ~20
    changing almost no bit."""
    _check_loss(loss)
    return float(n_bits) ** 2 if loss == "ksh" else 1.0


PAIR_ROWS = 512  # rows of Z Z^T formed at a time: 512 x N float64 (10 MB at N = 5000)


class Pairs:
    """The listed pairs of an affinity matrix Y in CSR order: ``rows``, ``cols``, ``y``
    (float64), and the CSR structure, so per-bit coefficient matrices share Y's pattern
    without a sort."""

    def __init__(self, Y):
        Y = sparse.csr_matrix(Y, copy=True)
        Y.sum_duplicates()  # also sorts the indices
        self.shape, self.indptr, self.cols = Y.shape, Y.indptr, Y.indices
        self.rows = np.repeat(np.arange(Y.shape[0]), np.diff(Y.indptr))
        self.y = Y.data.astype(np.float64)
        # the pattern of Y + Y^T, and where each pair (n, m) lands in it as (n, m) and (m, n)
        n = Y.shape[0]
        # int64 keys: scipy stores the columns as int32, and n^2 overflows int32 beyond 46341 points
        rows, cols = self.rows.astype(np.int64), self.cols.astype(np.int64)
        keys = np.concatenate([rows * n + cols, cols * n + rows])
        unique, where = np.unique(keys, return_inverse=True)
        self._forward, self._backward = where[: len(self.rows)], where[len(self.rows) :]
        self._sym_indices = (unique % n).astype(np.int32)
        self._sym_indptr = np.searchsorted(unique // n, np.arange(n + 1)).astype(np.int32)

    def inner(self, Z: np.ndarray) -> np.ndarray:
        """z_n^T z_m for every pair, from blocks of rows of Z Z^T (a GEMM of N^2 b flops,
        instead of gathering two nnz x b copies of the codes: 2.3 GB at N = 5000, 600 pairs
        per point and 48 bits)."""
        Z = np.asarray(Z, dtype=np.float64)
        inner = np.empty(len(self.rows))
        for start in range(0, self.shape[0], PAIR_ROWS):
            lo, hi = self.indptr[start], self.indptr[min(start + PAIR_ROWS, self.shape[0])]
            if hi > lo:
                G = Z[start : start + PAIR_ROWS] @ Z.T
                inner[lo:hi] = G[self.rows[lo:hi] - start, self.cols[lo:hi]]
        return inner

    def bit_products(self, z: np.ndarray) -> np.ndarray:
        """z_n z_m of one bit for every pair."""
        return z[self.rows] * z[self.cols]

    def coefficients(self, loss: str, others: np.ndarray, n_bits: int) -> sparse.csr_matrix:
        """A with A_nm = 1/2 (l(11) - l(-11)), given the other bits' inner products."""
        return sparse.csr_matrix((self._half_gaps(loss, others, n_bits), self.cols, self.indptr), shape=self.shape)

    def _half_gaps(self, loss: str, others: np.ndarray, n_bits: int) -> np.ndarray:
        if loss == "ksh":  # 1/2 ((s + 1 - b y)^2 - (s - 1 - b y)^2) = 2 (s - b y): one pass instead of six
            return 2.0 * (others - n_bits * self.y)
        return 0.5 * (_pair_loss(loss, others + 1.0, self.y, n_bits) - _pair_loss(loss, others - 1.0, self.y, n_bits))

    def symmetric_coefficients(self, loss: str, others: np.ndarray, n_bits: int) -> sparse.csr_matrix:
        """(A + A^T) / 2 of ``coefficients``, on the precomputed pattern of Y + Y^T."""
        a = self._half_gaps(loss, others, n_bits)
        size = len(self._sym_indices)
        data = 0.5 * (np.bincount(self._forward, a, size) + np.bincount(self._backward, a, size))
        return sparse.csr_matrix((data, self._sym_indices, self._sym_indptr), shape=self.shape)


def affinity_loss(loss: str, Z: np.ndarray, Y) -> float:
    """The loss of codes Z ({-1, +1}, (N, b)) summed over Y's pairs."""
    pairs = Y if isinstance(Y, Pairs) else Pairs(Y)
    return float(_pair_loss(loss, pairs.inner(Z), pairs.y, np.shape(Z)[1]).sum())


def bit_coefficients(loss: str, Z: np.ndarray, Y, bit: int) -> sparse.csr_matrix:
    """A (N x N, sparse, Y's pattern) with A_nm = 1/2 (l(11) - l(-11)) for bit ``bit``: the
    loss equals sum_nm A_nm z_n,bit z_m,bit + a constant over the codes that differ from Z in
    that bit only (module docstring)."""
    Z = np.asarray(Z, dtype=np.float64)
    pairs = Y if isinstance(Y, Pairs) else Pairs(Y)
    return pairs.coefficients(loss, pairs.inner(Z) - pairs.bit_products(Z[:, bit]), Z.shape[1])


def label_blocks(labels: np.ndarray) -> list[np.ndarray]:
    """GraphCut blocks from labels: one block per class (every pair inside is similar or
    unlisted, so each block's cut is exact, MAC paper Sec. 3.2)."""
    labels = np.asarray(labels)
    return [np.flatnonzero(labels == c) for c in np.unique(labels)]


def neighbour_blocks(Y, block_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """GraphCut blocks without labels: points visited in a random order; each point not yet
    in a block starts one and pulls in its similar (listed +1) points not yet placed, skipping
    any that has a dissimilar pair (either direction) with a member, up to ``block_size``
    points. Blocks cover every point once and hold no dissimilar pair."""
    Y = sparse.csr_matrix(Y)
    n = Y.shape[0]
    both = (Y + Y.T).tocsr()
    dissimilar = (Y.minimum(0) + Y.T.minimum(0)).tocsr()
    block_of = np.full(n, -1)
    blocks = []
    for seed_point in rng.permutation(n):
        if block_of[seed_point] >= 0:
            continue
        label = len(blocks)
        members = [seed_point]
        block_of[seed_point] = label
        row = slice(both.indptr[seed_point], both.indptr[seed_point + 1])
        for m in both.indices[row][both.data[row] > 0]:
            if len(members) >= block_size:
                break
            if block_of[m] >= 0:
                continue
            partners = dissimilar.indices[dissimilar.indptr[m] : dissimilar.indptr[m + 1]]
            if (block_of[partners] == label).any():
                continue
            block_of[m] = label
            members.append(m)
        blocks.append(np.sort(np.asarray(members)))
    return blocks
