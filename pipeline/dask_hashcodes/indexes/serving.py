"""An inverted file held in this process's memory, for answering queries one batch at a time
at low latency (a service, a notebook) rather than as a cluster job.

``ServingIVF.load`` reads a stored inverted file (``dhash index --kind ivf``) and its codes
once into InvertedLists (indexes.ivf: every shard's lists regrouped into one list-ordered
layout): the codes, 4-byte row ids (8 above 2**31 rows) and the centroids;
``bytes_per_vector`` says how much. A ServingIVF is an IVFIndex over those lists: a search
runs on the calling thread, without Dask: the query's ``nprobe`` nearest lists and the
Hamming top-k of their codes. Given the original vectors, it re-ranks through a Rerank
over itself: the Hamming top ``k_factor`` x k, re-ranked by exact squared L2. Vectors in
memory or memory-mapped (``np.load(path, mmap_mode="r")``) are re-ranked in the same
compiled loop as the search (kernels.ivf.search_lists_exact), which pages in only the
candidates' rows; vectors left where the dataset stores them (a Dataset handle, or a dask
array) are read chunk by chunk, only the chunks holding candidates, as the cluster's
re-ranking reads them (indexes.rerank). Vectors are not counted in ``bytes_per_vector``.

Its answers are the cluster path's (``IVFIndex`` over the stored lists, and ``Rerank`` over
it): the same probed lists, the same Hamming top-R with ties by id, the same re-ranking.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from dask_hashcodes.errors import InputError, shape_words
from dask_hashcodes.indexes.index import IVFIndex, Rerank
from dask_hashcodes.indexes.ivf import DEFAULT_NPROBE, InvertedLists, check_query_vectors
from dask_hashcodes.indexes.queries import Queries, checked_codes, with_vectors
from dask_hashcodes.indexes.rerank import K_FACTOR
from dask_hashcodes.kernels.knn import neighbour_recall
from dask_hashcodes.kernels.l2 import l2_topk

# the grid ``tune`` tries: probes, and candidates per neighbour asked for (k_factor)
TUNE_NPROBES = (1, 2, 4, 8, 16, 32, 64, 128)
TUNE_K_FACTORS = (10, 15, 20, 30, 50, 100)


@dataclass(frozen=True)
class Tuning:
    """What ``ServingIVF.tune`` chose: the setting now set on the index (``nprobe``,
    ``k_factor``; ``candidates``, the k_factor x k re-ranked), its measured ``recall`` and ``queries_per_second``, whether it ``reached``
    the target recall (when no setting did, the one with the highest recall was kept, so the
    caller decides what to do: longer codes, more lists probed, a lower target), and every
    setting tried (``trials``: {"nprobe", "k_factor", "candidates", "recall",
    "queries_per_second"}, fastest first)."""

    nprobe: int
    k_factor: int
    candidates: int
    recall: float
    queries_per_second: float
    reached: bool
    target: float
    trials: list = field(repr=False)


class ServingIVF(IVFIndex):
    """An IVFIndex whose lists (InvertedLists) are in this process's memory, searched on the
    calling thread (FAISS's interface: ``search(vectors, k)`` -> (D, I), the vectors encoded
    with ``model``; ``search_codes`` takes Queries holding the codes and the vectors;
    ``nprobe`` and ``k_factor`` are attributes, as FAISS's). With ``vectors`` (the original
    vectors of every row, aligned with the codes), a search is a Rerank over the lists: D
    is the exact squared L2 (float64) of the re-ranked Hamming top ``k_factor`` x k (or
    ``candidates``, when set); without, the Hamming distance (int32). The defaults of
    ``nprobe`` and ``k_factor`` were chosen on validation queries for recall@10 of 0.9 (see
    the documentation's search page)."""

    def __init__(self, lists: InvertedLists, *, vectors=None, model=None, nprobe: int = DEFAULT_NPROBE,
                 k_factor: int = K_FACTOR, candidates: int | None = None):  # fmt: skip
        super().__init__(lists, nprobe, model=model)
        if vectors is not None and hasattr(vectors, "features_dask"):  # a Dataset: its rows stay where stored
            vectors = vectors.features_dask()
        d = lists.d
        if vectors is not None and (vectors.ndim != 2 or vectors.shape[1] != d):
            raise InputError(
                f"the vectors ({shape_words(vectors.shape)}) do not have the {d} features the inverted file was "
                "built on; give the dataset the codes were encoded from"
            )
        self.vectors, self.k_factor, self.candidates = vectors, k_factor, candidates

    @classmethod
    def load(cls, lists, *, vectors=None, exclude=None, model=None, nprobe: int = DEFAULT_NPROBE,
             k_factor: int = K_FACTOR, candidates: int | None = None) -> ServingIVF:  # fmt: skip
        """Load a stored inverted file (the StoredLists of ``open_ivf``) and its codes, the rows
        ``exclude`` (e.g. a split's queries) left out. ``vectors``: the original vectors of
        every row, aligned with the codes, to re-rank by: a numpy array, a memory-mapped one,
        or where they are stored (a Dataset handle or a dask array)."""
        index = cls(InvertedLists.load(lists, exclude), vectors=vectors, model=model, nprobe=nprobe,
                    k_factor=k_factor, candidates=candidates)  # fmt: skip
        n = lists.codes.reader.shape[0]
        if index.vectors is not None and index.vectors.shape[0] != n:
            raise InputError(
                f"{index.vectors.shape[0]} vectors for the {n} codes at {lists.codes.path}; give the vectors of "
                "every row the codes encode"
            )
        return index

    @property
    def bytes_per_vector(self) -> float:
        """Memory held per indexed row: codes, ids, offsets and centroids (not the vectors)."""
        return self.lists.nbytes / max(1, self.ntotal)

    def settings(self) -> dict:
        reranked = {} if self.vectors is None else {"rerank": "exact", "k_factor": self.k_factor,
                                                     "candidates": self.candidates}  # fmt: skip
        return {**super().settings(), **reranked}

    def reranking(self) -> Rerank:
        """The exact re-ranking of this index's Hamming candidates by its vectors."""
        hamming = IVFIndex(self.lists, self.nprobe, model=self.model)
        return Rerank("exact", hamming, source=self.vectors, k_factor=self.k_factor, candidates=self.candidates)

    def search_codes(self, queries: Queries, k: int, *, progress: bool = False):
        """(D, I) of ``queries``: Queries holding the codes and the vectors (which find the
        lists, and are re-ranked when the index holds vectors)."""
        if self.vectors is None:
            return super().search_codes(queries, k, progress=progress)
        return self.reranking().search_codes(queries, k, progress=progress)

    def search_codes_lazy(self, queries: Queries, k: int):
        if self.vectors is None:
            return super().search_codes_lazy(queries, k)
        return self.reranking().search_codes_lazy(queries, k)

    def tune(self, vectors, k: int = 10, target: float = 0.9, *, nprobes=TUNE_NPROBES,
             k_factors=TUNE_K_FACTORS):  # fmt: skip
        """Choose ``nprobe`` and ``k_factor`` on the caller's validation queries (vectors that
        are not test queries, encoded with the model): the exact Euclidean top-k of each is
        computed here over the indexed rows, then every setting of the grid is timed on this
        thread, and the fastest whose recall@k reaches ``target`` is kept (set on the index);
        when none reaches it, the setting with the highest recall is kept instead. Returns a
        Tuning: the kept setting, whether it reached the target, and every setting tried. Not
        reaching the target is an answer about the data and the codes, not bad input, so it is
        reported in ``Tuning.reached`` rather than raised. Needs the vectors in memory or
        memory-mapped (they are scanned once for the exact neighbours)."""
        return self.tune_codes(self.encode(vectors), k, target, nprobes=nprobes, k_factors=k_factors)

    def tune_codes(self, queries: Queries, k: int = 10, target: float = 0.9, *, nprobes=TUNE_NPROBES,
                   k_factors=TUNE_K_FACTORS):  # fmt: skip
        """``tune`` on validation ``queries``: Queries holding their codes and vectors; returns
        the same Tuning."""
        if not isinstance(self.vectors, np.ndarray):
            raise InputError(
                "tuning computes the exact neighbours from the vectors; load the index with its vectors as an array"
            )
        if not 0 < target <= 1:
            raise InputError(f"target must be a recall in (0, 1]; got {target!r}")
        codes = checked_codes(queries, self.code_size)
        queries = with_vectors(queries, "tuning measures recall against the exact neighbours, so it")
        vectors = check_query_vectors(queries.vectors, self.lists.d, self.lists.location)
        rows = np.sort(self.lists.list_ids.astype(np.int64))
        _, truth = l2_topk(np.asarray(self.vectors[rows]), rows, queries=vectors, k=int(k))
        queries = Queries(codes=codes, vectors=vectors)
        trials = []
        for nprobe in [p for p in nprobes if p <= self.n_lists]:
            for k_factor in k_factors:
                self.nprobe, self.k_factor, self.candidates = nprobe, k_factor, None
                started = time.perf_counter()
                _, found = self.search_codes(queries, int(k))
                seconds = time.perf_counter() - started
                trials.append({"nprobe": nprobe, "k_factor": k_factor, "candidates": k_factor * int(k),
                               "recall": neighbour_recall(found, truth),
                               "queries_per_second": len(vectors) / seconds})  # fmt: skip
        best, reached = kept_setting(trials, k, target, ("nprobe", "k_factor"), "Tuning",
                                     "use longer codes, more lists probed or a lower target")  # fmt: skip
        self.nprobe, self.k_factor = best["nprobe"], best["k_factor"]
        return Tuning(**best, reached=reached, target=float(target), trials=trials)


def kept_setting(trials: list, k: int, target: float, knobs: tuple, tuning: str, advice: str) -> tuple[dict, bool]:
    """(the setting a tune keeps, whether it reached ``target``): the fastest of ``trials``
    ({knobs..., "recall", "queries_per_second"}, sorted here fastest first) whose recall
    reaches the target, else the one of highest recall. Not reaching it is an answer about the
    data, returned rather than raised; a caller that never looks at ``reached`` is told by a
    UserWarning naming the kept ``knobs`` and ``advice``."""
    trials.sort(key=lambda t: -t["queries_per_second"])
    good = [t for t in trials if t["recall"] >= target]
    best = good[0] if good else max(trials, key=lambda t: t["recall"])
    if not good:
        kept = " and ".join(f"{knob} {best[knob]}" for knob in knobs)
        warnings.warn(
            f"no setting reached recall@{k} {target} on these queries; kept the best, recall {best['recall']:.3f} "
            f"with {kept} ({tuning}.reached is False); {advice}",
            UserWarning,
            stacklevel=3,
        )
    return best, bool(good)
