"""Exact Hamming search through multi-index hashing (kernels.mih), over chunked codes on the
cluster. Every codes chunk is a shard with its own substring tables; each search sends the
queries to every shard (``mih-topk`` / ``mih-radius`` tasks) and merges the shards' results
exactly like the linear scan (indexes.hamming), so both give the same answer, ties by
id, whatever the chunking.

Two forms: ``MultiIndex`` builds the tables of in-memory or dask codes and keeps them on the
workers (repeated searches from a notebook); ``build_index`` writes them beside a codes store
(storage.mih_index, ``dhash index``) and ``index_knn_lazy`` / ``index_radius`` read one shard
per task (``dhash search --index``), leaving out the rows that are not database rows.
"""

from __future__ import annotations

import dask
import numpy as np

from dask_hashcodes.distributed.graph import chunk_delayeds, map_chunks, tree_reduce, write_shards
from dask_hashcodes.errors import InputError
from dask_hashcodes.indexes.base import HammingIndex
from dask_hashcodes.indexes.hamming import aligned, check_query_codes, concat_radius
from dask_hashcodes.indexes.plan import MIH, calibration
from dask_hashcodes.kernels.mih import (
    build_tables,
    default_substrings,
    mih_radius,
    mih_topk,
    substring_starts,
    tables_from_arrays,
)
from dask_hashcodes.kernels.topk import topk_merger
from dask_hashcodes.storage.chunkread import write_rows
from dask_hashcodes.storage.codes import open_codes
from dask_hashcodes.storage.location import resolve
from dask_hashcodes.storage.mih_index import add_index_attrs, create_index_arrays, index_output
from dask_hashcodes.validation import check_k, check_radius


def checked_substrings(n_bits: int, m: int) -> np.ndarray:
    """substring_starts, its refusal as a one-line input error."""
    try:
        return substring_starts(n_bits, m)
    except ValueError as err:
        raise InputError(str(err)) from None


class MultiIndex(HammingIndex):
    """Substring tables of every chunk of ``codes`` (numpy or dask (n, n_bytes) uint8), kept on
    the workers. ``m`` substrings (default: the paper's b / log2(rows of the largest chunk));
    ``ids`` the id of each row (default: row numbers); ``model`` encodes the vectors
    ``search`` takes. The Index interface (indexes.base), range searches included."""

    searched_by = MIH

    def __init__(self, codes, *, m: int | None = None, ids=None, model=None):
        codes, ids = aligned(codes, ids)
        self.model = model
        self.n_bits = 8 * int(codes.shape[1])
        self.m = default_substrings(self.n_bits, max(codes.chunks[0])) if m is None else int(m)
        checked_substrings(self.n_bits, self.m)  # a bad m is refused here, not in every task
        self.ntotal = int(codes.shape[0])
        self._code_size = int(codes.shape[1])
        code_parts, id_parts = chunk_delayeds(codes), chunk_delayeds(ids)
        tables = map_chunks("mih-build", build_tables, code_parts, self.n_bits, self.m)
        self._shards = list(zip(*dask.persist(code_parts, id_parts, tables), strict=True))

    @property
    def code_size(self) -> int:
        return self._code_size

    def settings(self) -> dict:
        return {"substrings": self.m}

    def _topk_lazy(self, codes, k):
        parts = map_chunks("mih-topk", _topk_shard, self._shards, queries=codes, k=k, n_bits=self.n_bits)
        return tree_reduce("mih-topk-merge", parts, topk_merger(k))

    def _radius(self, codes, radius):
        parts = map_chunks("mih-radius", _radius_shard, self._shards, queries=codes, radius=radius, n_bits=self.n_bits)
        return dask.compute(tree_reduce("mih-radius-merge", parts, concat_radius))[0]


def _topk_shard(codes, ids, tables, *, queries, k, n_bits):
    return mih_topk(codes, ids, tables, queries=queries, k=k, n_bits=n_bits)


def _radius_shard(codes, ids, tables, *, queries, radius, n_bits):
    return mih_radius(codes, ids, tables, queries=queries, radius=radius, n_bits=n_bits)


# ------------------------------------------------------------------ stored index ---------


