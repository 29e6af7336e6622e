"""The jobs as functions: what ``dhash COMMAND``, ``dhash run`` steps and notebooks call.

Each function takes objects or locations (paths or URLs) and returns objects, runs its
Dask work on the current client (``dhash.connect()`` starts or joins a cluster), and
prints nothing: progress bars go to stderr when ``progress=True``, and decisions worth
knowing (a checkpoint resumed or discarded) go to the ``pipeline`` logger.

    from dhash import connect, workflows
    connect()
    ds = workflows.synth("sift", "data/s.zarr", n=100_000)
    workflows.split(ds, queries=1000)
    model = workflows.train(ds, "itq", "models/itq32", bits=32, split="default")
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dhash.data.ingest import ingest
from dhash.data.sources import fashion_mnist_available, resolve_dataset
from dhash.data.synth import write_sift_synth
from dhash.distributed.cluster import cluster_shape
from dhash.distributed.encode import all_rows_codes, encode_to_zarr, write_codes
from dhash.distributed.progress import compute_with_progress
from dhash.errors import InputError
from dhash.evaluation.evaluate import DEFAULT_KS, evaluate_method
from dhash.evaluation.report import build_report, has_mac_path, write_report
from dhash.evaluation.truth import build_truth, query_rows
from dhash.hashing import METHOD_NAMES, Hasher, check_params_used, load_model, make_hasher, method_params
from dhash.hashing.checkpoint import CheckpointTarget, checkpoint_path, dataset_identity, live_writer
from dhash.kernels.rerank import candidate_values
from dhash.search.hamming import knn_search_lazy, radius_search
from dhash.search.mih import build_index, index_knn_lazy, index_radius
from dhash.search.rerank import check_rerank, rerank_lazy
from dhash.storage.atomic import remove_artifact
from dhash.storage.codes import codes_dask, open_codes
from dhash.storage.datasets import Dataset, dataset_summary, write_dataset_like
from dhash.storage.mih_index import open_index
from dhash.storage.results import write_knn_results, write_radius_results
from dhash.views import database_view

__all__ = [
    "Encoded",
    "Searched",
    "dataset",
    "demo",
    "encode",
    "evaluate",
    "groundtruth",
    "head",
    "ingest",
    "search",
    "split",
    "synth",
    "train",
]
log = logging.getLogger(__name__)


def _show(progress: bool):

    return lambda tasks: compute_with_progress(tasks, show=progress)


def dataset(
    name_or_path, *, n: int | None = None, seed: int = 0, chunk_rows: int | None = None, progress: bool = False
) -> Dataset:
    """A Dataset object as given, a dataset location opened, or a built-in source
    (``fashion-mnist``, ``sift-synth`` of ``n`` rows, ``debian-minilm``: its first ``n`` rows
    when ``n`` is given) materialised once in the data
    directory and opened."""
    if isinstance(name_or_path, Dataset):
        return name_or_path

    return resolve_dataset(str(name_or_path), n=n, seed=seed, chunk_rows=chunk_rows, progress=progress)


# ------------------------------------------------------------------ data ---------------
# ingest(source, out, ...): a file (path or URL) or fashion-mnist into a dataset (data/ingest.py)


def synth(
    kind: str,
    out,
    *,
    n: int = 1_000_000,
    seed: int = 0,
    chunk_rows: int | None = None,
    overwrite: bool = False,
    progress: bool = False,
) -> Dataset:
    """Generate a synthetic dataset chunk-parallel on the cluster (``kind``: ``sift``)."""

    if kind != "sift":
        raise InputError(f"unknown synthetic kind {kind!r}; use sift")
    return write_sift_synth(out, n, seed=seed, chunk_rows=chunk_rows, overwrite=overwrite, progress=_show(progress))


def head(dataset_, n: int, out, *, chunk_rows: int | None = None, overwrite: bool = False) -> Dataset:
    """The first ``n`` rows (and labels) of a dataset as a dataset of their own at ``out``
    (read through memory: meant for subsets of a few hundred MB, e.g. a quick notebook run)."""

    ds = dataset(dataset_)
    if n >= ds.n:
        return ds
    labels = None if ds.labels is None else ds.labels[:n]
    rows = [ds.features_dask()[:n].compute()]
    return write_dataset_like(ds, out, rows, n=n, labels=labels, chunk_rows=chunk_rows, overwrite=overwrite)


def split(dataset_, *, queries: int = 1000, seed: int = 0, name: str = "default", overwrite: bool = False):
    """Draw a seeded query/database split and store it in the dataset; returns the Split."""
    return dataset(dataset_).make_split(queries, seed, name=name, overwrite=overwrite)


def groundtruth(dataset_, *, split: str = "default", top_k: int | None = None, top_percent: float | None = None):
    """Exact Euclidean neighbours of a split's queries, computed once and stored in the
    dataset; returns the Truth."""
    ds = dataset(dataset_)
    return build_truth(ds, ds.get_split(split), ground_truth="euclidean", top_k=top_k, top_percent=top_percent)


# ------------------------------------------------------------------ models -------------


def _check_checkpoint(ckpt, *, resume: bool, overwrite: bool) -> None:
    """A checkpoint beside the model output: another live run's is refused; an interrupted
    run's is resumed with ``resume``, discarded with ``overwrite``, else refused."""

    writer = live_writer(ckpt)
    if writer is not None:
        raise InputError(
            f"another training run (pid {writer['pid']}) is writing {ckpt}; wait for it or train into another --out"
        )
    if resume:
        return
    if not overwrite:
        raise InputError(
            f"{ckpt} holds the state of an interrupted training run; pass --resume to continue it, "
            "or --overwrite to start over"
        )
    remove_artifact(ckpt, kind="checkpoint")  # only a checkpoint dhash wrote whole
    log.warning("train: removed the interrupted run's checkpoint %s (--overwrite); training starts over", ckpt)


