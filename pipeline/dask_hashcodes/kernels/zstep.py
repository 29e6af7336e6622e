"""The Z-step of affinity-based hashing for one bit (MAC paper, eqs. 6-8): with every other
bit fixed, minimise over z in {-1, +1}^N

    E(z) = z^T A z + mu ||z - h||^2 = z^T A z - 2 mu h^T z + const

(A from kernels/affinity.py, h the bit the hash function gives each point, mu the MAC
penalty; mu = 0 is the two-step methods' start). Only the symmetric part S = (A + A^T) / 2
matters (z^T A z = z^T S z); the solvers work on S, which a Z-step pass gets from
``Pairs.couplings`` as a ``BitCoupling`` without forming A. Plain numpy, scipy and numba;
the max-flow solver is PyMaxflow.

Quadratic surrogate (Lin et al. 2013, the paper's ``quad``): relax z to the box [-1, 1]^N,
start from the spectral relaxation (the eigenvector of A + A^T with the smallest eigenvalue,
scaled into the box, with the sign of lower energy; with mu > 0 the paper's eq. 9, which
includes the penalty's linear term), minimise the box-constrained quadratic by L-BFGS-B,
binarise by sign and keep the old bit vector if the energy rose.

GraphCut (Lin et al. 2014, the paper's ``cut``): points are visited in blocks; a block's bits
are solved exactly with the rest fixed, by a minimum s-t cut, which is exact when every pair
inside the block has A_nm + A_mn <= 0 (a submodular energy): blocks of points that are all
similar to each other, e.g. one label's points, where the KSH and eSPLH coefficients of
similar pairs are <= 0. Pairs with a positive coupling are refused (the caller chooses blocks
without them). Each block's optimum is at most the current energy, so the sweep never rises.
A block's linear terms are its rows of S z less its own pairs: S z is computed once per bit
and updated through the pairs of the points an accepted block flipped, so a bit costs one
pass over the pairs plus work in proportion to what changed, whatever the number of blocks.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from scipy import optimize, sparse
from scipy.sparse.linalg import eigsh

from dask_hashcodes.kernels.affinity import BitCoupling, Pairs, affinity_loss


def bit_energy(A, z: np.ndarray, mu: float, h: np.ndarray) -> float:
    """E(z) = z^T A z + mu ||z - h||^2 for one bit (z, h in {-1, +1})."""
    z = np.asarray(z, dtype=np.float64)
    return float(z @ (A @ z) + mu * ((z - h) ** 2).sum())


def symmetric_part(A) -> sparse.csr_matrix:
    """(A + A^T) / 2 as sorted CSR."""
    A = sparse.csr_matrix(A, dtype=np.float64)
    S = ((A + A.T) * 0.5).tocsr()
    S.sort_indices()
    return S


def _smallest_eigenvector(S) -> np.ndarray:
    n = S.shape[0]
    if n < 64:
        vector = np.linalg.eigh(S.toarray())[1][:, 0]
    else:
        operator = S.toarray() if _dense_is_cheap(S) else S
        vector = eigsh(operator, k=1, which="SA", v0=np.ones(n) / np.sqrt(n))[1][:, 0]
    return vector / max(np.abs(vector).max(), 1e-300)


DENSE_PRODUCT_BYTES = 256 * 2**20  # the largest dense copy made for the products (n up to ~5800)


def _dense_is_cheap(S) -> bool:
    """Whether S is worth multiplying as a dense array: as float64 it is at most a quarter
    larger than S's CSR arrays (about 55% of the entries non-zero or more, as label
    affinities make them) and small in absolute terms. Lanczos's and L-BFGS-B's products then
    run dense: a BLAS matrix-vector product reads no column indices and runs faster than the
    CSR one, for results equal to the sparse ones up to rounding."""
    dense = S.shape[0] * S.shape[1] * 8
    return dense <= DENSE_PRODUCT_BYTES and dense <= 1.25 * (S.data.nbytes + S.indices.nbytes + S.indptr.nbytes)


def augmented_matrix(S, linear: np.ndarray) -> sparse.csr_matrix:
    """B = [[S, linear / 2], [linear^T / 2, 0]] of the MAC paper's eq. 9: with alpha = (z, 1),
    alpha^T B alpha = z^T S z + linear^T z, the bit's energy up to a constant (linear =
    -2 mu h). The paper writes the off-diagonal as -mu/2 h for its ||z - h||^2; -mu h is the
    one for which this identity holds."""
    column = sparse.csr_matrix(0.5 * np.asarray(linear, dtype=np.float64)[:, None])
    return sparse.bmat([[sparse.csr_matrix(S), column], [column.T, None]], format="csr")


def _spectral_box_start(S, linear: np.ndarray) -> np.ndarray:
    """The MAC paper's eq. 9 start with a penalty: relaxed to ||alpha||^2 = N + 1, alpha is the
    eigenvector of ``augmented_matrix`` with the smallest eigenvalue, scaled to that norm
    (sign: alpha_0 >= 0) and truncated to the box."""
    n = S.shape[0]
    vector = _smallest_eigenvector(augmented_matrix(S, linear))
    vector *= np.sqrt(n + 1) / max(np.linalg.norm(vector), 1e-300)
    if vector[-1] < 0:
        vector = -vector
    return np.clip(vector[:n], -1.0, 1.0)


def _quad(S, z: np.ndarray, mu: float, h: np.ndarray, max_iter: int) -> np.ndarray:
    z = np.asarray(z, dtype=np.float64)
    linear = -2.0 * mu * np.asarray(h, dtype=np.float64)
    # L-BFGS-B's cost is S x, bound by reading S (nnz ~ 2 N (kappa+ + kappa-)): with S's values
    # in float32 the product reads 8 instead of 12 bytes per entry (4 when S is mostly
    # non-zero and multiplied dense) and runs faster, while its rounding (~1e-7 relative) is
    # far below what changes a sign of the relaxed solution; the energies that decide whether
    # to keep the new bit are computed in float64
    S_single = S.astype(np.float32)
    if _dense_is_cheap(S):
        S_single = S_single.toarray()

    def energy_and_gradient(x):
        Sx = (S_single @ x.astype(np.float32)).astype(np.float64)
        return float(x @ Sx + linear @ x), 2.0 * Sx + linear

    start = _spectral_box_start(S, linear) if mu > 0 else _smallest_eigenvector(S)
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


def quad_bit(A, z: np.ndarray, mu: float, h: np.ndarray, max_iter: int = 200) -> np.ndarray:
    """One bit's codes by the quadratic surrogate (module docstring): never higher in E than
    ``z``."""
    return _quad(symmetric_part(A), z, mu, h, max_iter)


@njit(nogil=True, cache=True)
def _inside_pairs(indptr, indices, block, position):
    """The entries (n, m) of a symmetric pattern with both points in ``block`` and n before m
    in it, as (entry, position of n, position of m); ``position``: -1 everywhere (scratch)."""
    k = len(block)
    for i in range(k):
        position[block[i]] = i
    count = 0
    for i in range(k):
        for e in range(indptr[block[i]], indptr[block[i] + 1]):
            if position[indices[e]] > i:
                count += 1
    entries = np.empty(count, np.int64)
    first = np.empty(count, np.int64)
    second = np.empty(count, np.int64)
    p = 0
    for i in range(k):
        for e in range(indptr[block[i]], indptr[block[i] + 1]):
            j = position[indices[e]]
            if j > i:
                entries[p], first[p], second[p] = e, i, j
                p += 1
    for i in range(k):
        position[block[i]] = -1
    return entries, first, second


# blocks of at most this many points are cut by ``_cut_small_blocks`` (numba, a dense
# max-flow) in runs, without a Python call per block; larger ones by PyMaxflow. Neighbour
# blocks (knn affinities) hold a few points each and number N / 6 or so, where a Python call
# per block cost more than the cuts themselves
SMALL_BLOCK_POINTS = 32


class CutBlocks:
    """GraphCut blocks (lists of point indices) with the pattern entries inside each, found
    once: every bit's cut then reads S only at those entries, and S z once. Held flat (block
    b's points are ``members[member_ptr[b]:member_ptr[b + 1]]``, its entries, with the
    positions of their two points in it, ``entries``/``first``/``second`` between
    ``entry_ptr[b]`` and ``entry_ptr[b + 1]``), so that a plan of a million points pickles
    as a few arrays and is sent to a worker once; ``runs``: (start, stop, small) ranges of
    consecutive blocks cut the same way."""

    def __init__(self, indptr, indices, blocks):
        position = np.full(len(indptr) - 1, -1, np.int64)
        blocks = [np.asarray(block, dtype=np.int64) for block in blocks]
        inside = [_inside_pairs(indptr, indices, block, position) for block in blocks]
        sizes = np.array([len(b) for b in blocks], np.int64)
        self.member_ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.entry_ptr = np.concatenate([[0], np.cumsum([len(e) for e, _, _ in inside])]).astype(np.int64)
        self.members = np.concatenate(blocks or [np.empty(0, np.int64)])
        pieces = inside or [(np.empty(0, np.int64),) * 3]
        self.entries, self.first, self.second = (np.concatenate([p[i] for p in pieces]) for i in range(3))
        small = sizes <= SMALL_BLOCK_POINTS
        cuts = np.flatnonzero(np.diff(small.astype(np.int8))) + 1
        bounds = np.concatenate([[0], cuts, [len(sizes)]]).astype(np.int64)
        self.runs = [(int(a), int(b), bool(small[a])) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]

    def __len__(self) -> int:
        return len(self.member_ptr) - 1

    def block(self, b: int) -> np.ndarray:
        return self.members[self.member_ptr[b] : self.member_ptr[b + 1]]

    def inside(self, b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(entries, first, second) of block b's pairs."""
        part = slice(self.entry_ptr[b], self.entry_ptr[b + 1])
        return self.entries[part], self.first[part], self.second[part]


