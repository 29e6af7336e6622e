"""SPLH kernels (Wang, Kumar & Chang, ICML 2010): adjusted covariance, truncated label
update, deflation, and the boundary regions of USPLH's pseudo-labels. Plain numpy.

Convention: M = C + eta s L, with C the (deflated) data covariance X^T X / n of centred
rows, L = X_l^T S X_l the label term (S: the +-1 pairwise labels of the paper's eq. 3,
``label_similarity.pair_labels``) and s = lambda_max(C_1) / ||L_1||_2 fixed at the first
bit (``label_scale``). The paper writes M = X_l S X_l^T + eta X X^T, the same family up to an
overall scale (paper eta = 1 / (ours s)). Without s, eta is not dimensionless: L's norm grows
with the number of labeled pairs (l^2) and with the data's scale while C's does not, so one
eta meant a different balance for every l (normalising L by l alone still leaves the ratio
of the two terms' top eigenvalues growing with l).
With s, eta = 1 gives both terms the same top eigenvalue at the first bit whatever l, n and
the data's units; s stays fixed for the later bits so that the label updates keep the weight
the paper gives them.
"""

from __future__ import annotations

import numpy as np

from dask_hashcodes.kernels.codes import project_linear
from dask_hashcodes.kernels.stats import top_eigenvector


def label_term(Xl: np.ndarray, S: np.ndarray) -> np.ndarray:
    """L = X_l^T S X_l of centred labeled rows (d, d)."""
    return Xl.T @ S @ Xl


def label_scale(C: np.ndarray, L: np.ndarray) -> float:
    """s = lambda_max(C) / ||L||_2: the factor that makes eta dimensionless (module docstring)."""
    top_variance = float(np.linalg.eigvalsh((C + C.T) / 2.0)[-1])
    label_norm = float(np.abs(np.linalg.eigvalsh((L + L.T) / 2.0)).max())
    return top_variance / label_norm if label_norm > 0 else 0.0


def top_direction(M: np.ndarray) -> np.ndarray:
    """Unit top eigenvector of a symmetric matrix, with a fixed sign."""
    return top_eigenvector((M + M.T) / 2.0)


def truncated_label_update(S: np.ndarray, projections: np.ndarray, alpha: float) -> np.ndarray:
    """S - alpha T(S~, S), S~ = p p^T: pairs whose bit contradicts their label (sign of
    S~_ij opposite to S_ij) grow in magnitude, the others stay (paper eq. 10)."""
    S_tilde = np.outer(projections, projections)
    violated = S * S_tilde < 0
    return S - alpha * np.where(violated, S_tilde, 0.0)


def deflate(C: np.ndarray, w: np.ndarray) -> np.ndarray:
    """(I - w w^T) C (I - w w^T): the covariance of the residual X - X w w^T (unit w)."""
    Cw = C @ w
    wCw = float(w @ Cw)
    return C - np.outer(Cw, w) - np.outer(w, Cw) + wCw * np.outer(w, w)


# ------------------------------------------------------------------ USPLH regions -----
# Four regions of a bit's projections p = (x - mean) . w (paper Fig. 2): r- / r+ the points
# closest to the boundary on each side, R- / R+ the farthest. Each region keeps the k rows
# with the smallest key (ties by row id), so chunks merge exactly.


def _region_keys(p: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per region: (mask of eligible rows, sort key: smaller = more central to the region)."""
    neg = p < 0
    return [(neg, -p), (~neg, p), (neg, p), (~neg, -p)]


def boundary_regions(X: np.ndarray, ids: np.ndarray, mean: np.ndarray, w: np.ndarray, k: int) -> list:
    """Per region (keys, ids, rows) of this chunk's k best candidates; rows stay in their
    stored dtype (uint8 SIFT rows are 128 bytes)."""
    X = np.asarray(X)
    p = project_linear(X, mean, np.asarray(w)[:, None])[:, 0].astype(np.float64)  # the encoder's projection
    out = []
    for mask, key in _region_keys(p):
        idx = np.flatnonzero(mask)
        if len(idx) > k:  # only the k smallest keys (and their ties) can be kept: sort those
            cut = np.partition(key[idx], k - 1)[k - 1]
            idx = idx[key[idx] <= cut]
        keep = idx[np.lexsort((ids[idx], key[idx]))[:k]]
        out.append((key[keep], ids[keep], X[keep]))
    return out


def merge_regions(a: list, b: list, k: int) -> list:
    merged = []
    for (ka, ia, xa), (kb, ib, xb) in zip(a, b):
        keys, ids, rows = np.concatenate([ka, kb]), np.concatenate([ia, ib]), np.concatenate([xa, xb])
        keep = np.lexsort((ids, keys))[:k]
        merged.append((keys[keep], ids[keep], rows[keep]))
    return merged


def pseudo_label_term(region_rows: list, mean: np.ndarray, residual: np.ndarray | None = None) -> np.ndarray:
    """L = X_MC^T S_MC X_MC for the pseudo-labels of one bit, each pair set weighted by one
    over its size: +1 for (r-, r+) pairs (close but split), -1 for (r-, R-) and (r+, R+)
    (same bit but far apart). S_MC is constant on each block of region pairs, so the term
    only needs the region means m: sum_pairs x_i x_j^T / (|A||B|) = m_A m_B^T.

    ``residual`` (d x d, optional) maps a centred row to the current residual of Algorithm 2
    (the product of the deflations (I - w w^T) of the earlier bits): the pseudo-labelled rows
    are rows of the residual X, not of the original data."""
    # an empty region (every projection on one side) has no pairs: it contributes nothing
    mu = [np.asarray(r, dtype=np.float64).mean(axis=0) - mean if len(r) else np.zeros_like(mean) for r in region_rows]
    if residual is not None:
        mu = [residual @ m for m in mu]
    near_neg, near_pos, far_neg, far_pos = mu

    def sym(a, b):
        return np.outer(a, b) + np.outer(b, a)

    return sym(near_neg, near_pos) - 0.5 * (sym(near_neg, far_neg) + sym(near_pos, far_pos))
