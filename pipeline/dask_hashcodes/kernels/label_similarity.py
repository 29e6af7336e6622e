"""Label similarity between training rows, and its products with codes summed chunk by chunk.
Plain numpy.

Two rows are similar when they share a label (class ids, or any label of multi-hot rows).
Supervised hashing fits codes to a similarity matrix built from that relation:

* ``pair_labels``: +1 for a similar pair, -1 otherwise, over a small labelled sample (the
  pairwise labels of SPLH and KSH).
* ``similarity``: S between sampled rows Omega (m of them) and the database, 1 for a similar
  pair and -r otherwise, r the ratio of similar to dissimilar pairs (``negative_weight``), so
  that both kinds of pairs weigh the same (ADSH and COSDISH, by the same authors, weigh them so).

S over the whole database (m x n) is never formed: the methods that sample Omega need it only
through products with codes, S^T U for a chunk's rows (``similarity_transpose_times``) and S V
summed over the database. With P the 0/1 same-label matrix, S = (1 + r) P - r, so S V follows
from the integer sums P V and 1^T V (``similarity_product``), which each chunk contributes
(``database_sums``) and which add exactly in any order (``add_chunk_sums``).
"""

from __future__ import annotations

import numpy as np

from dask_hashcodes.kernels.ranking import relevance_from_labels


def pair_labels(labels: np.ndarray) -> np.ndarray:
    """(l, l) float64: +1 for pairs sharing a label (any label, for multi-hot rows), -1
    otherwise. The diagonal is +1: a point and itself share their label (a 0 diagonal would
    subtract about X_l^T X_l, a covariance, from SPLH's label term)."""
    labels = np.asarray(labels)
    return np.where(relevance_from_labels(labels, labels), 1.0, -1.0)


def similar_pairs(query_labels: np.ndarray, labels: np.ndarray) -> int:
    """How many (query, database point) pairs share a label; the rest are dissimilar."""
    return int(relevance_from_labels(query_labels, labels).sum())


def negative_weight(n_similar: int, n_pairs: int) -> float:
    """r = similar / dissimilar pairs: the weight of S's dissimilar entries (-r)."""
    n_dissimilar = n_pairs - n_similar
    return float(n_similar) / n_dissimilar if n_dissimilar else 1.0


def similarity(query_labels: np.ndarray, labels: np.ndarray, weight: float) -> np.ndarray:
    """S (m, n_chunk) float64: 1 where query and database point share a label (class ids or
    multi-hot rows), -``weight`` elsewhere."""
    share = relevance_from_labels(query_labels, labels)
    return np.where(share, 1.0, -float(weight))


SHARE_BLOCK = 4096  # multi-label: database points per block of the (m, block) same-label matrix


def _class_index(omega_labels, labels):
    """Class-id labels: Omega's classes, each Omega row's class index, and for each database
    point its class index among them (-1: no Omega row has its class)."""
    classes, of_omega = np.unique(omega_labels, return_inverse=True)
    pos = np.minimum(np.searchsorted(classes, labels), len(classes) - 1)
    return classes, of_omega, np.where(classes[pos] == labels, pos, -1)


def share_transpose_times(omega_labels, labels, U) -> np.ndarray:
    """P^T U (n_chunk, c): for each database point, the sum of u_i over the Omega rows sharing
    a label with it. Class ids: through per-class sums, O((m + n) c); multi-hot rows: by
    blocks of the (m, n_chunk) 0/1 matrix."""
    if np.ndim(labels) == 1:
        classes, of_omega, of_point = _class_index(omega_labels, labels)
        class_sums = np.zeros((len(classes) + 1, U.shape[1]))  # the last row: no class, zeros
        np.add.at(class_sums, of_omega, U)
        return class_sums[of_point]
    out = np.empty((len(labels), U.shape[1]))
    for a in range(0, len(labels), SHARE_BLOCK):
        share = relevance_from_labels(omega_labels, labels[a : a + SHARE_BLOCK])
        out[a : a + SHARE_BLOCK] = share.T.astype(np.float64) @ U
    return out


def similarity_transpose_times(omega_labels, labels, U, weight: float) -> np.ndarray:
    """S^T U (n_chunk, c) for one chunk's database points, S = (1 + r) P - r with r = ``weight``:
    from P^T U and the column sums of U, without forming S."""
    return (1.0 + weight) * share_transpose_times(omega_labels, labels, U) - weight * U.sum(axis=0)


def share_times(omega_labels, labels, V) -> tuple[np.ndarray, int]:
    """(P V (m, c) int64, the number of similar pairs) of one chunk, as share_transpose_times."""
    Vi = V.astype(np.int64)
    if np.ndim(labels) == 1:
        classes, of_omega, of_point = _class_index(omega_labels, labels)
        class_sums = np.zeros((len(classes) + 1, V.shape[1]), dtype=np.int64)
        np.add.at(class_sums, of_point, Vi)
        counts = np.bincount(of_point[of_point >= 0], minlength=len(classes))
        return class_sums[of_omega], int(counts[of_omega].sum())
    PV, similar = np.zeros((len(omega_labels), V.shape[1]), dtype=np.int64), 0
    for a in range(0, len(labels), SHARE_BLOCK):
        share = relevance_from_labels(omega_labels, labels[a : a + SHARE_BLOCK])
        PV += share.astype(np.int64) @ Vi[a : a + SHARE_BLOCK]
        similar += int(share.sum())
    return PV, similar


def database_sums(V: np.ndarray, omega_labels, labels) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """One chunk's shares of V^T V (c, c), P V (m, c) and 1^T V (c,), and its count of
    similar pairs. All integers: their sums over the chunks are exact, so nothing depends on
    how the database is chunked or in which order the parts are added."""
    PV, similar = share_times(omega_labels, labels, V)
    return integer_gram(V), PV, V.sum(axis=0, dtype=np.int64), similar


def integer_gram(V: np.ndarray) -> np.ndarray:
    """V^T V (int64) of a {-1, +1} matrix by a float64 BLAS product, which is exact: every
    entry is an integer of magnitude <= the rows, far below 2^53 (numpy's integer matmul
    has no BLAS and dominated a chunk's time)."""
    Vf = V.astype(np.float64)
    return np.rint(Vf.T @ Vf).astype(np.int64)


def similarity_product(PV: np.ndarray, column_sums: np.ndarray, weight: float) -> np.ndarray:
    """S V from the summed P V and 1^T V: S = (1 + r) P - r (every entry -r, then 1 where similar)."""
    return (1.0 + weight) * PV - weight * column_sums[None, :].astype(np.float64)


def add_chunk_sums(a, b):
    """Combine two chunks' (or subtrees') sums, laid out as (V^T V, P V, 1^T V, similar pairs,
    Omega rows held, their codes, (total, relevant) distance histograms or None): integers
    add, Omega rows concatenate in order."""
    histograms = None if a[6] is None else (a[6][0] + b[6][0], a[6][1] + b[6][1])
    return (
        a[0] + b[0],
        a[1] + b[1],
        a[2] + b[2],
        a[3] + b[3],
        np.concatenate([a[4], b[4]]),
        np.concatenate([a[5], b[5]]),
        histograms,
    )
