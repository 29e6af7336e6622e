"""K-means hashing (He, Wen & Sun, CVPR 2013): the per-chunk assignment statistics, the
client's codebook update and the encoder. Plain numpy (and scipy.linalg).

Product space: the centred data is rotated onto its principal directions, which are dealt to
M = n_bits / b subspaces of equal dimension so that the subspaces' products of eigenvalues
balance (``balanced_partition``). In each subspace k = 2^b codewords c_0..c_{k-1}: a point's
b bits are the index of its nearest codeword, and the index's Hamming distance h(i, j)
stands for the codewords' distance through d_h(i, j) = s sqrt(h(i, j)). Per subspace the
learning minimises

    E = (1/n) sum_x ||y(x) - c_i(x)||^2 + lambda sum_{i,j} w_ij (||c_i - c_j|| - d_h(i, j))^2,

w_ij = n_i n_j / n^2 (n_i = points assigned to c_i), by alternating an assignment (nearest
codeword) and an update of each codeword in turn with the others fixed (Newton's method). Codewords
start on the vertices of a hypercube on the subspace's top b principal directions, index bit
t = the sign of coordinate t, as PCAH would code them.

Assignment statistics are sums of the raw rows per codeword (exact in float64 for integer
features, so the same whatever the chunking); the client projects them.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from scipy.linalg import solve_triangular

from dask_hashcodes.kernels.codes import BIT_ORDER, SLAB_ROWS, code_size

_FLOOR = 1e-20  # eigenvalues below this (rank-deficient data, rounding) count as this in the log-balance


def balanced_partition(eigenvalues: np.ndarray, n_subspaces: int) -> np.ndarray:
    """Order of the principal directions grouped by subspace (subspace m = positions
    [m D'/M, (m+1) D'/M)), D' = len(eigenvalues), a multiple of M. Greedy, largest eigenvalue
    first: each direction goes to the subspace, not yet full, whose sum of log eigenvalues is
    the smallest (ties: the lower subspace); within a subspace directions stay in descending
    eigenvalue order."""
    values = np.maximum(np.asarray(eigenvalues, dtype=np.float64), _FLOOR)
    size = len(values) // n_subspaces
    order = np.argsort(values, kind="stable")[::-1]
    logs = np.log(values) - np.log(values).min() + 1.0  # positive, so an empty subspace is the emptiest
    totals, members = np.zeros(n_subspaces), [[] for _ in range(n_subspaces)]
    for j in order:
        open_ = [m for m in range(n_subspaces) if len(members[m]) < size]
        m = min(open_, key=lambda m: (totals[m], m))
        members[m].append(j)
        totals[m] += logs[j]
    return np.concatenate(members).astype(np.int64)


def hamming_table(bits: int) -> np.ndarray:
    """(k, k) Hamming distances h(i, j) between the b-bit indices 0..k-1."""
    idx = np.arange(2**bits)
    xor = idx[:, None] ^ idx[None, :]
    return np.array([[bin(v).count("1") for v in row] for row in xor], dtype=np.float64)


def hypercube_codebook(bits: int, dim: int) -> np.ndarray:
    """(k, dim) unit hypercube vertices on the first ``bits`` coordinates: codeword i has
    coordinate t = +1 where bit t of i is set, -1 where not; 0 on the others."""
    idx = np.arange(2**bits)
    out = np.zeros((2**bits, dim))
    out[:, :bits] = 2.0 * ((idx[:, None] >> np.arange(bits)[None, :]) & 1) - 1.0
    return out


def _codeword_directions(components: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(G (d, M k), ||c||^2 (M k,)): column m k + i of G is P_m c_{m,i}, so that (x - mean) G
    holds every codeword's inner product with x's projection in subspace m."""
    M, k, dm = centroids.shape
    P = np.asarray(components, dtype=np.float64).reshape(components.shape[0], M, dm)
    G = np.einsum("dmt,mit->dmi", P, centroids).reshape(components.shape[0], M * k)
    return G, np.einsum("mit,mit->mi", centroids, centroids).ravel()


