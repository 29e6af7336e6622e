"""The Z-step of affinity-based hashing for one bit (MAC paper, eqs. 6-8): with every other
bit fixed, minimise over z in {-1, +1}^N

    E(z) = z^T A z + mu ||z - h||^2 = z^T A z - 2 mu h^T z + const

(A from kernels/affinity.py ``bit_coefficients``, h the bit the hash function gives each
point, mu the MAC penalty; mu = 0 is the two-step methods' start). Plain numpy and scipy;
the max-flow solver is PyMaxflow.

Quadratic surrogate (Lin et al. 2013, the paper's ``quad``): relax z to the box [-1, 1]^N,
start from the spectral relaxation (the eigenvector of A + A^T with the smallest eigenvalue,
scaled into the box, with the sign of lower energy), minimise the box-constrained quadratic
by L-BFGS-B, binarise by sign and keep the old bit vector if the energy rose.

GraphCut (Lin et al. 2014, the paper's ``cut``): points are visited in blocks; a block's bits
are solved exactly with the rest fixed, by a minimum s-t cut, which is exact when every pair
inside the block has A_nm + A_mn <= 0 (a submodular energy): blocks of points that are all
similar to each other, e.g. one label's points, where the KSH and eSPLH coefficients of
similar pairs are <= 0. Pairs with a positive coupling are refused (the caller chooses blocks
without them). Each block's optimum is at most the current energy, so the sweep never rises.
"""

from __future__ import annotations

import numpy as np
from scipy import optimize, sparse
from scipy.sparse.linalg import eigsh

from pipeline.kernels.affinity import affinity_loss, bit_coefficients


def bit_energy(A, z: np.ndarray, mu: float, h: np.ndarray) -> float:
    """E(z) = z^T A z + mu ||z - h||^2 for one bit (z, h in {-1, +1})."""
    z = np.asarray(z, dtype=np.float64)
    return float(z @ (A @ z) + mu * ((z - h) ** 2).sum())


def _symmetric(A) -> sparse.csr_matrix:
    A = sparse.csr_matrix(A, dtype=np.float64)
    return ((A + A.T) * 0.5).tocsr()


def spectral_start(A) -> np.ndarray:
    """The eigenvector of (A + A^T) / 2 with the smallest eigenvalue, scaled to max |v| = 1
    (ARPACK from a fixed start vector: the same result on every run; dense below 64 points)."""
    S = _symmetric(A)
    n = S.shape[0]
    if n < 64:
        vector = np.linalg.eigh(S.toarray())[1][:, 0]
    else:
        vector = eigsh(S, k=1, which="SA", v0=np.ones(n) / np.sqrt(n))[1][:, 0]
    return vector / max(np.abs(vector).max(), 1e-300)


def quad_bit(A, z: np.ndarray, mu: float, h: np.ndarray, max_iter: int = 200) -> np.ndarray:
    """One bit's codes by the quadratic surrogate (module docstring): never higher in E than
    ``z``."""
    S = _symmetric(A)
    z = np.asarray(z, dtype=np.float64)
    linear = -2.0 * mu * np.asarray(h, dtype=np.float64)

    def energy_and_gradient(x):
        Sx = S @ x
        return float(x @ Sx + linear @ x), 2.0 * Sx + linear

    start = spectral_start(S)
    if energy_and_gradient(-start)[0] < energy_and_gradient(start)[0]:
        start = -start
    result = optimize.minimize(
        energy_and_gradient,
        start,
        jac=True,
        method="L-BFGS-B",
        bounds=[(-1.0, 1.0)] * len(z),
        options={"maxiter": max_iter},
    )
    new = np.where(result.x >= 0, 1.0, -1.0)
    return new if bit_energy(S, new, mu, h) < bit_energy(S, z, mu, h) else z


def cut_block(A, z: np.ndarray, block: np.ndarray, mu: float, h: np.ndarray) -> np.ndarray:
    """z with the bits of ``block`` (point indices) replaced by their exact minimiser of
    E given the other points' bits (module docstring); ties keep the current bit."""
    import maxflow  # optional heavy import: only the cut solver needs it

    A = sparse.csr_matrix(A)
    z = np.asarray(z, dtype=np.float64)
    block = np.asarray(block)
    inside = np.zeros(len(z), bool)
    inside[block] = True
    # couplings inside the block, both orders summed: w_nm z_n z_m for n < m
    local = A[block][:, block]
    W = sparse.triu(local + local.T, k=1).tocoo()
    if (W.data > 0).any():
        raise ValueError("cut_block: the block couples points with a positive weight (not submodular)")
    # linear terms g_n z_n: couplings to the fixed points (both orders) and the penalty
    outside = np.where(inside, 0.0, z)
    # (A's diagonal gives z_n^2 = 1: a constant)
    g = (A[block] @ outside) + (A.T[block] @ outside) - 2.0 * mu * h[block]
    # with x = (z + 1) / 2 in {0, 1}: unary costs a_n of x_n = 1 over x_n = 0
    a = 2.0 * g
    # w z_n z_m = 4w x_n x_m - 2w x_n - 2w x_m + w; with c = -4w >= 0,
    # -c x_n x_m = c (1 - x_n) x_m - c x_m: an edge n -> m cut when x_n = 0 and x_m = 1
    c = -4.0 * W.data
    k = len(block)
    a += np.bincount(W.row, weights=-2.0 * W.data, minlength=k)
    a += np.bincount(W.col, weights=-2.0 * W.data - c, minlength=k)
    graph = maxflow.Graph[float]()
    nodes = graph.add_nodes(k)
    graph.add_edges(nodes[W.row], nodes[W.col], c, np.zeros_like(c))
    # x_n = 1 (sink side) costs a_n when a_n > 0, x_n = 0 (source side) costs -a_n otherwise
    graph.add_grid_tedges(np.asarray(nodes), np.maximum(a, 0.0), np.maximum(-a, 0.0))
    graph.maxflow()
    new = np.where(graph.get_grid_segments(np.asarray(nodes)), 1.0, -1.0)
    # E changes only through the block's bits: compare v^T local v + g^T v for the old and the
    # new bits (O(block) work, not two O(nnz(A)) energies); ties keep the current bits
    old = z[block]
    if new @ (local @ new) + g @ new >= old @ (local @ old) + g @ old:
        return z
    out = z.copy()
    out[block] = new
    return out


def penalised_loss(loss: str, Z: np.ndarray, Y, mu: float, H: np.ndarray) -> float:
    """The MAC objective L(Z) + mu ||Z - H||^2 (H = h(X), codes in {-1, +1})."""
    return affinity_loss(loss, Z, Y) + mu * float(((np.asarray(Z) - H) ** 2).sum())


def z_step(loss: str, Z: np.ndarray, Y, mu: float, H: np.ndarray, solver: str, blocks=()) -> np.ndarray:
    """One pass over the bits, each solved with the others fixed (``solver`` "quad", or
    "cut" over ``blocks``, lists of point indices whose pairs are all similar). Returns new
    codes; the penalised loss never rises (each bit's step never raises its energy)."""
    Z = np.array(Z, dtype=np.float64, copy=True)
    for bit in range(Z.shape[1]):
        A = bit_coefficients(loss, Z, Y, bit)
        z, h = Z[:, bit], H[:, bit]
        if solver == "quad":
            z = quad_bit(A, z, mu, h)
        elif solver == "cut":
            for block in blocks:
                z = cut_block(A, z, block, mu, h)
        else:
            raise ValueError(f"unknown Z-step solver {solver!r}; choose quad or cut")
        Z[:, bit] = z
    return Z