def _cut_blocks(S: BitCoupling, z: np.ndarray, plan: CutBlocks, mu: float, h: np.ndarray) -> np.ndarray:
    """z after each block in turn is replaced by its exact minimiser given the rest."""
    z = np.array(z, dtype=np.float64, copy=True)
    h = np.asarray(h, dtype=np.float64)
    sums = S.row_sums(z)  # S z, kept current as blocks change
    for start, stop, small in plan.runs:
        if small:
            _cut_small_blocks(
                *S._arrays(), plan.members, plan.member_ptr, plan.entries, plan.first, plan.second,
                plan.entry_ptr, start, stop, z, sums, mu, h,
            )  # fmt: skip
            continue
        for b in range(start, stop):
            _cut_large_block(S, z, sums, plan.block(b), plan.inside(b), mu, h)
    return z


def _cut_large_block(S: BitCoupling, z, sums, block, inside_pairs, mu: float, h) -> None:
    """One block's cut by PyMaxflow (z and sums updated in place when the energy drops)."""
    import maxflow  # optional heavy import: only the cut solver needs it

    entries, first, second = inside_pairs
    # pairwise weights w z_n z_m inside the block (each pair once, both orders: 2 S_nm)
    weight = S.values(entries, block[first])
    w = 2.0 * weight
    if (w > 0).any():
        raise ValueError("cut_block: the block couples points with a positive weight (not submodular)")
    old = z[block]
    k = len(block)
    # linear terms g_n z_n: couplings to the points outside the block (S z less the block's
    # own pairs), and the penalty
    inside = np.bincount(first, weight * old[second], minlength=k) + np.bincount(
        second, weight * old[first], minlength=k
    )
    g = 2.0 * (sums[block] - inside) - 2.0 * mu * h[block]
    # with x = (z + 1) / 2 in {0, 1}: unary costs a_n of x_n = 1 over x_n = 0
    a = 2.0 * g
    # w z_n z_m = 4w x_n x_m - 2w x_n - 2w x_m + w; with c = -4w >= 0,
    # -c x_n x_m = c (1 - x_n) x_m - c x_m: an edge n -> m cut when x_n = 0 and x_m = 1
    c = -4.0 * w
    a += np.bincount(first, weights=-2.0 * w, minlength=k)
    a += np.bincount(second, weights=-2.0 * w - c, minlength=k)
    graph = maxflow.Graph[float]()
    nodes = np.asarray(graph.add_nodes(k))
    graph.add_edges(nodes[first], nodes[second], c, np.zeros_like(c))
    # x_n = 1 (sink side) costs a_n when a_n > 0, x_n = 0 (source side) costs -a_n otherwise
    graph.add_grid_tedges(nodes, np.maximum(a, 0.0), np.maximum(-a, 0.0))
    graph.maxflow()
    # PyMaxflow's sink side: the points that reach the sink in the residual graph
    new = np.where(graph.get_grid_segments(nodes), 1.0, -1.0)
    # E changes only through the block's bits: sum w v_n v_m + g^T v for the old and the new
    # bits (O(block) work); ties keep the current bits
    if w @ (new[first] * new[second]) + g @ new >= w @ (old[first] * old[second]) + g @ old:
        return
    changed = block[new != old]
    z[block] = new
    S.spread(changed, z, sums)


