"""BRE (Kulis & Darrell, NIPS 2009): binary reconstructive embedding, trained by the paper's
coordinate descent on a small training set. Plain numpy plus one numba loop.

Hash p of a point x is h_p(x) = 1 if sum_q W_pq k(x_pq, x) >= 0 else 0 (q = 1..t, the points
x_pq drawn from the training set; >= as every encoder here, kernels/codes.py). The training
set's original distances d_ij = 1/2 ||x_i - x_j||^2 (unit rows) are scaled to [0, 1] and
reconstructed by d~_ij = (1/b) sum_p (h_p(x_i) - h_p(x_j))^2; the objective is
O(W) = sum_{i<j} (d_ij - d~_ij)^2 over all pairs of the training set.

Coordinate descent (paper Sec. 3): changing W_pq by alpha moves point i's kernel sum
y_pi to y_pi + alpha k_i (k_i = k(x_pq, x_i)), so its bit flips once, at alpha_i = -y_pi / k_i.
O is piecewise constant in alpha; sweeping the sorted breakpoints from alpha = -inf and
flipping the points one by one gives O on every interval, and alpha moves to the best.

Incremental objective. While bit p is optimised the other bits are fixed, so with
E_ij = d_ij - (Hamming distance over the other bits) / b and sigma_i = 1 - 2 h_pi (+-1),
flipping point i changes O by sigma_i sum_{j != i} sigma_j G_ij, G_ij = (1/b - 2 E_ij) / b
(expand (E - s'/b)^2 - (E - s/b)^2 with s' = 1 - s in {0, 1}). g = G sigma is kept up to
date: a flip of i subtracts 2 sigma_i G[i, :] (G is symmetric, so a contiguous row), so a flip
costs n and a coordinate step O(n log n + n^2) without touching an n x n matrix.

Choices the paper leaves open: N = all pairs of the training set; the distances scaled by
their maximum; a tie between intervals goes to the lowest alpha, a tie with the current
objective keeps W_pq; sweeps in the order (p, q) row by row, stopped after one that moved
no weight. The estimator (hashing/kernel.py) draws W's start from N(0, 1) (scale-free).
"""

from __future__ import annotations

import numpy as np
from numba import njit


def unit_rows(X: np.ndarray) -> np.ndarray:
    """float64 rows scaled to norm 1, as the paper assumes; an all-zero row stays zero (its
    kernel sums are 0, all its bits 1)."""
    X = np.asarray(X, dtype=np.float64)
    norms = np.sqrt(np.einsum("ij,ij->i", X, X))
    return X / np.where(norms > 0, norms, 1.0)[:, None]


def scaled_distances(U: np.ndarray) -> np.ndarray:
    """(n, n) 1/2 ||u_i - u_j||^2 of unit rows divided by its largest value, so the target
    lies in [0, 1] like the normalised Hamming distance (the paper's unit norms alone give
    [0, 2]; [0, 1] only for data with no negative cosine)."""
    sq = np.einsum("ij,ij->i", U, U)
    d = np.maximum(0.5 * (sq[:, None] + sq[None, :]) - U @ U.T, 0.0)
    np.fill_diagonal(d, 0.0)
    top = d.max()
    return d / top if top > 0 else d


def kernel_sums(K: np.ndarray, points: np.ndarray, W: np.ndarray) -> np.ndarray:
    """(b, n) y_pi = sum_q W_pq K[points[p, q], i]: the kernel sums of the n training rows
    (K: the training set's kernel matrix, points: (b, t) row numbers of the x_pq)."""
    return np.einsum("pq,pqi->pi", W, K[points])


def bits_of(y: np.ndarray) -> np.ndarray:
    return (y >= 0).astype(np.uint8)


def hamming_matrix(H: np.ndarray) -> np.ndarray:
    """(n, n) float64 Hamming distances between the columns of the (b, n) bits."""
    Hf = H.astype(np.float64)
    return Hf.T @ (1.0 - Hf) + (1.0 - Hf).T @ Hf


def bit_disagreement(h: np.ndarray) -> np.ndarray:
    """(n, n) float64 1 where two points' bits differ: bit p's share of the Hamming matrix."""
    return (h[:, None] != h[None, :]).astype(np.float64)


def gain_matrix(d: np.ndarray, others: np.ndarray, b: int) -> np.ndarray:
    """G (module docstring) from the Hamming distances over the other bits, zero diagonal."""
    G = (1.0 / b - 2.0 * (d - others / b)) / b
    np.fill_diagonal(G, 0.0)
    return G


def objective(d: np.ndarray, H: np.ndarray) -> float:
    """O = sum_{i<j} (d_ij - Hamming(h_i, h_j) / b)^2, written out from the (b, n) bits."""
    return pair_objective(d, hamming_matrix(H), H.shape[0])


