"""Re-ranking the Hamming top-R of each query on the cluster (kernels.rerank does the math).

The candidates' rows are read where they are stored, chunk by chunk: each chunk that holds
candidates becomes one ``rerank-exact`` (original vectors) or ``rerank-asymmetric``
(codes) task, which reads that chunk, keeps only the candidate rows, scores its (query,
candidate) pairs and returns each query's top-k among them; a tree of merges gives the
final top-k. Chunks without candidates are not read; the client holds the candidate lists
(m x R ids) and the m x k results, never rows of data.
"""

from __future__ import annotations

import numpy as np
from dask import delayed

from dask_hashcodes.distributed.graph import InlineRead, chunk_reads, map_chunks, row_bounds, take_rows, tree_reduce
from dask_hashcodes.errors import InputError
from dask_hashcodes.kernels.rerank import exact_pair_distances, lower_bound_pair_distances, pairs_topk
from dask_hashcodes.kernels.topk import topk_merger
from dask_hashcodes.validation import DEFAULT_K

RERANKERS = {"exact": exact_pair_distances, "asymmetric": lower_bound_pair_distances}
# FAISS's k_factor: Hamming candidates re-ranked per neighbour asked for (300 for a top-10), the
# default of every re-ranking search (Rerank, ServingIVF, `dhash search --rerank`), chosen on
# validation queries as the documentation's search page tells
K_FACTOR = 30


def check_rerank(rerank: str | None, candidates: int | None, k: int | None, radius: int | None = None) -> int | None:
    """The number of Hamming candidates R to re-rank the top ``k`` (default 100) from (None: no
    re-ranking; not given: ``K_FACTOR`` x k, FAISS's k_factor); one-line
    errors for options that do not go together. Needs no data: the command line calls it
    before any cluster starts."""
    if radius is not None and rerank is not None:
        raise InputError("`rerank` re-ranks a top-k search; use `k` instead of `radius`")
    k = DEFAULT_K if k is None else k
    if rerank is None:
        if candidates is not None:
            raise InputError(
                "`candidates` only applies when `rerank` is exact or asymmetric; add `rerank` or drop `candidates`"
            )
        return None
    if rerank not in RERANKERS:
        raise InputError(f"unknown re-ranking {rerank!r}; choose exact or asymmetric")
    candidates = K_FACTOR * k if candidates is None else int(candidates)
    if candidates < k:
        raise InputError(
            f"`candidates` {candidates} is below `k` {k}: re-ranking keeps the top k of the candidates; raise `candidates` to k or more"
        )
    return candidates


def _rerank_chunk(block, chunk_start, rows, query_index, row_index, *, score, query_side, n_queries, k):
    """``rows``: the candidate rows' ids; ``block``: those rows, or (``chunk_start`` not None:
    an in-memory array's chunk) the whole chunk, whose first row is ``chunk_start``."""
    if chunk_start is not None:  # keep only the candidate rows
        block = take_rows(block, rows - chunk_start)
    ids = rows[row_index]
    return pairs_topk(query_index, ids, score(query_side, block, query_index, row_index), n_queries, k)


def rerank_lazy(kind: str, query_side: np.ndarray, source, candidate_ids: np.ndarray, k: int):
    """Delayed (distances float64 (m, k), ids int64 (m, k)) of the candidates re-ranked.

    ``kind`` "exact": ``query_side`` holds the query vectors and ``source`` (a dask array of
    every dataset row) the features; "asymmetric": the queries' real projections and the
    codes. ``candidate_ids`` (m, R) are rows of ``source``, -1 for none."""
    m = candidate_ids.shape[0]
    query_index, ids = np.nonzero(candidate_ids >= 0)[0], candidate_ids[candidate_ids >= 0]
    bounds = row_bounds(source)
    chunk_of = np.searchsorted(bounds, ids, side="right") - 1
    order = np.argsort(chunk_of, kind="stable")
    cuts = np.searchsorted(chunk_of[order], np.arange(len(bounds)))
    reads = chunk_reads(source)
    chunks = []
    for c in range(len(bounds) - 1):
        picked = order[cuts[c] : cuts[c + 1]]
        if len(picked) == 0:
            continue  # no candidate lives in this chunk: it is not read
        rows, row_index = np.unique(ids[picked], return_inverse=True)
        read, chunk_start = reads[c], int(bounds[c])
        if isinstance(read, InlineRead):  # the task reads the chunk and keeps only these rows
            read, chunk_start = read.with_rows(rows - bounds[c]), None
        # int32 pair lists: every (query, candidate) pair rides in the graph once (8 bytes)
        chunks.append((read, chunk_start, rows, query_index[picked].astype(np.int32), row_index.astype(np.int32)))
    if not chunks:  # no query has a candidate
        return delayed(pairs_topk, pure=True)(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), m, k)
    parts = map_chunks(
        f"rerank-{kind}",
        _rerank_chunk,
        chunks,
        score=RERANKERS[kind],
        query_side=np.asarray(query_side),
        n_queries=m,
        k=int(k),
    )
    return tree_reduce(f"rerank-{kind}-merge", parts, topk_merger(k))
