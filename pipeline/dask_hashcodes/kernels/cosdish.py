"""The numeric steps of column-sampling discrete supervised hashing (COSDISH; Kang, Li & Zhou,
AAAI 2016), written so that the training rows are worked one chunk at a time. Plain numpy.

COSDISH fits codes B in {-1, +1}^(n x q) of the training rows to the scaled similarities,
min ||q S - B B^T||^2, on a few sampled columns at a time: each iteration draws Omega (|Omega|
rows, q by default), splits the rows into Omega and the rest Gamma, and alternates

* the Omega step: B_Omega bit by bit, bit k fitting what the bits before it leave of q S
  (a binary quadratic problem in |Omega| variables, ``solve_bit``), from the sums
  S_Gamma^T B_Gamma (|Omega| x q) and B_Gamma^T B_Gamma (q x q) over the database;
* the Gamma step: B_Gamma = sign(S_Gamma B_Omega) row by row (a zero keeps the old bit), in
  each chunk, with S's products formed from labels inside the task (kernels/label_similarity.py).

S is 1 for a shared label and -r otherwise (r: similar / dissimilar pairs), as ADSH, by the
same authors, weighs its dissimilar pairs. The hash functions are then a ridge regression from
the standardised features to B (``linear_hash``).
"""

from __future__ import annotations

import numpy as np

from dask_hashcodes.kernels.label_similarity import database_sums, similarity_transpose_times
from dask_hashcodes.kernels.stats import chunk_moments


def bit_objective(b: np.ndarray, A: np.ndarray, c: np.ndarray) -> float:
    """b^T A b + c^T b."""
    return float(b @ A @ b + c @ b)


def solve_bit(A: np.ndarray, c: np.ndarray, start: np.ndarray) -> np.ndarray:
    """A low value of b^T A b + c^T b over b in {-1, +1}^m (A symmetric, zero diagonal): the
    better of ``start`` (the bit's old value) and the sign of the smallest eigenvector of the
    augmented matrix [[A, c/2], [c^T/2, 0]] (the spectral relaxation, its sign fixed by the
    last entry), then single-bit flips, best first, while one lowers the value. Never worse
    than ``start``; the result is a local minimum under single flips."""
    m = len(c)
    M = np.zeros((m + 1, m + 1))
    M[:m, :m], M[:m, m], M[m, :m] = A, c / 2.0, c / 2.0
    vec = np.linalg.eigh(M)[1][:, 0]
    spectral = np.where(vec[:m] * (1.0 if vec[m] >= 0 else -1.0) >= 0, 1.0, -1.0)
    start = np.asarray(start, dtype=np.float64)
    b = min((start, spectral), key=lambda v: bit_objective(v, A, c)).copy()
    while True:
        # flipping b_i changes the value by -4 b_i (A b)_i - 2 c_i b_i (A has a zero diagonal)
        gain = -4.0 * b * (A @ b) - 2.0 * c * b
        i = int(np.argmin(gain))
        if gain[i] >= -1e-12:
            return b
        b[i] = -b[i]


def omega_step(B_omega, S_omega, StB_gamma, BtB_gamma, q: int) -> np.ndarray:
    """New B_Omega (|Omega|, q): bits in order, bit k minimising ||q S_Omega - sum_{l<=k} b_l
    b_l^T||^2 + ||q S_Gamma - sum_{l<=k} B_Gamma[:, l] b_l^T||^2 with the bits before it at
    their new values (the authors' residual order). S_Omega (|Omega|, |Omega|);
    StB_gamma = S_Gamma^T B_Gamma, BtB_gamma = B_Gamma^T B_Gamma: sums over the Gamma rows."""
    B_omega = np.asarray(B_omega, dtype=np.float64)
    new = np.zeros_like(B_omega)
    residual = q * np.asarray(S_omega, dtype=np.float64)
    for k in range(B_omega.shape[1]):
        A = -2.0 * residual
        np.fill_diagonal(A, 0.0)
        # the Gamma term's linear part: -2 (q S_Gamma - sum_{l<k} B_Gamma[:, l] b_l^T)^T B_Gamma[:, k]
        c = -2.0 * (q * StB_gamma[:, k] - new[:, :k] @ BtB_gamma[:k, k])
        new[:, k] = solve_bit(A, c, B_omega[:, k])
        residual -= np.outer(new[:, k], new[:, k])
    return new.astype(np.int8)


def gamma_step(B, omega_labels, labels, B_omega, weight: float) -> np.ndarray:
    """sign(S B_Omega) for a chunk's rows B (n_chunk, q) (a zero keeps the old bit)."""
    field = similarity_transpose_times(omega_labels, labels, B_omega, weight)
    return np.where(field > 0, 1, np.where(field < 0, -1, B)).astype(np.int8)


def cosdish_chunk_pass(B, labels, start: int, omega, omega_labels, B_omega=None, weight=1.0):
    """One chunk of training rows (rows start .. start + len(B)): with ``B_omega``, the Gamma
    step of its rows and B_Omega written into the Omega rows it holds; then its shares of
    B^T B, P B, 1^T B and the similar pairs (integers) and its Omega rows' codes.
    Returns (codes, sums) with the sums laid out as label_similarity.add_chunk_sums combines them."""
    held = omega[(omega >= start) & (omega < start + len(B))]
    if B_omega is not None:
        B = gamma_step(B, omega_labels, labels, B_omega, weight)
        B[held - start] = B_omega[np.searchsorted(omega, held)]
    return B, (*database_sums(B, omega_labels, labels), held, np.asarray(B[held - start]), None)


def regression_sums(X, B) -> tuple:
    """One chunk's (count, mean, M2) of X and its X^T B, 1^T B: all that the ridge regression
    from standardised features to codes needs (moments combine exactly in any order)."""
    Bf = np.asarray(B, dtype=np.float64)
    return chunk_moments(X), np.asarray(X, dtype=np.float64).T @ Bf, Bf.sum(axis=0)


def linear_hash(moments, XtB, column_sums, lam: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, scale, W): features centred and divided by one scale (their RMS), then
    W = (Xs^T Xs + lam I)^-1 Xs^T B as the authors' out-of-sample step; bits sign(Xs W).
    One scale for all dimensions, not one per dimension: per-dimension scaling blows up
    nearly constant dimensions (an image's border pixels) into noise the regression fits,
    and lowered map on Fashion-MNIST."""
    n, mean, M2 = moments
    scale = np.full(len(mean), np.sqrt(np.diag(M2).mean() / max(n, 1)) or 1.0)
    gram = M2 / np.outer(scale, scale)
    cross = (XtB - np.outer(mean, column_sums)) / scale[:, None]
    return mean, scale, np.linalg.solve(gram + lam * np.eye(len(mean)), cross)
