"""Evaluation protocol: train -> encode -> search -> metrics, for methods x bit lengths.

Training set = database (every row not in the query split), as the DisH protocol. All
database-sized work runs per chunk on the cluster; only histograms (queries x n_bits),
top-k lists and per-query sums reach the client.
"""

from __future__ import annotations

import time

import dask
import dask.array as da
import numpy as np
from dask.base import tokenize

from dhash.distributed.graph import as_dask, chunk_delayeds, map_chunks, tree_reduce
from dhash.distributed.nodes import node_groups, partition_rows
from dhash.errors import InputError
from dhash.evaluation.chunk_metrics import chunk_histograms, chunk_precision_sums
from dhash.evaluation.truth import Truth
from dhash.hashing import DisH, make_hasher, method_params
from dhash.kernels.codes import encode_linear_grouped
from dhash.kernels.ranking import mean_ap, radius_precision_recall, rank_offsets, tie_aware_ap, topk_metrics
from dhash.kernels.stats import add
from dhash.search.hamming import knn_search_lazy
from dhash.views import view_of

DEFAULT_KS = (1, 10, 50, 100, 200, 500, 1000)


def _chunks_or_none(x, n):
    return chunk_delayeds(x) if x is not None else [None] * n


def code_metrics(
    query_codes: np.ndarray, db_codes, db_ids, db_truth_rows, truth: Truth, n_bits: int, ks=DEFAULT_KS, db_groups=None
) -> tuple[dict, float]:
    """Every metric of the evaluation protocol (README, "Evaluation protocol") for one set of codes. Returns (metrics, search_seconds).
    ``db_truth_rows``: ``truth.database_rows`` (labels or relevance bits per database row,
    or None). Grouped query codes (G, m, n_bytes) with ``db_groups`` evaluate DisH1."""
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


def _score_model(model, features, split_query, truth, n_bits, ks) -> tuple[dict, dict]:
    """Encode every row with ``model``, rank the query codes: (metrics, timing)."""
    started = time.perf_counter()
    codes = model.encode(features).persist()
    dask.compute(codes.sum())  # materialise: time the encoding alone
    encode_seconds = time.perf_counter() - started
    metrics, search_seconds = score_codes(codes, split_query, truth, n_bits, ks)
    return metrics, {"encode_seconds": round(encode_seconds, 4), "search_seconds": round(search_seconds, 4)}


def _score_dish1(model, view, features, truth, n_bits, ks) -> tuple[dict, dict]:
    """DisH1: each node encodes its own rows and the queries with its own dictionary."""

    db_features, split_query = view.features, view.query
    node_rows = partition_rows(
        db_features, model.nodes, model.partition, model.seed_, model.labels_for_fit(view.labels)
    )
    db_groups = node_groups(node_rows, db_features.chunks[0])
    started = time.perf_counter()
    codes = da.map_blocks(
        encode_linear_grouped,
        db_features,
        db_groups[:, None],
        model.mean_,
        model.dictionaries_,
        dtype=np.uint8,
        chunks=(db_features.chunks[0], (model.code_bytes,)),
        name="dish1-encode-" + tokenize(db_features, db_groups, model.model_id),
    ).persist()
    dask.compute(codes.sum())
    encode_seconds = time.perf_counter() - started
    queries = features[split_query].compute()
    query_codes = np.stack([model.with_dictionary(i).encode(queries) for i in range(model.nodes)])
    db_truth_rows = truth.database_rows(features.chunks[0], split_query)
    metrics, search_seconds = code_metrics(
        query_codes, codes, view.ids, db_truth_rows, truth, n_bits, ks, db_groups=db_groups
    )
    return metrics, {"encode_seconds": round(encode_seconds, 4), "search_seconds": round(search_seconds, 4)}


