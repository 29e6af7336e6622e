"""Affinities and affinity losses of binary hashing (the MAC paper's setting,
Carreira-Perpinan & Raziperchikolaei, and the losses it optimises). Plain numpy and scipy,
and numba for the passes over the pairs.

Affinities: for each training point n, ``n_similar`` (kappa+) points m with y_nm = +1 and
``n_dissimilar`` (kappa-) points with y_nm = -1; every other pair is 0 (not in the loss).
With labels, the similar points are drawn at random among the points sharing n's label and
the dissimilar ones among the others; without labels, the similar points are n's exact
Euclidean nearest neighbours (ties by index) and the dissimilar ones are drawn among the
remaining points. Y is an N x N scipy.sparse CSR matrix of int8 with N (kappa+ + kappa-)
entries, never dense; row n holds the pairs chosen for n (Y need not be symmetric: the loss
sums over the listed (n, m) as the paper's sum does).

Losses over codes Z in {-1, +1}^(N x b), summed over Y's entries:

* KSH:   (z_n^T z_m - b y_nm)^2
* eSPLH: exp(-y_nm z_n^T z_m / b)

Both depend on z_n^T z_m only. With every bit but bit i fixed, z_n^T z_m = s_nm + z_ni z_mi
(s_nm: the inner product over the other bits), so each term takes one value l(11) when
z_ni = z_mi and another l(-11) when they differ, and equals
1/2 z_ni z_mi (l(11) - l(-11)) + a constant (Lin et al. 2013): those 1/2 (l(11) - l(-11))
form a sparse matrix A, and the Z-step's quadratic in bit i is z^T A z = z^T S z with
S = (A + A^T) / 2 (``bit_coefficients``).

Cost: ``Pairs`` holds the pattern of Y + Y^T, about 2 N (kappa+ + kappa-) entries of 7 bytes
(column, kind, inner product). The inner products are small integers, kept up to date as
bits change, so a bit's couplings, the loss and an update are each one pass over the
entries: linear in N, where forming z_n^T z_m from Z Z^T costs N^2 b.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange
from scipy import sparse

from dask_hashcodes.kernels.codes import pack_signs
from dask_hashcodes.kernels.hamming import as_words, popcount
from dask_hashcodes.kernels.knn import nearest_others

LOSSES = ("ksh", "esplh")


def _pair_matrix(rows: np.ndarray, cols: np.ndarray, values: np.ndarray, n: int) -> sparse.csr_matrix:
    Y = sparse.csr_matrix((values.astype(np.int8), (rows, cols)), shape=(n, n))
    Y.sort_indices()
    return Y


def _draw_from(pool: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    return np.sort(rng.choice(pool, count, replace=False))


def label_affinities(labels: np.ndarray, n_similar: int, n_dissimilar: int, rng: np.random.Generator):
    """Y from labels (one class per point): for each point, ``n_similar`` others of its class
    and ``n_dissimilar`` of other classes, drawn without replacement with ``rng`` in point
    order. Every class must hold more than ``n_similar`` points and every class's complement
    at least ``n_dissimilar`` (the caller checks, ``affinity_shortfall``)."""
    labels = np.asarray(labels)
    n = len(labels)
    rows, cols, values = [], [], []
    members = {c: np.flatnonzero(labels == c) for c in np.unique(labels)}
    others = {c: np.flatnonzero(labels != c) for c in members}
    for i in range(n):
        c = labels[i]
        same = members[c][members[c] != i]
        for pool, count, value in ((same, n_similar, 1), (others[c], n_dissimilar, -1)):
            chosen = _draw_from(pool, count, rng)
            rows.append(np.full(count, i))
            cols.append(chosen)
            values.append(np.full(count, value))
    return _pair_matrix(np.concatenate(rows), np.concatenate(cols), np.concatenate(values), n)


def affinity_shortfall(labels: np.ndarray, n_similar: int, n_dissimilar: int) -> str | None:
    """None when ``label_affinities`` can draw its pairs, else what is missing (one line)."""
    classes, counts = np.unique(np.asarray(labels), return_counts=True)
    smallest = int(counts.argmin())
    if counts[smallest] - 1 < n_similar:
        return (
            f"class {classes[smallest].item()!r} has {counts[smallest]} training points, fewer than kappa+ + 1 = "
            f"{n_similar + 1} (kappa+ can be at most {counts[smallest] - 1} here)"
        )
    largest = int(counts.argmax())
    if len(labels) - counts[largest] < n_dissimilar:
        return (
            f"only {len(labels) - counts[largest]} training points lie outside class {classes[largest].item()!r}, "
            f"fewer than kappa- = {n_dissimilar}"
        )
    return None


def knn_affinities(
    X: np.ndarray,
    n_similar: int,
    n_dissimilar: int,
    rng: np.random.Generator,
    search: str = "exact",
):
    """Y without labels: each point's ``n_similar`` nearest other points (Euclidean, ties by
    index; ``search`` as ``knn.nearest_others``: "exact" or the approximate "cells") are
    similar; ``n_dissimilar`` drawn uniformly among the remaining points are dissimilar.
    N must exceed n_similar + n_dissimilar."""
    n = len(X)
    neighbours = np.sort(nearest_others(X, n_similar, rng, search), axis=1)
    far = _draw_outside(neighbours, n_dissimilar, rng)
    rows = np.repeat(np.arange(n, dtype=np.int64), n_similar + n_dissimilar)
    cols = np.concatenate([neighbours, far], axis=1).ravel()
    values = np.tile(np.concatenate([np.ones(n_similar), -np.ones(n_dissimilar)]), n)
    return _pair_matrix(rows, cols, values, n)


# rows drawn together in ``_draw_outside``: bounds its (rows x draws) work arrays
_DRAW_ROWS = 65536


def _draw_outside(excluded: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """(N, count) sorted per row: for each point n, ``count`` distinct points drawn uniformly
    among those neither n nor in its row of ``excluded`` (N, k; sorted per row, without n).

    Drawn as ranks among the allowed points (N - 1 - k of them), which map to point indices
    by counting the excluded ones below: no rejection for the excluded points. Repeated
    ranks are dropped and a row keeps its first ``count`` distinct draws, which is a uniform
    draw without replacement; a row short of ``count`` (likely only when ``count`` is a
    large share of the allowed points) draws again with ``Generator.choice``. Linear in N:
    the per-point set difference this replaces cost N per point."""
    n, k = excluded.shape
    allowed = n - 1 - k
    if count > allowed:
        raise ValueError(f"{allowed} points remain outside each point's {k} excluded ones; {count} requested")
    # the excluded points of row n, n itself included, sorted, less their position: the
    # allowed rank r maps to r + (the number of these offsets <= r)
    own = np.arange(n, dtype=np.int64)[:, None]
    excluded = np.sort(np.concatenate([excluded, own], axis=1), axis=1)
    offsets = excluded - np.arange(k + 1)
    # spare draws for repeated ranks: about count^2 / (2 * allowed) expected per row
    width = count + int(np.ceil(4.0 * count * count / allowed)) + 8 if 4 * count <= allowed else 0
    out = np.empty((n, count), np.int64)
    for start in range(0, n, _DRAW_ROWS):
        stop = min(n, start + _DRAW_ROWS)
        block = out[start:stop]
        if width:
            block[:] = _first_distinct(rng.integers(0, allowed, size=(stop - start, width)), count)
        short = np.flatnonzero(block[:, -1] < 0) if width else range(stop - start)
        for i in short:
            block[i] = rng.choice(allowed, count, replace=False)
        shift = np.zeros_like(block)
        for j in range(k + 1):
            shift += block >= offsets[start:stop, j : j + 1]
        block += shift
    return np.sort(out, axis=1)


def _first_distinct(draws: np.ndarray, count: int) -> np.ndarray:
    """Each row's first ``count`` distinct values in draw order, -1 padded where it has fewer."""
    rows, width = draws.shape
    order = np.argsort(draws, axis=1, kind="stable")
    ranked = np.take_along_axis(draws, order, axis=1)
    repeat = np.zeros_like(draws, dtype=bool)
    # a value equal to its predecessor in sorted order is a later draw of it (stable sort)
    np.put_along_axis(repeat, order[:, 1:], ranked[:, 1:] == ranked[:, :-1], axis=1)
    keep = ~repeat & (np.cumsum(~repeat, axis=1) <= count)
    out = np.full((rows, count), -1, np.int64)
    kept_rows, kept_cols = np.nonzero(keep)
    slot = np.cumsum(keep, axis=1)[kept_rows, kept_cols] - 1
    out[kept_rows, slot] = draws[kept_rows, kept_cols]
    return out


