"""ITQ (Gong & Lazebnik): the rotation step and loss from the summed r x r term B^T V."""

from __future__ import annotations

import numpy as np


def random_rotation(r: int, rng: np.random.Generator) -> np.ndarray:
    """Random orthogonal r x r matrix (left singular vectors of a Gaussian, as ITQ's code)."""
    U, _, _ = np.linalg.svd(rng.standard_normal((r, r)))
    return U


def itq_loss(BtV: np.ndarray, R: np.ndarray, n: int, projected_sq: float) -> float:
    """||B - V R||_F^2 = n r - 2 tr(B^T V R) + ||V||^2 (R orthogonal, B in {-1, +1})."""
    return float(n * R.shape[0] - 2.0 * np.einsum("ij,ji->", BtV, R) + projected_sq)


def itq_rotation(BtV: np.ndarray) -> np.ndarray:
    """Orthogonal Procrustes: R maximising tr(R^T V^T B), from the summed B^T V."""
    UB, _, UAt = np.linalg.svd(BtV)
    return UAt.T @ UB.T
