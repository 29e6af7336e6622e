"""An inverted file over binary codes: the kernels. Plain numpy and numba, no Dask.

A coarse quantiser of ``n_lists`` centroids (k-means on the features) puts every database
row in the list of its nearest centroid. A query probes its ``nprobe`` nearest lists and
ranks only their codes by Hamming distance: with the lists sorted by id inside, the answer
is exactly the Hamming top-k of the probed lists' rows, ties by the smaller id, as the
linear scan restricted to those rows would give.

Layout of a built list set: ``order`` holds the database ids grouped by list (ascending
inside each list), ``offsets`` (n_lists + 1) where each list starts in it, and ``codes``
the packed codes in the same order, so that a list is one contiguous slice.

A query's probed lists are contiguous slices of the list-ordered codes, scanned in one
compiled loop: the work is nq * nprobe * (n / n_lists) code comparisons, with no call per
(query, list); the top R comes from a histogram of the distances (small integers), as in
the linear scan. ``search_lists_exact`` then re-ranks those R rows by their exact squared L2
to the query vector in the same loop, reading only those R rows of the original vectors:
the serving path, where one query costs a probe, a short scan and R gathers.

The quantiser's centroids are binary codes when it lives in code space (k-means of the codes:
kernels.code_kmeans): the rows it assigns and the queries it probes are then their codes,
by Hamming distance. A feature-space quantiser may live in a subspace (``Projection``): the top principal directions of the
k-means sample. Its centroids, the database rows it assigns and the queries it probes are
all projected first; k-means and the assignment, the build's two GEMM-bound passes, then
cost dims / d of their full-space work.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dask_hashcodes.kernels.codes import read_only, row_slabs
from dask_hashcodes.kernels.hamming import ID_BITS, as_words, empty_topk, hamming_topk, popcount
from dask_hashcodes.kernels.topk import smallest_with_offsets

# Histogram lanes: consecutive codes count into different rows, so that equal distances in
# a row do not wait on each other's store.
_LANES = 4


def list_layout(assignment: np.ndarray, n_lists: int) -> tuple[np.ndarray, np.ndarray]:
    """(order, offsets): the row ids grouped by their list, ascending inside each list, and
    the (n_lists + 1) starts of the lists in ``order``."""
    assignment = np.asarray(assignment, dtype=np.int64)
    if assignment.size and (assignment.min() < 0 or assignment.max() >= n_lists):
        raise ValueError(f"list numbers must lie in [0, {n_lists}); got {assignment.min()}..{assignment.max()}")
    order = np.argsort(assignment, kind="stable")
    offsets = np.searchsorted(assignment[order], np.arange(n_lists + 1))
    return order.astype(np.int64), offsets.astype(np.int64)


class Projection:
    """The space of a coarse quantiser in a subspace: a row x becomes (x - mean) @ components,
    ``components`` (d, dims) the top principal directions of the k-means sample, orthonormal,
    so squared distances in the subspace are those of the rows' parts that the directions
    hold. Computed in float64 one row slab at a time, the same whatever the chunking."""

    def __init__(self, mean: np.ndarray, components: np.ndarray):
        self.mean = np.ascontiguousarray(mean, dtype=np.float64)
        self.components = np.ascontiguousarray(components, dtype=np.float64)
        if self.components.ndim != 2 or self.mean.shape != (self.components.shape[0],):
            raise ValueError(f"a projection needs a mean of d values and d x dims components; got "
                             f"{self.mean.size} values and {' x '.join(map(str, self.components.shape))}")  # fmt: skip

    def __dask_tokenize__(self):
        # tasks that take a projection are keyed by its numbers (the same projection, the same keys)
        return ("dhash-projection", self.mean.tobytes(), self.components.tobytes(), self.components.shape)

    @property
    def d(self) -> int:
        return self.components.shape[0]

    @property
    def dims(self) -> int:
        return self.components.shape[1]

    def __call__(self, X: np.ndarray) -> np.ndarray:
        return (np.asarray(X, dtype=np.float64) - self.mean) @ self.components


def quantiser_space(X: np.ndarray, projection: Projection | None) -> np.ndarray:
    """Rows as the quantiser sees them: projected, or as they are (float64)."""
    return np.asarray(X, dtype=np.float64) if projection is None else projection(X)


def principal_dims(variances: np.ndarray, share: float) -> int:
    """The fewest leading principal directions (``variances`` descending) that hold ``share``
    of the total variance."""
    variances = np.clip(np.asarray(variances, dtype=np.float64), 0.0, None)
    total = variances.sum()
    if total <= 0:
        return 1
    return int(min(len(variances), np.searchsorted(np.cumsum(variances) / total, share - 1e-12) + 1))


def probed_lists(
    query_vectors: np.ndarray, centroids: np.ndarray, nprobe: int, projection: Projection | None = None
) -> np.ndarray:
    """(nq, nprobe) int64: each query's nprobe nearest centroids by squared L2 in the
    quantiser's space, nearest first (ties: the lower list number); see ``probe_distances``."""
    return probe_distances(quantiser_space(query_vectors, projection), centroids, nprobe)[0]


