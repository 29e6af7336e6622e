"""The numeric steps of asymmetric deep supervised hashing (ADSH; Jiang & Li, AAAI 2018),
written so that the database side works one chunk at a time. Plain numpy.

ADSH learns the codes V in {-1, +1}^(n x c) of the n database points directly, and a network
F for the queries, from sampled query points Omega (m of the database rows per outer
iteration, U = tanh(F(x_Omega)), m x c):

    J(U, V) = sum_{i in Omega} sum_j (u_i^T v_j - c S_ij)^2 + gamma sum_{i in Omega} ||v_i - u_i||^2

S_ij = 1 when query i and database point j share a label and -r otherwise, r being the ratio
of similar to dissimilar pairs (the authors' code weighs the -1 entries so, which balances
the two kinds of pairs).

* The V-step (eq. 8-10) minimises J over V bit by bit with the other bits fixed:
  V_k = -sign(2 V_{-k} U_{-k}^T U_k + Q_k), Q = -2c S^T U - 2 gamma U_bar (U_bar: u_i on the
  row of database point i in Omega, zeros elsewhere). Row j of V depends only on row j of S,
  Q and V: the step is the same on any split of the database into chunks, and S is never
  larger than |Omega| x one chunk.
* The network step needs V only through two sums over the database, V^T V (c x c) and
  S V (m x c; from P V and 1^T V, P the 0/1 same-label matrix, ``similarity_product``): sum_j (u_i^T v_j - c S_ij)^2 = u_i^T (V^T V) u_i - 2c u_i^T (S V)_i + const,
  whose gradient in u_i is eq. 6's 2 sum_j (u_i^T v_j - c S_ij) v_j. Each chunk gives its
  share of both sums; only they travel.
"""

from __future__ import annotations

import numpy as np

from dask_hashcodes.kernels.codes import pack_signs
from dask_hashcodes.kernels.hamming import hamming_distances
from dask_hashcodes.kernels.ranking import distance_histograms, relevance_from_labels


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


def quantisation_target(U: np.ndarray, omega: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """U_bar restricted to one chunk: u_i on the row of each Omega point that the chunk holds
    (``rows``: the chunk's global row ids, increasing; ``omega``: Omega's row ids, in U's
    order), zeros elsewhere."""
    target = np.zeros((len(rows), U.shape[1]), dtype=np.float64)
    pos = np.searchsorted(rows, omega)
    inside = pos < len(rows)
    inside[inside] = rows[pos[inside]] == omega[inside]
    target[pos[inside]] = U[inside]
    return target


def v_step(V: np.ndarray, U: np.ndarray, StU: np.ndarray, U_bar: np.ndarray, gamma: float) -> np.ndarray:
    """One pass of eq. 10 over the bits of one chunk's codes V (n_chunk, c) in {-1, +1}, each
    bit with the others at their newest values. StU = S^T U (n_chunk, c) for the chunk's rows
    of S, U (m, c), U_bar (n_chunk, c). A bit whose two values give the same J keeps its old
    value (np.sign would give 0)."""
    c = U.shape[1]
    V = np.array(V, dtype=np.float64, order="F")  # columns contiguous: one is rewritten per bit
    Q = -2.0 * c * StU - 2.0 * gamma * U_bar
    UtU = U.T @ U  # (c, c): U_{-k}^T U_k is column k of it without entry k
    for k in range(c):
        coupling = UtU[:, k].copy()
        coupling[k] = 0.0
        field = 2.0 * (V @ coupling) + Q[:, k]
        V[:, k] = np.where(field > 0, -1.0, np.where(field < 0, 1.0, V[:, k]))
    return V.astype(np.int8)


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


def objective(U: np.ndarray, VtV: np.ndarray, SV: np.ndarray, V_omega: np.ndarray, gamma: float, S_sq: float) -> float:
    """J(U, V) from the database sums; ``S_sq``: sum of S_ij^2 over Omega x database (the
    constant c^2 sum S^2 completes the square)."""
    c = U.shape[1]
    pairs = np.einsum("ic,cd,id->", U, VtV, U) - 2.0 * c * np.einsum("ic,ic->", U, SV) + c * c * S_sq
    return float(pairs + gamma * ((V_omega - U) ** 2).sum())


def validation_histograms(V, labels, start: int, validation) -> tuple[np.ndarray, np.ndarray]:
    """Per validation query, the counts of this chunk's database points (all, and those sharing
    a label) at each Hamming distance 0..c from the query's code; a query's own database row
    is left out. ``validation``: (rows, codes in {-1, +1} (q, c), labels)."""
    rows, codes, query_labels = validation
    c = V.shape[1]
    # packed bits and popcounts: far cheaper than a {-1, +1} product over a whole chunk
    dist = hamming_distances(pack_signs(codes), pack_signs(V))
    relevant = relevance_from_labels(query_labels, labels)
    total, rel = distance_histograms(dist, relevant, c)
    own = np.flatnonzero((rows >= start) & (rows < start + len(V)))
    np.subtract.at(total, (own, dist[own, rows[own] - start]), 1)
    np.subtract.at(rel, (own, dist[own, rows[own] - start]), 1)
    return total, rel


def chunk_pass(V, labels, start: int, omega, omega_labels, U=None, weight=1.0, gamma=0.0, validation=None):
    """One database chunk (rows start .. start + len(V)) in one outer iteration: with U,
    eq. 10's V-step of its codes; then its shares of the sums the network step needs and
    its codes of the Omega rows it holds; with ``validation``, its distance histograms of
    the validation queries (validation_histograms). Returns (codes, (V^T V, P V, 1^T V,
    similar pairs, Omega rows held, their codes, histograms or None))."""
    if U is not None:
        rows = np.arange(start, start + len(V))
        StU = (1.0 + weight) * share_transpose_times(omega_labels, labels, U) - weight * U.sum(axis=0)
        V = v_step(V, U, StU, quantisation_target(U, omega, rows), gamma)
    held = omega[(omega >= start) & (omega < start + len(V))]
    histograms = validation_histograms(V, labels, start, validation) if validation is not None else None
    return V, (*database_sums(V, omega_labels, labels), held, np.asarray(V[held - start]), histograms)


def add_chunk_sums(a, b):
    """Combine two chunks' (or subtrees') sums: integers add, Omega rows concatenate in order."""
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
