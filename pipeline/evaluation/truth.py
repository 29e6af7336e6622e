"""Ground truth: which database items are relevant to each query.

Two rules (PROTOCOLS.md): labels (relevant iff query and item share >= 1 label) or exact
Euclidean neighbours (the top K, or top p% of the database, by squared L2, ties by id),
computed distributed and stored in the dataset so it is computed once per split.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import dask
import numpy as np

from pipeline.distributed.graph import chunk_reads, drop_rows, map_chunks, row_numbers, tree_reduce
from pipeline.errors import InputError
from pipeline.kernels.l2 import l2_topk, merge_l2_topk
from pipeline.kernels.ranking import relevance_from_labels, relevance_from_neighbours


@dataclass
class Truth:
    """Relevance rule for one split: ``kind`` "labels" or "euclidean"."""
    kind: str
    query_labels: np.ndarray | None = None   # (m,) or (m, L)
    labels: np.ndarray | None = None         # labels of every dataset row (for top-k lists)
    neighbours: np.ndarray | None = None     # (m, K) ids
    description: dict | None = None

    def chunk_relevance(self, ids: np.ndarray, labels_chunk: np.ndarray | None, query_slice=slice(None)) -> np.ndarray:
        """(m, n_chunk) relevance of a database chunk to the queries in ``query_slice``."""
        if self.kind == "labels":
            return relevance_from_labels(self.query_labels[query_slice], labels_chunk)
        return relevance_from_neighbours(self.neighbours[query_slice], ids)

    def ids_relevance(self, ids: np.ndarray) -> np.ndarray:
        """(m, k) relevance of ranked result ids (-1 = no result, never relevant)."""
        valid = ids >= 0
        if self.kind == "labels":
            found = self.labels[np.where(valid, ids, 0)]
            if self.labels.ndim == 2:  # multi-hot rows
                rel = (found & self.query_labels[:, None, :]).any(axis=2)
            else:
                rel = found == self.query_labels[:, None]
            return rel & valid
        rel = np.zeros(ids.shape, dtype=bool)
        for q in range(ids.shape[0]):
            rel[q] = np.isin(ids[q], self.neighbours[q]) & valid[q]
        return rel

    def for_chunks(self) -> "Truth":
        """A copy without the all-rows label array: what per-chunk tasks need (small)."""
        return Truth(self.kind, query_labels=self.query_labels, neighbours=self.neighbours)

    def n_relevant(self) -> np.ndarray | None:
        if self.kind == "euclidean":
            return (self.neighbours >= 0).sum(axis=1)
        return None  # counted from the histograms


def neighbours_to_k(n_database: int, top_k: int | None, top_percent: float | None) -> int:
    if (top_k is None) == (top_percent is None):
        raise InputError("Euclidean ground truth needs exactly one of --top-k K or --top-percent P")
    if top_percent is not None:
        if not 0 < top_percent <= 100:
            raise InputError(f"--top-percent must be in (0, 100]; got {top_percent}")
        return max(1, math.ceil(top_percent / 100.0 * n_database))
    if not 1 <= top_k <= n_database:
        raise InputError(f"--top-k must be in [1, {n_database}] (the database size); got {top_k}")
    return int(top_k)


def _merge_pair(k):
    def merge(a, b):
        return merge_l2_topk(a, b, k)
    return merge


def euclidean_neighbours(features, query_vectors: np.ndarray, k: int, ids=None):
    """Exact top-k squared-L2 neighbours over a chunked dask array: per-chunk GEMM top-k,
    tree merge. Returns (ids int64 (m, k), squared distances float64 (m, k))."""
    ids = row_numbers(features) if ids is None else ids
    parts = map_chunks("l2-topk", l2_topk, list(zip(chunk_reads(features), chunk_reads(ids))),
                       queries=np.asarray(query_vectors), k=int(k))
    dist, nn = dask.compute(tree_reduce("l2-topk-merge", parts, _merge_pair(int(k))))[0]
    return nn, dist


def query_rows(ds, split) -> np.ndarray:
    return ds.features.get_orthogonal_selection((split.query, slice(None)))


def euclidean_groundtruth(ds, split, *, top_k=None, top_percent=None, progress=None):
    """Exact neighbours of the split's queries among its database, cached in the dataset."""
    k = neighbours_to_k(split.n_database, top_k, top_percent)
    name = f"{split.name}-l2-top{k}"
    cached = ds.get_groundtruth(name)
    if cached is not None and cached[2].get("query_sha256") == split.manifest["query_sha256"]:
        return cached[0], cached[1], cached[2]
    X = ds.features_dask()
    nn, dist = euclidean_neighbours(drop_rows(X, split.query), query_rows(ds, split), k,
                                    ids=drop_rows(row_numbers(X), split.query))
    attrs = {"split": split.name, "query_sha256": split.manifest["query_sha256"], "metric": "squared_l2",
             "k": k, "top_percent": top_percent, "tie_break": "database id ascending", "n_queries": split.n_query}
    ds.put_groundtruth(name, nn, dist, attrs)
    return nn, dist, ds.get_groundtruth(name)[2]


def build_truth(ds, split, *, ground_truth: str | None = None, top_k=None, top_percent=None) -> Truth:
    """The relevance rule of an evaluation: labels by default when the dataset has them."""
    ground_truth = ground_truth or ("labels" if ds.has_labels else "euclidean")
    if ground_truth == "labels":
        if not ds.has_labels:
            raise InputError(f"dataset {ds.path} has no labels; use --ground-truth euclidean with --top-k K or --top-percent P")
        if top_k is not None or top_percent is not None:
            raise InputError("--top-k/--top-percent apply to --ground-truth euclidean only")
        labels = ds.labels
        return Truth("labels", query_labels=labels[split.query], labels=labels,
                     description={"kind": "labels", "rule": "relevant iff query and item share at least one label"})
    if ground_truth == "euclidean":
        if top_k is None and top_percent is None:
            top_percent = 2.0  # the seeds' protocol for unlabeled data: top 2 percentile
        nn, _, attrs = euclidean_groundtruth(ds, split, top_k=top_k, top_percent=top_percent)
        return Truth("euclidean", neighbours=nn,
                     description={"kind": "euclidean", "rule": "relevant iff among the exact top-K squared-L2 neighbours (ties by id)",
                                  "k": int(attrs["k"]), "top_percent": attrs.get("top_percent")})
    raise InputError(f"unknown --ground-truth {ground_truth!r}; use labels or euclidean")