@njit(nogil=True, cache=True)
def _cut_small_blocks(
    indptr, indices, kind, inner, old_bits, table, offset,
    members, member_ptr, entries, first, second, entry_ptr, start, stop, z, sums, mu, h,
):  # fmt: skip
    """Blocks start..stop of a ``CutBlocks`` in turn, each as ``_cut_large_block`` does (the
    same unary and pair terms, the same sink side, the same tie rule), with the max-flow
    found by shortest augmenting paths on a dense (k + 2)^2 capacity matrix."""
    for b in range(start, stop):
        block = members[member_ptr[b] : member_ptr[b + 1]]
        k = len(block)
        lo, hi = entry_ptr[b], entry_ptr[b + 1]
        weight = np.empty(hi - lo)
        # accumulated per endpoint in entry order and then added, as the bincounts of
        # ``_cut_large_block``: the same sums in the same order
        inside_first, inside_second = np.zeros(k), np.zeros(k)
        old = np.empty(k)
        for i in range(k):
            old[i] = z[block[i]]
        for j in range(lo, hi):
            e = entries[j]
            weight[j - lo] = table[kind[e], inner[e] - old_bits[block[first[j]]] * old_bits[indices[e]] + offset]
            if weight[j - lo] > 0:
                raise ValueError("cut_block: the block couples points with a positive weight (not submodular)")
        for j in range(lo, hi):
            inside_first[first[j]] += weight[j - lo] * old[second[j]]
            inside_second[second[j]] += weight[j - lo] * old[first[j]]
        g = np.empty(k)
        for i in range(k):
            g[i] = 2.0 * (sums[block[i]] - (inside_first[i] + inside_second[i])) - 2.0 * mu * h[block[i]]
        source, sink = k, k + 1
        cap = np.zeros((k + 2, k + 2))
        unary_first, unary_second = np.zeros(k), np.zeros(k)
        for j in range(lo, hi):
            w = 2.0 * weight[j - lo]
            unary_first[first[j]] += -2.0 * w
            unary_second[second[j]] += -2.0 * w + 4.0 * w
            cap[first[j], second[j]] += -4.0 * w
        a = 2.0 * g + unary_first + unary_second
        for i in range(k):
            cap[source, i] = max(a[i], 0.0)
            cap[i, sink] = max(-a[i], 0.0)
        on_sink_side = _dense_min_cut(cap, source, sink)
        new_energy, old_energy = 0.0, 0.0
        for j in range(lo, hi):
            w = 2.0 * weight[j - lo]
            f, s = first[j], second[j]
            new_energy += w * (1.0 if on_sink_side[f] == on_sink_side[s] else -1.0)
            old_energy += w * old[f] * old[s]
        for i in range(k):
            new_energy += g[i] * (1.0 if on_sink_side[i] else -1.0)
            old_energy += g[i] * old[i]
        if new_energy >= old_energy:
            continue
        for i in range(k):
            z[block[i]] = 1.0 if on_sink_side[i] else -1.0
        for i in range(k):  # S z follows the flipped points (S's symmetry, as BitCoupling.spread)
            p = block[i]
            if z[p] == old[i]:
                continue
            own = old_bits[p]
            for e in range(indptr[p], indptr[p + 1]):
                q = indices[e]
                sums[q] += 2.0 * table[kind[e], inner[e] - own * old_bits[q] + offset] * z[p]


