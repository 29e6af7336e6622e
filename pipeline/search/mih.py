"""Exact Hamming search through multi-index hashing (kernels.mih), over chunked codes on the
cluster: every codes chunk is a shard whose substring tables are built once by an ``mih-build``
task and kept, with the chunk's codes and ids, on the worker that built them; each search
sends the queries to every shard (``mih-topk`` / ``mih-radius`` tasks) and merges the
shards' results exactly like the linear scan (pipeline.search.hamming), so both give the same
answer, ties by id, whatever the chunking.
"""

from __future__ import annotations

import dask
import numpy as np

from pipeline.distributed.graph import chunk_delayeds, map_chunks, tree_reduce
from pipeline.errors import InputError
from pipeline.kernels.mih import build_tables, default_substrings, mih_radius, mih_topk, substring_starts
from pipeline.search.hamming import _aligned, _concat_radius, _merge_pair


class MultiIndex:
    """Substring tables of every chunk of ``codes`` (numpy or dask (n, n_bytes) uint8), kept on
    the workers. ``m`` substrings (default: the paper's b / log2(rows of the largest chunk));
    ``ids`` the id of each row (default: row numbers)."""

    def __init__(self, codes, *, m: int | None = None, ids=None):
        codes, ids = _aligned(codes, ids)
        self.n_bits = 8 * int(codes.shape[1])
        self.m = default_substrings(self.n_bits, max(codes.chunks[0])) if m is None else int(m)
        substring_starts(self.n_bits, self.m)  # a bad m is refused here, not in every task
        self.n_codes = int(codes.shape[0])
        self._code_bytes = int(codes.shape[1])
        code_parts, id_parts = chunk_delayeds(codes), chunk_delayeds(ids)
        tables = map_chunks("mih-build", build_tables, code_parts, self.n_bits, self.m)
        self._shards = list(zip(*dask.persist(code_parts, id_parts, tables), strict=True))

    def _queries(self, query_codes):
        query_codes = np.asarray(query_codes)
        if query_codes.dtype != np.uint8 or query_codes.ndim != 2 or query_codes.shape[1] != self._code_bytes:
            raise InputError(
                f"query codes {query_codes.shape} {query_codes.dtype} do not match the index's "
                f"{self._code_bytes}-byte codes; encode the queries with the model of the indexed codes"
            )
        return query_codes

    def knn_lazy(self, query_codes, k: int):
        """Delayed (distances int32 (m, k), ids int64 (m, k)) of the exact top-k."""
        if not isinstance(k, (int, np.integer)) or k < 1:
            raise InputError(f"k must be a positive int; got {k!r}")
        parts = map_chunks(
            "mih-topk", _topk_shard, self._shards, queries=self._queries(query_codes), k=int(k), n_bits=self.n_bits
        )
        return tree_reduce("mih-topk-merge", parts, _merge_pair(int(k)))

    def knn(self, query_codes, k: int):
        """Exact Hamming top-k: the linear scan's (distances, ids), found through the tables."""
        return dask.compute(self.knn_lazy(query_codes, k))[0]

    def radius(self, query_codes, radius: int):
        """Every code within Hamming ``radius``: flat (query_index, id, distance) sorted by
        (query, distance, id), as pipeline.search.hamming.radius_search."""
        if not isinstance(radius, (int, np.integer)) or radius < 0:
            raise InputError(f"radius must be a non-negative int; got {radius!r}")
        parts = map_chunks(
            "mih-radius", _radius_shard, self._shards, queries=self._queries(query_codes),
            radius=int(radius), n_bits=self.n_bits,
        )  # fmt: skip
        return dask.compute(tree_reduce("mih-radius-merge", parts, _concat_radius))[0]


def _topk_shard(codes, ids, tables, *, queries, k, n_bits):
    return mih_topk(codes, ids, tables, queries=queries, k=k, n_bits=n_bits)


def _radius_shard(codes, ids, tables, *, queries, radius, n_bits):
    return mih_radius(codes, ids, tables, queries=queries, radius=radius, n_bits=n_bits)
