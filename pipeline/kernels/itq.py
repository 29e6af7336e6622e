"""ITQ (Gong & Lazebnik): rotation step on per-chunk r x r terms."""
from __future__ import annotations

import numpy as np

from pipeline.kernels.codes import signs


def random_rotation(r: int, rng: np.random.Generator) -> np.ndarray:
    """Random orthogonal r x r matrix (left singular vectors of a Gaussian, as ITQ's code)."""
    U, _, _ = np.linalg.svd(rng.standard_normal((r, r)))
    return U


def itq_chunk_terms(V: np.ndarray, R: np.ndarray) -> tuple[np.ndarray, float]:
    """For one chunk of projected data V (n, r): (B^T V, ||B - V R||_F^2) with B = sgn(V R)."""
    V = np.asarray(V, dtype=np.float64)
    VR = V @ R
    B = signs(VR)
    return B.T @ V, float(((B - VR) ** 2).sum())


def itq_rotation(BtV: np.ndarray) -> np.ndarray:
    """Orthogonal Procrustes: R maximising tr(R^T V^T B), from the summed B^T V."""
    UB, _, UAt = np.linalg.svd(BtV)
    return UAt.T @ UB.T
