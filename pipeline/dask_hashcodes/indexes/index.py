"""The indexes, every one an ``Index`` (indexes.base: FAISS's members, the query kind said by
the method called, never guessed from a dtype):

* ``FlatIndex``: the exact Hamming linear scan (indexes.hamming) over a Codes handle or a
  codes array, optionally leaving out some rows (a split's queries);
* ``MIHIndex``: the same answer through a stored multi-index (indexes.mih, ``dhash index``);
  ``indexes.mih.MultiIndex`` (tables kept on the workers) is the same over codes in memory;
* ``IVFIndex``: the top-k among the rows of each query's ``nprobe`` nearest lists of an
  inverted file (indexes.ivf, ``dhash index --kind ivf``): approximate, fewer codes
  compared; its lists stored (searched on the cluster) or in memory (InvertedLists,
  searched on the calling thread; ServingIVF);
* ``Rerank``: wraps any index, takes its top ``k_factor`` x k candidates and re-ranks them by
  the exact squared L2 to the original vectors (read chunk by chunk where they are stored)
  or by the asymmetric distance of the queries' real projections to the codes.

Results follow FAISS: D (nq, k) distances (int32 Hamming, float64 after re-ranking), I
(nq, k) int64 ids, -1 (and the largest distance) where fewer than k rows exist; ties are
broken by the smaller id. ``range_search`` gives query q's hits as ``I[lims[q]:lims[q+1]]``,
sorted by (distance, id).
"""

from __future__ import annotations

import numpy as np
from dask import delayed

from dask_hashcodes.distributed.graph import as_dask
from dask_hashcodes.distributed.progress import compute_with_progress
from dask_hashcodes.errors import InputError
from dask_hashcodes.indexes.base import HammingIndex, Index
from dask_hashcodes.indexes.hamming import knn_search_lazy, radius_search
from dask_hashcodes.indexes.ivf import DEFAULT_NPROBE, InvertedLists, ivf_knn_lazy, resident_lists
from dask_hashcodes.indexes.mih import index_knn_lazy, index_radius
from dask_hashcodes.indexes.plan import MIH, SCAN, faster_exact_search, start_early_trial
from dask_hashcodes.indexes.queries import Queries, checked_codes, checked_vectors, with_vectors
from dask_hashcodes.indexes.rerank import K_FACTOR, RERANKERS, rerank_lazy
from dask_hashcodes.kernels.rerank import candidate_values
from dask_hashcodes.storage.codes import Codes
from dask_hashcodes.validation import check_int_param, check_k, check_radius
from dask_hashcodes.views import view_of

__all__ = ["Index", "Queries", "FlatIndex", "MIHIndex", "IVFIndex", "Rerank"]

IVF = "inverted file"


def _excluded(exclude) -> np.ndarray:
    return np.empty(0, np.int64) if exclude is None else np.unique(np.asarray(exclude, dtype=np.int64))


class FlatIndex(HammingIndex):
    """The exact Hamming linear scan over ``codes`` (a Codes handle, or a numpy/dask array of
    packed codes) minus the rows ``exclude`` (e.g. a split's queries); ids are the codes'
    row numbers, or ``ids`` (one per row, aligned with the codes) when given. ``model``
    encodes the vectors ``search`` takes."""

    searched_by = SCAN

    def __init__(self, codes, *, exclude=None, ids=None, model=None):
        self.codes = codes
        self.model = model
        array = codes.dask() if isinstance(codes, Codes) else codes
        if ids is not None and exclude is not None:
            raise InputError("give either ids (the rows to search) or exclude (the rows to leave out), not both")
        view = view_of(array, exclude)
        self._db, self._ids = view.features, view.ids if ids is None else ids
        self.ntotal = view.n

    @property
    def code_size(self) -> int:
        return int(self._db.shape[1])

    def _topk_lazy(self, codes, k):
        return knn_search_lazy(codes, self._db, k, ids=self._ids)

    def _radius(self, codes, radius):
        return radius_search(codes, self._db, radius, ids=self._ids)


