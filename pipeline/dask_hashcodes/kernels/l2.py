"""Exact squared-L2 top-k of a block (ground truth), GEMM-based, ties broken by id.

||q - x||^2 = ||q||^2 - 2 q.x + ||x||^2. The ranking term ||x||^2 - 2 q.x comes from a
BLAS GEMM over slabs of SLAB_ROWS database rows, laid out rows x queries: slab @ (-2 Q)^T.
That orientation is what makes the kernel as fast as FAISS's: OpenBLAS runs this shape
faster than Q @ slab^T, and the scans
below then read each row's distances to all queries contiguously, with the queries' current
heap tops in one small array. -2 is folded into the queries once (a power of two: exact).
A numba loop keeps a bounded max-heap of (distance, id) per query, entered only by distances
strictly below the heap's top (rows are scanned in id order, so an equal distance never
displaces a smaller id: ties by id); which queries' tops a row beats is found by one
branch-free (vectorised) pass over its distances.

Exactness: for integer data whose products and sums stay below 2**24 (e.g. SIFT: 128-d
uint8, d * 255**2 < 2**24) every float32 term is an exact integer, so the float32 GEMM is
exact and ties are real ties — this is the fast path, the one FAISS uses (FAISS always
uses float32). Any other data uses float64 (exact below 2**53 for integers). Every kernel
here takes its distances from gemm_slabs, so all of them see the same numbers.

BLAS threads: these kernels are called by Dask tasks, one per worker thread; a multithreaded
BLAS inside each would oversubscribe the cores (two tasks each running a two-thread BLAS on
two cores take longer than with one BLAS thread each). Dask's worker processes start with one BLAS thread per thread.
"""

from __future__ import annotations

import numpy as np
from numba import njit

SLAB_ROWS = 2048
FLOAT32_EXACT = 2**24


def exact_dtype(X: np.ndarray, queries: np.ndarray) -> type:
    """float32 when every GEMM term is an integer below 2**24, else float64."""
    if not (np.issubdtype(X.dtype, np.integer) and np.issubdtype(queries.dtype, np.integer)):
        return np.float64
    peak = max(abs(int(np.iinfo(X.dtype).min)), int(np.iinfo(X.dtype).max))
    qpeak = int(np.abs(queries.astype(np.int64)).max(initial=0))
    d = X.shape[1]
    bound = d * max(peak, qpeak) ** 2 * 2  # ||x||^2 + 2|q.x|, both bounded by d * peak^2
    return np.float32 if bound < FLOAT32_EXACT else np.float64


def squared_distances(Q: np.ndarray, X: np.ndarray) -> np.ndarray:
    Q = np.asarray(Q, dtype=np.float64)
    X = np.asarray(X, dtype=np.float64)
    d = (Q * Q).sum(1)[:, None] - 2.0 * (Q @ X.T) + (X * X).sum(1)[None, :]
    return np.maximum(d, 0.0, out=d)


@njit(nogil=True, cache=True)
def heap_less(da, ia, db, ib):
    """(da, ia) ranks before (db, ib): the smaller distance, ties to the smaller id (the order
    of every top-k here, so results do not depend on the order candidates arrive in)."""
    return da < db or (da == db and ia < ib)


@njit(nogil=True, cache=True)
def heap_replace_top(heap_d, heap_i, d, i):
    """Replace the max of a (distance, id) max-heap and sift down."""
    k = heap_d.shape[0]
    pos = 0
    while True:
        child = 2 * pos + 1
        if child >= k:
            break
        if child + 1 < k and heap_less(heap_d[child], heap_i[child], heap_d[child + 1], heap_i[child + 1]):
            child += 1
        if not heap_less(d, i, heap_d[child], heap_i[child]):
            break
        heap_d[pos] = heap_d[child]
        heap_i[pos] = heap_i[child]
        pos = child
    heap_d[pos] = d
    heap_i[pos] = i


