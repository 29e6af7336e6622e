"""An inverted file held in this process's memory, for answering queries one batch at a time
at low latency (a service, a notebook) rather than as a cluster job.

``ServingIVF.load`` reads a stored inverted file (``dhash index --kind ivf``) and its codes
once, regroups every shard's lists into one list-ordered layout, and keeps the codes, 4-byte
row ids (8 above 2**31 rows) and the centroids: ``bytes_per_vector`` says how much. A search
then runs on the calling thread, without Dask: the query's ``nprobe`` nearest lists, the
Hamming top ``candidates`` of their codes, and, when original vectors are given, their exact
squared L2 re-ranking in the same compiled loop (kernels.ivf.search_lists_exact), reading
only the candidates' rows of the vectors. Vectors may be a memory-mapped array
(``np.load(path, mmap_mode="r")``): only those rows are then paged in from disk. Or they
may stay where the dataset stores them (a Dataset handle, or a dask array): the candidates'
rows are then read chunk by chunk, as the cluster's re-ranking reads them (search.rerank),
on this thread; slower per query, and nothing of the dataset is loaded beyond those rows.
Vectors are not counted in ``bytes_per_vector``.

Its answers are the cluster path's (``IVFIndex``, and ``Rerank`` over it): the same probed
lists, the same Hamming top-R with ties by id, the same exact re-ranking.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from dask_hashcodes.errors import InputError, shape_words
from dask_hashcodes.kernels.ivf import probed_lists, search_lists, search_lists_exact
from dask_hashcodes.kernels.knn import neighbour_recall
from dask_hashcodes.kernels.l2 import l2_topk
from dask_hashcodes.indexes.index import top_k_only
from dask_hashcodes.indexes.ivf import CANDIDATES_PER_K, DEFAULT_NPROBE, check_nprobe, check_query_vectors, merged_lists
from dask_hashcodes.indexes.queries import Queries, checked_codes, encoded, with_vectors
from dask_hashcodes.indexes.rerank import rerank_lazy

# the grid ``tune`` tries: probes, and candidates per neighbour asked for
TUNE_NPROBES = (1, 2, 4, 8, 16, 32, 64, 128)
TUNE_CANDIDATES = (10, 15, 20, 30, 50, 100)


@dataclass(frozen=True)
class Tuning:
    """What ``ServingIVF.tune`` chose: the setting now set on the index (``nprobe``,
    ``candidates``), its measured ``recall`` and ``queries_per_second``, whether it ``reached``
    the target recall (when no setting did, the one with the highest recall was kept, so the
    caller decides what to do: longer codes, more lists probed, a lower target), and every
    setting tried (``trials``: {"nprobe", "candidates", "recall", "queries_per_second"},
    fastest first)."""

    nprobe: int
    candidates: int
    recall: float
    queries_per_second: float
    reached: bool
    target: float
    trials: list = field(repr=False)


class ServingIVF:
    """Top-k search through an inverted file loaded in memory (FAISS's interface:
    ``search(vectors, k)`` -> (D, I), the vectors encoded with ``model``; ``search_codes``
    takes Queries holding the codes and the vectors; ``nprobe`` and ``candidates`` are
    attributes, as FAISS's ``nprobe``). With ``vectors``, D is the exact squared L2 (float64) of the
    re-ranked Hamming top ``candidates`` (None: CANDIDATES_PER_K x k); without, the Hamming
    distance (int32). The defaults of ``nprobe`` and ``candidates`` were chosen on
    validation queries for recall@10 of 0.9 (see the documentation's search page)."""

    def __init__(self, centroids, list_codes, list_ids, offsets, *, vectors=None, model=None,
                 nprobe: int = DEFAULT_NPROBE, candidates: int | None = None, location=None):  # fmt: skip
        self.centroids = np.ascontiguousarray(centroids, dtype=np.float32)
        self.list_codes = np.ascontiguousarray(list_codes, dtype=np.uint8)
        self.list_ids = np.ascontiguousarray(list_ids)
        self.offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        if vectors is not None and hasattr(vectors, "features_dask"):  # a Dataset: its rows stay where stored
            vectors = vectors.features_dask()
        self.vectors, self.model, self.location = vectors, model, location
        self.nprobe, self.candidates = nprobe, candidates
        if vectors is not None and (vectors.ndim != 2 or vectors.shape[1] != self.centroids.shape[1]):
            raise InputError(
                f"the vectors ({shape_words(vectors.shape)}) do not have the {self.centroids.shape[1]} features the "
                "inverted file was built on; give the dataset the codes were encoded from"
            )

    @classmethod
    def load(cls, lists, *, vectors=None, exclude=None, model=None, nprobe: int = DEFAULT_NPROBE,
             candidates: int | None = None) -> ServingIVF:  # fmt: skip
        """Load a stored inverted file (the StoredLists of ``open_ivf``) and its codes, the rows
        ``exclude`` (e.g. a split's queries) left out. ``vectors``: the original vectors of
        every row, aligned with the codes, to re-rank by: a numpy array, a memory-mapped one,
        or where they are stored (a Dataset handle or a dask array)."""
        reader = lists.codes.reader
        excluded = np.empty(0, np.int64) if exclude is None else np.unique(np.asarray(exclude, dtype=np.int64))
        readers = (reader, lists.order, lists.offsets)
        list_codes, ids, offsets = merged_lists(readers, lists.n_lists, range(reader.n_chunks), excluded)
        id_type = np.int32 if reader.shape[0] < 2**31 else np.int64
        index = cls(lists.centroids, list_codes, ids.astype(id_type), offsets, vectors=vectors,
                    model=model, nprobe=nprobe, candidates=candidates, location=lists.location)  # fmt: skip
        if index.vectors is not None and index.vectors.shape[0] != reader.shape[0]:
            raise InputError(
                f"{index.vectors.shape[0]} vectors for the {reader.shape[0]} codes at {lists.codes.path}; give the "
                "vectors of every row the codes encode"
            )
        return index

    @property
    def n_lists(self) -> int:
        return len(self.centroids)

    @property
    def ntotal(self) -> int:
        return len(self.list_ids)

    @property
    def code_bytes(self) -> int:
        return int(self.list_codes.shape[1])

    @property
    def bytes_per_vector(self) -> float:
        """Memory held per indexed row: codes, ids, offsets and centroids (not the vectors)."""
        held = self.list_codes.nbytes + self.list_ids.nbytes + self.offsets.nbytes + self.centroids.nbytes
        return held / max(1, self.ntotal)

    def search(self, vectors, k: int):
        """(D (nq, k), I int64 (nq, k)): each query's top k among its nprobe nearest lists,
        re-ranked by exact squared L2 when the index holds vectors; -1 (and inf or -1 in D)
        where the probed lists hold fewer rows. ``vectors`` are encoded with the model."""
        return self.search_codes(encoded(vectors, self.model, self.code_bytes), k)

    def search_codes(self, queries: Queries, k: int):
        """``search`` of ``queries``: Queries holding the codes and the vectors (which find
        the lists, and are re-ranked)."""
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise InputError(f"k must be a positive int; got {k!r}")
        nprobe = check_nprobe(self.nprobe, self.n_lists, self.location)
        codes = checked_codes(queries, self.code_bytes)
        queries = with_vectors(queries, "an inverted file finds each query's lists from its vector, so it")
        vectors = check_query_vectors(queries.vectors, self.centroids.shape[1], self.location)
        probes = probed_lists(vectors, self.centroids, nprobe)
        if self.vectors is None:
            return search_lists(codes, probes, self.list_codes, self.list_ids, self.offsets, int(k))
        candidates = CANDIDATES_PER_K * int(k) if self.candidates is None else int(self.candidates)
        if candidates < k:
            raise InputError(
                f"{candidates} candidates is below k = {k}: re-ranking keeps k of them; raise `candidates`"
            )
        if isinstance(self.vectors, np.ndarray):  # in memory or memory-mapped: the fused loop
            return search_lists_exact(codes, vectors, probes, self.list_codes, self.list_ids, self.offsets,
                                      self.vectors, self.list_ids, candidates, int(k))  # fmt: skip
        # stored vectors: the Hamming top-R here, their rows read chunk by chunk on this thread
        _, shortlist = search_lists(codes, probes, self.list_codes, self.list_ids, self.offsets, candidates)
        return rerank_lazy("exact", vectors, self.vectors, shortlist, int(k)).compute(scheduler="sync")

    def tune(self, vectors, k: int = 10, target: float = 0.9, *, nprobes=TUNE_NPROBES,
             candidates_per_k=TUNE_CANDIDATES):  # fmt: skip
        """Choose ``nprobe`` and ``candidates`` on the caller's validation queries (vectors that
        are not test queries, encoded with the model): the exact Euclidean top-k of each is
        computed here over the indexed rows, then every setting of the grid is timed on this
        thread, and the fastest whose recall@k reaches ``target`` is kept (set on the index);
        when none reaches it, the setting with the highest recall is kept instead. Returns a
        Tuning: the kept setting, whether it reached the target, and every setting tried. Not
        reaching the target is an answer about the data and the codes, not bad input, so it is
        reported in ``Tuning.reached`` rather than raised. Needs the vectors in memory or
        memory-mapped (they are scanned once for the exact neighbours)."""
        return self.tune_codes(encoded(vectors, self.model, self.code_bytes), k, target, nprobes=nprobes,
                               candidates_per_k=candidates_per_k)  # fmt: skip

    def tune_codes(self, queries: Queries, k: int = 10, target: float = 0.9, *, nprobes=TUNE_NPROBES,
                   candidates_per_k=TUNE_CANDIDATES):  # fmt: skip
        """``tune`` on validation ``queries``: Queries holding their codes and vectors; returns
        the same Tuning."""
        if not isinstance(self.vectors, np.ndarray):
            raise InputError(
                "tuning computes the exact neighbours from the vectors; load the index with its vectors as an array"
            )
        if not 0 < target <= 1:
            raise InputError(f"target must be a recall in (0, 1]; got {target!r}")
        codes = checked_codes(queries, self.code_bytes)
        queries = with_vectors(queries, "tuning measures recall against the exact neighbours, so it")
        vectors = check_query_vectors(queries.vectors, self.centroids.shape[1], self.location)
        rows = np.sort(self.list_ids.astype(np.int64))
        _, truth = l2_topk(np.asarray(self.vectors[rows]), rows, queries=vectors, k=int(k))
        queries = Queries(codes=codes, vectors=vectors)
        trials = []
        for nprobe in [p for p in nprobes if p <= self.n_lists]:
            for per_k in candidates_per_k:
                self.nprobe, self.candidates = nprobe, per_k * int(k)
                started = time.perf_counter()
                _, found = self.search_codes(queries, int(k))
                seconds = time.perf_counter() - started
                trials.append({"nprobe": nprobe, "candidates": per_k * int(k), "recall": neighbour_recall(found, truth),
                               "queries_per_second": len(vectors) / seconds})  # fmt: skip
        trials.sort(key=lambda t: -t["queries_per_second"])
        good = [t for t in trials if t["recall"] >= target]
        best = good[0] if good else max(trials, key=lambda t: t["recall"])
        self.nprobe, self.candidates = best["nprobe"], best["candidates"]
        if not good:  # returned, not raised; but a caller that never looks at `reached` is told
            warnings.warn(
                f"no setting reached recall@{k} {target} on these queries; kept the best, recall "
                f"{best['recall']:.3f} with nprobe {best['nprobe']} and {best['candidates']} candidates "
                "(Tuning.reached is False); use longer codes, more lists probed or a lower target",
                UserWarning,
                stacklevel=2,
            )
        return Tuning(**best, reached=bool(good), target=float(target), trials=trials)

    def range_search(self, vectors, radius):
        raise top_k_only("an inverted file")

    def range_search_codes(self, codes, radius):
        raise top_k_only("an inverted file")