def _check_loss(loss: str) -> None:
    if loss not in LOSSES:
        raise ValueError(f"unknown loss {loss!r}; choose from {', '.join(LOSSES)}")


def _pair_loss(loss: str, inner: np.ndarray, y: np.ndarray, n_bits: int) -> np.ndarray:
    _check_loss(loss)
    if loss == "ksh":
        return (inner - n_bits * y) ** 2
    return np.exp(-y * inner / n_bits)


def penalty_scale(loss: str, n_bits: int) -> float:
    """The weight that puts MAC's penalty mu ||Z - h(X)||^2 against a loss normalised to
    O(1) per pair: b^2 for KSH, i.e. mu is measured against Liu et al.'s (z_n^T z_m / b -
    y_nm)^2 rather than eq. 3's (z_n^T z_m - b y_nm)^2 (the same minimisers for a fixed mu
    scale); 1 for eSPLH, already O(1) per pair. The MAC paper's mu schedule (mu_1 = 0.3,
    alpha = 1.4) is set for a loss of this size; against eq. 3's raw scale the penalty is b^2
    times weaker next to the loss, so the schedule's first iterations, until mu has grown to
    make up for it, change almost no bit and only lengthen the run."""
    _check_loss(loss)
    return float(n_bits) ** 2 if loss == "ksh" else 1.0