@njit(nogil=True, cache=True)
def _dense_min_cut(cap, source, sink):
    """The nodes that reach ``sink`` in the residual graph of a maximum flow (the sink side of
    the minimum cut with the fewest nodes on it; PyMaxflow's too) of the capacities ``cap``
    (dense, overwritten by the residuals). Shortest augmenting paths (Edmonds-Karp): each
    augmentation empties its bottleneck edge exactly (x - x = 0 in floating point) and
    leaves every residual >= 0, so it ends as with exact arithmetic."""
    v_count = cap.shape[0]
    parent = np.empty(v_count, np.int64)
    queue = np.empty(v_count, np.int64)
    while True:
        parent[:] = -1
        parent[source] = source
        queue[0], head, tail = source, 0, 1
        while head < tail and parent[sink] < 0:
            u = queue[head]
            head += 1
            for v in range(v_count):
                if parent[v] < 0 and cap[u, v] > 0.0:
                    parent[v] = u
                    queue[tail] = v
                    tail += 1
        if parent[sink] < 0:
            break
        bottleneck, v = np.inf, sink
        while v != source:
            bottleneck = min(bottleneck, cap[parent[v], v])
            v = parent[v]
        v = sink
        while v != source:
            u = parent[v]
            cap[u, v] -= bottleneck
            cap[v, u] += bottleneck
            v = u
    reaches = np.zeros(v_count, np.bool_)
    reaches[sink] = True
    queue[0], head, tail = sink, 0, 1
    while head < tail:
        v = queue[head]
        head += 1
        for u in range(v_count):
            if not reaches[u] and cap[u, v] > 0.0:
                reaches[u] = True
                queue[tail] = u
                tail += 1
    return reaches[: v_count - 2]


