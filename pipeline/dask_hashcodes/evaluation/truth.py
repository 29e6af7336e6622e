"""Ground truth: which database items are relevant to each query.

Two rules: labels (relevant iff query and item share >= 1 label) or exact
Euclidean neighbours (the top K, or top p% of the database, by squared L2, ties by id),
computed distributed and stored in the dataset so it is computed once per split.

Euclidean truth has two stored forms, chosen by K alone (same relevant sets either way):

* K <= MAX_LISTED_NEIGHBOURS: the (queries x K) neighbour lists, from a per-chunk heap
  (kernels.l2.l2_topk) and a tree merge;
* larger K (the seeds' top 2 percentile: 200,000 neighbours per query at 10M, where lists
  are GBs and a heap per task does not fit): each query's K-th neighbour (distance, id),
  found exactly by counting passes, and a relevance bitmap over the dataset's rows
  (n x ceil(queries / 8) bytes, zstd; 1.25 GB raw for 1000 queries at 10M and mostly zeros).
  Row j is relevant to query q iff (d(q, x_j), j) <= (d*_q, id*_q).

Finding the K-th neighbour exactly, without sorting n distances per query:

1. a seeded sample of database rows gives each query a window of distances that holds its
   K-th neighbour with overwhelming probability (the sample rank +- WINDOW_SIGMAS binomial
   standard deviations), cut into WINDOW_BINS equal bins;
2. one pass counts, per query, the rows below the window and in each bin; the bin where
   the count reaches K becomes the new window. If it still holds more than
   MAX_WINDOW_MEMBERS rows (a bad sample, heavy ties) the pass repeats on it;
3. one pass collects the (distance, id) of the rows inside each final window (a few per
   query), and the K-th is picked exactly on the client;
4. one pass writes the relevance bits, chunk by chunk, in place (each task one zarr chunk).

The sample only decides how fast this is, never the answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dask_hashcodes.distributed.cluster import available_cores
from dask_hashcodes.distributed.graph import as_dask, chunk_reads, map_chunks, row_numbers, tree_reduce
from dask_hashcodes.distributed.progress import compute_with_progress
from dask_hashcodes.errors import InputError
from dask_hashcodes.kernels.l2 import (
    l2_topk,
    partial_distances,
    query_norms,
    relevance_bits,
    select_threshold,
    unpack_relevance,
    window_counts,
    window_members,
)
from dask_hashcodes.kernels.ranking import relevance_from_labels, relevance_from_neighbours
from dask_hashcodes.kernels.topk import topk_merger
from dask_hashcodes.storage.chunkread import ChunkReader, dask_from_reader, write_rows
from dask_hashcodes.views import database_view, view_of

MAX_LISTED_NEIGHBOURS = 10_000  # above: a K-th-neighbour threshold and relevance bits
SAMPLE_ROWS = 131_072  # database rows that place the first windows
WINDOW_SIGMAS = 6.0  # window half-width, in binomial std devs of the sample rank
WINDOW_BINS = 4096
MAX_WINDOW_MEMBERS = 4096  # rows per query collected to the client in the final window
MAX_COUNTING_PASSES = 8


@dataclass
class Truth:
    """Relevance rule for one split: ``kind`` "labels" or "euclidean"."""

    kind: str
    query_labels: np.ndarray | None = None  # (m,) or (m, L)
    labels: np.ndarray | None = None  # labels of every dataset row (for top-k lists)
    neighbours: np.ndarray | None = None  # (m, K) ids
    description: dict | None = None
    relevance: object = None  # ChunkReader of (n, ceil(m / 8)) relevance bits (large K)
    n_queries: int | None = None  # with ``relevance``
    stored: tuple | None = None  # (dataset Location, ground-truth name, fingerprint) of ``neighbours``

    @property
    def as_bits(self) -> bool:
        return self.n_queries is not None

    def database_rows(self, row_chunks: tuple, split_query: np.ndarray):
        """Per-row relevance input of the database, as a dask array chunked like the
        database (the query rows dropped from ``row_chunks``, the dataset's row chunks):
        labels, relevance bits, or None when the truth travels with the tasks (lists)."""
        if self.kind == "labels":
            rows = self.labels
        elif self.as_bits:
            rows = self.relevance
        else:
            return None
        arr = _dask_rows(rows)
        if arr.chunks[0] != tuple(row_chunks):
            arr = arr.rechunk((tuple(row_chunks),) + arr.shape[1:])
        return view_of(arr, split_query).features

    def chunk_relevance(self, ids: np.ndarray, rows_chunk: np.ndarray | None, query_slice=slice(None)) -> np.ndarray:
        """(m, n_chunk) relevance of a database chunk to the queries in ``query_slice``;
        ``rows_chunk`` is the chunk of ``database_rows`` (labels or relevance bits)."""
        if self.kind == "labels":
            return relevance_from_labels(self.query_labels[query_slice], rows_chunk)
        if self.as_bits:
            return unpack_relevance(rows_chunk, self.n_queries, query_slice)
        return relevance_from_neighbours(self.neighbour_lists()[query_slice], ids)

    def neighbour_lists(self) -> np.ndarray:
        """The (m, K) neighbour ids: in memory, or read from the stored ground truth once per
        worker process (chunk tasks get the small ``stored`` reference, not the lists)."""
        if self.neighbours is not None:
            return self.neighbours
        return _stored_neighbours(*self.stored)

    def ids_relevance(self, ids: np.ndarray) -> np.ndarray:
        """(m, k) relevance of ranked result ids (-1 = no result, never relevant)."""
        valid = ids >= 0
        if self.kind == "labels":
            found = self.labels[np.where(valid, ids, 0)]
            if self.labels.ndim == 2:  # multi-hot rows
                rel = (found & self.query_labels[:, None, :]).any(axis=2)
            else:
                rel = found == self.query_labels[:, None]
            return rel & valid
        if self.as_bits:
            return _bits_at(self.relevance, ids, self.n_queries) & valid
        rel = np.zeros(ids.shape, dtype=bool)
        for q in range(ids.shape[0]):
            rel[q] = np.isin(ids[q], self.neighbours[q]) & valid[q]
        return rel

    def for_chunks(self) -> Truth:
        """A copy without the all-rows arrays: what per-chunk tasks need (small). Stored
        neighbour lists (1000 x 1000 ids: 8 MB) are read by the tasks themselves, so they do
        not ride in every evaluation graph."""
        neighbours = None if self.stored is not None else self.neighbours
        return Truth(
            self.kind,
            query_labels=self.query_labels,
            neighbours=neighbours,
            n_queries=self.n_queries,
            stored=self.stored,
        )


_NEIGHBOUR_CACHE: dict = {}  # per process: the stored neighbour lists last read


def _stored_neighbours(location, name: str, fingerprint: str) -> np.ndarray:
    key = (str(location), name, fingerprint)
    if key not in _NEIGHBOUR_CACHE:
        from dask_hashcodes.storage.datasets import open_dataset

        ds = open_dataset(location)
        if ds.groundtruth_fingerprint(name) != fingerprint:
            raise InputError(f"ground truth {name} of {location} changed during the evaluation; run it again")
        _NEIGHBOUR_CACHE.clear()  # one evaluation's lists at a time
        _NEIGHBOUR_CACHE[key] = ds.get_groundtruth(name)[0]
    return _NEIGHBOUR_CACHE[key]


def _dask_rows(rows):

    if isinstance(rows, ChunkReader):
        from dask.base import tokenize

        return dask_from_reader(rows, f"relevance-{tokenize(rows)}")
    return as_dask(rows)


def _bits_at(relevance, ids: np.ndarray, m: int) -> np.ndarray:
    """(queries, k) bool: bit q of relevance row ids[q, i] (ids < 0: False). Reads only the
    distinct rows the ranked lists name (at most queries x k rows of ceil(queries / 8)
    bytes: 125 MB for 1000 x 1000), not the whole bitmap."""
    out = np.zeros(ids.shape, dtype=bool)
    valid = ids >= 0
    unique, inverse = np.unique(np.where(valid, ids, 0), return_inverse=True)
    inverse = inverse.reshape(ids.shape)
    bits = relevance.take(unique)
    byte, shift = np.arange(ids.shape[0]) // 8, np.arange(ids.shape[0]) % 8
    out[:] = (bits[inverse, byte[:, None]] >> shift[:, None]) & 1
    return out & valid


def neighbours_to_k(n_database: int, top_k: int | None, top_percent: float | None) -> int:
    if (top_k is None) == (top_percent is None):
        raise InputError("Euclidean ground truth needs exactly one of `top_k=K` or `top_percent=P`")
    if top_percent is not None:
        if not 0 < top_percent <= 100:
            raise InputError(f"`top_percent` must be in (0, 100]; got {top_percent}")
        return max(1, math.ceil(top_percent / 100.0 * n_database))
    if not 1 <= top_k <= n_database:
        raise InputError(f"`top_k` must be in [1, {n_database}] (the database size); got {top_k}")
    return int(top_k)


def euclidean_neighbours(features, query_vectors: np.ndarray, k: int, ids=None):
    """Exact top-k squared-L2 neighbours over a chunked dask array: per-chunk GEMM top-k,
    tree merge. Returns (ids int64 (m, k), squared distances float64 (m, k))."""
    ids = row_numbers(features) if ids is None else ids
    parts = map_chunks(
        "l2-topk",
        l2_topk,
        list(zip(chunk_reads(features), chunk_reads(ids))),
        queries=np.asarray(query_vectors),
        k=int(k),
    )
    dist, nn = compute_with_progress(tree_reduce("l2-topk-merge", parts, topk_merger(k)))
    return nn, dist


def query_rows(ds, split) -> np.ndarray:
    """The split's query vectors: its own copy when it keeps one, else read from the
    dataset in this process by as many threads as it has cores (random query rows touch
    nearly every chunk of the dataset)."""
    if split.query_features is not None:
        return split.query_features.read_all()
    return ds.features.take(split.query, threads=available_cores())


def euclidean_groundtruth(ds, split, *, top_k=None, top_percent=None, progress=None):
    """Exact neighbour lists of the split's queries among its database, cached in the
    dataset: (ids (m, K), squared distances (m, K), attrs). For K > MAX_LISTED_NEIGHBOURS
    use ``relevance_groundtruth``."""
    k = neighbours_to_k(split.n_database, top_k, top_percent)
    if k > MAX_LISTED_NEIGHBOURS:
        raise InputError(
            f"{k} neighbours per query is over the {MAX_LISTED_NEIGHBOURS} kept as lists; "
            "the evaluation stores it as relevance bits (relevance_groundtruth)"
        )
    name = groundtruth_name(split, k)
    cached = ds.get_groundtruth(name)
    if cached is not None and cached[2].get("query_sha256") == split.manifest["query_sha256"]:
        return cached[0], cached[1], cached[2]
    view = database_view(ds, split)
    nn, dist = euclidean_neighbours(view.features, query_rows(ds, split), k, ids=view.ids)
    ds.put_groundtruth(name, nn, dist, _attrs(split, k, top_percent, "neighbour lists"))
    return nn, dist, ds.get_groundtruth(name)[2]


def groundtruth_name(split, k: int) -> str:
    return f"{split.name}-l2-top{k}"


def _attrs(split, k, top_percent, form) -> dict:
    return {
        "split": split.name,
        "query_sha256": split.manifest["query_sha256"],
        "metric": "squared_l2",
        "k": k,
        "top_percent": top_percent,
        "tie_break": "database id ascending",
        "n_queries": split.n_query,
        "form": form,
    }


# ---------------------------------------------------------------- large K: thresholds ---


def _sum_counts(a, b):
    return a[0] + b[0], np.minimum(a[1], b[1]), np.maximum(a[2], b[2])


def _concat_members(a, b):
    return tuple(np.concatenate([x, y]) for x, y in zip(a, b))


def _keep_rows(ids: np.ndarray, excluded: np.ndarray) -> np.ndarray:
    return ~np.isin(ids, excluded, assume_unique=True)


def _count_task(X, ids, *, excluded, queries, lo, hi):
    return window_counts(X, _keep_rows(ids, excluded), queries=queries, edges=bin_edges(lo, hi))


def _members_task(X, ids, *, excluded, queries, lo, hi):
    return window_members(X, ids, _keep_rows(ids, excluded), queries=queries, lo=lo, hi=hi)


def _mark_task(X, ids, *, excluded, queries, threshold, threshold_id, out):
    """Write the relevance bits of one dataset chunk (its own zarr chunk: no overlap)."""

    bits, per_query = relevance_bits(
        X, ids, _keep_rows(ids, excluded), queries=queries, threshold=threshold, threshold_id=threshold_id
    )
    write_rows(out, slice(int(ids[0]), int(ids[0]) + len(ids)), bits)
    return per_query


def sample_windows(sample: np.ndarray, queries: np.ndarray, k: int, n_database: int):
    """Per query, a [lo, hi) range of partial distances that holds its k-th neighbour among
    n_database rows with overwhelming probability, from its distances to ``sample`` (a
    uniform random sample of the database)."""
    s = len(sample)
    p = k / n_database
    rank = p * s
    half = WINDOW_SIGMAS * np.sqrt(max(s * p * (1 - p), 1.0)) + 1
    r_lo, r_hi = max(int(np.floor(rank - half)), 0), min(int(np.ceil(rank + half)), s - 1)
    lo, hi = np.empty(len(queries)), np.empty(len(queries))
    for start in range(0, len(queries), 64):
        part = np.partition(partial_distances(sample, queries[start : start + 64]), [r_lo, r_hi], axis=1)
        lo[start : start + 64] = part[:, r_lo]
        hi[start : start + 64] = part[:, r_hi]
    return lo, np.maximum(hi, np.nextafter(lo, np.inf))


def bin_edges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    edges = lo[:, None] + (hi - lo)[:, None] * np.linspace(0.0, 1.0, WINDOW_BINS + 1)[None, :]
    edges[:, 0], edges[:, -1] = lo, hi
    return np.maximum.accumulate(edges, axis=1)  # rounding never makes an edge decrease


def kth_neighbour_thresholds(
    X, row_ids, excluded: np.ndarray, queries: np.ndarray, k: int, *, sample: np.ndarray, n_database: int
):
    """Exact (partial distance, id) of every query's k-th nearest non-excluded row, and the
    number of counting passes used. ``X``/``row_ids``: dask arrays of the rows and their ids."""
    chunks = list(zip(chunk_reads(X), chunk_reads(row_ids)))
    m = len(queries)
    lo, hi = sample_windows(sample, queries, k, n_database)
    done = np.zeros(m, bool)
    below = np.zeros(m, np.int64)
    passes = 0
    while not done.all():
        passes += 1
        edges = bin_edges(lo, hi)  # the tasks recompute the same edges from lo, hi (a smaller graph)
        parts = map_chunks("l2-window-counts", _count_task, chunks, excluded=excluded, queries=queries, lo=lo, hi=hi)
        counts, lowest, highest = compute_with_progress(tree_reduce("l2-window-counts-sum", parts, _sum_counts))
        for q in np.flatnonzero(~done):
            cum = np.cumsum(counts[q])
            b = int(np.searchsorted(cum, k))  # first bin where the count reaches k
            if b == 0:
                new_lo, new_hi = lowest[q], edges[q, 0]
            elif b == WINDOW_BINS + 1:
                new_lo, new_hi = edges[q, -1], np.nextafter(highest[q], np.inf)
            else:
                new_lo, new_hi = edges[q, b - 1], edges[q, b]
            lo[q], hi[q] = new_lo, new_hi
            below[q] = cum[b - 1] if b else 0
            indivisible = np.nextafter(new_lo, np.inf) >= new_hi
            done[q] = counts[q, b] <= MAX_WINDOW_MEMBERS or indivisible or passes >= MAX_COUNTING_PASSES
    parts = map_chunks("l2-window-members", _members_task, chunks, excluded=excluded, queries=queries, lo=lo, hi=hi)
    member_q, member_d, member_i = compute_with_progress(
        tree_reduce("l2-window-members-concat", parts, _concat_members)
    )
    need = k - below
    have = np.bincount(member_q, minlength=m)
    if np.any(have < need):  # cannot happen: the window's count was taken in the same way
        raise RuntimeError("ground-truth window lost rows between passes; rerun")
    threshold, threshold_id = select_threshold(member_q, member_d, member_i, need)
    return threshold, threshold_id, passes


def relevance_groundtruth(ds, split, *, top_k=None, top_percent=None):
    """Exact top-K relevance of the split's queries as a threshold per query plus relevance
    bits over the dataset's rows, cached in the dataset: (relevance ChunkReader, thresholds,
    attrs). Any K works; the evaluation uses it for K > MAX_LISTED_NEIGHBOURS."""
    import time

    k = neighbours_to_k(split.n_database, top_k, top_percent)
    name = groundtruth_name(split, k) + "-bits"
    cached = ds.get_relevance_groundtruth(name)
    if cached is not None and cached[2].get("query_sha256") == split.manifest["query_sha256"]:
        return cached
    started = time.perf_counter()
    X = ds.features_dask()
    ids = row_numbers(X)
    queries = query_rows(ds, split)
    rng = np.random.default_rng([int(split.manifest["seed"]), 0x5A])  # the sample sets speed only, not the answer
    picked = np.sort(rng.choice(ds.n, size=min(ds.n, SAMPLE_ROWS + split.n_query), replace=False))
    picked = np.setdiff1d(picked, split.query)[:SAMPLE_ROWS]
    sample = X[picked].compute()
    threshold, threshold_id, passes = kth_neighbour_thresholds(
        X, ids, split.query, queries, k, sample=sample, n_database=split.n_database
    )

    def fill(location):
        parts = map_chunks(
            "l2-relevance-bits",
            _mark_task,
            list(zip(chunk_reads(X), chunk_reads(ids))),
            excluded=split.query,
            queries=queries,
            threshold=threshold,
            threshold_id=threshold_id,
            out=location,
        )
        per_query = compute_with_progress(tree_reduce("l2-relevance-bits-count", parts, np.add))
        if not np.all(per_query == k):  # a self-check: exactly k rows per query at or below the threshold
            raise RuntimeError(
                f"relevance bits hold {per_query.min()}..{per_query.max()} neighbours per query, not {k}"
            )

    thresholds = {"threshold_distance": threshold + query_norms(queries), "threshold_id": threshold_id.astype(np.int64)}
    attrs = _attrs(split, k, top_percent, "relevance bits") | {
        "counting_passes": passes,
        "sample_rows": len(sample),
        "threshold_seconds": round(time.perf_counter() - started, 2),
    }
    ds.put_relevance_groundtruth(name, n_queries=split.n_query, fill=fill, thresholds=thresholds, attrs=attrs)
    return ds.get_relevance_groundtruth(name)


def build_truth(ds, split, *, ground_truth: str | None = None, top_k=None, top_percent=None) -> Truth:
    """The relevance rule of an evaluation: labels by default when the dataset has them."""
    ground_truth = ground_truth or ("labels" if ds.has_labels else "euclidean")
    if ground_truth == "labels":
        if not ds.has_labels:
            raise InputError(
                f"dataset {ds.path} has no labels; use `ground_truth='euclidean'` with `top_k=K` or `top_percent=P`"
            )
        if top_k is not None or top_percent is not None:
            raise InputError("`top_k`/`top_percent` apply to `ground_truth='euclidean'` only")
        labels = ds.labels
        return Truth(
            "labels",
            query_labels=labels[split.query],
            labels=labels,
            description={"kind": "labels", "rule": "relevant iff query and item share at least one label"},
        )
    if ground_truth == "euclidean":
        if top_k is None and top_percent is None:
            top_percent = 2.0  # the seeds' protocol for unlabeled data: top 2 percentile
        k = neighbours_to_k(split.n_database, top_k, top_percent)
        description = {
            "kind": "euclidean",
            "rule": "relevant iff among the exact top-K squared-L2 neighbours (ties by id)",
            "k": k,
            "top_percent": top_percent,
        }
        if k > MAX_LISTED_NEIGHBOURS:
            relevance, _, attrs = relevance_groundtruth(ds, split, top_k=top_k, top_percent=top_percent)
            return Truth(
                "euclidean",
                relevance=relevance,
                n_queries=split.n_query,
                description=description | {"form": attrs["form"]},
            )
        nn, _, attrs = euclidean_groundtruth(ds, split, top_k=top_k, top_percent=top_percent)
        name = groundtruth_name(split, k)
        return Truth(
            "euclidean",
            neighbours=nn,
            description=description | {"form": attrs["form"]},
            stored=(ds.location, name, ds.groundtruth_fingerprint(name)),
        )
    raise InputError(f"unknown `ground_truth` {ground_truth!r}; use labels or euclidean")
