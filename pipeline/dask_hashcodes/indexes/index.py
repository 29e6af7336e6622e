"""Search as composable index objects with FAISS's interface, the kind of query said by the
method called (search.queries), never guessed from a dtype:

* ``search(vectors, k)`` -> (D, I): query vectors (uint8, float16, float32 or float64
  (nq, d)), encoded by the index's ``model``;
* ``search_codes(codes, k)`` -> (D, I): packed query codes (uint8 (nq, code bytes)), or
  ``Queries`` holding the codes and their vectors (an inverted file and re-ranking need both);
* ``range_search(vectors, radius)`` / ``range_search_codes(codes, radius)`` -> (lims, D, I)
  where a range search is defined (the exact Hamming indexes); the others refuse it;
* ``search_lazy`` / ``search_codes_lazy``: the delayed (D, I), to compute with other work.

The indexes:

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
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from dask_hashcodes.distributed.progress import compute_with_progress
from dask_hashcodes.errors import InputError
from dask_hashcodes.kernels.rerank import candidate_values
from dask_hashcodes.indexes.hamming import knn_search_lazy, lims_of, radius_search
from dask_hashcodes.indexes.ivf import ivf_knn_lazy
from dask_hashcodes.indexes.mih import index_knn_lazy, index_radius
from dask_hashcodes.indexes.plan import MIH, SCAN, faster_exact_search
from dask_hashcodes.indexes.queries import Queries, checked_codes, checked_vectors, encoded, with_vectors
from dask_hashcodes.indexes.rerank import RERANKERS, rerank_lazy
from dask_hashcodes.storage.codes import Codes
from dask_hashcodes.views import view_of

__all__ = ["Index", "Queries", "FlatIndex", "MIHIndex", "IVFIndex", "Rerank"]


@runtime_checkable
class Index(Protocol):
    """What every index offers (FAISS's interface, the query kind said by the method):
    ``search(vectors, k)`` and ``search_codes(codes, k)`` -> (D, I) of the top ``k``;
    ``range_search(vectors, radius)`` and ``range_search_codes(codes, radius)`` -> (lims, D,
    I) of every row within ``radius`` (refused by the indexes that only answer top-k)."""

    def search(self, vectors, k: int): ...

    def search_codes(self, codes, k: int): ...

    def range_search(self, vectors, radius): ...

    def range_search_codes(self, codes, radius): ...


def _check_k(k) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise InputError(f"k must be a positive int; got {k!r}")
    return int(k)


def _check_radius(radius) -> int:
    if isinstance(radius, bool) or not isinstance(radius, (int, np.integer)) or radius < 0:
        raise InputError(f"radius must be a non-negative int; got {radius!r}")
    return int(radius)


def top_k_only(what: str) -> InputError:
    """The refusal of a range search by an index that answers top-k searches only."""
    return InputError(
        f"{what} answers top-k searches only: call search(vectors, k) or search_codes(queries, k), or range-search "
        "a FlatIndex or MIHIndex"
    )


class _CodesIndex:
    """Shared by the exact Hamming indexes: the model that encodes query vectors, and the
    FAISS-shaped results computed (with a progress bar on stderr when asked)."""

    model = None

    @property
    def code_bytes(self) -> int:  # pragma: no cover - each index defines it
        raise NotImplementedError

    def search(self, vectors, k: int, *, progress: bool = False):
        """(D int32 (nq, k), I int64 (nq, k)) of the exact Hamming top-``k`` of ``vectors``
        encoded by the index's model."""
        return compute_with_progress(self.search_lazy(vectors, k), show=progress)

    def search_codes(self, codes, k: int, *, progress: bool = False):
        """(D int32 (nq, k), I int64 (nq, k)) of the exact Hamming top-``k`` of packed
        ``codes`` (or the codes of a Queries value)."""
        return compute_with_progress(self.search_codes_lazy(codes, k), show=progress)

    def search_lazy(self, vectors, k: int):
        """The delayed (D, I) of ``search``, to compute together with other work."""
        return self.search_codes_lazy(encoded(vectors, self.model, self.code_bytes).codes, k)

    def search_codes_lazy(self, codes, k: int):
        """The delayed (D, I) of ``search_codes``, to compute together with other work."""
        return self._topk_lazy(checked_codes(codes, self.code_bytes), _check_k(k))

    def range_search(self, vectors, radius: int):
        """(lims, D, I): every row within Hamming ``radius`` of ``vectors`` encoded by the
        index's model, sorted by (distance, id) per query."""
        return self.range_search_codes(encoded(vectors, self.model, self.code_bytes).codes, radius)

    def range_search_codes(self, codes, radius: int):
        """(lims, D, I): every row within Hamming ``radius`` of packed ``codes``, sorted by
        (distance, id) per query."""
        codes = checked_codes(codes, self.code_bytes)
        query_index, ids, dist = self._radius(codes, _check_radius(radius))
        return lims_of(query_index, len(codes)), dist, ids


class FlatIndex(_CodesIndex):
    """The exact Hamming linear scan over ``codes`` (a Codes handle, or a numpy/dask array of
    packed codes) minus the rows ``exclude`` (e.g. a split's queries); ids are the codes'
    row numbers. ``model`` encodes the vectors ``search`` takes."""

    searched_by = SCAN

    def __init__(self, codes, *, exclude=None, model=None):
        self.codes = codes
        self.model = model
        array = codes.dask() if isinstance(codes, Codes) else codes
        view = view_of(array, exclude)
        self._db, self._ids = view.features, view.ids
        self.ntotal = view.n

    @property
    def code_bytes(self) -> int:
        return int(self._db.shape[1])

    def _topk_lazy(self, codes, k):
        return knn_search_lazy(codes, self._db, k, ids=self._ids)

    def _radius(self, codes, radius):
        return radius_search(codes, self._db, radius, ids=self._ids)


class MIHIndex(_CodesIndex):
    """Exact Hamming search through a stored multi-index (the StoredTables of
    storage.mih_index.open_index) over its codes minus the rows ``exclude``: the linear
    scan's answer, fewer codes compared. ``model`` encodes the vectors ``search`` takes.

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

    @property
    def code_bytes(self) -> int:
        return int(self.tables.codes.reader.shape[1])

    def _by_scan(self, codes, **search) -> bool:
        """Whether this search (top-k or radius) runs by the linear scan; sets searched_by."""
        self.searched_by = faster_exact_search(self.tables, codes, **search) if self.choose else MIH
        return self.searched_by == SCAN

    def _scan(self) -> FlatIndex:
        return FlatIndex(self.tables.codes, exclude=self._exclude)

    def _topk_lazy(self, codes, k):
        if len(codes) and self._by_scan(codes, k=k):
            return self._scan()._topk_lazy(codes, k)
        return index_knn_lazy(codes, self.tables, k, excluded_rows=self._exclude)

    def _radius(self, codes, radius):
        if len(codes) and self._by_scan(codes, radius=radius):
            return self._scan()._radius(codes, radius)
        return index_radius(codes, self.tables, radius, excluded_rows=self._exclude)


class IVFIndex:
    """Hamming search through a stored inverted file (the StoredLists of
    storage.ivf_index.open_ivf): each query's top-k among the rows of its ``nprobe`` nearest
    lists, the rows ``exclude`` left out. Approximate (a true neighbour in a list not probed
    is missed); exactly the linear scan over the probed lists' rows. The lists are found
    from the query vectors: ``search(vectors, k)`` encodes them with ``model``;
    ``search_codes`` takes ``Queries`` holding the codes and the vectors."""

    searched_by = "inverted file"

    def __init__(self, lists, nprobe: int, *, exclude=None, model=None):
        self.lists, self.nprobe, self.model = lists, nprobe, model
        self._exclude = np.empty(0, np.int64) if exclude is None else np.asarray(exclude, dtype=np.int64)
        self.ntotal = lists.codes.n - len(np.unique(self._exclude))

    @property
    def code_bytes(self) -> int:
        return int(self.lists.codes.reader.shape[1])

    def search(self, vectors, k: int, *, progress: bool = False):
        """(D int32 (nq, k), I int64 (nq, k)): the Hamming top-``k`` of the probed lists of
        ``vectors``, encoded by the index's model."""
        return compute_with_progress(self.search_lazy(vectors, k), show=progress)

    def search_codes(self, queries: Queries, k: int, *, progress: bool = False):
        """(D int32 (nq, k), I int64 (nq, k)) of ``queries``: Queries holding the codes and
        the vectors (which find the lists)."""
        return compute_with_progress(self.search_codes_lazy(queries, k), show=progress)

    def search_lazy(self, vectors, k: int):
        """The delayed (D, I) of ``search``."""
        return self.search_codes_lazy(encoded(vectors, self.model, self.code_bytes), k)

    def search_codes_lazy(self, queries: Queries, k: int):
        """The delayed (D, I) of ``search_codes``."""
        codes = checked_codes(queries, self.code_bytes)
        queries = with_vectors(queries, "an inverted file finds each query's lists from its vector, so it")
        return ivf_knn_lazy(codes, queries.vectors, self.lists, k, self.nprobe, excluded_rows=self._exclude)

    def range_search(self, vectors, radius):
        raise top_k_only("an inverted file")

    def range_search_codes(self, codes, radius):
        raise top_k_only("an inverted file")


class Rerank:
    """Re-ranking as a step over another index: ``base``'s Hamming top ``candidates`` of each
    query, re-ranked by ``kind`` and cut to the top k.

    ``kind`` "exact": squared L2 between the query vectors and the original vectors of
    ``source`` (a Dataset handle or a dask array of every row), read chunk by chunk;
    "asymmetric": the queries' real projections (``model.project``) against the codes of
    ``source`` (a Codes handle or a dask array). ``search(vectors, k)`` encodes the vectors
    with ``model`` (or the base index's); ``search_codes`` takes ``Queries`` holding the
    codes and the vectors."""

    def __init__(self, kind: str, base, candidates: int, *, source, model=None):
        if kind not in RERANKERS:
            raise InputError(f"unknown re-ranking {kind!r}; choose exact or asymmetric")
        if kind == "asymmetric" and model is None:
            raise InputError("asymmetric re-ranking projects the queries with the model; give it a `model`")
        self.kind, self.base, self.candidates, self.model = kind, base, int(candidates), model
        if hasattr(source, "features_dask"):
            source = source.features_dask()
        elif isinstance(source, Codes):
            source = source.dask()
        self.source = source

    @property
    def code_bytes(self) -> int:
        return self.base.code_bytes

    def _query_side(self, vectors) -> np.ndarray:
        d = self.source.shape[1] if self.kind == "exact" else getattr(self.model, "n_features_in_", None)
        trained_on = "the re-ranking's source rows have" if self.kind == "exact" else "the model was trained on"
        vectors = checked_vectors(vectors, None if d is None else int(d), trained_on=trained_on)
        return self.model.project(vectors) if self.kind == "asymmetric" else vectors

    def search_codes_with_hamming(self, queries: Queries, k: int, *, progress: bool = False):
        """(D float64 (nq, k) re-ranked distances, I int64 (nq, k), the Hamming distances of I)
        of ``queries``: Queries holding the codes and the vectors."""
        k = _check_k(k)
        if self.candidates < k:
            raise InputError(
                f"{self.candidates} candidates is below k = {k}: re-ranking keeps k of them; raise `candidates`"
            )
        checked_codes(queries, self.code_bytes)
        queries = with_vectors(queries, f"{self.kind} re-ranking")
        query_side = self._query_side(queries.vectors)  # a model without projections is refused before any search
        hamming, candidates = self.base.search_codes(queries, self.candidates, progress=progress)
        lazy = rerank_lazy(self.kind, query_side, self.source, candidates, k)
        scores, ranked = compute_with_progress(lazy, show=progress)
        return scores, ranked, candidate_values(candidates, hamming, ranked)

    def search(self, vectors, k: int, *, progress: bool = False):
        """(D float64 (nq, k), I int64 (nq, k)) of the re-ranked top ``k`` of ``vectors``,
        encoded by the model (or the base index's)."""
        model = self.model if self.model is not None else getattr(self.base, "model", None)
        return self.search_codes(encoded(vectors, model, self.code_bytes), k, progress=progress)

    def search_codes(self, queries: Queries, k: int, *, progress: bool = False):
        """(D float64 (nq, k), I int64 (nq, k)) of the re-ranked top ``k`` of ``queries``:
        Queries holding the codes and the vectors."""
        scores, ranked, _ = self.search_codes_with_hamming(queries, k, progress=progress)
        return scores, ranked

    def range_search(self, vectors, radius):
        raise top_k_only("re-ranking")

    def range_search_codes(self, codes, radius):
        raise top_k_only("re-ranking")
