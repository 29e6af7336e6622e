"""Discrete graph hashing (Liu, Mu, Kumar & Chang, NIPS 2014): the per-chunk steps and the
r x r algebra of the client. Plain numpy.

DGH keeps AGH's anchor graph A = Z Lambda^{-1} Z^T (kernels/anchor_graph.py) and solves

    max_{B, Y}  tr(B^T A B) + rho tr(B^T Y),  B in {-1, 1}^{n x r},  1^T Y = 0,  Y^T Y = n I_r

by alternating two steps (the paper's Algorithms 1 and 2):

* B-step, signed gradient ascent: B <- sgn(C(2 A B + rho Y, B)), C(x, y) = x where x != 0
  and y elsewhere (a zero gradient keeps the bit). The paper's gradient uses A itself, not
  A - 1 1^T / n: the balance of the bits comes from Y (1^T Y = 0), not from the graph. With
  M = Lambda^{-1} Z^T B (m x r, summed over chunks), A B = Z M is a per-row product.
* Y-step: Y = sqrt(n) [U Ubar] [V Vbar]^T from the thin SVD J B = U Sigma V^T (J = I - 1 1^T / n).
  V and Sigma come from the eigendecomposition of the r x r matrix (J B)^T (J B) =
  B^T B - n mu mu^T (mu = the mean of B's rows, integer sums: the same bits whatever the
  chunking), and U = J B V Sigma^{-1} row by row. When J B has rank r' < r, Ubar (n x (r - r'))
  completes U orthogonally to [1 U]: Gram-Schmidt of k = r - r' pseudo-random columns G,
  written as the Cholesky factor of their k x k Gram matrix after projecting out 1 and U, so
  only B^T G, G^T G and 1^T G are summed. G's entries are a hash of (seed, row, column): the
  same numbers whatever the chunking.

Every Y is linear in its rows' bits: Y = (B - mu) P + (G - mean(G)) Q with P (r x r) and
Q (k x r) from the client. Out-of-sample codes: h(x) = sgn(z(x) W), W = Lambda^{-1} Z^T B
(the paper's b(q) = sgn(B^T Z Lambda^{-1} z(q))), AGH's encoder with DGH's W.

A chunk's graph is held as (anchor indices (n, s), weights (n, s), first row number).
"""

from __future__ import annotations

import numpy as np

from dask_hashcodes.kernels.anchor_graph import anchor_rows

RANK_TOLERANCE = 1e-9  # eigenvalues of (JB)^T JB below this x n are zero (its rounding is ~1e-14 x n)
_UINT64_SCALE = 2.0**-53


def _splitmix64(x: np.ndarray) -> np.ndarray:
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def completion_vectors(first_row: int, n_rows: int, k: int, seed: int) -> np.ndarray:
    """(n_rows, k) uniform numbers in [-1, 1), a hash of (seed, global row, column): a row's
    values do not depend on the chunk it is in."""
    rows = np.arange(first_row, first_row + n_rows, dtype=np.uint64)[:, None]
    cols = np.arange(k, dtype=np.uint64)[None, :]
    key = _splitmix64(np.full(1, seed, dtype=np.uint64))
    bits = _splitmix64(key ^ _splitmix64(rows * np.uint64(k) + cols))
    return (bits >> np.uint64(11)).astype(np.float64) * (2 * _UINT64_SCALE) - 1.0


def graph_rows(X: np.ndarray, row_numbers: np.ndarray, anchors: np.ndarray, s: int, sigma: float):
    """A chunk's graph: (anchor indices, weights) of its rows and its first row number."""
    idx, w = anchor_rows(X, anchors, s, sigma)
    return idx, w, int(row_numbers[0]) if len(row_numbers) else 0


def graph_product(graph, M: np.ndarray) -> np.ndarray:
    """Z M for the chunk's rows (n, r): each row sums s rows of M."""
    idx, w, _ = graph
    return np.einsum("ns,nsr->nr", w, M[idx])


def anchor_sums(graph, B: np.ndarray, m: int) -> np.ndarray:
    """The chunk's Z^T B (m, r)."""
    idx, w, _ = graph
    flat = idx.ravel()
    return np.stack(
        [np.bincount(flat, weights=(w * B[:, j, None]).ravel(), minlength=m) for j in range(B.shape[1])], axis=1
    )


