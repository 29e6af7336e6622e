"""Recall of the true neighbours for the searches users serve with, beside the evaluation's
ranking metrics: recall@k of each query's exact Euclidean top-k among the k results of

- the Hamming order (the linear scan's top-k);
- the Hamming top-R re-ranked by the exact squared L2 to the original vectors, per R;
- an inverted file (k-means lists on the database features, the Hamming top-R of the
  ``nprobe`` lists nearest the query, re-ranked exactly), per nprobe and R.

Each is an index object (dask_hashcodes.indexes): a FlatIndex over the database codes, a
Rerank over it, and a Rerank over an IVFIndex. The database codes and features stay on the
cluster for the scan and the re-ranking (the candidates' rows are read chunk by chunk); the
inverted file's lists are laid out in memory on the client (InvertedLists) from the database
codes (n x code bytes) and every row's list (n int32), which is what a serving process
holds too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import dask
import numpy as np

from dask_hashcodes.distributed.graph import chunk_delayeds, map_chunks
from dask_hashcodes.errors import InputError
from dask_hashcodes.indexes.index import FlatIndex, IVFIndex, Queries, Rerank
from dask_hashcodes.indexes.ivf import DEFAULT_NPROBE, InvertedLists, default_lists, ivf_quantiser
from dask_hashcodes.kernels.ivf import Projection
from dask_hashcodes.kernels.kmeans import nearest_centres
from dask_hashcodes.kernels.knn import neighbour_recall


def _listed(values) -> str:
    return ", ".join(str(v) for v in values)


@dataclass(frozen=True)
class NeighbourSearches:
    """Which searches to measure: recall@``recall_at``; exact re-ranking of each R in
    ``rerank_candidates``; with ``ivf_lists`` (0: the inverted file default, 4 sqrt(n)), an
    inverted file probed at each of ``ivf_nprobes``. The fields are spelt as the options of
    ``dhash evaluate`` that set them, so its messages name those options."""

    recall_at: int = 10
    rerank_candidates: tuple[int, ...] = (100, 1000)
    ivf_lists: int | None = None
    ivf_nprobes: tuple[int, ...] = field(default=(DEFAULT_NPROBE,))

    def checked(self, n_database: int) -> NeighbourSearches:
        """These settings for a database of ``n_database`` rows (``ivf_lists`` 0 resolved,
        the lists of R and nprobe sorted), refused in one line unless they fit it."""
        k, candidates, nprobes = self.recall_at, self.rerank_candidates, self.ivf_nprobes
        ints = [k, *candidates, *nprobes] + ([] if self.ivf_lists is None else [self.ivf_lists])
        if any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) for v in ints):
            raise InputError(
                f"`recall_at`, `rerank_candidates`, `ivf_lists` and `ivf_nprobes` must be ints; got {_listed(ints)}"
            )
        if not 1 <= k <= n_database:
            raise InputError(f"`recall_at` must lie in [1, {n_database}] (the database rows); got {k}")
        if any(r < k or r > n_database for r in candidates):
            raise InputError(
                f"re-ranking candidates must lie in [k={k}, {n_database}] (the recall's k, the database rows); got "
                f"{_listed(candidates)}; set `rerank_candidates` at or above `recall_at`"
            )
        lists = None if self.ivf_lists is None else self.ivf_lists or default_lists(n_database)
        if lists is not None and not 1 <= lists <= n_database:
            raise InputError(
                f"inverted file lists (`ivf_lists`) must lie in [1, {n_database}] (the database rows); got {lists}"
            )
        if lists is not None and any(not 1 <= p <= lists for p in nprobes):
            raise InputError(
                f"lists probed (`ivf_nprobes`) must lie in [1, {lists}] (the inverted file's lists); got "
                f"{_listed(nprobes)}"
            )
        return NeighbourSearches(k, tuple(sorted(set(candidates))), lists, tuple(sorted(set(nprobes))))

    def protocol(self) -> dict:
        """The settings as the evaluation report records them."""
        return {
            "k": self.recall_at,
            "candidates": list(self.rerank_candidates),
            "ivf_lists": self.ivf_lists,
            "nprobes": list(self.ivf_nprobes),
        }


class NeighbourRecall:
    """The evaluation's measure of the recall of the true neighbours: the checked
    ``searches``, the queries' ``exact`` Euclidean neighbour ids and the evaluation's
    ``seed``. The inverted file's lists depend only on the database features, so they are
    learned once and reused for every method and bit length."""

    def __init__(self, searches: NeighbourSearches, exact: np.ndarray, seed: int):
        self.searches, self.exact, self.seed = searches, exact, seed
        self._lists = None

    def measure(self, features, query_vectors, query_codes, db_features, db_codes, db_ids) -> dict:
        if self.searches.ivf_lists is not None and self._lists is None:
            self._lists = inverted_lists(db_features, self.searches.ivf_lists, self.seed)
        return neighbour_recalls(
            self.searches, self.exact, features, query_vectors, query_codes, db_codes, db_ids, self._lists
        )


def inverted_lists(db_features, n_lists: int, seed: int) -> tuple[np.ndarray, Projection | None, np.ndarray]:
    """(centroids, their projection, each database row's list): the quantiser of
    ``dhash index --kind ivf`` learned on the database features, every row assigned to its
    nearest centroid."""
    centroids, projection = ivf_quantiser(db_features, n_lists, seed=seed)
    assigned = map_chunks(
        "ivf-assign", _assign, chunk_delayeds(db_features), centroids=centroids, projection=projection
    )
    return centroids, projection, np.concatenate(dask.compute(assigned)[0])


def neighbour_recalls(searches: NeighbourSearches, exact, features, query_vectors, query_codes, db_codes, db_ids,
                      lists=None) -> dict:  # fmt: skip
    """recall@k of each search (``searches`` checked), against ``exact`` (m, >= k) ids of the
    queries' Euclidean neighbours. ``features``: every dataset row (dask, the re-ranking's
    source); ``db_codes``, ``db_ids``: the database rows' codes and ids (dask, aligned);
    ``lists``: the inverted file's (centroids, projection, row lists) of ``inverted_lists``."""
    k = searches.recall_at
    queries = Queries(codes=np.asarray(query_codes), vectors=np.asarray(query_vectors))
    scan = FlatIndex(db_codes, ids=db_ids)
    _, hamming = scan.search_codes(queries, k)
    rows = [{"search": "hamming", "recall": neighbour_recall(hamming, exact)}]
    for r in searches.rerank_candidates:
        _, found = Rerank("exact", scan, source=features, candidates=r).search_codes(queries, k)
        rows.append({"search": "rerank", "candidates": r, "recall": neighbour_recall(found, exact)})
    if searches.ivf_lists is not None:
        centroids, projection, assignment = lists
        inverted = InvertedLists.assigned(centroids, *dask.compute(db_codes, db_ids), assignment, projection)
        for nprobe in searches.ivf_nprobes:
            for r in searches.rerank_candidates:
                ivf = Rerank("exact", IVFIndex(inverted, nprobe), source=features, candidates=r)
                _, found = ivf.search_codes(queries, k)
                recall = neighbour_recall(found, exact)
                rows.append({"search": "ivf", "lists": len(centroids), "nprobe": nprobe, "candidates": r,
                             "recall": recall})  # fmt: skip
    return {"k": k, "searches": rows}


def _assign(block, *, centroids, projection):
    return nearest_centres(block, centroids, transform=projection).astype(np.int32)