class MIHIndex(HammingIndex):
    """Exact Hamming search through a stored multi-index (the StoredTables of
    storage.mih_index.open_index) over its codes minus the rows ``exclude``: the linear
    scan's answer, fewer codes compared. ``model`` encodes the vectors ``search`` takes.

    With ``choose`` (the default) each search first times a sample of its queries both
    through the tables and by the linear scan of the same codes on one shard
    (indexes.plan), and runs by the faster: the answer is the same either way.
    ``searched_by`` names the one the last search used."""

    def __init__(self, tables, *, exclude=None, model=None, choose: bool = True):
        self.tables = tables
        self.model = model
        self.choose = choose
        self._exclude = _excluded(exclude)
        self.ntotal = tables.codes.n - len(self._exclude)
        self.searched_by = MIH
        self._early = None

    @property
    def code_size(self) -> int:
        return self.tables.code_size

    def settings(self) -> dict:
        return {"substrings": self.tables.substrings}

    def expect(self, query_rows, *, k: int | None = None, radius: int | None = None) -> None:
        """The next search's queries are the stored codes at ``query_rows``: its trial starts
        now on a worker, which reads a sample of them, while the caller reads the batch. A
        bad ``k`` or ``radius`` starts nothing: the search itself refuses it in one line."""
        try:
            k, radius = (None if k is None else check_k(k)), (None if radius is None else check_radius(radius))
        except InputError:
            return
        if self.choose:
            self._early = start_early_trial(self.tables, query_rows, k=k, radius=radius)

    def _by_scan(self, codes, **search) -> bool:
        """Whether this search (top-k or radius) runs by the linear scan; sets searched_by."""
        early, self._early = self._early, None
        self.searched_by = faster_exact_search(self.tables, codes, **search, early=early) if self.choose else MIH
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


class IVFIndex(Index):
    """Hamming search through an inverted file: each query's top-k among the rows of its
    ``nprobe`` nearest lists. Approximate (a true neighbour in a list not probed is missed);
    exactly the linear scan over the probed lists' rows. ``lists``: a stored inverted file
    (the StoredLists of storage.ivf_index.open_ivf), searched on the cluster with the rows
    ``exclude`` left out, or InvertedLists in this process's memory (``exclude`` applied
    when they were loaded), searched on the calling thread. The lists are found from the
    query vectors: ``search(vectors, k)`` encodes them with ``model``; ``search_codes``
    takes ``Queries`` holding the codes and the vectors; a quantiser in code space finds
    them from the codes alone (plain codes suffice). ``warm`` (stored lists): the first
    search reads and merges the lists into blocks the workers keep, and every later search of
    the same index in this process uses them without reading storage (``resident()``
    reports what each worker holds, ``release()`` frees them)."""

    searched_by = IVF

    def __init__(self, lists, nprobe: int = DEFAULT_NPROBE, *, exclude=None, model=None, warm: bool = False):
        self.lists, self.nprobe, self.model, self.warm = lists, nprobe, model, warm
        self.needs_query_vectors = lists.quantiser != "codes"
        if isinstance(lists, InvertedLists) and exclude is not None:
            raise InputError("lists in memory leave rows out when loaded: InvertedLists.load(lists, exclude=...)")
        self._exclude = _excluded(exclude)
        self.ntotal = lists.ntotal if self.in_memory else lists.codes.n - len(self._exclude)

    @property
    def in_memory(self) -> bool:
        return isinstance(self.lists, InvertedLists)

    @property
    def code_size(self) -> int:
        return self.lists.code_size

    @property
    def n_lists(self) -> int:
        return self.lists.n_lists

    def settings(self) -> dict:
        return {"n_lists": self.n_lists, "nprobe": self.nprobe}

    def _checked(self, queries, k):
        codes = checked_codes(queries, self.code_size)
        if not self.needs_query_vectors:
            return codes, getattr(queries, "vectors", None), check_k(k)
        queries = with_vectors(queries, "an inverted file finds each query's lists from its vector, so it")
        return codes, queries.vectors, check_k(k)

    def search_codes(self, queries: Queries, k: int, *, progress: bool = False):
        if self.in_memory:  # on the calling thread, no graph: a served query's latency is the search
            return self.lists.search(*self._checked(queries, k), self.nprobe)
        return super().search_codes(queries, k, progress=progress)

    def search_codes_lazy(self, queries: Queries, k: int):
        codes, vectors, k = self._checked(queries, k)
        if self.in_memory:
            return delayed(self.lists.search, pure=True)(codes, vectors, k, self.nprobe)
        return ivf_knn_lazy(codes, vectors, self.lists, k, self.nprobe, excluded_rows=self._exclude, warm=self.warm)

    def resident(self):
        """The blocks of the stored lists held on the workers for warm searches (a
        ResidentBlocks: ``by_worker()`` says what each worker holds), or None when none are."""
        return None if self.in_memory else resident_lists(self.lists, self._exclude, create=False)

    def release(self) -> None:
        """Free the blocks the workers hold for this index's warm searches."""
        held = self.resident()
        if held is not None:
            held.release()

    def reranked_exact(self, queries: Queries, source, candidates: int, k: int):
        if not (self.in_memory and isinstance(source, np.ndarray)):
            return None
        codes, vectors, k = self._checked(queries, k)
        return self.lists.search_exact(codes, vectors, source, k, self.nprobe, candidates)