# the symmetric pattern's entries hold a "kind": 3 * (listed pairs with y = +1) + (pairs with
# y = -1) over the two directions (n, m) and (m, n), so 0 .. 8 (each direction listed once)
_KINDS = 9


# ``Pairs.update`` visits only the changed points' pairs while fewer than 1 / this share of
# the points changed
CHANGED_SHARE_FOR_FULL_UPDATE = 64


def _kind_table(term, loss: str, n_bits: int) -> np.ndarray:
    """(kind, s + b) -> 1/2 (similar count x term(s, +1) + dissimilar count x term(s, -1)) for
    s in [-b, b]: a pattern entry's share of ``term`` summed over its listed directions."""
    kinds = np.arange(_KINDS)
    similar, dissimilar = (kinds // 3).astype(np.float64), (kinds % 3).astype(np.float64)
    s = np.arange(-n_bits, n_bits + 1, dtype=np.float64)
    return 0.5 * (similar[:, None] * term(loss, s, 1, n_bits) + dissimilar[:, None] * term(loss, s, -1, n_bits))


@njit(nogil=True, cache=True, parallel=True)
def _pattern_inner(indptr, indices, words, n_bits, out):
    """out[e] = z_n^T z_m = b - 2 popcount(code_n ^ code_m) for every entry e = (n, m)."""
    for n in prange(len(indptr) - 1):
        for e in range(indptr[n], indptr[n + 1]):
            m = indices[e]
            differing = 0
            for w in range(words.shape[1]):
                differing += popcount(words[n, w] ^ words[m, w])
            out[e] = n_bits - 2 * differing


@njit(nogil=True, cache=True)
def _pattern_sum(indptr, kind, inner, table, offset):
    """sum_e table[kind_e, inner_e + offset]."""
    total = 0.0
    for e in range(indptr[-1]):
        total += table[kind[e], inner[e] + offset]
    return total


@njit(nogil=True, cache=True, parallel=True)
def _pattern_update_all(indptr, indices, inner, old, new):
    """inner_e += new_n new_m - old_n old_m on every entry."""
    for n in prange(len(indptr) - 1):
        for e in range(indptr[n], indptr[n + 1]):
            m = indices[e]
            inner[e] += new[n] * new[m] - old[n] * old[m]


@njit(nogil=True, cache=True)
def _pattern_update(indptr, indices, inner, old, new, changed):
    """inner_e += new_n new_m - old_n old_m on the entries of the points in ``changed`` (one
    bit of their codes replaced): each changed point's row, and the mirror entry (m, n) of
    each of its pairs whose other point did not change (a changed one updates its own row)."""
    is_changed = np.zeros(len(indptr) - 1, np.bool_)
    for n in changed:
        is_changed[n] = True
    for n in changed:
        for e in range(indptr[n], indptr[n + 1]):
            m = indices[e]
            delta = new[n] * new[m] - old[n] * old[m]
            inner[e] += delta
            if not is_changed[m]:
                start = indptr[m]
                inner[start + np.searchsorted(indices[start : indptr[m + 1]], n)] += delta


class BitCoupling:
    """The coupling S of one bit on a symmetric sparse pattern (CSR ``indptr``, ``indices``;
    (m, n) is an entry whenever (n, m) is), held without its values: entry e = (n, m) is
    ``table[kind_e, inner_e - old_n old_m + offset]``, a lookup by the pair's kind and its
    inner product over the other bits. GraphCut reads entries on the fly (``row_sums``,
    ``values``, ``spread``); ``matrix()`` writes them all for the solvers that multiply by S.
    An explicit symmetric matrix is the case of one kind per entry (``from_matrix``)."""

    def __init__(self, indptr, indices, kind, inner, old, table, offset, shape):
        self.indptr, self.indices, self.kind, self.inner, self.old = indptr, indices, kind, inner, old
        self.table, self.offset, self.shape = table, offset, shape

    @classmethod
    def from_matrix(cls, S) -> BitCoupling:
        """``S`` (symmetric) without its diagonal, which adds a constant for z in {-1, +1}."""
        S = sparse.csr_matrix(S, dtype=np.float64, copy=True)
        S.setdiag(0.0)
        S.eliminate_zeros()
        S.sort_indices()
        nnz, n = S.nnz, S.shape[0]
        kind = np.arange(nnz, dtype=np.int64)
        return cls(
            S.indptr, S.indices, kind, np.zeros(nnz, np.int16), np.zeros(n, np.int16), S.data[:, None], 0, S.shape
        )

    def _arrays(self):
        return self.indptr, self.indices, self.kind, self.inner, self.old, self.table, self.offset

    def matrix(self) -> sparse.csr_matrix:
        """S with every entry written (float64, one value per entry)."""
        out = np.empty(len(self.indices))
        _coupling_values(*self._arrays(), out)
        return sparse.csr_matrix((out, self.indices, self.indptr), shape=self.shape, copy=False)

    def row_sums(self, z: np.ndarray) -> np.ndarray:
        """S z."""
        out = np.zeros(self.shape[0])
        _coupling_row_sums(*self._arrays(), z, out)
        return out

    def values(self, entries: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """S at the given entries (``rows``: each entry's row)."""
        return _coupling_entries(self.indices, self.kind, self.inner, self.old, self.table, self.offset, entries, rows)

    def spread(self, changed: np.ndarray, z: np.ndarray, sums: np.ndarray) -> None:
        """``sums`` (= S z before) becomes S z after the points ``changed`` flipped to their
        values in ``z``: O(their pairs), through S's symmetry (in place)."""
        _coupling_spread(*self._arrays(), changed, z, sums)


@njit(nogil=True, cache=True, parallel=True)
def _coupling_values(indptr, indices, kind, inner, old, table, offset, out):
    for n in prange(len(indptr) - 1):
        for e in range(indptr[n], indptr[n + 1]):
            out[e] = table[kind[e], inner[e] - old[n] * old[indices[e]] + offset]


@njit(nogil=True, cache=True, parallel=True)
def _coupling_row_sums(indptr, indices, kind, inner, old, table, offset, z, out):
    for n in prange(len(indptr) - 1):
        own, total = old[n], 0.0
        for e in range(indptr[n], indptr[n + 1]):
            m = indices[e]
            total += table[kind[e], inner[e] - own * old[m] + offset] * z[m]
        out[n] = total


@njit(nogil=True, cache=True)
def _coupling_entries(indices, kind, inner, old, table, offset, entries, rows):
    out = np.empty(len(entries))
    for i in range(len(entries)):
        e = entries[i]
        out[i] = table[kind[e], inner[e] - old[rows[i]] * old[indices[e]] + offset]
    return out


@njit(nogil=True, cache=True)
def _coupling_spread(indptr, indices, kind, inner, old, table, offset, changed, z, sums):
    # a flip of z_m to its new value adds S_nm (z_m - (-z_m)) = 2 S_mn z_m to (S z)_n
    for m in changed:
        own = old[m]
        for e in range(indptr[m], indptr[m + 1]):
            n = indices[e]
            sums[n] += 2.0 * table[kind[e], inner[e] - own * old[n] + offset] * z[m]


class Pairs:
    """The listed pairs of an affinity matrix Y (values +1 / -1), held as the pattern of
    Y + Y^T in CSR form (``indptr``, ``indices``) with each entry's ``kind``: how many of
    (n, m) and (m, n) are listed as similar and as dissimilar. Everything the Z-step needs is
    a pass over this pattern (numba): the inner products z_n^T z_m of the codes (small
    integers, int16, kept up to date bit by bit), the loss, and the symmetric coupling of one
    bit, S = (A + A^T) / 2, whose entry is a table lookup by (kind, inner product). No n x n
    array and no sort after construction."""

    def __init__(self, Y):
        Y = sparse.csr_matrix(Y, copy=True)
        Y.sum_duplicates()
        if Y.shape[0] != Y.shape[1]:
            raise ValueError(f"affinities must be square, got {Y.shape[0]} x {Y.shape[1]}")
        if Y.nnz and not np.isin(Y.data, (-1, 1)).all():
            raise ValueError("affinities must be +1 (similar) or -1 (dissimilar), each pair listed once")
        if Y.diagonal().any():
            raise ValueError("affinities must not pair a point with itself")
        self.shape, self.n_listed = Y.shape, Y.nnz
        # each direction's code: 3 for similar, 1 for dissimilar; summed over both directions
        # the code is 3 * (similar count) + (dissimilar count)
        coded = sparse.csr_matrix((np.where(Y.data > 0, 3, 1).astype(np.int8), Y.indices, Y.indptr), shape=Y.shape)
        both = (coded + coded.T).tocsr()
        both.sum_duplicates()
        self.indptr = both.indptr.astype(np.int64)
        self.indices = both.indices.astype(np.int32)
        self.kind = both.data.astype(np.int8)

    def inner(self, Z: np.ndarray) -> np.ndarray:
        """z_n^T z_m (int16) of codes Z ({-1, +1}, (N, b)) on every entry of the pattern."""
        Z = np.asarray(Z)
        if Z.shape[1] > np.iinfo(np.int16).max:
            raise ValueError(f"at most {np.iinfo(np.int16).max} bits, got {Z.shape[1]}")
        out = np.empty(len(self.indices), np.int16)
        _pattern_inner(self.indptr, self.indices, as_words(pack_signs(Z)), Z.shape[1], out)
        return out

    def loss(self, loss: str, inner: np.ndarray, n_bits: int) -> float:
        """The loss summed over the listed pairs, from ``inner`` of the pattern (each listed
        pair appears at (n, m) and at (m, n): each counts half)."""
        table = _kind_table(_pair_loss, loss, n_bits)
        return float(_pattern_sum(self.indptr, self.kind, inner, table, n_bits))

    def couplings(self, loss: str, inner: np.ndarray, z: np.ndarray, n_bits: int) -> BitCoupling:
        """S = (A + A^T) / 2 of one bit (``bit_coefficients``), given ``inner`` of all bits and
        the bit's current values ``z`` ({-1, +1}, or 0 for a bit not set yet)."""
        # the other bits' inner product s = inner - z_n z_m lies in [-(b - 1), b - 1]
        table = _kind_table(_half_gaps, loss, n_bits)
        return BitCoupling(self.indptr, self.indices, self.kind, inner, _bit_signs(z), table, n_bits, self.shape)

    def update(self, inner: np.ndarray, old: np.ndarray, new: np.ndarray) -> None:
        """``inner`` after one bit changed from ``old`` to ``new`` (in place; the work is
        proportional to the pairs of the points that changed)."""
        changed = np.flatnonzero(np.asarray(old) != np.asarray(new))
        old, new = _bit_signs(old), _bit_signs(new)
        # a changed point's mirror entries cost a search each: past a share of the points one
        # plain pass over every entry is cheaper
        if len(changed) > len(old) // CHANGED_SHARE_FOR_FULL_UPDATE:
            _pattern_update_all(self.indptr, self.indices, inner, old, new)
        elif len(changed):
            _pattern_update(self.indptr, self.indices, inner, old, new, changed)


def _bit_signs(z: np.ndarray) -> np.ndarray:
    """A bit's values as int16 (0 stays 0: a bit not set yet)."""
    return np.sign(np.asarray(z)).astype(np.int16)


def _half_gaps(loss: str, others: np.ndarray, y: int, n_bits: int) -> np.ndarray:
    """1/2 (l(s + 1, y) - l(s - 1, y)): the pair's loss is this times z_n z_m plus a constant."""
    return 0.5 * (_pair_loss(loss, others + 1.0, y, n_bits) - _pair_loss(loss, others - 1.0, y, n_bits))


def affinity_loss(loss: str, Z: np.ndarray, Y) -> float:
    """The loss of codes Z ({-1, +1}, (N, b)) summed over Y's pairs."""
    pairs = Y if isinstance(Y, Pairs) else Pairs(Y)
    return pairs.loss(loss, pairs.inner(Z), np.shape(Z)[1])


def bit_coefficients(loss: str, Z: np.ndarray, Y, bit: int) -> sparse.csr_matrix:
    """S (N x N, sparse, the pattern of Y + Y^T): the loss equals sum_nm S_nm z_n,bit z_m,bit
    + a constant over the codes that differ from Z in bit ``bit`` only. S = (A + A^T) / 2
    for A of the module docstring (z^T A z = z^T S z)."""
    pairs = Y if isinstance(Y, Pairs) else Pairs(Y)
    return pairs.couplings(loss, pairs.inner(Z), np.asarray(Z)[:, bit], np.shape(Z)[1]).matrix()


def label_blocks(labels: np.ndarray, max_points: int | None = None) -> list[np.ndarray]:
    """GraphCut blocks from labels: one block per class (every pair inside is similar or
    unlisted, so each block's cut is exact, MAC paper Sec. 3.2); a class of more than
    ``max_points`` points is split, in index order, into the fewest nearly equal blocks of at
    most that many (any subset of a class is still exact: the max-flow's cost grows faster
    than the block, while the pairs a split moves out of the blocks become linear terms)."""
    labels = np.asarray(labels)
    blocks = []
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        parts = 1 if max_points is None else -(-len(members) // max_points)
        blocks.extend(np.array_split(members, parts))
    return blocks


def neighbour_blocks(Y, block_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """GraphCut blocks without labels: points visited in a random order; each point not yet
    in a block starts one and pulls in its similar (listed +1) points not yet placed, skipping
    any that has a dissimilar pair (either direction) with a member, up to ``block_size``
    points. Blocks cover every point once and hold no dissimilar pair."""
    Y = sparse.csr_matrix(Y)
    both = (Y + Y.T).tocsr()
    dissimilar = (Y.minimum(0) + Y.T.minimum(0)).tocsr()
    block_of, n_blocks = _grow_blocks(
        rng.permutation(Y.shape[0]),
        both.indptr,
        both.indices,
        both.data,
        dissimilar.indptr,
        dissimilar.indices,
        block_size,
    )
    order = np.argsort(block_of, kind="stable")  # each block's members ascending
    return np.split(order, np.searchsorted(block_of[order], np.arange(1, n_blocks)))


@njit(cache=True)
def _grow_blocks(seed_order, indptr, indices, data, dissimilar_indptr, dissimilar_indices, block_size):
    """(block of every point, number of blocks) for ``neighbour_blocks``."""
    block_of = np.full(len(seed_order), -1, np.int64)
    n_blocks = 0
    for seed in seed_order:
        if block_of[seed] >= 0:
            continue
        block_of[seed] = n_blocks
        size = 1
        for e in range(indptr[seed], indptr[seed + 1]):
            if data[e] <= 0:
                continue
            if size >= block_size:
                break
            m = indices[e]
            if block_of[m] >= 0:
                continue
            clash = False
            for f in range(dissimilar_indptr[m], dissimilar_indptr[m + 1]):
                if block_of[dissimilar_indices[f]] == n_blocks:
                    clash = True
                    break
            if not clash:
                block_of[m] = n_blocks
                size += 1
        n_blocks += 1
    return block_of, n_blocks
