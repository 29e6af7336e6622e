"""Supervised hashing with kernels (KSH; Liu, Wang, Ji, Jiang & Chang, CVPR 2012). Plain numpy
and scipy on l x m and l x l matrices (l labeled points, m kernel anchors).

Hash functions h_k(x) = sgn(a_k^T kbar(x)) on centred kernel features kbar(x) = k(x) - mean
over the labeled points of k. The codes of the labeled points, B = sgn(Kbar A) (l x r), should
reproduce the pairwise labels S (+1 similar, -1 dissimilar, every pair) through their inner
products: min ||B B^T - r S||_F^2. KSH learns the bits greedily: with the residual
R_{k-1} = r S - sum_{t<k} b_t b_t^T, bit k maximises b_k^T R_{k-1} b_k over b_k = sgn(Kbar a):

* spectral relaxation: a_k^0, the top generalised eigenvector of Kbar^T R Kbar a = lambda
  Kbar^T Kbar a (scaled so that ||Kbar a||^2 = l, as the authors' code does);
* sigmoid smoothing: sgn(x) replaced by phi(x) = 2 / (1 + exp(-x)) - 1, maximise
  phi(Kbar a)^T R phi(Kbar a) from a_k^0 (here by L-BFGS; the paper uses gradient descent);
* the bit is the one of the two (relaxed start, smoothed optimum) whose signs score higher in
  b^T R b.
"""

from __future__ import annotations

import numpy as np
from scipy import linalg, optimize

RIDGE = 1e-6  # relative ridge on Kbar^T Kbar: it is singular when the anchors' features are


def _signs(x: np.ndarray) -> np.ndarray:
    return np.where(x >= 0, 1.0, -1.0)


def _phi(x: np.ndarray) -> np.ndarray:
    """2 / (1 + exp(-x)) - 1, written as tanh(x / 2): no overflow for large |x|."""
    return np.tanh(0.5 * x)


def spectral_direction(K: np.ndarray, R: np.ndarray, KtK: np.ndarray) -> np.ndarray:
    """a maximising a^T K^T R K a / a^T K^T K a, scaled to ||K a||^2 = l."""
    gram = KtK + RIDGE * np.trace(KtK) / len(KtK) * np.eye(len(KtK))
    _, vectors = linalg.eigh(K.T @ (R @ K), gram, subset_by_index=[len(KtK) - 1, len(KtK) - 1])
    a = vectors[:, 0]
    return a * np.sqrt(len(K) / max(float(a @ KtK @ a), 1e-300))


def smoothed_direction(K: np.ndarray, R: np.ndarray, start: np.ndarray, max_iter: int) -> np.ndarray:
    """a maximising phi(K a)^T R phi(K a), from ``start``."""

    def negative_score(a):
        p = _phi(K @ a)
        Rp = R @ p
        # d phi / dx = (1 - phi^2) / 2
        return -float(p @ Rp), -K.T @ (Rp * (1.0 - p * p))

    return optimize.minimize(negative_score, start, jac=True, method="L-BFGS-B", options={"maxiter": max_iter}).x


def train_ksh(K: np.ndarray, S: np.ndarray, n_bits: int, max_iter: int = 500, log=None) -> tuple[np.ndarray, list]:
    """(A (m, n_bits), per-bit scores b^T R b) for centred kernel features K (l, m) of the
    labeled points and their pair labels S (l, l) in {+1, -1}."""
    K = np.asarray(K, dtype=np.float64)
    R = n_bits * np.asarray(S, dtype=np.float64)
    KtK = K.T @ K
    A = np.empty((K.shape[1], n_bits))
    scores = []
    for k in range(n_bits):
        start = spectral_direction(K, R, KtK)
        smoothed = smoothed_direction(K, R, start, max_iter)
        candidates = [(float(b @ R @ b), a, b) for a in (start, smoothed) for b in [_signs(K @ a)]]
        score, A[:, k], bits = max(candidates, key=lambda c: c[0])
        R -= np.outer(bits, bits)
        scores.append(score)
        if log is not None:
            log(k, score)
    return A, scores
