"""Search as composable index objects with FAISS's interface: ``search(queries, k)`` returns
(D, I), ``range_search(queries, radius)`` returns (lims, D, I).

* ``FlatIndex``: the exact Hamming linear scan (search.hamming) over a Codes handle or a
  codes array, optionally leaving out some rows (a split's queries);
* ``MIHIndex``: the same answer through a stored multi-index (search.mih, ``dhash index``);
  ``search.mih.MultiIndex`` (tables kept on the workers) has the same interface;
* ``IVFIndex``: the top-k among the rows of each query's ``nprobe`` nearest lists of a stored
  inverted file (search.ivf, ``dhash index --kind ivf``): approximate, fewer codes compared;
* ``Rerank``: wraps another index, takes its top ``candidates`` and re-ranks them by the
  exact squared L2 to the original vectors (read chunk by chunk where they are stored) or
  by the asymmetric distance of the queries' real projections to the codes.

Results follow FAISS: D (nq, k) distances (int32 Hamming, float64 after re-ranking), I
(nq, k) int64 ids, -1 (and the largest distance) where fewer than k rows exist; ties are
broken by the smaller id. ``range_search`` gives query q's hits as ``I[lims[q]:lims[q+1]]``,
sorted by (distance, id).

Queries are packed codes (uint8 (nq, code_bytes)), vectors (float (nq, d); an index that
needs codes encodes them with its ``model``), or ``Queries`` holding both (the stored codes
of a split's queries and their vectors, as ``dhash search`` uses).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from dhash.distributed.progress import compute_with_progress
from dhash.errors import InputError
from dhash.kernels.rerank import candidate_values
from dhash.search.hamming import _check_codes, knn_search_lazy, lims_of, radius_search
from dhash.search.ivf import ivf_knn_lazy
from dhash.search.mih import index_knn_lazy, index_radius
from dhash.search.plan import MIH, SCAN, faster_exact_search
from dhash.search.rerank import RERANKERS, rerank_lazy
from dhash.storage.codes import Codes
from dhash.views import view_of


@runtime_checkable
class Index(Protocol):
    """What every index offers (FAISS's interface): ``search`` -> (D, I) of the top ``k``,
    ``range_search`` -> (lims, D, I) of every row within ``radius``."""

    def search(self, queries, k: int): ...

    def range_search(self, queries, radius): ...


@dataclass(frozen=True)
class Queries:
    """A batch of queries: their packed ``codes``, their ``vectors``, or both."""

    codes: np.ndarray | None = None
    vectors: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.codes if self.codes is not None else self.vectors)


def as_queries(queries) -> Queries:
    """``queries`` as Queries: uint8 arrays are packed codes, other arrays vectors."""
    if isinstance(queries, Queries):
        return queries
    arr = np.asarray(queries)
    if arr.dtype == np.uint8:
        return Queries(codes=arr)
    if arr.ndim != 2 or arr.dtype.kind not in "fiu":
        raise InputError(
            f"queries must be packed uint8 codes or a 2-D numeric array of vectors; got {arr.dtype} {arr.shape}"
        )
    return Queries(vectors=arr)


def query_codes(queries: Queries, model) -> np.ndarray:
    """The queries' packed codes: given, or encoded by ``model``."""
    if queries.codes is not None:
        return queries.codes
    if model is None:
        raise InputError("these queries are vectors and the index has no model to encode them; give model=")
    return np.asarray(model.encode(queries.vectors))


class _CodesIndex:
    """Shared by the Hamming indexes: the model that encodes vector queries, and the
    FAISS-shaped results computed (with a progress bar on stderr when asked)."""

    model = None

    def search(self, queries, k: int, *, progress: bool = False):
        """(D int32 (nq, k), I int64 (nq, k)) of the exact Hamming top-``k``."""
        return compute_with_progress(self.search_lazy(queries, k), show=progress)

    def range_search(self, queries, radius: int):
        """(lims, D, I): every row within Hamming ``radius``, sorted by (distance, id) per query."""
        codes = query_codes(as_queries(queries), self.model)
        query_index, ids, dist = self._radius(codes, radius)
        return lims_of(query_index, len(codes)), dist, ids


class FlatIndex(_CodesIndex):
    """The exact Hamming linear scan over ``codes`` (a Codes handle, or a numpy/dask array of
    packed codes) minus the rows ``exclude`` (e.g. a split's queries); ids are the codes'
    row numbers. ``model`` encodes vector queries."""

    searched_by = SCAN

    def __init__(self, codes, *, exclude=None, model=None):
        self.codes = codes
        self.model = model
        array = codes.dask() if isinstance(codes, Codes) else codes
        view = view_of(array, exclude)
        self._db, self._ids = view.features, view.ids
        self.ntotal = view.n

    def search_lazy(self, queries, k: int):
        """The delayed (D, I) of ``search``, to compute together with other work."""
        return knn_search_lazy(query_codes(as_queries(queries), self.model), self._db, k, ids=self._ids)

    def _radius(self, codes, radius):
        return radius_search(codes, self._db, radius, ids=self._ids)


class MIHIndex(_CodesIndex):
    """Exact Hamming search through a stored multi-index (the StoredTables of
    storage.mih_index.open_index) over its codes minus the rows ``exclude``: the linear
    scan's answer, fewer codes compared.

    With ``choose`` (the default) each search first times a sample of its queries both
    through the tables and by the linear scan of the same codes on one shard
    (search.plan), and runs by the faster: the answer is the same either way.
    ``searched_by`` names the one the last search used."""

    def __init__(self, tables, *, exclude=None, model=None, choose: bool = True):
        self.tables = tables
        self.model = model
        self.choose = choose
        self._exclude = np.empty(0, np.int64) if exclude is None else np.asarray(exclude, dtype=np.int64)
        self.ntotal = tables.codes.n - len(np.unique(self._exclude))
        self.searched_by = MIH

    def _by_scan(self, codes, **search) -> bool:
        """Whether this search (top-k or radius) runs by the linear scan; sets searched_by."""
        _check_codes(codes, self.tables.codes.reader[:0])  # before the trial runs the kernels on them
        self.searched_by = faster_exact_search(self.tables, codes, **search) if self.choose else MIH
        return self.searched_by == SCAN

    def _scan(self) -> FlatIndex:
        return FlatIndex(self.tables.codes, exclude=self._exclude)

    def search_lazy(self, queries, k: int):
        codes = query_codes(as_queries(queries), self.model)
        if not isinstance(k, (int, np.integer)) or k < 1:
            raise InputError(f"k must be a positive int; got {k!r}")
        if len(codes) and self._by_scan(codes, k=int(k)):
            return self._scan().search_lazy(Queries(codes=codes), k)
        return index_knn_lazy(codes, self.tables, k, excluded_rows=self._exclude)

    def _radius(self, codes, radius):
        if not isinstance(radius, (int, np.integer)) or radius < 0:
            raise InputError(f"radius must be a non-negative int; got {radius!r}")
        if len(codes) and self._by_scan(codes, radius=int(radius)):
            return self._scan()._radius(codes, radius)
        return index_radius(codes, self.tables, radius, excluded_rows=self._exclude)


class IVFIndex(_CodesIndex):
    """Hamming search through a stored inverted file (the StoredLists of
    storage.ivf_index.open_ivf): each query's top-k among the rows of its ``nprobe`` nearest
    lists, the rows ``exclude`` left out. Approximate (a true neighbour in a list not probed
    is missed); exactly the linear scan over the probed lists' rows. The lists are found
    from the query vectors, so queries must carry them (vectors, or ``Queries`` with both)."""

    searched_by = "inverted file"

    def __init__(self, lists, nprobe: int, *, exclude=None, model=None):
        self.lists, self.nprobe, self.model = lists, nprobe, model
        self._exclude = np.empty(0, np.int64) if exclude is None else np.asarray(exclude, dtype=np.int64)
        self.ntotal = lists.codes.n - len(np.unique(self._exclude))

    def search_lazy(self, queries, k: int):
        queries = as_queries(queries)
        if queries.vectors is None:
            raise InputError(
                "an inverted file probes the lists nearest the query vectors; pass vectors (or Queries with vectors)"
            )
        codes = query_codes(queries, self.model)
        return ivf_knn_lazy(codes, queries.vectors, self.lists, k, self.nprobe, excluded_rows=self._exclude)

    def range_search(self, queries, radius):
        raise InputError("an inverted file answers top-k searches; use search(queries, k), or the flat or MIH index")


class Rerank:
    """Re-ranking as a step over another index: ``base``'s Hamming top ``candidates`` of each
    query, re-ranked by ``kind`` and cut to the top k.

    ``kind`` "exact": squared L2 between the query vectors and the original vectors of
    ``source`` (a Dataset handle or a dask array of every row), read chunk by chunk;
    "asymmetric": the queries' real projections (``model.project``) against the codes of
    ``source`` (a Codes handle or a dask array). Queries must carry vectors (``Queries``
    with the stored codes too, or vectors that ``model`` encodes for ``base``)."""

    def __init__(self, kind: str, base, candidates: int, *, source, model=None):
        if kind not in RERANKERS:
            raise InputError(f"unknown re-ranking {kind!r}; choose exact or asymmetric")
        if kind == "asymmetric" and model is None:
            raise InputError("asymmetric re-ranking projects the queries with the model; give model=")
        self.kind, self.base, self.candidates, self.model = kind, base, int(candidates), model
        if hasattr(source, "features_dask"):
            source = source.features_dask()
        elif isinstance(source, Codes):
            source = source.dask()
        self.source = source

    def _query_side(self, queries: Queries):
        if queries.vectors is None:
            raise InputError(f"{self.kind} re-ranking needs the query vectors; pass vectors (or Queries with vectors)")
        vectors = np.asarray(queries.vectors)
        return self.model.project(vectors) if self.kind == "asymmetric" else vectors

    def search_with_hamming(self, queries, k: int, *, progress: bool = False):
        """(D float64 (nq, k) re-ranked distances, I int64 (nq, k), the Hamming distances of I)."""
        if not isinstance(k, (int, np.integer)) or k < 1:
            raise InputError(f"k must be a positive int; got {k!r}")
        if self.candidates < k:
            raise InputError(f"{self.candidates} candidates is below k = {k}: re-ranking keeps k of them; raise R")
        queries = as_queries(queries)
        query_side = self._query_side(queries)  # a model without projections is refused before any search
        if queries.codes is None and self.model is not None:
            queries = Queries(codes=np.asarray(self.model.encode(queries.vectors)), vectors=queries.vectors)
        hamming, candidates = self.base.search(queries, self.candidates, progress=progress)
        lazy = rerank_lazy(self.kind, query_side, self.source, candidates, int(k))
        scores, ranked = compute_with_progress(lazy, show=progress)
        return scores, ranked, candidate_values(candidates, hamming, ranked)

    def search(self, queries, k: int, *, progress: bool = False):
        """(D float64 (nq, k), I int64 (nq, k)) of the re-ranked top ``k``."""
        scores, ranked, _ = self.search_with_hamming(queries, k, progress=progress)
        return scores, ranked

    def range_search(self, queries, radius):
        raise InputError("re-ranking re-ranks a top-k search; use search(queries, k) instead of range_search")