def train(
    dataset_,
    method: str,
    out=None,
    *,
    bits: int = 32,
    seed: int = 0,
    split: str | None = None,
    params: dict | None = None,
    overwrite: bool = False,
    resume: bool = False,
    codes=None,
) -> Hasher:
    """Learn ``method``'s hash functions on the dataset's rows (the database rows of
    ``split`` when given) and, with ``out``, save the model there. Iterative methods save a
    checkpoint beside ``out`` after every iteration; ``resume`` continues it. Methods that
    learn the database's codes (adsh) write them to the codes store ``codes``: every row of
    the dataset, the split's query rows encoded by the learned hash function."""

    ds = dataset(dataset_)
    check_params_used([method], params)
    model = make_hasher(method, bits, random_state=seed, **method_params(method, params))
    if model.learns_database_codes and codes is None:
        raise InputError(
            f"{method} learns the database's codes; give --codes PATH to store them (then search with them)"
        )
    if codes is not None and not model.learns_database_codes:
        raise InputError(f"{method} learns hash functions only; drop --codes and encode with `dhash encode`")
    ckpt = checkpoint_path(out) if out is not None and model.supports_checkpoint else None
    if ckpt is not None and ckpt.exists():
        _check_checkpoint(ckpt, resume=resume, overwrite=overwrite)
    split_ = ds.get_split(split) if split else None
    view = database_view(ds, split_)
    target = None
    if ckpt is not None:  # the checkpoint records which rows it learns from; resuming checks them
        rows = int(view.features.shape[0])
        query = split_.query if split_ else None
        identity = dataset_identity(ds.content_id, ds.n, split_.name if split_ else None, query, rows)
        target = CheckpointTarget(ckpt, identity)
    model.fit(view.features, view.labels, checkpoint=target)
    model.dataset_ = {**dataset_summary(ds), "split": split_.manifest if split_ else {}}
    if out is not None:
        model.save(out, overwrite=overwrite)
        if ckpt is not None:
            remove_artifact(ckpt, kind="checkpoint")  # the model holds everything now
    if codes is not None:
        query_rows = split_.query if split_ else np.empty(0, dtype=np.int64)
        write_codes(
            codes, all_rows_codes(model, ds.features_dask(), query_rows), model, dataset=ds, overwrite=overwrite
        )
    return model


def _model(model) -> Hasher:
    return model if isinstance(model, Hasher) else load_model(model)


@dataclass(frozen=True)
class Encoded:
    path: str
    n: int
    code_bytes: int
    seconds: float