def probed_code_lists(query_codes: np.ndarray, centroid_codes: np.ndarray, nprobe: int) -> np.ndarray:
    """(nq, nprobe) int64: each query code's nprobe nearest centroid codes by Hamming distance
    (a code-space quantiser), nearest first (ties: the lower list number)."""
    if not 1 <= nprobe <= len(centroid_codes):
        raise ValueError(f"nprobe must lie in [1, {len(centroid_codes)}] (the number of lists); got {nprobe}")
    return hamming_topk(centroid_codes, np.arange(len(centroid_codes)), queries=query_codes, k=nprobe)[1]


# centroids scored per block: stored in bytes, each block is converted to float32 while it is
# in cache, so a probe reads the bytes from memory, not a float32 copy of every centroid
PROBE_BLOCK = 256
# queries scored at a time: a batch of 10,000 queries against 4096 centroids would otherwise
# hold a 160 MB score matrix at once
PROBE_QUERY_ROWS = 1024


def probe_distances(query_vectors, centroids, nprobe) -> tuple[np.ndarray, np.ndarray]:
    """(probes (nq, nprobe) int64, their squared distances (nq, nprobe) float32): each query's
    nprobe nearest centroids, nearest first (ties: the lower list number).

    Scored in float32 as |c|^2 - 2 q.c, FAISS's choice for its coarse quantiser: half the
    cost of float64 per query, and a probe only decides which lists are scanned (a near tie
    between two centroids may go either way; the answer over the probed lists stays exact).
    The norms are added as the nearest are selected, not in a pass of their own.
    ``centroids`` may be of any numeric dtype (an index may keep them in bytes)."""
    centroids = np.asarray(centroids)
    if not 1 <= nprobe <= len(centroids):
        raise ValueError(f"nprobe must lie in [1, {len(centroids)}] (the number of lists); got {nprobe}")
    queries = np.asarray(query_vectors, np.float32)
    blocks = range(0, len(centroids), PROBE_BLOCK)
    norms = np.empty(len(centroids), np.float32)
    for start in blocks:
        block = centroids[start : start + PROBE_BLOCK].astype(np.float32, copy=False)
        norms[start : start + PROBE_BLOCK] = (block * block).sum(axis=1)
    probes = np.empty((len(queries), nprobe), np.int64)
    squared = np.empty((len(queries), nprobe), np.float32)
    for rows in row_slabs(len(queries), PROBE_QUERY_ROWS):
        part = queries[rows]
        products = np.empty((len(part), len(centroids)), np.float32)
        for start in blocks:  # -2 q.c: scaling by two is exact, so these are the products the scores had
            block = centroids[start : start + PROBE_BLOCK].astype(np.float32, copy=False)
            products[:, start : start + PROBE_BLOCK] = part @ (-2 * block.T)
        probes[rows], chosen = smallest_with_offsets(products, norms, nprobe)
        squared[rows] = np.maximum(chosen + (part * part).sum(axis=1)[:, None], 0)
    return probes, squared


def _checked(query_codes, probes, list_codes, list_ids, offsets):
    """The kernels' argument types; ids stay int32 when given so (half the memory of int64)."""
    id_type = np.int32 if np.asarray(list_ids).dtype == np.int32 else np.int64
    return (
        as_words(query_codes), np.ascontiguousarray(probes, dtype=np.int64), as_words(list_codes),
        np.ascontiguousarray(list_ids, dtype=id_type), np.ascontiguousarray(offsets, dtype=np.int64),
    )  # fmt: skip


# The batch schedule pays off when each probed list is compared with several queries at once
# and the kept top-k is short; the per-query scan's histogram selection wins for a few queries
# per list or a deep top-k (re-ranking candidates).
BATCH_QUERIES_PER_LIST = 4
BATCH_MAX_K = 256
SCHEDULES = ("by-list", "by-query")