def _nearest_slabs(X: np.ndarray, mean: np.ndarray, components: np.ndarray, centroids: np.ndarray):
    """Yield (row slice, rows as float64, (rows, M) index of the nearest codeword per subspace),
    slab by slab: argmin_i ||c_i||^2 - 2 y_m . c_i (||y_m||^2 is the same for every i). Each row
    is scored on its own, so the result does not depend on the chunking; ties go to the lower
    index."""
    M, k, _ = centroids.shape
    G, norms = _codeword_directions(components, centroids)
    mean = np.asarray(mean, dtype=np.float64)
    for start in range(0, X.shape[0], SLAB_ROWS):
        rows = slice(start, min(start + SLAB_ROWS, X.shape[0]))
        part = np.asarray(X[rows], dtype=np.float64)
        scores = norms[None, :] - 2.0 * ((part - mean) @ G)
        yield rows, part, scores.reshape(-1, M, k).argmin(axis=2)


def assignment_sums(
    X: np.ndarray, mean: np.ndarray, components: np.ndarray, centroids: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """One assignment step's statistics of a chunk: (points per codeword (M, k) int64, sum of
    the raw rows assigned to each codeword (M, k, d) float64). The sums add rows in float64,
    exact for integer features."""
    M, k, _ = centroids.shape
    counts, sums = np.zeros(M * k, np.int64), np.zeros((M * k, X.shape[1]))
    flat = np.arange(M) * k
    for _, part, nearest in _nearest_slabs(X, mean, components, centroids):
        cells = nearest + flat[None, :]
        counts += np.bincount(cells.ravel(), minlength=M * k)
        _add_rows_to_cells(part, cells, sums)
    return counts.reshape(M, k), sums.reshape(M, k, X.shape[1])


@njit(nogil=True, cache=True)
def _add_rows_to_cells(part, cells, sums):
    """sums[cells[i, m]] += part[i] for every row i and subspace m, rows in order: M row
    additions per row, where a one-hot GEMM would multiply each row by all M k columns."""
    for i in range(part.shape[0]):
        for m in range(cells.shape[1]):
            target = sums[cells[i, m]]
            for c in range(part.shape[1]):
                target[c] += part[i, c]


def projected_sums(sums: np.ndarray, counts: np.ndarray, mean: np.ndarray, components: np.ndarray) -> np.ndarray:
    """Raw sums per codeword (M, k, d) -> sums of the projections y_m = P_m^T (x - mean)
    (M, k, d_m)."""
    M, k, _ = sums.shape
    P = np.asarray(components, dtype=np.float64).reshape(components.shape[0], M, -1)
    centred = sums - counts[:, :, None] * np.asarray(mean, dtype=np.float64)[None, None, :]
    return np.einsum("mkd,dmt->mkt", centred, P)


def initial_scale(projected: np.ndarray, n: int, bits: int) -> float:
    """PCAH's least-squares scale a of one subspace, min_a sum_x ||y_{1..b} - a sgn(y_{1..b})||^2
    = mean |y_t| over points and the top b coordinates, from the projected sums of the
    assignment to the unit hypercube (a point's codeword there is its sign pattern, so
    sum_x |y_t| = sum_i sign_{i,t} S_{i,t}). The hypercube's edge is 2a: s = 2a."""
    signs = hypercube_codebook(bits, bits)
    return float((signs * projected[:, :bits]).sum() / (n * bits))


def kmh_objective(
    centroids: np.ndarray, projected: np.ndarray, counts: np.ndarray, n: int, sum_sq: float, s: float
) -> tuple[float, float]:
    """(E_quan, E_aff) of one subspace for an assignment's statistics: E_quan from
    sum_x ||y||^2 (``sum_sq``) - 2 sum_i c_i . S_i + sum_i n_i ||c_i||^2, no pass needed."""
    quan = (sum_sq - 2.0 * np.einsum("it,it->", centroids, projected) + counts @ (centroids**2).sum(1)) / n
    d = np.sqrt(((centroids[:, None, :] - centroids[None, :, :]) ** 2).sum(-1))
    w = np.outer(counts, counts) / float(n) ** 2
    dh = s * np.sqrt(hamming_table(int(np.log2(len(counts)))))
    return float(quan), float((w * (d - dh) ** 2).sum())


def _one_codeword(u, target, others, q, root_h, lam):
    """E restricted to one codeword, in units of s and divided by n_j / n:
    f(u) = ||u - target||^2 + 2 lambda sum_i q_i (||u - u_i|| - sqrt h_i)^2 (+ a constant), with
    its gradient and Hessian. ``others`` excludes the codeword itself; q_i = n_i / n."""
    diff = u[None, :] - others
    r = np.sqrt((diff**2).sum(1))
    gap = r - root_h
    value = ((u - target) ** 2).sum() + 2.0 * lam * (q * gap**2).sum()
    if (r == 0).any():  # ||u - u_i|| has no derivative where two codewords coincide
        return value, None, None
    ratio = root_h / r
    grad = 2.0 * (u - target) + 4.0 * lam * ((q * (1.0 - ratio))[:, None] * diff).sum(0)
    unit = diff / r[:, None]
    hess = (2.0 + 4.0 * lam * (q * (1.0 - ratio)).sum()) * np.eye(len(u))
    hess += (4.0 * lam * q * ratio * unit.T) @ unit
    return value, grad, hess


def _majorised_step(u, target, others, q, root_h, lam):
    """The minimiser of f's quadratic majoriser at u (SMACOF's Guttman step: -||u - u_i|| is
    bounded by its tangent plane): used where Newton's step is undefined or not a descent."""
    diff = u[None, :] - others
    r = np.sqrt((diff**2).sum(1))
    unit = np.divide(diff, r[:, None], out=np.zeros_like(diff), where=r[:, None] > 0)
    pulled = (q[:, None] * (others + root_h[:, None] * unit)).sum(0)
    return (target + 2.0 * lam * pulled) / (1.0 + 2.0 * lam * q.sum())


def _minimise_codeword(u, args, gtol: float, max_steps: int = 100) -> np.ndarray:
    """Newton's method with a backtracking (Armijo) line search on f from u, until the
    gradient's norm is below gtol; where the Hessian is not positive definite (codewords
    closer than their Hamming target) the step is the majoriser's, which never increases f."""
    value, grad, hess = _one_codeword(u, *args)
    for _ in range(max_steps):
        if grad is not None and np.sqrt(grad @ grad) <= gtol:
            break
        step = None
        if hess is not None:
            try:
                L = np.linalg.cholesky(hess)
                step = -solve_triangular(L.T, solve_triangular(L, grad, lower=True), lower=False)
            except np.linalg.LinAlgError:
                pass
        if step is None:
            new = _majorised_step(u, *args)
            new_value, new_grad, new_hess = _one_codeword(new, *args)
            if not new_value < value:
                break
        else:
            t = 1.0
            while True:
                new = u + t * step
                new_value, new_grad, new_hess = _one_codeword(new, *args)
                if new_value <= value + 1e-4 * t * (grad @ step):
                    break
                t *= 0.5
                if t < 1e-12:
                    return u
        u, value, grad, hess = new, new_value, new_grad, new_hess
    return u


def update_codebook(
    centroids: np.ndarray, projected: np.ndarray, counts: np.ndarray, n: int, s: float, lam: float, gtol: float
) -> np.ndarray:
    """The update step of one subspace: each codeword in turn (index order) minimises E with
    the others fixed, from where it is; a codeword without points is not in E and stays.
    Working in units of s (and per point of the codeword) makes ``gtol`` scale-free."""
    k = len(counts)
    root_h = np.sqrt(hamming_table(int(np.log2(k))))
    u = np.array(centroids, dtype=np.float64) / s
    q = counts / float(n)
    for j in range(k):
        if counts[j] == 0:
            continue
        keep = np.arange(k) != j
        args = (projected[j] / (counts[j] * s), u[keep], q[keep], root_h[j, keep], lam)
        u[j] = _minimise_codeword(u[j], args, gtol)
    return u * s


def encode_kmh(X: np.ndarray, mean: np.ndarray, components: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """Packed codes: bit m b + t is bit t of the index of x's nearest codeword in subspace m."""
    M, k, _ = centroids.shape
    b = int(np.log2(k))
    out = np.empty((X.shape[0], code_size(M * b)), np.uint8)
    for rows, _, nearest in _nearest_slabs(X, mean, components, centroids):
        bits = (nearest[:, :, None] >> np.arange(b)[None, None, :]) & 1
        out[rows] = np.packbits(bits.reshape(len(bits), M * b).astype(np.uint8), axis=1, bitorder=BIT_ORDER)
    return out