def encode(dataset_, model, out, *, overwrite: bool = False, progress: bool = False) -> Encoded:
    """Encode every row of the dataset with ``model`` (object or model location) into a
    codes store at ``out``."""

    ds, model = dataset(dataset_), _model(model)
    started = time.perf_counter()
    encode_to_zarr(out, ds.features_dask(), model, dataset=ds, overwrite=overwrite, progress=_show(progress))
    return Encoded(str(out), ds.n, model.code_bytes, time.perf_counter() - started)


@dataclass(frozen=True)
class Indexed:
    path: str
    n: int
    m: int
    seconds: float


def index(codes, out, *, substrings: int | None = None, overwrite: bool = False, progress: bool = False) -> Indexed:
    """Multi-index hashing tables of the codes store at ``codes`` (one shard per codes chunk),
    written to ``out`` for ``search(..., index=out)``; ``substrings`` m (default: the paper's
    b / log2(rows per shard))."""
    started = time.perf_counter()
    reader, _ = open_codes(codes)
    loc, m = build_index(codes, out, m=substrings, overwrite=overwrite, progress=_show(progress))
    return Indexed(str(loc), int(reader.shape[0]), m, time.perf_counter() - started)


@dataclass(frozen=True)
class Searched:
    path: str
    n_queries: int
    n_database: int
    rows: int
    seconds: float


def search(
    dataset_,
    model,
    codes,
    out,
    *,
    split: str = "default",
    k: int | None = None,
    radius: int | None = None,
    index=None,
    rerank: str | None = None,
    candidates: int | None = None,
    overwrite: bool = False,
    progress: bool = False,
) -> Searched:
    """Hamming top-``k`` (default 100) or radius search of the split's queries against the
    other rows' codes; results to a parquet file at ``out``. With ``index`` (made by
    ``index()`` from these codes) the search goes through its substring tables (multi-index
    hashing): the same results, fewer codes compared. With ``rerank`` ("exact": squared L2
    to the original vectors; "asymmetric": the queries' real projections against the
    codes) the Hamming top-``candidates`` (default 10 k) are re-ranked and the top k kept."""

    if k is not None and radius is not None:
        raise InputError("give either --k (top-k search) or --radius (radius search), not both")
    candidates = check_rerank(rerank, candidates, k, radius)
    ds, model = dataset(dataset_), _model(model)
    reader, _ = open_codes(codes, model, ds)
    if reader.shape[0] != ds.n:
        raise InputError(
            f"codes at {codes} have {reader.shape[0]} rows but the dataset has {ds.n}; encode this dataset"
        )
    split_ = ds.get_split(split)
    view = database_view(ds, split_)
    queries, db = reader.take(split_.query), view.of(codes_dask(reader))
    tables = None if index is None else open_index(index, codes, reader)
    started = time.perf_counter()
    if rerank is not None:  # the query side first: a model without projections is refused before any search
        query_side = query_rows(ds, split_)
        source = ds.features_dask() if rerank == "exact" else codes_dask(reader)
        if rerank == "asymmetric":
            query_side = model.project(query_side)
    if radius is not None:
        if tables is None:
            res = radius_search(queries, db, radius, ids=view.ids)
        else:
            res = index_radius(queries, reader, tables, radius, excluded_rows=split_.query)
        write_radius_results(out, split_.query, *res, overwrite=overwrite)
        found = len(res[0])
    else:
        k = 100 if k is None else k
        hamming_k = k if candidates is None else candidates
        if tables is None:
            lazy = knn_search_lazy(queries, db, hamming_k, ids=view.ids)
        else:
            lazy = index_knn_lazy(queries, reader, tables, hamming_k, excluded_rows=split_.query)
        dist, nn = compute_with_progress(lazy, show=progress)
        reranked = None
        if rerank is not None:
            scores, ranked = compute_with_progress(rerank_lazy(rerank, query_side, source, nn, k), show=progress)
            dist, nn = candidate_values(nn, dist, ranked), ranked
            reranked = (rerank, candidates, scores)
        write_knn_results(out, split_.query, dist, nn, rerank=reranked, overwrite=overwrite)
        found = int((nn >= 0).sum())
    return Searched(str(out), len(queries), int(db.shape[0]), found, time.perf_counter() - started)


