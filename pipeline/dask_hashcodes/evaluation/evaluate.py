"""Evaluation protocol: train -> encode -> search -> metrics, for methods x bit lengths.

Training set = database (every row not in the query split), as the DisH protocol. All
database-sized work runs per chunk on the cluster; only histograms (queries x n_bits),
top-k lists and per-query sums reach the client.
"""

from __future__ import annotations

import time

import dask
import numpy as np

from dask_hashcodes.distributed.graph import as_dask, chunk_delayeds, map_chunks, tree_reduce
from dask_hashcodes.errors import InputError
from dask_hashcodes.evaluation.chunk_metrics import chunk_histograms, chunk_precision_sums
from dask_hashcodes.evaluation.truth import Truth
from dask_hashcodes.hashing import HASHERS, make_hasher, method_params
from dask_hashcodes.indexes.hamming import knn_search_lazy
from dask_hashcodes.kernels.ranking import mean_ap, radius_precision_recall, rank_offsets, tie_aware_ap, topk_metrics
from dask_hashcodes.kernels.stats import add
from dask_hashcodes.views import view_of

DEFAULT_KS = (1, 10, 50, 100, 200, 500, 1000)


def _chunks_or_none(x, n):
    return chunk_delayeds(x) if x is not None else [None] * n


def code_metrics(
    query_codes: np.ndarray, db_codes, db_ids, db_truth_rows, truth: Truth, n_bits: int, ks=DEFAULT_KS, db_groups=None
) -> tuple[dict, float]:
    """Every metric of the evaluation protocol (the documentation's evaluation protocol page) for one set of codes. Returns (metrics, search_seconds).
    ``db_truth_rows``: ``truth.database_rows`` (labels or relevance bits per database row,
    or None). Grouped query codes (G, m, n_bytes) with ``db_groups``: group-wise encoders (``Scorer.grouped``)."""
    n_db = db_codes.shape[0]
    ks = sorted({int(k) for k in ks if 1 <= k <= n_db})
    kmax = max(ks)
    nb = db_codes.numblocks[0]
    chunks = list(
        zip(
            chunk_delayeds(db_codes),
            chunk_delayeds(db_ids),
            _chunks_or_none(db_truth_rows, nb),
            _chunks_or_none(db_groups, nb),
        )
    )
    started = time.perf_counter()
    top_d, top_i = dask.compute(knn_search_lazy(query_codes, db_codes, kmax, ids=db_ids, groups=db_groups))[0]
    search_seconds = time.perf_counter() - started

    chunk_truth = truth.for_chunks()
    hists = dask.compute(
        map_chunks("metric-histograms", chunk_histograms, chunks, queries=query_codes, truth=chunk_truth, n_bits=n_bits)
    )[0]
    total = sum(h[0] for h in hists)
    rel = sum(h[1] for h in hists)
    offsets = rank_offsets(hists)
    parts = map_chunks(
        "metric-ap",
        chunk_precision_sums,
        [c + off for c, off in zip(chunks, offsets)],
        queries=query_codes,
        truth=chunk_truth,
    )
    precision_sums = dask.compute(tree_reduce("metric-ap-sum", parts, add))[0]
    n_relevant = rel.sum(axis=1)

    precision, recall, failed = radius_precision_recall(total, rel)
    metrics = {
        "map": float(mean_ap(precision_sums, n_relevant).mean()),
        "map_tie": float(tie_aware_ap(total, rel).mean()),
        **topk_metrics(truth.ids_relevance(top_i), n_relevant, ks),
        "precision@radius2": float(precision[min(2, n_bits)]),
        "failed_queries@radius2": float(failed[min(2, n_bits)]),
        "pr_curve": {
            "radius": list(range(n_bits + 1)),
            "precision": precision.tolist(),
            "recall": recall.tolist(),
            "failed_queries": failed.tolist(),
        },
        "queries_without_relevant": int((n_relevant == 0).sum()),
    }
    return metrics, search_seconds