def initial_codes(graph, W: np.ndarray):
    """DGH-I: Y0 = Z W (AGH's embedding, sqrt(n) x the graph's top non-trivial eigenvectors),
    B0 = sgn(Y0) (>= 0 gives +1, as the codes' bits): (B0 int8, Y0)."""
    Y = graph_product(graph, W)
    return np.where(Y >= 0, 1, -1).astype(np.int8), Y


def signed_gradient_step(graph, B: np.ndarray, Y: np.ndarray, M: np.ndarray, half_rho: float):
    """One step of Algorithm 1 on the chunk's rows with M = Lambda^{-1} Z^T B:
    (new bits, their Z^T B (m, r), bits changed). The gradient 2 A B + rho Y is halved: the
    same signs (halving is exact in floating point)."""
    gradient = graph_product(graph, M) + half_rho * Y
    new = np.where(gradient > 0, 1, np.where(gradient < 0, -1, B)).astype(np.int8)
    return new, anchor_sums(graph, new, M.shape[0]), int((new != B).sum())


def code_moments(B: np.ndarray):
    """(B^T B, 1^T B) of the chunk, as int64: exact sums whatever the chunking (float64
    products of +-1 are exact below 2^53)."""
    Bf = B.astype(np.float64)
    return np.rint(Bf.T @ Bf).astype(np.int64), B.sum(axis=0, dtype=np.int64)


def completion_moments(graph, B: np.ndarray, k: int, seed: int):
    """(B^T G (r, k), G^T G (k, k), 1^T G (k,)) of the chunk's completion vectors G."""
    G = completion_vectors(graph[2], B.shape[0], k, seed)
    return B.T.astype(np.float64) @ G, G.T @ G, G.sum(axis=0)


def centred_spectrum(BtB: np.ndarray, code_sums: np.ndarray, n: int):
    """(V (r, r'), singular values (r',), Vbar (r, r - r')) of J B from its r x r Gram matrix."""
    C = BtB - np.outer(code_sums, code_sums) / n
    values, vectors = np.linalg.eigh((C + C.T) / 2.0)
    values, vectors = values[::-1], vectors[:, ::-1]
    rank = int((values > RANK_TOLERANCE * n).sum())
    return vectors[:, :rank], np.sqrt(values[:rank]), vectors[:, rank:]


def y_step(n: int, code_sums: np.ndarray, V, singular, Vbar, completion=None):
    """(P (r, r), Q (k, r) or None) of Y = (B - mu) P + (G - mean(G)) Q (module docstring).
    ``completion``: the summed (B^T G, G^T G, 1^T G) when J B is rank-deficient."""
    mu = code_sums / n
    left = V / singular  # V Sigma^{-1}
    if completion is None:
        return np.sqrt(n) * left @ V.T, None
    BtG, GtG, G_sums = completion
    g = G_sums / n
    T = left.T @ (BtG - n * np.outer(mu, g))  # U^T G
    L = np.linalg.cholesky(GtG - n * np.outer(g, g) - T.T @ T)  # of G'^T G', G' = G projected off [1 U]
    Q = np.sqrt(n) * np.linalg.solve(L.T, Vbar.T)  # L^{-T} Vbar^T, scaled
    return np.sqrt(n) * left @ (V.T - T @ np.linalg.solve(L.T, Vbar.T)), Q


def continuous_codes(graph, B, mu, P, completion_mean, Q, seed: int) -> np.ndarray:
    """The chunk's rows of Y = (B - mu) P + (G - mean(G)) Q."""
    Y = (B - mu) @ P
    if Q is not None:
        G = completion_vectors(graph[2], B.shape[0], Q.shape[0], seed)
        Y += (G - completion_mean) @ Q
    return Y


def graph_projection(ZtB: np.ndarray, column_sums: np.ndarray) -> np.ndarray:
    """Lambda^{-1} Z^T B (m, r): the B-step's M and the hash functions' W. Anchors no row
    chose (column sum 0) carry no weight."""
    inv = np.zeros_like(column_sums)
    inv[column_sums > 0] = 1.0 / column_sums[column_sums > 0]
    return inv[:, None] * ZtB


def graph_term(ZtB: np.ndarray, column_sums: np.ndarray) -> float:
    """tr(B^T A B) = tr((Z^T B)^T Lambda^{-1} Z^T B)."""
    return float((ZtB * graph_projection(ZtB, column_sums)).sum())