def cut_block(A, z: np.ndarray, block: np.ndarray, mu: float, h: np.ndarray) -> np.ndarray:
    """z with the bits of ``block`` (point indices) replaced by their exact minimiser of
    E given the other points' bits (module docstring); ties keep the current bit."""
    S = BitCoupling.from_matrix(symmetric_part(A))
    return _cut_blocks(S, z, CutBlocks(S.indptr, S.indices, [block]), mu, h)


def _starting(S) -> np.ndarray:
    z = np.where(_smallest_eigenvector(S) >= 0, 1.0, -1.0)
    return -z if (-z) @ (S @ -z) < z @ (S @ z) else z


def starting_bit(A) -> np.ndarray:
    """A bit for every point from the spectral relaxation alone: the sign of the smallest
    eigenvector (>= 0 gives +1), of the two signs the one of lower z^T A z."""
    return _starting(symmetric_part(A))


def penalised_loss(loss: str, Z: np.ndarray, Y, mu: float, H: np.ndarray) -> float:
    """The MAC objective L(Z) + mu ||Z - H||^2 (H = h(X), codes in {-1, +1})."""
    return affinity_loss(loss, Z, Y) + mu * float(((np.asarray(Z) - H) ** 2).sum())


def _solve_bit(S: BitCoupling, z: np.ndarray, mu: float, h: np.ndarray, solver: str, blocks) -> np.ndarray:
    if solver == "quad":
        return _quad(S.matrix(), z, mu, h, max_iter=200)
    if solver == "cut":
        return _cut_blocks(S, z, blocks, mu, h)
    raise ValueError(f"unknown Z-step solver {solver!r}; choose quad or cut")