def score_codes(codes, split_query: np.ndarray, truth: Truth, n_bits: int, ks=DEFAULT_KS) -> tuple[dict, float]:
    """Every metric for codes of all rows of a dataset (numpy or dask, e.g. stored codes
    opened with ``codes_dask``): the split's query rows are ranked against the other rows.
    Returns (metrics, search_seconds)."""
    codes = as_dask(codes)
    query_codes = codes[split_query].compute()
    view = view_of(codes, split_query)
    return code_metrics(
        query_codes, view.features, view.ids, truth.database_rows(codes.chunks[0], split_query), truth, n_bits, ks
    )


def _timing(encode_seconds: float, search_seconds: float) -> dict:
    return {"encode_seconds": round(encode_seconds, 4), "search_seconds": round(search_seconds, 4)}


class Scorer:
    """The evaluation protocol's scoring of one split, handed to a fitted estimator's
    ``evaluation_results`` hook (``dask_hashcodes.hashing.base.Hasher``): however the estimator's codes
    are made, they are ranked by ``code_metrics`` against the same queries, database rows and
    ground truth, and each way returns (metrics, timing). ``view``: the database view
    (features, labels, ids and the split's query rows); ``seed``: the evaluation's seed;
    ``neighbours``: see ``evaluate_method``."""

    def __init__(self, features, view, truth: Truth, n_bits: int, ks, seed: int, *, neighbours=None):
        self.features, self.view, self.truth = features, view, truth
        self.n_bits, self.ks, self.seed = n_bits, ks, seed
        self.neighbours = neighbours

    def _database_truth(self):
        return self.truth.database_rows(self.features.chunks[0], self.view.query)

    def symmetric(self, encoder) -> tuple[dict, dict]:
        """Encode every row with ``encoder``, rank the query codes against the others."""
        started = time.perf_counter()
        codes = encoder.encode(self.features).persist()
        dask.compute(codes.sum())  # materialise: time the encoding alone
        encode_seconds = time.perf_counter() - started
        metrics, search_seconds = score_codes(codes, self.view.query, self.truth, self.n_bits, self.ks)
        if self.neighbours is not None:
            metrics["neighbour_recall"] = self._neighbour_recalls(codes)
        return metrics, _timing(encode_seconds, search_seconds)

    def _neighbour_recalls(self, codes) -> dict:
        query = self.view.query
        database = view_of(codes, query)
        query_vectors = np.asarray(self.features[query].compute(), dtype=np.float64)
        return self.neighbours.measure(
            self.features, query_vectors, np.asarray(codes[query].compute()), self.view.features, database.features,
            database.ids,
        )  # fmt: skip

    def asymmetric(self, encoder, database_codes) -> tuple[dict, dict]:
        """Methods that learn the database's codes directly: ``database_codes`` (aligned with
        the database rows) are ranked against the queries encoded by ``encoder``."""
        started = time.perf_counter()
        query_codes = encoder.encode(np.asarray(self.features[self.view.query].compute()))
        encode_seconds = time.perf_counter() - started
        metrics, search_seconds = code_metrics(
            query_codes, database_codes, self.view.ids, self._database_truth(), self.truth, self.n_bits, self.ks
        )
        return metrics, _timing(encode_seconds, search_seconds)

    def grouped(self, database_codes, groups, encode_queries) -> tuple[dict, dict]:
        """Database rows encoded group by group: ``database_codes`` (lazy, aligned with the
        database rows) and ``groups`` (each database row's group, a dask array); each query is
        ranked in group g by its code ``encode_queries(queries)[g]`` (G, m, n_bytes). The
        database encoding is timed."""
        started = time.perf_counter()
        codes = database_codes.persist()
        dask.compute(codes.sum())
        encode_seconds = time.perf_counter() - started
        query_codes = encode_queries(self.features[self.view.query].compute())
        db_truth_rows = self._database_truth()
        metrics, search_seconds = code_metrics(
            query_codes, codes, self.view.ids, db_truth_rows, self.truth, self.n_bits, self.ks, db_groups=groups
        )
        return metrics, _timing(encode_seconds, search_seconds)

    @staticmethod
    def mean_and_std(runs: list[dict]) -> tuple[dict, dict]:
        """Average the metrics of several runs (e.g. over alternative encoders); std of each scalar."""
        mean = {k: float(np.mean([r[k] for r in runs])) for k, v in runs[0].items() if isinstance(v, float)}
        std = {k: float(np.std([r[k] for r in runs])) for k in mean}
        curve = {k: np.mean([r["pr_curve"][k] for r in runs], axis=0).tolist() for k in runs[0]["pr_curve"]}
        if "neighbour_recall" in runs[0]:
            first = runs[0]["neighbour_recall"]
            searches = [
                {**row, "recall": float(np.mean([r["neighbour_recall"]["searches"][i]["recall"] for r in runs]))}
                for i, row in enumerate(first["searches"])
            ]
            mean["neighbour_recall"] = {**first, "searches": searches}
        return {**runs[0], **mean, "pr_curve": curve}, std