# ------------------------------------------------------------------ evaluation ---------


def evaluate(
    dataset_,
    *,
    methods=("lsh", "pcah", "itq"),
    bits=(32,),
    queries: int = 1000,
    seed: int = 0,
    out=None,
    ground_truth: str | None = None,
    top_k: int | None = None,
    top_percent: float | None = None,
    ks=DEFAULT_KS,
    params: dict | None = None,
    dish2_dictionaries: int | None = None,
    split_name: str | None = None,
    log_lines=None,
) -> dict:
    """Train, encode, search and score ``methods`` x ``bits`` on a seeded split of
    ``queries`` rows (stored in the dataset as ``split_name``, default ``q{queries}-s{seed}``);
    returns the report, and writes report.json, report.md and plots to ``out`` when given.
    ``log_lines``: a callable receiving one line per trained model."""
    unknown = [m for m in methods if m not in METHOD_NAMES]
    if unknown:
        raise InputError(f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(METHOD_NAMES)}")
    check_params_used(methods, params)
    ds = dataset(dataset_)
    split_ = ds.make_split(queries, seed, name=split_name or f"q{queries}-s{seed}")
    truth = build_truth(ds, split_, ground_truth=ground_truth, top_k=top_k, top_percent=top_percent)
    features = ds.features_dask()
    options = {"seed": seed, "ks": ks, "params": params, "log": log_lines, "dish2_count": dish2_dictionaries}
    results = [
        row
        for b in bits
        for method in methods
        for row in evaluate_method(features, split_.query, ds.labels, truth, method, b, **options)
    ]
    protocol = {
        "seed": seed,
        "n_queries": queries,
        "methods": list(methods),
        "bits": list(bits),
        "ks": sorted(ks),
        "train_set": "database",
        "method_params": params or {},
        "dish2_dictionaries": "all" if dish2_dictionaries is None else int(dish2_dictionaries),
        "has_training_plot": any(
            "objective" in r["training"] or has_mac_path(r["training"]) or r["training"].get("adsh_path")
            for r in results
        ),
    }
    report = build_report(
        dataset=dataset_summary(ds),
        split=split_.manifest,
        truth=truth.description,
        results=results,
        cluster=cluster_shape(),
        protocol=protocol,
    )
    if out is not None:
        write_report(out, report)
    return report


DEMO_DATASETS = ("sift-synth", "fashion-mnist")  # the demo's report directories below its out


def demo(
    out="runs/demo",
    *,
    n: int = 1_000_000,
    methods=("lsh", "pcah", "itq", "dish"),
    bits=(32, 64),
    top_k: int | None = None,
    top_percent: float | None = None,
    chunk_rows: int | None = None,
    progress: bool = False,
    log_lines=None,
    **evaluate_options,
) -> dict:
    """The end-to-end demo: sift-synth of ``n`` points with Euclidean ground truth (top
    1000 unless ``top_k``/``top_percent``), and Fashion-MNIST with label ground truth when it
    is installed. Returns {dataset name: report}."""

    out = Path(out) if "://" not in str(out) else out
    say = log_lines or (lambda line: None)
    say(f"demo: sift-synth with {n:,} points (generated chunk-parallel, cached in the data directory)")
    sift = dataset("sift-synth", n=n, seed=evaluate_options.get("seed", 0), chunk_rows=chunk_rows, progress=progress)
    options = {"methods": methods, "bits": bits, "log_lines": log_lines, **evaluate_options}
    reports = {
        "sift-synth": evaluate(
            sift,
            out=f"{out}/{DEMO_DATASETS[0]}",
            ground_truth="euclidean",
            top_k=top_k or (None if top_percent else 1000),
            top_percent=top_percent,
            **options,
        )
    }
    if fashion_mnist_available():
        say("demo: Fashion-MNIST (label ground truth)")
        fm = dataset("fashion-mnist", chunk_rows=chunk_rows, progress=progress)
        reports["fashion-mnist"] = evaluate(fm, out=f"{out}/{DEMO_DATASETS[1]}", ground_truth="labels", **options)
    else:
        say("demo: Fashion-MNIST skipped (install it with `apt-get install dataset-fashion-mnist`)")
    return reports
