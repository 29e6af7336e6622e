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
  S V (m x c; from P V and 1^T V, P the 0/1 same-label matrix, as kernels/label_similarity.py
  forms it): sum_j (u_i^T v_j - c S_ij)^2 = u_i^T (V^T V) u_i - 2c u_i^T (S V)_i + const,
  whose gradient in u_i is eq. 6's 2 sum_j (u_i^T v_j - c S_ij) v_j. Each chunk gives its
  share of both sums; only they travel.
"""

from __future__ import annotations

import numpy as np

from dask_hashcodes.kernels.codes import pack_signs
from dask_hashcodes.kernels.hamming import hamming_distances
from dask_hashcodes.kernels.label_similarity import database_sums, similarity_transpose_times
from dask_hashcodes.kernels.ranking import distance_histograms, relevance_from_labels


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
        StU = similarity_transpose_times(omega_labels, labels, U, weight)
        V = v_step(V, U, StU, quantisation_target(U, omega, rows), gamma)
    held = omega[(omega >= start) & (omega < start + len(V))]
    histograms = validation_histograms(V, labels, start, validation) if validation is not None else None
    return V, (*database_sums(V, omega_labels, labels), held, np.asarray(V[held - start]), histograms)
