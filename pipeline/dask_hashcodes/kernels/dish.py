"""DisH (Leng et al., ICML 2015): the math of one node, plain numpy.

Row convention here (the paper uses columns): a node holds X_i (n_i x d, centred), codes
B_i = sgn(X_i C_i) (n_i x r), dictionary C_i (d x r, orthonormal columns). The paper's
r x d term B_i X_i^T is ``gram = B_i^T X_i`` here, and its S_i (13) is

    S_i = 2 gram_i - Lambda_i^T + rho * sum_{j in N(i)} (C_i + C_j)^T          (r x d)

maximising tr(S_i C_i) over orthonormal C_i gives C_i = H_i G_i^T with S_i = G_i Sigma H_i^T
(18). Multipliers: Lambda_i += rho * sum_{j in N(i)} (C_i - C_j) — the standard
decentralised-consensus step (Mateos et al.); the paper writes 2 rho with its penalty
convention, and both converge. Objective (3): sum_i ||X_i - B_i C_i^T||_F^2
= sum_i ||X_i||^2 - 2 tr(gram_i C_i) + n_i r, so it needs no extra pass over the data.
"""

from __future__ import annotations

import numpy as np


def random_orthonormal(d: int, r: int, rng: np.random.Generator) -> np.ndarray:
    """d x r with orthonormal columns (QR of a Gaussian, signs fixed so R has a positive diagonal)."""
    Q, R = np.linalg.qr(rng.standard_normal((d, r)))
    return Q * np.sign(np.diag(R))


def orthonormal_maximiser(S: np.ndarray) -> np.ndarray:
    """argmax tr(S C) over C (d x r) with C^T C = I, for S (r x d): C = H G^T (eq. 18)."""
    G, _, Ht = np.linalg.svd(S, full_matrices=False)
    return Ht.T @ G.T


def admm_dictionary_step(gram, multiplier, C, neighbour_Cs, rho: float) -> np.ndarray:
    """C_i^{k+1} from eq. (13) and (18): the local step of one node."""
    S = 2.0 * gram - multiplier.T
    for Cj in neighbour_Cs:
        S += rho * (C + Cj).T
    return orthonormal_maximiser(S)


def multiplier_step(multiplier, C, neighbour_Cs, rho: float) -> np.ndarray:
    out = multiplier.copy()
    for Cj in neighbour_Cs:
        out += rho * (C - Cj)
    return out


def admm_round(gram, multiplier, C, neighbour_Cs, rho: float, *, update_multiplier: bool, update_dictionary: bool):
    """One node's share of one exchange of dictionaries: (multiplier, C) after the multiplier
    step for the neighbours' current dictionaries, then the dictionary step with it.

    The steps of ADMM alternate C^{k+1} = dictionary(Lambda^k, C^k, C_N^k) and Lambda^{k+1} =
    multiplier(Lambda^k, C^{k+1}, C_N^{k+1}); both steps of a node read the same neighbour
    dictionaries, so the multiplier step of one exchange and the dictionary step of the next
    share a round: the first round only steps the dictionary, the last only the multiplier."""
    if update_multiplier:
        multiplier = multiplier_step(multiplier, C, neighbour_Cs, rho)
    if update_dictionary:
        C = admm_dictionary_step(gram, multiplier, C, neighbour_Cs, rho)
    return multiplier, C


def node_objective(sq_norm: float, gram: np.ndarray, C: np.ndarray, n: int) -> float:
    """||X_i - B_i C_i^T||_F^2 from the node's statistics (B_i = sgn(X_i C_i))."""
    return float(sq_norm - 2.0 * np.einsum("rd,dr->", gram, C) + n * C.shape[1])


def relative_residual(Ci: np.ndarray, Cj: np.ndarray) -> float:
    return float(np.linalg.norm(Ci - Cj) / np.linalg.norm(Ci))
