"""Gaussian (RBF) kernel features k(x, a) = exp(-||x - a||^2 / (2 bandwidth^2)) of rows against
a set of bases (anchors, centres). Plain numpy.

The kernel methods (SGH, SDH, KSH, KLSH's encoder, MAC's kernel hash functions) all feed their
rows through ``rbf_features``: float32 features computed row by row, so training and encoding
give the same features for the same row whatever the chunking. ``rbf_kernel_matrix`` is the
same kernel in float64 for a small set of points against another (KLSH's anchors against
themselves), where the whitening of the matrix needs the precision.
"""

from __future__ import annotations

import numpy as np

from dask_hashcodes.kernels.codes import row_slabs
from dask_hashcodes.kernels.l2 import exact_dtype


def rbf_features(X: np.ndarray, bases: np.ndarray, bandwidth: float) -> np.ndarray:
    """float32 (n, m): exp(-||x - a_j||^2 / (2 bandwidth^2)) for every base a_j (uncentred).

    Squared distances come from ||x||^2 - 2 x.a + ||a||^2 slab by slab; for integer data
    whose products stay below 2**24 (SIFT) the float32 GEMM is exact (see kernels/l2.py),
    otherwise float64. Each row is computed on its own, so features do not depend on the
    chunking."""
    X = np.asarray(X)
    dtype = exact_dtype(X, bases) if np.issubdtype(np.asarray(bases).dtype, np.integer) else np.float64
    B = np.asarray(bases, dtype=dtype)
    base_sq = np.einsum("ij,ij->i", B.astype(np.float64), B.astype(np.float64))
    scale = -1.0 / (2.0 * float(bandwidth) ** 2)
    out = np.empty((X.shape[0], B.shape[0]), np.float32)
    for rows in row_slabs(X.shape[0]):
        slab = np.asarray(X[rows], dtype=dtype)
        sq = np.einsum("ij,ij->i", slab, slab).astype(np.float64)
        d2 = (slab @ B.T).astype(np.float64)
        d2 *= -2.0
        d2 += sq[:, None]
        d2 += base_sq[None, :]
        np.maximum(d2, 0.0, out=d2)
        d2 *= scale
        out[rows] = np.exp(d2)
    return out


def rbf_kernel_matrix(A: np.ndarray, B: np.ndarray, bandwidth: float) -> np.ndarray:
    """float64 exp(-||a - b||^2 / (2 bandwidth^2)) for every pair of rows of A and B."""
    A, B = np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64)
    d2 = np.einsum("ij,ij->i", A, A)[:, None] - 2.0 * A @ B.T + np.einsum("ij,ij->i", B, B)[None, :]
    return np.exp(-np.maximum(d2, 0.0) / (2.0 * bandwidth**2))