class Rerank(Index):
    """Re-ranking as a step over any index ``base``: its Hamming top ``k_factor`` x k
    candidates of each query (FAISS's k_factor; ``candidates``: that many whatever k),
    re-ranked by ``kind`` and cut to the top k. ``ntotal``, ``code_size`` and
    ``searched_by`` are the base's.

    ``kind`` "exact": squared L2 between the query vectors and the original vectors of
    ``source`` (a Dataset handle, a dask array of every row read chunk by chunk, or a numpy
    array, memory-mapped or not); "asymmetric": the queries' real projections
    (``model.project``) against the codes of ``source`` (a Codes handle or a dask array).
    ``search(vectors, k)`` encodes the vectors with ``model`` (or the base index's);
    ``search_codes`` takes ``Queries`` holding the codes and the vectors. After a search,
    ``candidate_distances`` holds the base's distances (Hamming) of the results; None when
    the base searched and re-ranked in one pass (``Index.reranked_exact``: an inverted file
    in memory over vectors in memory), which keeps no Hamming distances."""

    needs_query_vectors = True

    def __init__(self, kind: str, base: Index, *, source, k_factor: int = K_FACTOR, candidates: int | None = None,
                 model=None):  # fmt: skip
        if kind not in RERANKERS:
            raise InputError(f"unknown re-ranking {kind!r}; choose exact or asymmetric")
        if kind == "asymmetric" and model is None:
            raise InputError("asymmetric re-ranking projects the queries with the model; give it a `model`")
        self.kind, self.base = kind, base
        self.k_factor = check_int_param(k_factor, "k_factor", "Rerank")
        self.candidates = None if candidates is None else check_int_param(candidates, "candidates", "Rerank")
        self.model = model if model is not None else base.model
        if hasattr(source, "features_dask"):
            source = source.features_dask()
        elif isinstance(source, Codes):
            source = source.dask()
        self.source = source
        self.candidate_distances = None

    @property
    def ntotal(self) -> int:
        return self.base.ntotal

    @property
    def code_size(self) -> int:
        return self.base.code_size

    @property
    def searched_by(self) -> str:
        return self.base.searched_by

    def settings(self) -> dict:
        return {"rerank": self.kind, "k_factor": self.k_factor, "candidates": self.candidates,
                "base": self.base.describe()}  # fmt: skip

    def expect(self, query_rows, *, k: int | None = None, radius: int | None = None) -> None:
        if k is not None and radius is None and (self.candidates is None or self.candidates >= k):
            self.base.expect(query_rows, k=self.candidates_for(k))

    def candidates_for(self, k: int) -> int:
        """The candidates re-ranked for a top ``k``: ``candidates``, or k_factor x k."""
        candidates = self.k_factor * k if self.candidates is None else self.candidates
        if candidates < k:
            raise InputError(
                f"{candidates} candidates is below k = {k}: re-ranking keeps k of them; raise `candidates`"
            )
        return candidates

    def _query_side(self, vectors) -> np.ndarray:
        d = self.source.shape[1] if self.kind == "exact" else self.d
        trained_on = "the re-ranking's source rows have" if self.kind == "exact" else "the model was trained on"
        vectors = checked_vectors(vectors, None if d is None else int(d), trained_on=trained_on)
        return self.model.project(vectors) if self.kind == "asymmetric" else vectors

    def _checked(self, queries, k):
        k = check_k(k)
        candidates = self.candidates_for(k)
        checked_codes(queries, self.code_size)
        queries = with_vectors(queries, f"{self.kind} re-ranking")
        return queries, self._query_side(queries.vectors), candidates, k  # a model without projections is refused first

    def search_codes(self, queries: Queries, k: int, *, progress: bool = False):
        """(D float64 (nq, k), I int64 (nq, k)) of the re-ranked top ``k`` of ``queries``:
        Queries holding the codes and the vectors."""
        queries, query_side, candidates, k = self._checked(queries, k)
        fused = None if self.kind != "exact" else self.base.reranked_exact(queries, self.source, candidates, k)
        if fused is not None:
            scores, ranked = fused
            self.candidate_distances = None
            return scores, ranked
        hamming, shortlist = self.base.search_codes(queries, candidates, progress=progress)
        lazy = rerank_lazy(self.kind, query_side, as_dask(self.source), shortlist, k)
        scores, ranked = compute_with_progress(lazy, show=progress)
        self.candidate_distances = candidate_values(shortlist, hamming, ranked)
        return scores, ranked

    def search_codes_lazy(self, queries, k: int):
        """The delayed re-ranking of ``search_codes``. The base's candidates are found when it
        is called: which chunks the re-ranking reads depends on them."""
        queries, query_side, candidates, k = self._checked(queries, k)
        _, shortlist = self.base.search_codes(queries, candidates)
        return rerank_lazy(self.kind, query_side, as_dask(self.source), shortlist, k)
