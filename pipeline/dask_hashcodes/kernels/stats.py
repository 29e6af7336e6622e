"""Chunk statistics for centering and covariance, combined exactly in any order.

Each chunk gives (count, mean, M2) with M2 = (X - mean)^T (X - mean); two partial results
merge with Chan et al.'s parallel update. Unlike sum/sum-of-squares this does not lose
precision when the data has a large offset (embeddings, SIFT's mean of ~30 per dimension).
"""

from __future__ import annotations

import numpy as np

Moments = tuple[int, np.ndarray, np.ndarray]


def chunk_moments(X: np.ndarray) -> Moments:
    X = np.asarray(X, dtype=np.float64)
    n = X.shape[0]
    if n == 0:
        d = X.shape[1]
        return 0, np.zeros(d), np.zeros((d, d))
    mean = X.mean(axis=0)
    Xc = X - mean
    return n, mean, Xc.T @ Xc


def combine_moments(a: Moments, b: Moments) -> Moments:
    na, ma, Ma = a
    nb, mb, Mb = b
    if na == 0:
        return b
    if nb == 0:
        return a
    n = na + nb
    delta = mb - ma
    mean = ma + delta * (nb / n)
    M2 = Ma + Mb + np.outer(delta, delta) * (na * nb / n)
    return n, mean, M2


def covariance(moments: Moments) -> tuple[np.ndarray, np.ndarray]:
    """(mean, covariance with 1/n normalisation)."""
    n, mean, M2 = moments
    return mean, M2 / n


def top_eigenvectors(cov: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k eigenpairs, descending, with a fixed sign (largest-|entry| of each vector > 0).

    The sign fix makes PCA directions identical when the covariance differs only by
    rounding (e.g. another chunking), which keeps downstream codes reproducible.
    """
    evals, evecs = np.linalg.eigh(cov)
    order = np.argsort(evals)[::-1][:k]
    evals, evecs = evals[order], evecs[:, order]
    return evals, _fixed_signs(evecs)


def top_eigenvector(M: np.ndarray) -> np.ndarray:
    """The unit eigenvector of a symmetric matrix's largest eigenvalue, its sign fixed as in
    ``top_eigenvectors``. LAPACK's partial solver (syevr for one eigenpair) reduces the matrix
    to tridiagonal form and back-transforms one vector instead of all of them: a fraction of
    the full decomposition's work, for the methods that take one direction per bit."""
    import scipy.linalg  # here: workers import this module for the moments, and scipy.linalg is slow to import

    d = M.shape[0]
    _, vector = scipy.linalg.eigh(M, subset_by_index=[d - 1, d - 1], driver="evr", check_finite=False)
    return _fixed_signs(vector)[:, 0]


def _fixed_signs(evecs: np.ndarray) -> np.ndarray:
    """Each column times the sign of its largest-|entry|, in place: that entry is positive."""
    pivot = np.abs(evecs).argmax(axis=0)
    evecs *= np.sign(evecs[pivot, np.arange(evecs.shape[1])])
    return evecs


def chunk_count_sum(X: np.ndarray) -> tuple[int, np.ndarray]:
    """(rows, column sums) in float64: all that centering needs, far cheaper than moments."""
    return X.shape[0], np.asarray(X, dtype=np.float64).sum(axis=0)


def add_partials(a, b):
    """Element-wise sum of two partial results given as tuples (counts, arrays, floats)."""
    return tuple(x + y for x, y in zip(a, b))


def add(a, b):
    """a + b: the combine step of reductions whose partial results are single arrays."""
    return a + b