@njit(nogil=True, cache=True)
def _push_slab(dots, x_norms, ids, heap_d, heap_i, tops, beats):
    """Offer ||x||^2 - 2 q.x of a slab (rows x queries) to each query's heap; ``tops[q]``
    mirrors heap_d[q, 0]. Per row, one branch-free (vectorised) pass marks the queries
    whose top it beats in ``beats`` (bytes, a multiple of 8 long); the heaps are then
    visited only where a word of 8 marks is not zero: past the first slabs a row beats
    one or two of 1000 queries' tops, and the scan costs what the compares cost."""
    m = dots.shape[1]
    words = beats.view(np.uint64)
    for j in range(dots.shape[0]):
        x_norm = x_norms[j]
        row = dots[j]
        for q in range(m):
            beats[q] = x_norm + row[q] < tops[q]
        for w in range(words.shape[0]):
            if words[w] == 0:
                continue
            for q in range(8 * w, min(8 * w + 8, m)):
                if beats[q]:
                    heap_replace_top(heap_d[q], heap_i[q], x_norm + row[q], ids[j])
                    tops[q] = heap_d[q, 0]


def l2_topk(X: np.ndarray, ids: np.ndarray, *, queries: np.ndarray, k: int):
    """Exact top-k of one block: (squared distances float64 (m,k), ids int64 (m,k)), inf/-1
    padded; ids must ascend along the rows of X (ties by id)."""
    ids = np.asarray(ids, dtype=np.int64)
    queries = np.asarray(queries)
    m = queries.shape[0]
    if len(X) == 0:
        return np.full((m, k), np.inf), np.full((m, k), -1, np.int64)
    dtype = exact_dtype(X, queries)
    heap_d = np.full((m, k), np.inf, dtype)
    heap_i = np.full((m, k), np.iinfo(np.int64).max, np.int64)
    tops = np.full(m, np.inf, dtype)
    beats = np.zeros(-(-m // 8) * 8, np.uint8)
    for start, dots, x_norms in gemm_slabs(X, queries):
        _push_slab(dots, x_norms, ids[start : start + len(x_norms)], heap_d, heap_i, tops, beats)
    q_norms = query_norms(queries)
    dist = heap_d.astype(np.float64) + q_norms[:, None]
    order = np.lexsort((heap_i, dist), axis=-1)
    dist, out_i = np.take_along_axis(dist, order, axis=1), np.take_along_axis(heap_i, order, axis=1)
    empty = np.isinf(dist)
    out_i[empty] = -1
    return np.maximum(dist, 0.0), out_i


def merge_l2_topk(a, b, k: int):
    dist = np.concatenate([a[0], b[0]], axis=1)
    ids = np.concatenate([a[1], b[1]], axis=1)
    ids_key = np.where(ids < 0, np.iinfo(np.int64).max, ids)
    order = np.lexsort((ids_key, dist), axis=-1)[:, :k]
    return np.take_along_axis(dist, order, axis=1), np.take_along_axis(ids, order, axis=1)


# ------------------------------------------------- rank-k threshold (large K) ---------
#
# Top 2% of 10M is 200,000 neighbours per query: a (queries x K) list is GBs and a heap of
# that size per task does not fit. Instead each query's relevant set is described by the
# (distance, id) of its K-th neighbour (the "threshold"): item x is relevant iff
# (d(q, x), id) <= (d*, id*) lexicographically, the same set as the top-K list with ties by
# id. The threshold is found exactly with counting passes over per-query windows of
# distances (truth.py); these kernels are the per-chunk steps. Distances are the
# partial ||x||^2 - 2 q.x of l2_topk, computed the same way (same slabs, same dtype, the
# same float64 expression), so both give the same numbers; ||q||^2 is added only when
# reporting.


def gemm_slabs(X: np.ndarray, queries: np.ndarray):
    """Yield (start, dots (slab, m) = x . (-2 q), x_norms (slab,)) over SLAB_ROWS-row slabs
    of X, in the exact dtype; every kernel forms the partial distance ||x||^2 - 2 q.x of row
    j and query q as x_norms[j] + dots[j, q], so all of them give the same numbers."""
    queries = np.asarray(queries)
    dtype = exact_dtype(X, queries)
    minus_2qt = np.ascontiguousarray((-2 * queries.astype(dtype)).T)
    for start in range(0, len(X), SLAB_ROWS):
        slab = np.asarray(X[start : start + SLAB_ROWS], dtype=dtype)
        yield start, slab @ minus_2qt, np.einsum("ij,ij->i", slab, slab)


def partial_distances(X: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """(m, n) float64 ||x||^2 - 2 q.x, the same numbers as the kernels below (small inputs)."""
    return np.concatenate(
        [(x_norms[:, None] + dots).astype(np.float64).T for _, dots, x_norms in gemm_slabs(X, queries)],
        axis=1,
    )


def query_norms(queries: np.ndarray) -> np.ndarray:
    q = np.asarray(queries, dtype=np.float64)
    return np.einsum("ij,ij->i", q, q)


@njit(nogil=True, cache=True)
def _inner_bin(d, edges, scale):
    """Bin b of ``d`` inside [edges[0], edges[B]), i.e. edges[b] <= d < edges[b+1]: the
    uniform-width guess is corrected against the explicit edges, so every pass assigns
    exactly the same bin."""
    n_bins = edges.shape[0] - 1
    b = min(max(int((d - edges[0]) * scale), 0), n_bins - 1)
    while b > 0 and d < edges[b]:
        b -= 1
    while b < n_bins - 1 and d >= edges[b + 1]:
        b += 1
    return b


@njit(nogil=True, cache=True)
def _count_slab(dots, x_norms, keep, edges, counts, lowest, highest):
    n_bins = edges.shape[1] - 1
    lo, hi = edges[:, 0], edges[:, n_bins]
    scale = n_bins / (hi - lo)
    for j in range(dots.shape[0]):
        if not keep[j]:
            continue
        for q in range(dots.shape[1]):
            d = x_norms[j] + dots[j, q]
            lowest[q] = min(lowest[q], d)
            highest[q] = max(highest[q], d)
            if d < lo[q]:
                counts[q, 0] += 1
            elif d >= hi[q]:
                counts[q, n_bins + 1] += 1
            else:
                counts[q, 1 + _inner_bin(d, edges[q], scale[q])] += 1


def window_counts(X: np.ndarray, keep: np.ndarray, *, queries: np.ndarray, edges: np.ndarray):
    """Per query, how many kept rows fall below, in each bin of, and at or above its window
    ``edges[q]`` (B + 1 ascending edges): counts (m, B + 2) int64, plus the smallest and
    largest partial distance seen."""
    m = edges.shape[0]
    counts = np.zeros((m, edges.shape[1] + 1), np.int64)
    lowest, highest = np.full(m, np.inf), np.full(m, -np.inf)
    keep = np.ascontiguousarray(keep, dtype=np.bool_)
    for start, dots, x_norms in gemm_slabs(X, queries):
        _count_slab(dots, x_norms, keep[start : start + len(x_norms)], edges, counts, lowest, highest)
    return counts, lowest, highest


@njit(nogil=True, cache=True)
def _collect_slab(dots, x_norms, keep, ids, lo, hi, out_q, out_d, out_i, k):
    for j in range(dots.shape[0]):
        if not keep[j]:
            continue
        for q in range(dots.shape[1]):
            d = x_norms[j] + dots[j, q]
            if lo[q] <= d and d < hi[q]:
                if k < out_q.shape[0]:
                    out_q[k] = q
                    out_d[k] = d
                    out_i[k] = ids[j]
                k += 1
    return k


def window_members(
    X: np.ndarray, ids: np.ndarray, keep: np.ndarray, *, queries: np.ndarray, lo: np.ndarray, hi: np.ndarray
):
    """(query, partial distance, id) of every kept row with lo[q] <= d < hi[q]."""
    keep = np.ascontiguousarray(keep, dtype=np.bool_)
    ids = np.asarray(ids, dtype=np.int64)
    capacity, k = 1024, 0
    out_q, out_d, out_i = np.empty(capacity, np.int64), np.empty(capacity), np.empty(capacity, np.int64)
    for start, dots, x_norms in gemm_slabs(X, queries):
        stop = start + len(x_norms)
        found = _collect_slab(dots, x_norms, keep[start:stop], ids[start:stop], lo, hi, out_q, out_d, out_i, k)
        if found > capacity:  # grow and redo this slab (its matches past capacity were only counted)
            capacity = 2 * found
            out_q, out_d, out_i = (np.resize(a, capacity) for a in (out_q, out_d, out_i))
            found = _collect_slab(dots, x_norms, keep[start:stop], ids[start:stop], lo, hi, out_q, out_d, out_i, k)
        k = found
    return out_q[:k], out_d[:k], out_i[:k]


@njit(nogil=True, cache=True)
def _mark_slab(dots, x_norms, keep, ids, threshold, threshold_id, bits, row0, per_query):
    for j in range(dots.shape[0]):
        if not keep[j]:
            continue
        for q in range(dots.shape[1]):
            d = x_norms[j] + dots[j, q]
            if d < threshold[q] or (d == threshold[q] and ids[j] <= threshold_id[q]):
                bits[row0 + j, q >> 3] |= np.uint8(1 << (q & 7))
                per_query[q] += 1


def relevance_bits(
    X: np.ndarray,
    ids: np.ndarray,
    keep: np.ndarray,
    *,
    queries: np.ndarray,
    threshold: np.ndarray,
    threshold_id: np.ndarray,
):
    """(bits, per_query): bits (rows, ceil(m / 8)) uint8, bit q of row j (little-endian
    within a byte) set iff row j is kept and (d(q, x_j), id_j) <= (threshold[q],
    threshold_id[q]); per_query (m,) int64, how many rows each query marked."""
    m = len(threshold)
    bits = np.zeros((len(X), (m + 7) // 8), np.uint8)
    per_query = np.zeros(m, np.int64)
    keep = np.ascontiguousarray(keep, dtype=np.bool_)
    ids = np.asarray(ids, dtype=np.int64)
    for start, dots, x_norms in gemm_slabs(X, queries):
        stop = start + len(x_norms)
        _mark_slab(dots, x_norms, keep[start:stop], ids[start:stop], threshold, threshold_id, bits, start, per_query)
    return bits, per_query


def select_threshold(member_q, member_d, member_i, need: np.ndarray):
    """Per query q, the need[q]-th smallest (distance, id) among its window members
    (1-based; need[q] <= its member count): (distances (m,), ids (m,))."""
    m = len(need)
    order = np.lexsort((member_i, member_d, member_q))
    q_sorted = member_q[order]
    first = np.searchsorted(q_sorted, np.arange(m))
    pick = order[first + need - 1]
    return member_d[pick], member_i[pick]


@njit(nogil=True, cache=True)
def _positions_from_bits(bits, m, counts, out):
    fill = np.zeros(m, np.int64)
    for j in range(bits.shape[0]):
        for b in range(bits.shape[1]):
            v = bits[j, b]
            q = b * 8
            while v:
                if v & 1 and q < m:
                    if out.shape[1]:
                        out[q, fill[q]] = j
                    fill[q] += 1
                v >>= 1
                q += 1
    counts[:] = fill


def relevant_positions(bits: np.ndarray, m: int) -> np.ndarray:
    """Relevance bits of a chunk (rows, ceil(m / 8)) -> (m, R) row positions of each query's
    relevant rows, ascending, padded with len(bits) (the fused metric kernels' input)."""
    bits = np.ascontiguousarray(bits, dtype=np.uint8)
    counts = np.zeros(m, np.int64)
    _positions_from_bits(bits, m, counts, np.empty((m, 0), np.int64))
    out = np.full((m, max(1, int(counts.max(initial=0)))), len(bits), np.int64)
    _positions_from_bits(bits, m, counts, out)
    return out


def unpack_relevance(bits: np.ndarray, m: int, query_slice=slice(None)) -> np.ndarray:
    """Relevance bits (rows, ceil(m / 8)) -> (queries in ``query_slice``, rows) bool.

    Only the bytes that hold the sliced queries are unpacked: the generic metric path asks
    for 64 queries at a time, and unpacking all 1000 each time cost 16x the work."""
    start, stop, step = query_slice.indices(m)
    if step != 1:
        return np.unpackbits(bits, axis=1, count=m, bitorder="little")[:, query_slice].T.astype(bool)
    first, last = start // 8, (stop + 7) // 8
    unpacked = np.unpackbits(bits[:, first:last], axis=1, bitorder="little")
    return unpacked[:, start - 8 * first : stop - 8 * first].T.astype(bool)
