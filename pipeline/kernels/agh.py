"""Anchor graph hashing (Liu, Wang, Kumar & Chang, ICML 2011), one layer: the per-chunk
terms and the m x m spectral step. Plain numpy.

The n x n graph is never formed: each row x is tied to its s nearest of m anchors (k-means
centres) with weights z(x) = exp(-||x - u_j||^2 / sigma^2) normalised to sum 1 (sigma = the
mean distance of a row to its s-th nearest anchor, as the authors' code). The anchor graph
A = Z Lambda^{-1} Z^T (Lambda = diag(Z^T 1)) has the eigenvectors of the m x m matrix
M = Lambda^{-1/2} Z^T Z Lambda^{-1/2}: with M's eigenpairs (v_k, s_k), k = 2..r+1 (k = 1 is
the trivial one, s = 1), the embedding is Y = Z W, W = sqrt(n) Lambda^{-1/2} V S^{-1/2}, and
h(x) = sgn(z(x) W) extends to any x.
"""

from __future__ import annotations

import numpy as np

from pipeline.kernels.codes import SLAB_ROWS, code_bytes, pack_signs
from pipeline.kernels.l2 import squared_distances


def _slabs(X: np.ndarray):
    for start in range(0, X.shape[0], SLAB_ROWS):
        yield slice(start, min(start + SLAB_ROWS, X.shape[0]))


def lloyd_sums(X: np.ndarray, centres: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """One Lloyd step's statistics of a chunk: (rows per centre, sum of the rows assigned to
    each centre, sum of squared distances to the nearest centre). Ties go to the lower centre."""
    m, d = centres.shape
    counts, sums, inertia = np.zeros(m, np.int64), np.zeros((m, d)), 0.0
    for rows in _slabs(X):
        part = np.asarray(X[rows], dtype=np.float64)
        d2 = squared_distances(part, centres)
        nearest = d2.argmin(axis=1)
        counts += np.bincount(nearest, minlength=m)
        np.add.at(sums, nearest, part)
        inertia += float(d2[np.arange(len(part)), nearest].sum())
    return counts, sums, inertia


def updated_centres(centres: np.ndarray, counts: np.ndarray, sums: np.ndarray) -> np.ndarray:
    """Means of the assigned rows; a centre that got no row stays where it was."""
    out = np.array(centres, dtype=np.float64, copy=True)
    filled = counts > 0
    out[filled] = sums[filled] / counts[filled, None]
    return out


def nearest_anchors(X: np.ndarray, anchors: np.ndarray, s: int) -> tuple[np.ndarray, np.ndarray]:
    """(indices, squared distances), each (n, s): the s nearest anchors of every row, nearest
    first (ties: lower anchor index)."""
    n = X.shape[0]
    idx, dist = np.empty((n, s), np.int64), np.empty((n, s))
    for rows in _slabs(X):
        d2 = squared_distances(np.asarray(X[rows], dtype=np.float64), anchors)
        near = np.argsort(d2, axis=1, kind="stable")[:, :s]
        idx[rows], dist[rows] = near, np.take_along_axis(d2, near, axis=1)
    return idx, dist


def sth_distance_sum(X: np.ndarray, anchors: np.ndarray, s: int) -> tuple[int, float]:
    """(rows, sum of the distance to the s-th nearest anchor): sigma is their mean."""
    _, dist = nearest_anchors(X, anchors, s)
    return X.shape[0], float(np.sqrt(dist[:, s - 1]).sum())


def anchor_weights(dist: np.ndarray, sigma: float) -> np.ndarray:
    """z(x) on the s nearest anchors: exp(-d^2 / sigma^2), each row normalised to sum 1.
    Shifting by the row's smallest distance first avoids underflow to 0 / 0 for far rows."""
    w = np.exp(-(dist - dist[:, :1]) / sigma**2)
    return w / w.sum(axis=1, keepdims=True)


def anchor_gram(X: np.ndarray, anchors: np.ndarray, s: int, sigma: float) -> tuple[np.ndarray, np.ndarray]:
    """A chunk's (Z^T Z (m x m), Z^T 1 (m,)): Z has s non-zeros per row, never stored."""
    m = anchors.shape[0]
    idx, dist = nearest_anchors(X, anchors, s)
    w = anchor_weights(dist, sigma)
    gram = np.zeros(m * m)
    for a in range(s):
        for b in range(s):
            np.add.at(gram, idx[:, a] * m + idx[:, b], w[:, a] * w[:, b])
    return gram.reshape(m, m), np.bincount(idx.ravel(), weights=w.ravel(), minlength=m)


def agh_projection(gram: np.ndarray, column_sums: np.ndarray, n: int, n_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """(W (m, n_bits), eigenvalues s_2..s_{r+1}) of the anchor graph: see the module docstring.
    Anchors no row chose (column sum 0) carry no weight."""
    used = column_sums > 0
    inv_sqrt = np.zeros_like(column_sums)
    inv_sqrt[used] = column_sums[used] ** -0.5
    M = inv_sqrt[:, None] * gram * inv_sqrt[None, :]
    values, vectors = np.linalg.eigh((M + M.T) / 2.0)
    order = np.argsort(values)[::-1][1 : n_bits + 1]  # drop the trivial eigenvector (s = 1)
    values, vectors = values[order], vectors[:, order]
    vectors = vectors * np.sign(vectors[np.abs(vectors).argmax(axis=0), np.arange(n_bits)])  # fixed signs
    return np.sqrt(n) * inv_sqrt[:, None] * vectors / np.sqrt(values)[None, :], values


def encode_anchor_graph(X: np.ndarray, anchors: np.ndarray, s: int, sigma: float, W: np.ndarray) -> np.ndarray:
    """Packed codes of sgn(z(x) W), slab by slab (each row on its own: chunking-independent)."""
    out = np.empty((X.shape[0], code_bytes(W.shape[1])), np.uint8)
    for rows in _slabs(X):
        idx, dist = nearest_anchors(X[rows], anchors, s)
        out[rows] = pack_signs(np.einsum("ns,nsr->nr", anchor_weights(dist, sigma), W[idx]))
    return out
