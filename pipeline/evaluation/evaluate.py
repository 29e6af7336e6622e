"""Evaluation protocol: train -> encode -> search -> metrics, for methods x bit lengths.

Training set = database (every row not in the query split), as the DisH protocol. All
database-sized work runs per chunk on the cluster; only histograms (queries x n_bits),
top-k lists and per-query sums reach the client.
"""
from __future__ import annotations

import time

import dask
import numpy as np

from pipeline.distributed.graph import as_dask, chunk_delayeds, drop_rows, map_chunks, row_numbers, tree_reduce
from pipeline.evaluation.chunk_metrics import chunk_histograms, chunk_precision_sums
from pipeline.evaluation.truth import Truth
from pipeline.hashing import make_hasher
from pipeline.kernels.ranking import (mean_ap, radius_precision_recall, rank_offsets, tie_aware_ap,
                                      topk_metrics)
from pipeline.search.hamming import knn_search_lazy

DEFAULT_KS = (1, 10, 50, 100, 200, 500, 1000)


def _add(a, b):
    return a + b


def code_metrics(query_codes: np.ndarray, db_codes, db_ids, db_labels, truth: Truth, n_bits: int,
                 ks=DEFAULT_KS) -> tuple[dict, float]:
    """Every metric of PROTOCOLS.md for one set of codes. Returns (metrics, search_seconds)."""
    n_db = db_codes.shape[0]
    ks = sorted({int(k) for k in ks if 1 <= k <= n_db})
    kmax = max(ks)
    chunks = [(c, i, lab) for c, i, lab in zip(chunk_delayeds(db_codes), chunk_delayeds(db_ids),
                                                chunk_delayeds(db_labels) if db_labels is not None
                                                else [None] * db_codes.numblocks[0])]
    started = time.perf_counter()
    top_d, top_i = dask.compute(knn_search_lazy(query_codes, db_codes, kmax, ids=db_ids))[0]
    search_seconds = time.perf_counter() - started

    chunk_truth = truth.for_chunks()
    hists = dask.compute(map_chunks("metric-histograms", chunk_histograms, chunks,
                                    queries=query_codes, truth=chunk_truth, n_bits=n_bits))[0]
    total = sum(h[0] for h in hists)
    rel = sum(h[1] for h in hists)
    offsets = rank_offsets(hists)
    parts = map_chunks("metric-ap", chunk_precision_sums,
                       [c + off for c, off in zip(chunks, offsets)], queries=query_codes, truth=chunk_truth)
    precision_sums = dask.compute(tree_reduce("metric-ap-sum", parts, _add))[0]
    n_relevant = rel.sum(axis=1)

    precision, recall, failed = radius_precision_recall(total, rel)
    metrics = {
        "map": float(mean_ap(precision_sums, n_relevant).mean()),
        "map_tie": float(tie_aware_ap(total, rel).mean()),
        **topk_metrics(truth.ids_relevance(top_i), n_relevant, ks),
        "precision@radius2": float(precision[min(2, n_bits)]),
        "failed_queries@radius2": float(failed[min(2, n_bits)]),
        "pr_curve": {"radius": list(range(n_bits + 1)), "precision": precision.tolist(),
                     "recall": recall.tolist(), "failed_queries": failed.tolist()},
        "queries_without_relevant": int((n_relevant == 0).sum()),
    }
    return metrics, search_seconds


def evaluate_method(features, split_query: np.ndarray, labels, truth: Truth, method: str, n_bits: int,
                    *, seed: int, ks=DEFAULT_KS, params: dict | None = None, log=None) -> dict:
    """Train one method on the database rows, encode all rows, rank the query codes."""
    features = as_dask(features)
    db_features = drop_rows(features, split_query)
    model = make_hasher(method, n_bits, random_state=seed, **(params or {}))
    started = time.perf_counter()
    model.fit(db_features)
    train_seconds = time.perf_counter() - started

    started = time.perf_counter()
    codes = model.encode(features).persist()
    dask.compute(codes.sum())  # materialise: time the encoding alone
    encode_seconds = time.perf_counter() - started
    query_codes = codes[split_query].compute()
    db_codes = drop_rows(codes, split_query)
    db_ids = drop_rows(row_numbers(features), split_query)
    db_labels = None
    if labels is not None:
        db_labels = drop_rows(as_dask(labels).rechunk((features.chunks[0],) + labels.shape[1:]), split_query)
    metrics, search_seconds = code_metrics(query_codes, db_codes, db_ids, db_labels, truth, n_bits, ks)
    if log:
        log(f"{method:>6} {n_bits:>4} bits  map {metrics['map']:.4f}  train {train_seconds:.1f}s")
    return {"method": method, "n_bits": int(n_bits), "params": model.get_params(), "model_id": model.model_id,
            "metrics": metrics, "training": model.training_stats_,
            "timing": {"train_seconds": round(train_seconds, 4), "encode_seconds": round(encode_seconds, 4),
                       "search_seconds": round(search_seconds, 4)}}


def run_evaluation(ds, *, methods, bits, n_queries: int, seed: int, out=None, ground_truth=None,
                   top_k=None, top_percent=None, ks=DEFAULT_KS, split_name: str | None = None, log=None) -> dict:
    """The whole protocol on a dataset; writes a report directory when ``out`` is given."""
    from pipeline.distributed.cluster import cluster_shape
    from pipeline.evaluation.report import build_report, write_report
    from pipeline.evaluation.truth import build_truth
    from pipeline.storage.datasets import dataset_summary
    split = ds.make_split(n_queries, seed, name=split_name or f"q{n_queries}-s{seed}")
    truth = build_truth(ds, split, ground_truth=ground_truth, top_k=top_k, top_percent=top_percent)
    features, labels = ds.features_dask(), ds.labels
    results = [evaluate_method(features, split.query, labels, truth, method, b, seed=seed, ks=ks, log=log)
               for b in bits for method in methods]
    report = build_report(dataset=dataset_summary(ds), split=split.manifest, truth=truth.description,
                          results=results, cluster=cluster_shape(),
                          protocol={"seed": seed, "n_queries": n_queries, "methods": list(methods),
                                    "bits": list(bits), "ks": sorted(ks), "train_set": "database"})
    if out is not None:
        write_report(out, report)
    return report
