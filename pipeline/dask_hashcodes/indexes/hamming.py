"""Exact Hamming search over chunked codes: per-chunk top-k (or radius hits), then merge.

Results follow FAISS: distances int32 (m, k), ids int64 (m, k), -1 where fewer than k
codes exist; ties are broken by the smaller id, so every chunking gives the same answer.
"""

from __future__ import annotations

import dask
import numpy as np

from dask_hashcodes.distributed.graph import (
    as_dask,
    chunk_delayeds,
    chunk_reads,
    map_chunks,
    merged_row_chunks,
    row_numbers,
    tree_reduce,
)
from dask_hashcodes.errors import InputError, shape_words
from dask_hashcodes.indexes.queries import width_words
from dask_hashcodes.kernels.hamming import hamming_radius, hamming_topk, sort_radius_results
from dask_hashcodes.kernels.topk import topk_merger
from dask_hashcodes.validation import check_k, check_radius


def check_query_codes(query_codes, codes):
    """Packed query codes as a numpy array, refused in one line unless they are uint8 codes
    as wide as the database ``codes`` (grouped (G, nq, bytes) query codes: each group)."""
    query_codes = np.asarray(query_codes)
    if query_codes.ndim == 3 and getattr(codes, "ndim", 0) == 2:  # grouped (DisH1) query codes
        check_query_codes(query_codes[0], codes)
        return query_codes
    if query_codes.dtype != np.uint8 or getattr(codes, "dtype", None) != np.uint8:
        raise InputError(
            f"codes must be packed uint8 arrays (got {query_codes.dtype} queries and "
            f"{getattr(codes, 'dtype', None)} database codes); encode with a hasher's encode()"
        )
    if query_codes.ndim != 2 or codes.ndim != 2:
        raise InputError(
            f"query codes ({shape_words(query_codes.shape)}) and database codes ({shape_words(codes.shape)}) must "
            "both be 2-D arrays of packed codes, one row per code"
        )
    if query_codes.shape[1] != codes.shape[1]:
        width = query_codes.shape[1]
        raise InputError(
            f"query codes are {width} byte{'' if width == 1 else 's'} ({8 * width} bits) wide but the database "
            f"holds {width_words(codes.shape[1])} codes; encode both with the same model"
        )
    return query_codes


def aligned(codes, ids, *, task_bytes: int = 0):
    """(codes, ids) as dask arrays chunked alike (ids: the row numbers when None); with
    ``task_bytes``, consecutive stored chunks merged until each holds about that many bytes
    of codes."""
    codes = as_dask(codes, chunk_rows=1 << 20)
    if task_bytes:
        codes = merged_row_chunks(codes, task_bytes)
    ids = row_numbers(codes) if ids is None else as_dask(ids).rechunk((codes.chunks[0],))
    return codes, ids


# codes per scan task (1M 64-bit codes): a task's top-k limit tightens as it scans and starts
# again at the full code width in the next task; at storage's 1 MB chunks those fresh starts
# are a large part of a scan's time
SCAN_TASK_BYTES = 8 << 20


def knn_search_lazy(query_codes, codes, k: int, ids=None, groups=None):
    """Delayed (distances, ids) of the exact top-k; compute it together with other work.
    ``groups`` (dask, aligned with codes) picks the query encoding per code for grouped
    (G, m, n_bytes) query codes (DisH1)."""
    query_codes, k = check_query_codes(query_codes, codes), check_k(k)
    codes, ids = aligned(codes, ids, task_bytes=SCAN_TASK_BYTES)
    if groups is not None:
        groups = as_dask(groups).rechunk((codes.chunks[0],))
    group_chunks = chunk_delayeds(groups) if groups is not None else [None] * codes.numblocks[0]
    parts = map_chunks(
        "hamming-topk",
        hamming_topk,
        list(zip(chunk_reads(codes), chunk_reads(ids), group_chunks)),
        k=k,
        queries=query_codes,
    )
    return tree_reduce("hamming-topk-merge", parts, topk_merger(k))


def knn_search(query_codes, codes, k: int, ids=None):
    """Exact Hamming top-k: (distances int32 (m, k), ids int64 (m, k)).

    ``codes`` is a numpy or dask array (n, n_bytes) uint8; ``ids`` the id of each row
    (default: row numbers).
    """
    return dask.compute(knn_search_lazy(query_codes, codes, k, ids))[0]


def _radius_chunk(codes, ids, *, queries, radius):
    return hamming_radius(queries, codes, ids, radius)


def concat_radius(a, b):
    """Two flat radius results (query_index, id, distance) as one, sorted."""
    return sort_radius_results(*(np.concatenate([x, y]) for x, y in zip(a, b)))


def radius_search(query_codes, codes, radius: int, ids=None):
    """All codes within Hamming ``radius``: flat arrays (query_index, id, distance) sorted by
    (query, distance, id) — the shape of FAISS's range_search results, flattened."""
    query_codes, radius = check_query_codes(query_codes, codes), check_radius(radius)
    codes, ids = aligned(codes, ids)
    parts = map_chunks(
        "hamming-radius",
        _radius_chunk,
        list(zip(chunk_reads(codes), chunk_reads(ids))),
        queries=query_codes,
        radius=radius,
    )
    return dask.compute(tree_reduce("hamming-radius-merge", parts, concat_radius))[0]


def lims_of(query_index: np.ndarray, n_queries: int) -> np.ndarray:
    """FAISS's range-search ``lims`` (n_queries + 1) of flat hits sorted by query: query q's
    hits are ``lims[q]:lims[q + 1]``."""
    return np.searchsorted(np.asarray(query_index), np.arange(n_queries + 1)).astype(np.int64)


def flat_hits(lims: np.ndarray) -> np.ndarray:
    """The query index of every hit of a (lims, D, I) range result (the inverse of lims_of)."""
    return np.repeat(np.arange(len(lims) - 1, dtype=np.int64), np.diff(lims))
