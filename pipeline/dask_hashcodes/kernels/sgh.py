"""SGH kernels (Jiang & Li, IJCAI 2015): the feature transformation P(x)/Q(x) and the
per-chunk terms of Algorithm 1 on Gaussian kernel features (kernels/rbf.py). Plain numpy;
the estimator sums them.

Notation (rows are points): K is the n x m matrix of kernel features centred by their mean
over the training set, P and Q the n x (d+2) transformed features, so that the n x n target
S~ = 2 exp(-||x_i - x_j||^2 / rho) - 1 ~= P Q^T is never formed:

  A_1 = c K^T S~ K = c (K^T P)(K^T Q)^T,   Z = K^T K + gamma I,
  bit t: A_t w = lambda Z w (top generalised eigenvector), A_{t+1} = A_t - u u^T,
  u = K^T sgn(K w_t).

P(x) = [a e^{-|x|^2/rho} x ; b e^{-|x|^2/rho} ; 1] and Q(x) the same with -1 last, where
a = sqrt(2 (e^2 - 1) / (e rho)), b = sqrt((e^2 + 1) / e). Their first d + 1 columns agree
("head" below), and the last columns are +1 / -1, so with s = K^T 1:
K^T P = [H, s], K^T Q = [H, -s] and A_1 / c = H H^T - s s^T (symmetric, as S~ is).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg

SLAB_ROWS = 2048  # rows of kernel features handled at a time: a float64 slab of 300 bases stays ~5 MB
E = math.e
HEAD_X_SCALE = math.sqrt(2.0 * (E * E - 1.0) / E)  # a * sqrt(rho)
HEAD_CONST = math.sqrt((E * E + 1.0) / E)  # b


def sq_distance_moments(n: int, col_sum: np.ndarray, sq_sum: float, bases: np.ndarray) -> float:
    """Mean of ||x - a_j||^2 over all training rows x and bases a_j, from the row sums:
    E||x||^2 - 2 mean . mean(a) + mean ||a||^2 (no second pass)."""
    B = np.asarray(bases, dtype=np.float64)
    return float(sq_sum / n - 2.0 * (col_sum / n) @ B.mean(axis=0) + np.einsum("ij,ij->i", B, B).mean())


def transformed_head(Xc: np.ndarray, rho: float) -> np.ndarray:
    """(n, d + 1) float64: the first d + 1 columns of P(x) (= those of Q(x)) of centred rows."""
    Xc = np.asarray(Xc, dtype=np.float64)
    damp = np.exp(-np.einsum("ij,ij->i", Xc, Xc) / rho)
    head = np.empty((Xc.shape[0], Xc.shape[1] + 1))
    np.multiply(Xc, (HEAD_X_SCALE / math.sqrt(rho)) * damp[:, None], out=head[:, :-1])
    head[:, -1] = HEAD_CONST * damp
    return head


def max_centred_sq_norm_and_kernel_sum(X: np.ndarray, phi: np.ndarray, mean: np.ndarray) -> tuple[float, np.ndarray]:
    """(max ||x - mean||^2 over the chunk, column sums of the kernel features)."""
    best = 0.0
    for start in range(0, X.shape[0], SLAB_ROWS):
        slab = np.asarray(X[start : start + SLAB_ROWS], dtype=np.float64) - mean
        best = max(best, float(np.einsum("ij,ij->i", slab, slab).max(initial=0.0)))
    return best, phi.sum(axis=0, dtype=np.float64)


def combine_max_sum(a, b):
    return max(a[0], b[0]), a[1] + b[1]


def gram_terms(X: np.ndarray, phi: np.ndarray, mean: np.ndarray, kernel_mean: np.ndarray, rho: float):
    """(K^T K (m, m), K^T head (m, d+1), K^T 1 (m,)) of one chunk, K = phi - kernel_mean."""
    m = phi.shape[1]
    KtK, KtH, Ks = np.zeros((m, m)), np.zeros((m, X.shape[1] + 1)), np.zeros(m)
    for start in range(0, X.shape[0], SLAB_ROWS):
        K = phi[start : start + SLAB_ROWS].astype(np.float64) - kernel_mean
        head = transformed_head(np.asarray(X[start : start + SLAB_ROWS], dtype=np.float64) - mean, rho)
        KtK += K.T @ K
        KtH += K.T @ head
        Ks += K.sum(axis=0)
    return KtK, KtH, Ks


def initial_residual(KtH: np.ndarray, Ks: np.ndarray, n_bits: int) -> np.ndarray:
    """A_1 = c (K^T P)(K^T Q)^T = c (H H^T - s s^T), symmetrised against rounding."""
    A = n_bits * (KtH @ KtH.T - np.outer(Ks, Ks))
    return (A + A.T) / 2.0


def kernel_sign_gram(phi: np.ndarray, kernel_mean: np.ndarray, w: np.ndarray) -> np.ndarray:
    """u = K^T sgn(K w) of one chunk (m,), K = phi - kernel_mean, sgn(0) = +1."""
    u = np.zeros(phi.shape[1])
    # one float64 buffer, filled by a single widening subtraction per slab: this runs once per
    # bit per chunk, and a fresh cast plus a fresh difference per slab cost twice the time
    # for the same numbers
    buffer = np.empty((min(SLAB_ROWS, phi.shape[0]), phi.shape[1]))
    for start in range(0, phi.shape[0], SLAB_ROWS):
        slab = phi[start : start + SLAB_ROWS]
        K = np.subtract(slab, kernel_mean, out=buffer[: len(slab)])
        u += K.T @ np.where(K @ w >= 0, 1.0, -1.0)
    return u


def top_generalized_eigenvector(A: np.ndarray, Z: np.ndarray) -> np.ndarray:
    """w maximising w^T A w subject to w^T Z w = 1, with a fixed sign (largest |entry| > 0),
    so the same problem up to rounding gives the same hash function."""
    m = A.shape[0]
    _, vec = scipy.linalg.eigh((A + A.T) / 2.0, Z, subset_by_index=[m - 1, m - 1])
    w = vec[:, 0]
    return w if w[np.argmax(np.abs(w))] > 0 else -w