def _score_asymmetric(model, view, features, truth, n_bits, ks) -> tuple[dict, dict]:
    """Methods that learn the database's codes directly (ADSH): the database rows are ranked
    by those codes (``database_codes_``, aligned with the training rows), the queries are
    encoded by the learned hash function."""
    started = time.perf_counter()
    query_codes = model.encode(np.asarray(features[view.query].compute()))
    encode_seconds = time.perf_counter() - started
    db_truth_rows = truth.database_rows(features.chunks[0], view.query)
    metrics, search_seconds = code_metrics(
        query_codes, model.database_codes_, view.ids, db_truth_rows, truth, n_bits, ks
    )
    return metrics, {"encode_seconds": round(encode_seconds, 4), "search_seconds": round(search_seconds, 4)}


def _mean_and_std(runs: list[dict]) -> tuple[dict, dict]:
    """Average the metrics of several runs (DisH2 over dictionaries); std of each scalar."""
    mean = {k: float(np.mean([r[k] for r in runs])) for k, v in runs[0].items() if isinstance(v, float)}
    std = {k: float(np.std([r[k] for r in runs])) for k in mean}
    curve = {k: np.mean([r["pr_curve"][k] for r in runs], axis=0).tolist() for k in runs[0]["pr_curve"]}
    return {**runs[0], **mean, "pr_curve": curve}, std


def dish2_dictionaries(n_nodes: int, count: int | None, seed: int) -> list[int]:
    """Which node dictionaries DisH2 is scored with: all of them (count None, the default:
    mean and std over every choice), or ``count`` nodes drawn with the seed (count 1 is the
    paper's DisH2: one randomly selected node's hash functions encode everything)."""
    if count is None or count >= n_nodes:
        return list(range(n_nodes))
    if count < 1:
        raise InputError(f"--dish2-dictionaries must be a positive number of nodes; got {count}")
    return sorted(np.random.default_rng(seed).choice(n_nodes, count, replace=False).tolist())


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
    dish2_count: int | None = None,
) -> list[dict]:
    """Train one method on the database rows, encode all rows, rank the query codes.

    Returns report rows: one for most methods; DisH with ADMM consensus gives two, DisH2
    (mean and std over node dictionaries, see ``dish2_dictionaries``) and DisH1 (each node
    its own dictionary).
    """

    features = as_dask(features)
    view = view_of(features, split_query, labels)
    model = make_hasher(method, n_bits, random_state=seed, **method_params(method, params))
    started = time.perf_counter()
    model.fit(view.features, view.labels)  # semi-supervised methods draw their labeled subset here
    train_seconds = time.perf_counter() - started

    base = {
        "method": method,
        "n_bits": int(n_bits),
        "params": model.get_params(),
        "model_id": model.model_id,
        "training": model.training_stats_,
    }
    rows = []
    if isinstance(model, DisH) and model.consensus == "admm" and model.nodes > 1:
        chosen = dish2_dictionaries(model.nodes, dish2_count, seed)
        runs = [_score_model(model.with_dictionary(i), features, split_query, truth, n_bits, ks) for i in chosen]
        metrics, std = _mean_and_std([m for m, _ in runs])
        rows.append(
            {
                **base,
                "label": f"{method} (DisH2)",
                "metrics": metrics,
                "metrics_std": std,
                "per_dictionary_map": [m["map"] for m, _ in runs],
                "dictionaries": chosen,
                "timing": {"train_seconds": round(train_seconds, 4), **runs[0][1]},
            }
        )
        metrics, timing = _score_dish1(model, view, features, truth, n_bits, ks)
        rows.append(
            {
                **base,
                "label": f"{method} (DisH1)",
                "metrics": metrics,
                "timing": {"train_seconds": round(train_seconds, 4), **timing},
            }
        )
    else:
        if model.learns_database_codes:
            metrics, timing = _score_asymmetric(model, view, features, truth, n_bits, ks)
        else:
            metrics, timing = _score_model(model, features, split_query, truth, n_bits, ks)
        rows.append({**base, "metrics": metrics, "timing": {"train_seconds": round(train_seconds, 4), **timing}})
    if log:
        for row in rows:
            log(
                f"{row.get('label', method):>16} {n_bits:>4} bits  map {row['metrics']['map']:.4f}  train {train_seconds:.1f}s"
            )
    return rows