def evaluation_protocol(options: dict | None) -> dict:
    """What a report's protocol records of the evaluation options: every registered method's
    options (``Hasher.evaluation_options``), as given or else their recorded default. An
    option no method declares is refused (a typo would otherwise be ignored)."""
    declared = {name: default for cls in HASHERS.values() for name, default in cls.evaluation_options.items()}
    given = {k: v for k, v in (options or {}).items() if v is not None}
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise InputError(
            f"unknown evaluation option {', '.join(unknown)}; the evaluation options: {', '.join(declared) or 'none'}"
        )
    return {name: given.get(name, default) for name, default in declared.items()}


def evaluate_method(
    features,
    split_query: np.ndarray,
    labels,
    truth: Truth,
    method: str,
    n_bits: int,
    *,
    seed: int,
    ks=DEFAULT_KS,
    params: dict | None = None,
    log=None,
    evaluation_options: dict | None = None,
    neighbours=None,
) -> list[dict]:
    """Train one method on the database rows, encode all rows, rank the query codes.

    Returns report rows: one for most methods; a method scored in several ways gives one row
    per way (its estimator's ``evaluation_results`` hook, which receives the options in
    ``evaluation_options`` that its class declares). ``neighbours``: a NeighbourRecall,
    to measure the recall of the true neighbours of codes every row is encoded into
    (``Scorer.symmetric``).
    """

    features = as_dask(features)
    view = view_of(features, split_query, labels)
    model = make_hasher(method, n_bits, random_state=seed, **method_params(method, params))
    model.fit(view.features, view.labels)  # semi-supervised methods draw their labeled subset here
    train_seconds = model.training_stats_["train_seconds"]  # reused work counted (Hasher.fit)

    base = {
        "method": method,
        "n_bits": int(n_bits),
        "params": model.get_params(),
        "model_id": model.model_id,
        "training": model.training_stats_,
    }
    options = {k: v for k, v in (evaluation_options or {}).items() if k in type(model).evaluation_options}
    scorer = Scorer(features, view, truth, n_bits, ks, seed, neighbours=neighbours)
    rows = []
    for scored in model.evaluation_results(scorer, options):
        label = {} if scored.variant is None else {"label": f"{method} ({scored.variant})"}
        timing = {"train_seconds": round(train_seconds, 4), **scored.timing}
        rows.append({**base, **label, "metrics": scored.metrics, **scored.extras, "timing": timing})
    if log:
        for row in rows:
            log(
                f"{row.get('label', method):>16} {n_bits:>4} bits  map {row['metrics']['map']:.4f}  train {train_seconds:.1f}s"
            )
    return rows
