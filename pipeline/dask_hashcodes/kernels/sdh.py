"""The numeric steps of supervised discrete hashing (SDH; Shen, Shen, Liu & Shen, CVPR 2015),
written so that every step works one chunk of training rows at a time. Plain numpy.

SDH learns codes B in {-1, +1}^(n x L) of the training rows, a linear classifier W (L x C)
from codes to labels and a kernel hash function F(x) = phi(x)^T P (phi: RBF features
against anchors, plus a constant 1):

    min ||Y - B W||^2 + lambda ||W||^2 + nu ||B - Phi P||^2        (Y: one-hot or multi-hot labels)

* G-step W = (B^T B + lambda I)^-1 B^T Y and F-step P = (Phi^T Phi + lambda_F I)^-1 Phi^T B
  need only the sums B^T B (L x L), B^T Y (L x C), Phi^T Phi and Phi^T B over the rows;
* B-step by discrete cyclic coordinate descent (DCC): minimise ||B W||^2 - 2 tr(B^T Q),
  Q = Y W^T + nu Phi P, bit by bit with the others fixed,
  b_k = sign(q_k - B_{-k} W_{-k} w_k^T). Each row of B depends only on its own row of Q, so
  the step is the same on any split of the rows into chunks.
"""

from __future__ import annotations

import numpy as np

from dask_hashcodes.kernels.codes import random_codes
from dask_hashcodes.kernels.rbf import rbf_features


def label_matrix(labels: np.ndarray, classes: np.ndarray | None) -> np.ndarray:
    """Y (n, C) float64: for class labels a one-hot row per label, column j for ``classes[j]``
    (the sorted classes of the training rows); multi-hot rows (``classes`` None) as given."""
    labels = np.asarray(labels)
    if labels.ndim == 2:
        return labels.astype(np.float64)
    Y = np.zeros((len(labels), len(classes)))
    Y[np.arange(len(labels)), np.searchsorted(classes, labels)] = 1.0
    return Y


def sdh_features(X: np.ndarray, anchors: np.ndarray, bandwidth: float) -> np.ndarray:
    """phi(X) (n, m + 1) float64: Gaussian kernel features against the anchors, then a 1 (the
    hash function's offset, regularised like the other weights as in the authors' code)."""
    K = rbf_features(X, anchors, bandwidth).astype(np.float64)
    return np.hstack([K, np.ones((K.shape[0], 1))])


def ridge(gram: np.ndarray, cross: np.ndarray, lam: float) -> np.ndarray:
    """(G + lam I)^-1 C: a regularised least-squares solution from its two sums."""
    return np.linalg.solve(gram + lam * np.eye(gram.shape[0]), cross)


def dcc_codes(B: np.ndarray, Q: np.ndarray, W: np.ndarray, max_sweeps: int = 10) -> np.ndarray:
    """DCC on rows of B (n, L) in {-1, +1}: sweeps over the bits, b_k = sign(q_k - B_{-k}
    W_{-k} w_k^T) with the other bits at their newest values, until a sweep changes no bit or
    after ``max_sweeps`` (the authors' 10). A zero keeps the old bit. Rows are independent:
    running them in chunks is running them together."""
    B = np.array(B, dtype=np.float64)
    WWt = W @ W.T  # (L, L): W_{-k} w_k^T is column k of it without entry k
    for _ in range(max_sweeps):
        before = B.copy()
        for k in range(B.shape[1]):
            coupling = WWt[:, k].copy()
            coupling[k] = 0.0
            field = Q[:, k] - B @ coupling
            B[:, k] = np.where(field > 0, 1.0, np.where(field < 0, -1.0, B[:, k]))
        if np.array_equal(B, before):
            break
    return B.astype(np.int8)


def sdh_objective_terms(Y: np.ndarray, B: np.ndarray, W: np.ndarray, Phi: np.ndarray, P: np.ndarray) -> tuple:
    """(||Y - B W||^2, ||B - Phi P||^2) of one chunk (for the report; they add over chunks)."""
    return float(((Y - B @ W) ** 2).sum()), float(((B - Phi @ P) ** 2).sum())


def sdh_chunk_pass(X, labels, B, start, *, anchors, bandwidth, classes, start_seed=0, n_bits=0, W=None, P=None, nu=0.0):
    """One chunk of training rows (rows ``start`` .. ``start + len(X)``) in one SDH pass: B's
    start (B None: ``random_codes`` from ``start_seed``) or the DCC B-step from the current W
    and P; then the chunk's shares of Phi^T Phi, Phi^T B, B^T B, B^T Y and of the two loss
    terms. Returns (codes, sums)."""
    Y = label_matrix(labels, classes)
    Phi = sdh_features(X, anchors, bandwidth)
    if B is None:
        B = random_codes(start_seed, start, len(Y), n_bits)
    else:
        Q = Y @ W.T + nu * (Phi @ P)
        B = dcc_codes(B, Q, W)
    Bf = B.astype(np.float64)
    terms = (0.0, 0.0) if W is None else sdh_objective_terms(Y, Bf, W, Phi, P)
    return B, (Phi.T @ Phi, Phi.T @ Bf, Bf.T @ Bf, Bf.T @ Y, np.array(terms))