def pair_objective(d: np.ndarray, D: np.ndarray, b: int) -> float:
    r = np.triu(d - D / b, 1)
    return float((r * r).sum())


@njit(cache=True)
def _flip(i, sigma, g, G):
    """Flip point i's bit; returns the change of O."""
    delta = sigma[i] * g[i]
    s2 = 2.0 * sigma[i]
    for j in range(g.shape[0]):
        g[j] -= s2 * G[i, j]
    sigma[i] = -sigma[i]
    return delta


@njit(cache=True)
def _set_bits(target, sigma, g, G):
    """Flip every point whose bit differs from ``target`` (+-1); returns the change of O."""
    change = 0.0
    for i in range(sigma.shape[0]):
        if sigma[i] != target[i]:
            change += _flip(i, sigma, g, G)
    return change


# a move must lower O by more than this fraction: below it the gain is rounding of the
# incremental sums (and zero when the best interval is the current one)
RELATIVE_GAIN = 1e-12


@njit(cache=True)
def _outward(end: float, reach: float) -> float:
    """How far past an outer breakpoint alpha goes: max(|end|, reach), 1 if both are 0."""
    step = max(abs(end), reach)
    return step if step > 0 else 1.0


@njit(cache=True)
def coordinate_step(y, k, sigma, g, G, current):
    """Best change alpha of one W_pq: (alpha, objective after it). ``y``: bit p's kernel sums
    (n), moved to y + alpha k; ``k``: k(x_pq, x_i) (n); ``sigma``/``g``: the state of bit p
    (module docstring), moved to the new bits; ``current``: O now.

    The breakpoints alpha_i = -y_i / k_i are swept from alpha = -inf upwards (points with
    k_i = 0 never flip; equal breakpoints are one step). alpha is the midpoint of the best
    interval, or in an outer one its end moved out by max(|end|, span of the breakpoints)
    (1 when both are 0). It stays 0 unless the best interval beats ``current``: O never
    rises, and a tie keeps the weight where it is."""
    n = y.shape[0]
    moving = np.flatnonzero(k != 0.0)
    if moving.shape[0] == 0:
        return 0.0, current
    breaks = -y[moving] / k[moving]
    order = np.argsort(breaks, kind="mergesort")
    lo, hi = breaks[order[0]], breaks[order[-1]]
    # at alpha -> -inf a moving point's sum has the sign of -k_i (sigma = 1 - 2h)
    start = sigma.copy()
    for i in moving:
        start[i] = -1.0 if k[i] < 0 else 1.0
    value = current + _set_bits(start, sigma, g, G)
    alpha, best = 0.0, current * (1.0 - RELATIVE_GAIN)
    if value < best:
        alpha, best = lo - _outward(lo, hi - lo), value
    m, a = order.shape[0], 0
    while a < m:
        here = breaks[order[a]]
        while a < m and breaks[order[a]] == here:
            value += _flip(moving[order[a]], sigma, g, G)
            a += 1
        if value < best:
            alpha = 0.5 * (here + breaks[order[a]]) if a < m else hi + _outward(hi, hi - lo)
            best = value
    target = np.empty(n)
    for i in range(n):
        y[i] = y[i] + alpha * k[i]
        target[i] = -1.0 if y[i] >= 0 else 1.0
    return alpha, value + _set_bits(target, sigma, g, G)


def train_bre(K: np.ndarray, d: np.ndarray, points: np.ndarray, W: np.ndarray, n_iter: int, log=None):
    """Coordinate descent from ``W`` (b, t): sweeps over every (p, q) in order, at most
    ``n_iter`` of them, stopping after a sweep that moved no weight. Returns (W, objective
    before the first sweep and after each, written out from the Hamming distances)."""
    W = np.array(W, dtype=np.float64, copy=True)
    b, t = W.shape
    y = kernel_sums(K, points, W)
    H = bits_of(y)
    D = hamming_matrix(H)
    history = [pair_objective(d, D, b)]
    for sweep in range(n_iter):
        value, moved = history[-1], 0
        for p in range(b):
            own = bit_disagreement(H[p])
            G = gain_matrix(d, D - own, b)
            sigma = 1.0 - 2.0 * H[p].astype(np.float64)
            g = G @ sigma
            for q in range(t):
                alpha, value = coordinate_step(y[p], K[points[p, q]], sigma, g, G, value)
                if alpha != 0.0:
                    W[p, q] += alpha
                    moved += 1
            H[p] = bits_of(y[p])
            D += bit_disagreement(H[p]) - own
        history.append(pair_objective(d, D, b))
        if log is not None:
            log(sweep, history[-1], moved)
        if moved == 0:
            break
    return W, history