def build_index(codes, out, *, m: int | None = None, overwrite: bool = False, progress=None, storage=None):
    """Write the substring tables of a codes store (a Codes handle or its location) into a new
    index at ``out`` (atomically): one ``mih-build`` task per codes chunk reads the chunk,
    builds its tables and writes its rows of ``order`` and its row of ``offsets``; then one
    ``mih-calibration`` task times both exact searches on the first chunk (indexes.plan), which
    lets later searches the tables would clearly lose skip their trial. Returns (index
    location, m)."""
    codes = open_codes(codes, storage=storage)
    reader = codes.reader
    n_bits = 8 * int(reader.shape[1])
    m = default_substrings(n_bits, reader.chunk_rows) if m is None else int(m)
    starts = checked_substrings(n_bits, m)
    out = resolve(out, storage=storage)
    with index_output(out, overwrite) as tmp:
        create_index_arrays(tmp, codes=codes, starts=starts)
        write_shards(
            "mih-build", _build_shard_into, codes.dask(), reader.shape[0], progress,
            n_bits=n_bits, m=m, chunk_rows=reader.chunk_rows, target=tmp,
        )  # fmt: skip
        timed = dask.delayed(_first_shard_calibration, pure=False)(reader, n_bits, m, dask_key_name="mih-calibration")
        add_index_attrs(tmp, {"calibration": timed.compute()})
    return out, m


def _first_shard_calibration(reader, n_bits: int, m: int) -> dict:
    codes = reader(0)
    return calibration(codes, build_tables(codes, n_bits, m), n_bits, reader.shape[0])


def _build_shard_into(block, shard, *, n_bits, m, chunk_rows, target):
    """One task: the tables of one codes chunk, written as its rows of ``order`` and its row
    of ``offsets`` (offsets < 2^31: a chunk has fewer rows)."""
    tables = build_tables(block, n_bits, m)
    start = shard * chunk_rows
    write_rows(target.child("order"), slice(start, start + len(block)), tables["order"].T.astype(np.int32))
    write_rows(target.child("offsets"), shard, tables["offsets"].astype(np.int32))
    return len(block)


def _stored_shards(codes_reader, excluded_rows):
    """Per shard: (shard number, first row, the shard's rows to leave out)."""
    excluded_rows = np.sort(np.asarray(excluded_rows, dtype=np.int64))
    rows = codes_reader.chunk_rows
    shards = []
    for i in range(codes_reader.n_chunks):
        lo, hi = np.searchsorted(excluded_rows, [i * rows, (i + 1) * rows])
        shards.append((i, i * rows, excluded_rows[lo:hi] - i * rows))
    return shards


def _load_shard(shard, start, excluded, readers):
    codes_reader, order_reader, offsets_reader, starts = readers
    codes = codes_reader(shard)
    tables = tables_from_arrays(starts, order_reader(shard), offsets_reader(shard)[0])
    allowed = None
    if len(excluded):
        allowed = np.ones(len(codes), bool)
        allowed[excluded] = False
    return codes, np.arange(start, start + len(codes), dtype=np.int64), tables, allowed


def _stored_topk(shard, start, excluded, *, readers, queries, k, n_bits):
    codes, ids, tables, allowed = _load_shard(shard, start, excluded, readers)
    return mih_topk(codes, ids, tables, queries=queries, k=k, n_bits=n_bits, allowed=allowed)


def _stored_radius(shard, start, excluded, *, readers, queries, radius, n_bits):
    codes, ids, tables, allowed = _load_shard(shard, start, excluded, readers)
    return mih_radius(codes, ids, tables, queries=queries, radius=radius, n_bits=n_bits, allowed=allowed)


def _stored_tasks(name, fn, query_codes, tables, excluded_rows, **kwargs):
    """One ``name`` task per shard of a stored index (StoredTables), each loading its shard."""
    codes_reader, attrs = tables.codes.reader, tables.attrs
    readers = (codes_reader, tables.order, tables.offsets, np.asarray(attrs["starts"], np.int64))
    return map_chunks(
        name, fn, _stored_shards(codes_reader, excluded_rows), readers=readers,
        queries=check_query_codes(query_codes, codes_reader[:0]), n_bits=int(attrs["n_bits"]), **kwargs,
    )  # fmt: skip


def index_knn_lazy(query_codes, tables, k: int, excluded_rows=()):
    """Delayed exact top-k (distances, ids = row numbers) of ``query_codes`` against every row
    of a codes store except ``excluded_rows``, through its stored index (the StoredTables of
    storage.mih_index.open_index)."""
    k = check_k(k)
    parts = _stored_tasks("mih-topk", _stored_topk, query_codes, tables, excluded_rows, k=k)
    return tree_reduce("mih-topk-merge", parts, topk_merger(k))


def index_radius(query_codes, tables, radius: int, excluded_rows=()):
    """Every row within ``radius`` (flat (query_index, id, distance), sorted), as index_knn_lazy."""
    radius = check_radius(radius)
    parts = _stored_tasks("mih-radius", _stored_radius, query_codes, tables, excluded_rows, radius=radius)
    return dask.compute(tree_reduce("mih-radius-merge", parts, concat_radius))[0]
