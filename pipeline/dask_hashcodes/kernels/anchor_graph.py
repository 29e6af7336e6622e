"""The anchor graph of anchor graph hashing (Liu, Wang, Kumar & Chang, ICML 2011): the
per-chunk terms and the m x m spectral step, and AGH's second layer. Plain numpy. DGH
(kernels/dgh.py) solves its discrete problem on the same graph, so the graph lives here,
named for what it is rather than for one of the two methods.

The n x n graph is never formed: each row x is tied to its s nearest of m anchors (k-means
centres) with weights z(x) = exp(-||x - u_j||^2 / sigma^2) normalised to sum 1 (sigma = the
mean distance of a row to its s-th nearest anchor, as the authors' code). The anchor graph
A = Z Lambda^{-1} Z^T (Lambda = diag(Z^T 1)) has the eigenvectors of the m x m matrix
M = Lambda^{-1/2} Z^T Z Lambda^{-1/2}: with M's eigenpairs (v_k, s_k), k = 2..r+1 (k = 1 is
the trivial one, s = 1), the embedding is Y = Z W, W = sqrt(n) Lambda^{-1/2} V S^{-1/2}, and
h(x) = sgn(z(x) W) extends to any x.

Two layers (the paper's hierarchical hashing): r/2 eigenfunctions y_k give 2 bits each: the
first sgn(y_k), the second thresholds each side again, y_k - b+ on the rows with y_k >= 0 and
b- - y_k on the others, with (b+, b-) the closed-form minimisers of the paper's cut on the
anchor graph. Written with P = the rows with y_k >= 0 (n1 of them, n2 = n - n1):
s1 = 1_P^T A |y_k|, s2 = n1 - 1_P^T A 1_P, s3 = sum_P y_k, and
b+ = (2 s3 + n2 (s3 - s1) / s2) / n, b- = (n1 (s3 - s1) / s2 - 2 s3) / n (as the authors'
released code computes them). A = Z Lambda^{-1} Z^T is again never formed: each chunk gives
|y|^T Z and 1_P^T Z (r/2 x m each), n1 and s3.
"""

from __future__ import annotations

import numpy as np

from dask_hashcodes.kernels.codes import code_size, pack_signs, row_slabs
from dask_hashcodes.kernels.l2 import squared_distances


def nearest_anchors(X: np.ndarray, anchors: np.ndarray, s: int) -> tuple[np.ndarray, np.ndarray]:
    """(indices, squared distances), each (n, s): the s nearest anchors of every row, nearest
    first (ties: lower anchor index)."""
    n = X.shape[0]
    idx, dist = np.empty((n, s), np.int64), np.empty((n, s))
    for rows in row_slabs(X.shape[0]):
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


def anchor_rows(X: np.ndarray, anchors: np.ndarray, s: int, sigma: float) -> tuple[np.ndarray, np.ndarray]:
    """Z's rows in sparse form: (anchor indices, weights), each (n, s)."""
    idx, dist = nearest_anchors(X, anchors, s)
    return idx, anchor_weights(dist, sigma)


def anchor_gram(X: np.ndarray, anchors: np.ndarray, s: int, sigma: float) -> tuple[np.ndarray, np.ndarray]:
    """A chunk's (Z^T Z (m x m), Z^T 1 (m,)): Z has s non-zeros per row, never stored."""
    m = anchors.shape[0]
    idx, w = anchor_rows(X, anchors, s, sigma)
    gram = np.zeros(m * m)
    for a in range(s):
        for b in range(s):
            gram += np.bincount(idx[:, a] * m + idx[:, b], weights=w[:, a] * w[:, b], minlength=m * m)
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


def _embedding_slabs(X: np.ndarray, anchors: np.ndarray, s: int, sigma: float, W: np.ndarray):
    """(rows, anchor indices, weights, Y = z(x) W) slab by slab; Z is never stored."""
    for rows in row_slabs(X.shape[0]):
        idx, w = anchor_rows(X[rows], anchors, s, sigma)
        yield rows, idx, w, np.einsum("ns,nsr->nr", w, W[idx])


def second_layer_values(Y: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """The second layer's values, whose signs are its bits: y - b+ where y >= 0, b- - y elsewhere."""
    return np.where(Y >= 0, Y - thresholds[0], thresholds[1] - Y)


def encode_anchor_graph(
    X: np.ndarray, anchors: np.ndarray, s: int, sigma: float, W: np.ndarray, thresholds: np.ndarray | None = None
) -> np.ndarray:
    """Packed codes of sgn(z(x) W), followed by the second layer's bits when ``thresholds``
    (2, r/2) are given; slab by slab (each row on its own: chunking-independent)."""
    n_bits = W.shape[1] * (1 if thresholds is None else 2)
    out = np.empty((X.shape[0], code_size(n_bits)), np.uint8)
    for rows, _, _, Y in _embedding_slabs(X, anchors, s, sigma, W):
        out[rows] = pack_signs(Y if thresholds is None else np.hstack([Y, second_layer_values(Y, thresholds)]))
    return out


def second_layer_sums(X: np.ndarray, anchors: np.ndarray, s: int, sigma: float, W: np.ndarray):
    """A chunk's terms of the second-layer thresholds, per eigenfunction k: (n1 (r,),
    |y|^T Z (r, m), 1_P^T Z (r, m), s3 (r,)); P = rows with y_k >= 0."""
    m, r = anchors.shape[0], W.shape[1]
    n1, s3 = np.zeros(r, np.int64), np.zeros(r)
    abs_z, pos_z = np.zeros((r, m)), np.zeros((r, m))
    for _, idx, w, Y in _embedding_slabs(X, anchors, s, sigma, W):
        positive = Y >= 0
        n1 += positive.sum(axis=0)
        s3 += np.where(positive, Y, 0.0).sum(axis=0)
        for k in range(r):
            abs_z[k] += np.bincount(idx.ravel(), weights=(w * np.abs(Y[:, k : k + 1])).ravel(), minlength=m)
            pos_z[k] += np.bincount(idx[positive[:, k]].ravel(), weights=w[positive[:, k]].ravel(), minlength=m)
    return n1, abs_z, pos_z, s3


def second_layer_thresholds(n: int, n1, abs_z, pos_z, s3, column_sums) -> np.ndarray:
    """(b+, b-) per eigenfunction, (2, r), from the summed second_layer_sums (module docstring)."""
    inv = np.zeros_like(column_sums)
    inv[column_sums > 0] = 1.0 / column_sums[column_sums > 0]  # unused anchors carry no weight
    s1 = (pos_z * abs_z * inv).sum(axis=1)
    s2 = n1 - (pos_z * pos_z * inv).sum(axis=1)
    n2 = n - n1
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(s2 > 0, (s3 - s1) / s2, 0.0)  # s2 = 0: one side is empty; no second cut
    return np.vstack([(2 * s3 + n2 * ratio) / n, (n1 * ratio - 2 * s3) / n])