def search_lists(
    query_codes: np.ndarray,
    probes: np.ndarray,
    list_codes: np.ndarray,
    list_ids: np.ndarray,
    offsets: np.ndarray,
    k: int,
    *,
    schedule: str | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(D int32 (nq, k), I int64 (nq, k)): each query's Hamming top-k among the rows of its
    probed lists (``probes``, (nq, nprobe)), ties by the smaller id; -1 where those lists
    hold fewer than k rows. ``list_codes``/``list_ids``: the codes and ids in list order,
    ``offsets`` the lists' starts (``list_layout``).

    Two schedules give exactly the same arrays. "by-query" scans each query's lists in turn
    and selects its top-k from a histogram of the distances. "by-list" groups the queries by
    the lists they probe and reads each list once, comparing it with every query probing it
    while it is in cache (a per-query max-heap keeps each top-k): a 10,000-query batch
    becomes one pass over the probed lists. ``schedule=None`` takes by-list when the batch
    probes each list BATCH_QUERIES_PER_LIST times on average and k <= BATCH_MAX_K."""
    out_d, out_i = empty_topk(len(query_codes), k)
    if len(query_codes) == 0 or len(list_codes) == 0:
        return out_d, out_i
    words, probes, list_words, list_ids, offsets = _checked(query_codes, probes, list_codes, list_ids, offsets)
    if schedule is None:
        many = probes.size >= BATCH_QUERIES_PER_LIST * max(1, len(offsets) - 1)
        schedule = "by-list" if k <= BATCH_MAX_K and many else "by-query"
    if schedule == "by-query":
        _probed_topk(words, probes, list_words, list_ids, offsets, k, out_d, out_i)
        return out_d, out_i
    if schedule != "by-list":
        raise ValueError(f"schedule must be one of {SCHEDULES} or None; got {schedule!r}")
    if probes.size and (probes.min() < 0 or probes.max() >= len(offsets) - 1):
        raise ValueError(f"probed list numbers must lie in [0, {len(offsets) - 1})")
    keys = np.full((len(words), k), _NO_KEY, np.int64)
    _list_major_topk(words, probes, list_words, list_ids, offsets, keys)
    _decode_keys(keys, out_d, out_i)
    return out_d, out_i


_NO_KEY = np.iinfo(np.int64).max  # an empty heap slot: worse than any (distance, id) key


@njit(nogil=True, cache=True)
def _queries_by_list(probes, n_lists):
    """(starts (n_lists + 1), queries): the queries probing each list, ascending."""
    starts = np.zeros(n_lists + 1, np.int64)
    for q in range(probes.shape[0]):
        for p in probes[q]:
            starts[p + 1] += 1
    for p in range(n_lists):
        starts[p + 1] += starts[p]
    filled = starts[:-1].copy()
    queries = np.empty(starts[-1], np.int64)
    for q in range(probes.shape[0]):
        for p in probes[q]:
            queries[filled[p]] = q
            filled[p] += 1
    return starts, queries


@njit(nogil=True, cache=True)
def _list_major_topk(query_words, probes, list_words, list_ids, offsets, keys):
    """Per list: its queries' codes gathered into a small block, then every row of the list
    against every one of them; a (distance, id) key below a query's worst kept key replaces
    it in that query's max-heap ``keys[q]`` (root at column 0)."""
    n_lists, n_words = len(offsets) - 1, list_words.shape[1]
    starts, members = _queries_by_list(probes, n_lists)
    most = 0
    for p in range(n_lists):
        most = max(most, starts[p + 1] - starts[p])
    block = np.empty((n_words, most), np.uint64)  # word-major: the distance loop vectorises over queries
    worst = np.empty(most, np.int64)
    worst_distance = np.empty(most, np.int64)  # worst >> ID_BITS: most rows fail this test alone
    dist = np.empty(most, np.int64)
    for p in range(n_lists):
        first, count = starts[p], starts[p + 1] - starts[p]
        if count == 0 or offsets[p] == offsets[p + 1]:
            continue
        for j in range(count):
            q = members[first + j]
            for w in range(n_words):
                block[w, j] = query_words[q, w]
            worst[j] = keys[q, 0]
            worst_distance[j] = worst[j] >> ID_BITS
        for r in range(offsets[p], offsets[p + 1]):
            dist[:count] = 0
            for w in range(n_words):
                word = list_words[r, w]
                for j in range(count):
                    dist[j] += popcount(block[w, j] ^ word)
            row_id = np.int64(list_ids[r])
            for j in range(count):
                if dist[j] > worst_distance[j]:
                    continue
                key = (dist[j] << ID_BITS) | row_id
                if key < worst[j]:
                    heap = keys[members[first + j]]
                    _replace_root(heap, key)
                    worst[j] = heap[0]
                    worst_distance[j] = worst[j] >> ID_BITS


@njit(nogil=True, cache=True, inline="always")
def _replace_root(heap, key):
    """Put ``key`` in place of the max-heap's root and sift it down."""
    size, at = heap.shape[0], 0
    while True:
        child = 2 * at + 1
        if child >= size:
            break
        if child + 1 < size and heap[child + 1] > heap[child]:
            child += 1
        if heap[child] <= key:
            break
        heap[at] = heap[child]
        at = child
    heap[at] = key


@njit(nogil=True, cache=True)
def _decode_keys(keys, out_d, out_i):
    """Each query's kept keys in (distance, id) order, split into distances and ids."""
    for q in range(keys.shape[0]):
        row = np.sort(keys[q])
        for j in range(row.shape[0]):
            if row[j] == _NO_KEY:
                break
            out_d[q, j] = row[j] >> ID_BITS
            out_i[q, j] = row[j] & ((1 << ID_BITS) - 1)


def search_lists_exact(
    query_codes: np.ndarray,
    query_vectors: np.ndarray,
    probes: np.ndarray,
    list_codes: np.ndarray,
    list_ids: np.ndarray,
    offsets: np.ndarray,
    vectors: np.ndarray,
    list_rows: np.ndarray,
    candidates: int,
    k: int,
) -> tuple[np.ndarray, np.ndarray]:
    """(D float64 (nq, k), I int64 (nq, k)): each query's Hamming top-``candidates`` among its
    probed lists' rows (as ``search_lists``), re-ranked by the exact squared L2 between its
    vector and theirs, cut to k, ties by the smaller id; inf / -1 where fewer rows exist.
    ``vectors[list_rows[j]]`` is the original vector of the j-th row in list order (any
    array numpy can index: in memory or memory-mapped; only the candidates' rows are read).

    The squared L2 sums in float64 in an order the compiler may vectorise: exact for integer
    features (SIFT bytes) whose squared distances stay below 2**53, and the same on every run
    of one machine otherwise."""
    if candidates < k:
        raise ValueError(f"{candidates} candidates is below k = {k}: re-ranking keeps k of them")
    out_d = np.full((len(query_codes), k), np.inf)
    out_i = np.full((len(query_codes), k), -1, np.int64)
    if len(query_codes) == 0 or len(list_codes) == 0:
        return out_d, out_i
    query_vectors = np.ascontiguousarray(query_vectors, dtype=np.float64)
    if query_vectors.shape != (len(query_codes), vectors.shape[1]):
        raise ValueError(
            f"{len(query_vectors)} query vectors of {query_vectors.shape[-1]} features for {len(query_codes)} queries of {vectors.shape[1]} features"
        )
    words, probes, list_words, list_ids, offsets = _checked(query_codes, probes, list_codes, list_ids, offsets)
    _probed_exact_topk(
        words, query_vectors, probes, list_words, list_ids, offsets, read_only(vectors),
        np.ascontiguousarray(list_rows, dtype=list_ids.dtype), candidates, out_d, out_i,
    )  # fmt: skip
    return out_d, out_i


@njit(nogil=True, cache=True)
def _probed_size(probes, offsets):
    """The most rows any query's probed lists hold (the scan buffer's length)."""
    most = 0
    for q in range(probes.shape[0]):
        total = 0
        for p in probes[q]:
            total += offsets[p + 1] - offsets[p]
        most = max(most, total)
    return most


@njit(nogil=True, cache=True)
def _scan_buffers(probes, offsets, n_words, want):
    """Work arrays reused by every query: its distances, the rows at the cut-off, the rows
    chosen (at most ``want``), the laned histogram."""
    size = _probed_size(probes, offsets)
    dist = np.empty(size, np.int32)
    at_cut = np.empty(size, np.int64)
    chosen = np.empty(min(want, size), np.int64)
    counts = np.zeros((_LANES, 64 * n_words + 1), np.int64)
    return dist, at_cut, chosen, counts


@njit(nogil=True, cache=True)
def _scan_probed(query, probe_row, list_words, offsets, dist, counts):
    """Hamming distances from ``query`` to every row of the probed lists, in probe order,
    into ``dist``, and their histogram into ``counts`` (counted in the same pass: the scan
    waits on memory, the counting hides under it); returns how many rows."""
    counts[:] = 0
    n_words = list_words.shape[1]
    at = 0
    for p in probe_row:
        for r in range(offsets[p], offsets[p + 1]):
            d = 0
            for w in range(n_words):
                d += popcount(query[w] ^ list_words[r, w])
            dist[at] = d
            counts[at % _LANES, d] += 1
            at += 1
    return at


@njit(nogil=True, cache=True)
def _select_probed(probe_row, list_ids, offsets, dist, counts, want, at_cut, chosen):
    """The ``want`` (<= rows scanned) rows of smallest (Hamming distance, id) among the
    scanned ``dist`` (histogram ``counts``): their positions in list order into ``chosen``
    (in no particular order)."""
    cut, before = 0, 0
    while True:
        here = 0
        for lane in range(_LANES):
            here += counts[lane, cut]
        if before + here >= want:
            break
        before += here
        cut += 1
    n_below, n_cut, at = 0, 0, 0
    for p in probe_row:
        start, stop = offsets[p], offsets[p + 1]
        for j in range(stop - start):
            d = dist[at + j]
            if d <= cut:  # rarely true: a branch the CPU predicts
                if d < cut:
                    chosen[n_below] = start + j
                    n_below += 1
                else:
                    at_cut[n_cut] = start + j
                    n_cut += 1
        at += stop - start
    ties = at_cut[:n_cut]
    if n_cut > want - before:  # ties at the cut go to the smallest ids
        ties = ties[np.argsort(list_ids[ties], kind="mergesort")]
    chosen[n_below:want] = ties[: want - before]


@njit(nogil=True, cache=True)
def _shortlist(query, probe_row, list_words, list_ids, offsets, want, dist, counts, at_cut, chosen):
    """Scan one query's probed lists and put its Hamming top ``want`` (fewer if the lists hold
    fewer rows) into ``chosen``; returns how many."""
    kept = min(want, _scan_probed(query, probe_row, list_words, offsets, dist, counts))
    if kept:
        _select_probed(probe_row, list_ids, offsets, dist, counts, kept, at_cut, chosen)
    return kept


@njit(nogil=True, cache=True)
def _probed_topk(query_words, probes, list_words, list_ids, offsets, k, out_d, out_i):
    """Per query: scan its probed lists, select the top k, sort them by (distance, id)."""
    dist, at_cut, chosen, counts = _scan_buffers(probes, offsets, list_words.shape[1], k)
    for q in range(query_words.shape[0]):
        kk = _shortlist(query_words[q], probes[q], list_words, list_ids, offsets, k, dist, counts, at_cut, chosen)
        keys = np.empty(kk, np.int64)
        for j in range(kk):
            keys[j] = _hamming_key(query_words[q], list_words[chosen[j]], list_ids[chosen[j]])
        keys.sort()
        for j in range(kk):
            out_d[q, j] = keys[j] >> ID_BITS
            out_i[q, j] = keys[j] & ((1 << ID_BITS) - 1)


@njit(nogil=True, cache=True, inline="always")
def _hamming_key(query, code, row_id):
    d = 0
    for w in range(code.shape[0]):
        d += popcount(query[w] ^ code[w])
    return (d << ID_BITS) | row_id


@njit(nogil=True, cache=True, fastmath={"reassoc", "contract"})
def _squared_l2(query, row):
    """sum (query - row)^2 in float64, reassociated so that it vectorises: exact for integer
    features, deterministic on one machine otherwise."""
    total = 0.0
    for j in range(query.shape[0]):
        diff = query[j] - np.float64(row[j])
        total += diff * diff
    return total


@njit(nogil=True, cache=True)
def _probed_exact_topk(query_words, query_vectors, probes, list_words, list_ids, offsets, vectors, list_rows,
                       candidates, out_d, out_i):  # fmt: skip
    """Per query: scan its probed lists, select the Hamming top ``candidates``, score them by
    the exact squared L2 to the query vector, keep the k of smallest (distance, id)."""
    dist, at_cut, chosen, counts = _scan_buffers(probes, offsets, list_words.shape[1], candidates)
    exact = np.empty(len(chosen))
    ids = np.empty(len(chosen), np.int64)
    k = out_d.shape[1]
    for q in range(query_words.shape[0]):
        kept = _shortlist(query_words[q], probes[q], list_words, list_ids, offsets, candidates, dist, counts, at_cut,
                          chosen)  # fmt: skip
        for j in range(kept):
            ids[j] = list_ids[chosen[j]]
            exact[j] = _squared_l2(query_vectors[q], vectors[list_rows[chosen[j]]])
        by_id = np.argsort(ids[:kept], kind="mergesort")
        by_distance = by_id[np.argsort(exact[:kept][by_id], kind="mergesort")]
        for j in range(min(k, kept)):
            out_d[q, j] = exact[by_distance[j]]
            out_i[q, j] = ids[by_distance[j]]
