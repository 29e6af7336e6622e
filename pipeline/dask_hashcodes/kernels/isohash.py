"""IsoHash (Kong & Li, NIPS 2012): the orthogonal Q that makes PCA's projected variances
equal, by the paper's lift and projection. Plain numpy on r x r matrices."""

from __future__ import annotations

import numpy as np


def isotropic_rotation(variances: np.ndarray, Q0: np.ndarray, max_iter: int = 1000, tol: float = 1e-10):
    """(Q, iterations >= 1): orthogonal Q with diag(Q^T diag(variances) Q) = mean(variances).

    Lift and projection alternates between the two sets whose intersection is the answer:
    T, the symmetric matrices with the wanted diagonal (project: overwrite the diagonal)
    and M, the matrices Q^T Lambda Q with Lambda's spectrum (project: keep the eigenvectors
    of T, put Lambda's eigenvalues back in the same order). Stops when the largest distance
    of a diagonal entry from the mean is below tol x the mean."""
    variances = np.asarray(variances, dtype=np.float64)
    order = np.argsort(variances, kind="stable")  # work in ascending order, as eigh's output
    lam = variances[order]
    target = lam.mean()
    Q = np.asarray(Q0, dtype=np.float64)[order]
    iterations = 0
    while iterations < max_iter:
        T = Q.T @ np.diag(lam) @ Q
        np.fill_diagonal(T, target)
        _, U = np.linalg.eigh(T)
        Q = U.T  # Q^T diag(lam) Q = U diag(lam) U^T: T's eigenvectors with lam's spectrum
        iterations += 1
        if np.abs(np.diag(Q.T @ np.diag(lam) @ Q) - target).max() <= tol * abs(target):
            break
    out = np.empty_like(Q)
    out[order] = Q  # back to the given order of the variances
    return out, iterations
