"""KLSH (Kulis & Grauman, ICCV 2009): random hyperplanes in a kernel's feature space, from
p anchor points. Plain numpy on p x p matrices.

A bit's hyperplane is r = Sigma^{-1/2} z with z = mean of t random anchors minus the mean of
all p (centred, approximately Gaussian by the central limit theorem), whitened by the
anchors' covariance in feature space. Through the centred kernel matrix K_c of the anchors
this is r = sum_i w_i phi(x_i) with w = K_c^{-1/2} (e_S / t - 1 / p) (paper Sec. 3), so
h(x) = sgn(k_c(x) . w), k_c the centred kernel vector of x against the anchors. As K_c 1 = 0,
w is orthogonal to 1 and the centring of k(x) reduces to subtracting the column means of K.
"""

from __future__ import annotations

import numpy as np


def centred(K: np.ndarray) -> np.ndarray:
    """H K H with H = I - 11^T / p: the kernel matrix of the anchors' centred features."""
    K = np.asarray(K, dtype=np.float64)
    return K - K.mean(axis=0)[None, :] - K.mean(axis=1)[:, None] + K.mean()


# K_c's eigenvalues below this fraction of the largest are dropped: K_c is singular (its null
# space holds 1), and a Gaussian kernel's spectrum decays fast. The kernel features a bit is
# computed from are float32 (relative error ~1e-7); whitening by eigenvalues below 1e-6 x
# the largest would amplify that error more than 1000-fold and flip bits at random.
RELATIVE_EIGENVALUE_FLOOR = 1e-6


def inverse_sqrt(Kc: np.ndarray, rel_tol: float = RELATIVE_EIGENVALUE_FLOOR) -> np.ndarray:
    """K_c^{-1/2} on the span of K_c's eigenvectors whose eigenvalues are above rel_tol x
    the largest."""
    values, vectors = np.linalg.eigh((Kc + Kc.T) / 2.0)
    keep = values > rel_tol * values.max()
    return (vectors[:, keep] / np.sqrt(values[keep])) @ vectors[:, keep].T


def klsh_weights(K: np.ndarray, subsets: np.ndarray) -> np.ndarray:
    """(p, n_bits) W, column b = K_c^{-1/2} (e_S / t - 1 / p) for the anchors S = subsets[b]."""
    p = K.shape[0]
    E = np.full((p, len(subsets)), -1.0 / p)
    for b, S in enumerate(subsets):
        E[S, b] += 1.0 / len(S)
    return inverse_sqrt(centred(K)) @ E