class _BitSweep:
    """A pass over the bits that keeps every pair's inner product z_n^T z_m up to date bit
    by bit (one pass over the pairs per bit, no GEMM): ``coupling(bit)``, then
    ``set(bit, z)``."""

    def __init__(self, loss: str, Z: np.ndarray, pairs: Pairs):
        self.loss, self.Z, self.pairs = loss, Z, pairs
        # codes not set yet (0) add nothing to any inner product
        self.inner = pairs.inner(Z) if Z.any() else np.zeros(len(pairs.indices), np.int16)

    def coupling(self, bit: int) -> BitCoupling:
        return self.pairs.couplings(self.loss, self.inner, self.Z[:, bit], self.Z.shape[1])

    def set(self, bit: int, z: np.ndarray) -> None:
        self.pairs.update(self.inner, self.Z[:, bit], z)
        self.Z[:, bit] = z


def _cut_plan(pairs: Pairs, solver: str, blocks):
    """``blocks`` as ``CutBlocks`` of ``pairs`` when the cut solver will visit them."""
    if solver != "cut" or isinstance(blocks, CutBlocks):
        return blocks
    return CutBlocks(pairs.indptr, pairs.indices, blocks)


def z_step(loss: str, Z: np.ndarray, Y, mu: float, H: np.ndarray, solver: str, blocks=()) -> np.ndarray:
    """One pass over the bits, each solved with the others fixed (``solver`` "quad", or
    "cut" over ``blocks``, lists of point indices whose pairs are all similar). Returns new
    codes; the penalised loss never rises (each bit's step never raises its energy)."""
    pairs = Y if isinstance(Y, Pairs) else Pairs(Y)
    blocks = _cut_plan(pairs, solver, blocks)
    sweep = _BitSweep(loss, np.array(Z, dtype=np.float64, copy=True), pairs)
    for bit in range(sweep.Z.shape[1]):
        sweep.set(bit, _solve_bit(sweep.coupling(bit), sweep.Z[:, bit], mu, H[:, bit], solver, blocks))
    return sweep.Z


def z_steps(
    loss: str, Z: np.ndarray, Y, mu: float, H: np.ndarray, solver: str, blocks=(), max_passes: int = 1
) -> tuple[np.ndarray, int]:
    """``z_step`` repeated until a pass changes no bit or ``max_passes`` ran (the MAC
    paper's "until no change in Z or maxit cycles"): (codes, passes run)."""
    pairs = Y if isinstance(Y, Pairs) else Pairs(Y)
    blocks = _cut_plan(pairs, solver, blocks)
    for passes in range(1, max_passes + 1):
        new = z_step(loss, Z, pairs, mu, H, solver, blocks)
        if np.array_equal(new, Z):
            return new, passes
        Z = new
    return Z, max_passes


def free_codes(loss: str, Y, n_bits: int, solver: str, blocks=(), max_passes: int = 1) -> tuple[np.ndarray, int]:
    """The codes of the two-step methods' first step (mu = 0, no hash function): bits added
    one at a time, each from ``starting_bit`` of its coefficients given the earlier bits (the
    later ones count 0 in z_n^T z_m, as in the greedy bit-wise schemes of TSH and KSH),
    improved by the solver; then ``z_steps`` over all bits. (codes, passes after the first)."""
    pairs = Y if isinstance(Y, Pairs) else Pairs(Y)
    blocks = _cut_plan(pairs, solver, blocks)
    n = pairs.shape[0]
    sweep = _BitSweep(loss, np.zeros((n, n_bits)), pairs)
    none = np.zeros(n)
    for bit in range(n_bits):
        S = sweep.coupling(bit)
        sweep.set(bit, _solve_bit(S, _starting(S.matrix()), 0.0, none, solver, blocks))
    return z_steps(loss, sweep.Z, pairs, 0.0, np.zeros_like(sweep.Z), solver, blocks, max_passes)
