"""The jobs as functions: what ``dhash COMMAND``, ``dhash run`` steps and notebooks call.

Each function takes handles (Dataset, Split, Model, Codes: opened and verified once) or
locations (paths or URLs, opened once at the top and passed down as handles) and returns
objects, runs its Dask work on the current client (``dask_hashcodes.connect()`` starts or joins a
cluster), and prints nothing: progress bars go to stderr, and decisions worth knowing (a
checkpoint resumed or discarded) go to the ``dask_hashcodes`` logger.

``progress``, a keyword of every workflow that runs long: None (the default) shows the
bars when someone watches (stderr is a terminal, or a Jupyter notebook), not in CI, cron
jobs or logs; True always, False never. Everything the workflow calls follows its answer:
Dask's task bar of a cluster computation, a training run's iterations, an evaluation's
(method, bits) runs (dask_hashcodes.distributed.progress.show_progress is the rule).

URLs are opened with the ``storage=`` keyword's fsspec options (a ``dask_hashcodes.Storage``, a
dict, or None: ``$DHASH_STORAGE_OPTIONS`` or the config's ``storage-options`` table);
nothing is set for the whole process.

    from dask_hashcodes import connect, workflows
    connect()
    ds = workflows.synth("sift", "data/s.zarr", n=100_000)
    workflows.split(ds, queries=1000)
    model = workflows.train(ds, "itq", "models/itq32", bits=32, split="default")
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dask_hashcodes.data.ingest import ingest as ingest_file
from dask_hashcodes.data.sources import fashion_mnist_available, resolve_dataset
from dask_hashcodes.data.synth import write_sift_synth
from dask_hashcodes.distributed.cluster import available_cores, cluster_shape
from dask_hashcodes.distributed.encode import all_rows_codes, encode_to_zarr, write_codes
from dask_hashcodes.distributed.progress import compute_with_progress, resolves_progress, steps_bar
from dask_hashcodes.errors import InputError
from dask_hashcodes.evaluation.evaluate import DEFAULT_KS, evaluate_method, evaluation_protocol
from dask_hashcodes.evaluation.neighbours import NeighbourRecall, NeighbourSearches
from dask_hashcodes.evaluation.report import build_report, has_training_plot, write_report
from dask_hashcodes.evaluation.truth import build_truth, euclidean_groundtruth, query_rows
from dask_hashcodes.hashing import (
    BASELINE_METHODS,
    DEMO_METHODS,
    METHOD_NAMES,
    Hasher,
    check_params_used,
    load_model,
    make_hasher,
    method_params,
)
from dask_hashcodes.hashing.checkpoint import (
    CheckpointTarget,
    checkpoint_path,
    checkpoint_progress,
    dataset_identity,
    live_writer,
)
from dask_hashcodes.indexes.hamming import flat_hits
from dask_hashcodes.indexes.index import FlatIndex, IVFIndex, MIHIndex, Queries, Rerank
from dask_hashcodes.indexes.ivf import DEFAULT_NPROBE, build_ivf, check_nprobe
from dask_hashcodes.indexes.mih import build_index
from dask_hashcodes.indexes.plan import calibrated_choice
from dask_hashcodes.indexes.rerank import check_rerank
from dask_hashcodes.kernels.knn import neighbour_recall
from dask_hashcodes.storage.atomic import (
    DiskFull,
    check_file_output,
    check_output,
    child_inside,
    read_commit,
    remove_artifact,
)
from dask_hashcodes.storage.chunkread import read_attrs
from dask_hashcodes.storage.codes import Codes, open_codes
from dask_hashcodes.storage.datasets import Dataset, Split, dataset_summary, open_dataset, write_dataset_like
from dask_hashcodes.storage.ivf_index import StoredLists, open_stored_index
from dask_hashcodes.storage.location import Location, resolve
from dask_hashcodes.storage.mih_index import INDEX_KIND as MIH_KIND
from dask_hashcodes.storage.residual_index import RESIDUAL_KIND
from dask_hashcodes.storage.results import RESULTS_KIND, write_knn_results, write_radius_results, write_vector_results
from dask_hashcodes.validation import DEFAULT_K, check_k
from dask_hashcodes.views import database_view

__all__ = [
    "Encoded",
    "ResidualIndexed",
    "Searched",
    "demo",
    "encode",
    "evaluate",
    "groundtruth",
    "head",
    "index",
    "ingest",
    "load_dataset",
    "residual_index",
    "search",
    "search_vectors",
    "split",
    "synth",
    "train",
]
log = logging.getLogger(__name__)


def _at(where, storage):
    """A URL resolved (once) with the storage options; local paths, handles and None as
    given: they need no options, and the layers below resolve them as before."""
    if isinstance(where, (str, os.PathLike)) and "://" in os.fspath(where):
        return resolve(where, storage=storage)
    return where


def _show(progress: bool):

    return lambda tasks: compute_with_progress(tasks, show=progress)


@resolves_progress
def load_dataset(
    name_or_path,
    *,
    n: int | None = None,
    seed: int = 0,
    chunk_rows: int | None = None,
    progress: bool | None = None,
    storage=None,
) -> Dataset:
    """A Dataset handle as given, a dataset location opened (a URL with ``storage``), or a
    built-in source (``fashion-mnist``, ``sift-synth`` of ``n`` rows, ``debian-minilm``: its
    first ``n`` rows when ``n`` is given) materialised once in the data directory and opened.
    Every workflow's ``dataset`` argument goes through it, so each accepts the same forms."""
    if isinstance(name_or_path, Dataset):
        return name_or_path
    where = _at(name_or_path, storage)
    if isinstance(where, Location):
        return open_dataset(where)
    return resolve_dataset(str(name_or_path), n=n, seed=seed, chunk_rows=chunk_rows, progress=progress)


# ------------------------------------------------------------------ data ---------------


@resolves_progress
def ingest(
    source,
    out,
    *,
    format: str = "auto",
    column: str | None = None,
    labels=None,
    label_column: str | None = None,
    chunk_rows: int | None = None,
    overwrite: bool = False,
    progress: bool | None = None,
    storage=None,
) -> Dataset:
    """Copy the vectors in file ``source`` (fvecs/bvecs/ivecs, IDX, npy, parquet; and optional
    ``labels``) into a new dataset at ``out``, or materialise the built-in ``fashion-mnist``
    or ``debian-sift`` there; each a local path or a URL (opened with ``storage``). See
    dask_hashcodes.data.ingest.ingest."""
    return ingest_file(
        _at(source, storage),
        _at(out, storage),
        format=format,
        column=column,
        labels=_at(labels, storage),
        label_column=label_column,
        chunk_rows=chunk_rows,
        overwrite=overwrite,
        progress=progress,
    )


@resolves_progress
def synth(
    kind: str,
    out,
    *,
    n: int = 1_000_000,
    seed: int = 0,
    chunk_rows: int | None = None,
    overwrite: bool = False,
    progress: bool | None = None,
    storage=None,
) -> Dataset:
    """Generate a synthetic dataset chunk-parallel on the cluster (``kind``: ``sift``)."""

    if kind != "sift":
        raise InputError(f"unknown synthetic kind {kind!r}; use sift")
    return write_sift_synth(
        _at(out, storage), n, seed=seed, chunk_rows=chunk_rows, overwrite=overwrite, progress=_show(progress)
    )


def head(dataset, n: int, out, *, chunk_rows: int | None = None, overwrite: bool = False, storage=None) -> Dataset:
    """The first ``n`` rows (and labels) of a dataset as a dataset of their own at ``out``
    (read through memory: meant for subsets of a few hundred MB, e.g. a quick notebook run)."""

    ds, out = load_dataset(dataset, storage=storage), _at(out, storage)
    if n >= ds.n:
        return ds
    labels = None if ds.labels is None else ds.labels[:n]
    rows = [ds.features_dask()[:n].compute()]
    return write_dataset_like(ds, out, rows, n=n, labels=labels, chunk_rows=chunk_rows, overwrite=overwrite)


def split(
    dataset, *, queries: int = 1000, seed: int = 0, name: str = "default", overwrite: bool = False, storage=None
) -> Split:
    """Draw a seeded query/database split and store it in the dataset; returns the Split."""
    ds = load_dataset(dataset, storage=storage)
    return ds.make_split(queries, seed, name=name, overwrite=overwrite, threads=available_cores())


@resolves_progress
def groundtruth(
    dataset,
    *,
    split: str | Split = "default",
    top_k: int | None = None,
    top_percent: float | None = None,
    progress: bool | None = None,
    storage=None,
):
    """Exact Euclidean neighbours of a split's queries, computed once and stored in the
    dataset; returns the Truth. ``progress``: Dask's bar of each pass over the rows (see
    the module docstring for None)."""
    ds = load_dataset(dataset, storage=storage)
    return build_truth(ds, ds.get_split(split), ground_truth="euclidean", top_k=top_k, top_percent=top_percent)


# ------------------------------------------------------------------ models -------------


def _check_checkpoint(ckpt, *, resume: bool, overwrite: bool) -> None:
    """A checkpoint beside the model output: another live run's is refused; an interrupted
    run's is resumed with ``resume``, discarded with ``overwrite``, else refused."""

    writer = live_writer(ckpt)
    if writer is not None:
        raise InputError(
            f"another training run (pid {writer['pid']}) is writing {ckpt}; wait for it or train into another `out`"
        )
    if resume:
        return
    if not overwrite:
        raise InputError(
            f"{ckpt} holds the state of an interrupted training run; pass `resume=True` to continue it, "
            "or `overwrite=True` to start over"
        )
    remove_artifact(ckpt, kind="checkpoint")  # only a checkpoint dhash wrote whole
    log.warning("train: overwriting: removed the interrupted run's checkpoint %s; training starts over", ckpt)


@resolves_progress
def train(
    dataset,
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
    progress: bool | None = None,
    storage=None,
) -> Hasher:
    """Learn ``method``'s hash functions on the dataset's rows (the database rows of
    ``split`` when given) and, with ``out``, save the model there. Iterative methods save a
    checkpoint beside ``out`` after every iteration; ``resume`` continues it. Methods that
    learn the database's codes (adsh) write them to the codes store ``codes``: every row of
    the dataset, the split's query rows encoded by the learned hash function. ``progress``: a
    bar of the fit's iterations (epochs, bits, passes) for the iterative methods (see the
    module docstring for None); it changes nothing in the result."""

    ds, out, codes = load_dataset(dataset, storage=storage), _at(out, storage), _at(codes, storage)
    check_params_used([method], params)
    model = make_hasher(method, bits, random_state=seed, **method_params(method, params))
    if model.learns_database_codes and codes is None:
        raise InputError(
            f"{method} learns the database's codes; give `codes=PATH` to store them (then search with them)"
        )
    if codes is not None and not model.learns_database_codes:
        raise InputError(
            f"{method} learns hash functions only; drop `codes` and encode the dataset with the trained model"
        )
    ckpt = checkpoint_path(out) if out is not None and model.supports_checkpoint else None
    if ckpt is not None and ckpt.exists():
        _check_checkpoint(ckpt, resume=resume, overwrite=overwrite)
    elif resume:  # a scheduled job passes resume every time: the first run, or one after a finished run, starts
        log.info("train: no checkpoint%s to resume; training from the start", f" at {ckpt}" if ckpt else "")
    split_ = ds.get_split(split) if split else None
    view = database_view(ds, split_)
    target = None
    if ckpt is not None:  # the checkpoint records which rows it learns from; resuming checks them
        rows = int(view.features.shape[0])
        query = split_.query if split_ else None
        identity = dataset_identity(ds.content_id, ds.n, split_.name if split_ else None, query, rows)
        target = CheckpointTarget(ckpt, identity)
    try:
        model.fit(view.features, view.labels, checkpoint=target)
        model.dataset_ = {**dataset_summary(ds), "split": split_.manifest if split_ else {}}
        if out is not None:
            model.save(out, overwrite=overwrite)
    except DiskFull as exc:
        if ckpt is None or not ckpt.exists():
            raise
        done = checkpoint_progress(ckpt)  # an earlier iteration's, committed whole
        raise exc.keeping(
            f"the checkpoint {ckpt} (after iteration {'?' if done is None else done}) was kept: free space "
            "there and train again with `resume=True` to continue from it"
        ) from None
    if out is not None and ckpt is not None:
        remove_artifact(ckpt, kind="checkpoint")  # the model holds everything now
    if codes is not None:
        query_rows = split_.query if split_ else np.empty(0, dtype=np.int64)
        write_codes(
            codes, all_rows_codes(model, ds.features_dask(), query_rows), model, dataset=ds, overwrite=overwrite
        )
    return model


def _model(model, storage=None) -> Hasher:
    """A model (Hasher) as given, or the model at a location loaded (and verified) once."""
    return model if isinstance(model, Hasher) else load_model(_at(model, storage))


@dataclass(frozen=True)
class Encoded:
    path: str
    n: int
    code_size: int
    seconds: float


@resolves_progress
def encode(dataset, model, out, *, overwrite: bool = False, progress: bool | None = None, storage=None) -> Encoded:
    """Encode every row of the dataset with ``model`` (object or model location) into a
    codes store at ``out``."""

    ds, model, out = load_dataset(dataset, storage=storage), _model(model, storage), _at(out, storage)
    started = time.perf_counter()
    encode_to_zarr(out, ds.features_dask(), model, dataset=ds, overwrite=overwrite, progress=_show(progress))
    return Encoded(str(out), ds.n, model.code_size, time.perf_counter() - started)


@dataclass(frozen=True)
class Indexed:
    """An index written by ``index``: its ``kind`` ("mih" or "ivf"), the ``n`` codes it indexes
    and its size: ``substrings`` (multi-index hashing) or ``n_lists`` (an inverted file), whose
    centroids live in ``quantiser_dims`` of the features' ``d`` dimensions (principal
    directions when fewer), or, with ``quantiser`` "codes", are codes of ``quantiser_dims``
    bits (``d`` 0: no feature read)."""

    path: str
    kind: str
    n: int
    seconds: float
    substrings: int | None = None
    n_lists: int | None = None
    quantiser_dims: int | None = None
    d: int | None = None
    quantiser: str | None = None


@resolves_progress
def index(
    codes,
    out,
    *,
    kind: str = "mih",
    substrings: int | None = None,
    dataset=None,
    lists: int | None = None,
    quantiser: str = "features",
    kmeans_rows: int | None = None,
    quantiser_dims: int | None = None,
    seed: int = 0,
    overwrite: bool = False,
    progress: bool | None = None,
    storage=None,
) -> Indexed:
    """An index of a codes store (a Codes handle or its location; one shard per codes chunk),
    written to ``out`` for ``search(..., index=out)``. ``kind="mih"``: multi-index hashing
    tables, ``substrings`` m (default: the paper's b / log2(rows per shard)); exact.
    ``kind="ivf"``: an inverted file of ``lists`` lists (default 4 sqrt(n)), k-means (seeded
    by ``seed``) on ``kmeans_rows`` rows (default 256 per list) of the features of
    ``dataset``, the dataset the codes encode, in ``quantiser_dims`` principal directions of
    those rows (default: the fewest holding 90% of their variance, where that saves work;
    the features' count: their own space); approximate. ``quantiser="codes"``: the lists
    come from k-means on ``kmeans_rows`` of the codes themselves as +-1 vectors, the centroids
    then made binary, as FAISS's ``IndexBinaryIVF`` builds them: no dataset is read, rows are
    assigned by popcounts, queries probe by their codes; how many lists a query must probe
    for a given recall depends on the data (measure it on validation queries)."""
    started = time.perf_counter()
    codes = open_codes(codes, storage=storage)
    if kind == "mih":
        loc, m = build_index(codes, out, m=substrings, overwrite=overwrite, progress=_show(progress), storage=storage)
        return Indexed(str(loc), kind, codes.n, time.perf_counter() - started, substrings=m)
    if kind != "ivf":
        raise InputError(f"unknown index kind {kind!r}; choose mih or ivf")
    if dataset is None and quantiser != "codes":
        raise InputError(
            "an inverted file clusters the features the codes encode; give the dataset they encode (`dataset`), or "
            "build the lists from the codes alone (`quantiser='codes'`)"
        )
    features = None if quantiser == "codes" else load_dataset(dataset, storage=storage).features_dask()
    loc, n_lists, dims = build_ivf(
        codes, features, out, quantiser=quantiser, n_lists=lists, kmeans_rows=kmeans_rows,
        quantiser_dims=quantiser_dims, seed=seed, overwrite=overwrite, progress=_show(progress), storage=storage,
    )  # fmt: skip
    return Indexed(str(loc), kind, codes.n, time.perf_counter() - started, n_lists=n_lists, quantiser_dims=int(dims),
                   d=0 if features is None else int(features.shape[1]), quantiser=quantiser)  # fmt: skip


@dataclass(frozen=True)
class ResidualIndexed:
    """A residual-code inverted file written by ``residual_index``: the ``n`` database rows it
    holds (the split's queries left out), its lists and the RAM a search reads per row."""

    path: str
    n: int
    n_lists: int
    ram_bytes_per_vector: float
    seconds: float
    tuning: object = None  # indexes.residual.ResidualTuning when tune_rows chose nprobe and eps


def split_identity(ds: Dataset, split: Split) -> dict:
    """What a residual index records of the rows it holds, and a search checks: the dataset's
    content id and the split (name, and a digest of its query rows: a split drawn again under
    the same name is another split)."""
    digest = hashlib.sha256(np.ascontiguousarray(split.query, np.int64).tobytes()).hexdigest()[:16]
    return {"dataset_id": ds.content_id, "split": split.name, "queries_digest": digest}


@resolves_progress
def residual_index(
    dataset,
    out,
    *,
    split: str | Split = "default",
    lists: int | None = None,
    rotation: str | None = None,
    seed: int = 0,
    tune_rows: int = 0,
    target_recall: float = 0.9,
    overwrite: bool = False,
    progress: bool | None = None,
    storage=None,
) -> ResidualIndexed:
    """A residual-code inverted file (indexes.residual.ResidualIVF) of the database rows of
    ``split`` (its queries left out, so ``search_vectors`` answers them as the Hamming search
    does), written to ``out``. The rows are read on the cluster and gathered here: the index
    is built and searched in one process, and needs the rows in its memory (n x d bytes for
    byte data, 4 n d for float32) while it is built. ``lists`` default 2 sqrt(n); ``rotation``
    random (default), structured or learned; ``seed`` fixes the lists, the rotation and the
    tuning rows. ``tune_rows``: when positive, ``nprobe`` and ``eps`` are chosen (the fastest
    setting reaching recall@10 ``target_recall``) on that many indexed rows drawn with the
    seed, each searched for its neighbours among the others: validation queries from the
    data, never the split's own queries, which a search of the split measures. Otherwise the
    library's defaults are kept."""
    from dask_hashcodes.indexes.residual import DEFAULT_ROTATION, ResidualIVF

    if tune_rows < 0:
        raise InputError(f"`tune_rows={tune_rows}`: give the number of validation rows, 0 or more")
    if not 0 < target_recall <= 1:
        raise InputError(f"`target_recall={target_recall}`: give a recall in (0, 1]")
    started = time.perf_counter()
    ds = load_dataset(dataset, storage=storage)
    split_ = split if isinstance(split, Split) else ds.get_split(split)
    out = _at(out, storage)
    # refused before the rows are read: an output dhash did not write is never replaced
    check_output(out, kind=RESIDUAL_KIND, overwrite=overwrite)
    view = database_view(ds, split_)
    vectors, ids = compute_with_progress([view.features, view.ids], show=progress)
    index = ResidualIVF.build(
        vectors, n_lists=lists, rotation=rotation or DEFAULT_ROTATION, seed=seed, ids=ids,
        about=split_identity(ds, split_),
    )  # fmt: skip
    tuning = None
    if tune_rows:
        rows = np.sort(np.random.default_rng(seed).choice(len(vectors), min(tune_rows, len(vectors)), replace=False))
        tuning = index.tune(vectors[rows], 10, target_recall, database=vectors, database_ids=ids, held_out=ids[rows])
    loc = index.save(out, overwrite=overwrite)
    return ResidualIndexed(str(loc), index.ntotal, index.n_lists, index.ram_bytes_per_vector,
                           time.perf_counter() - started, tuning)  # fmt: skip


def is_residual_index(index, storage=None) -> bool:
    """Whether ``index`` (a location) is a committed residual-code inverted file."""
    if index is None or not isinstance(index, (str, os.PathLike, Location)):
        return False
    record = read_commit(index if isinstance(index, Location) else resolve(index, storage=storage))
    return record is not None and record.get("kind") == RESIDUAL_KIND


def search_vectors(
    dataset,
    index,
    out=None,
    *,
    split: str | Split = "default",
    k: int | None = None,
    nprobe: int | None = None,
    recall: bool = False,
    overwrite: bool = False,
    storage=None,
) -> Searched:
    """Top-``k`` (default 100) Euclidean search of the split's query vectors through the
    residual index at ``index`` (made by ``residual_index`` for this dataset and split), on
    this process; results to a parquet file at ``out`` (squared distances in its ``l2``
    column) and in ``Searched.results``. ``nprobe``: lists probed per query (default: the
    index's own, chosen on validation queries). ``recall``: as in ``search``."""
    from dask_hashcodes.indexes.residual import ResidualIVF

    k = DEFAULT_K if k is None else check_k(k)
    ds = load_dataset(dataset, storage=storage)
    split_ = split if isinstance(split, Split) else ds.get_split(split)
    out = _at(out, storage)
    if out is not None:
        check_file_output(out, kind=RESULTS_KIND, overwrite=overwrite)
    searcher = ResidualIVF.open(_at(index, storage), storage=storage)
    about, expected = searcher.about, split_identity(ds, split_)
    if about != expected:
        if "split" not in about:
            held = "rows the library was given (no dataset or split recorded)"
        elif about.get("dataset_id") != expected["dataset_id"]:
            held = f"the database rows of split {about['split']!r} of another dataset"
        elif about["split"] == split_.name:
            held = f"the database rows of an earlier draw of split {split_.name!r}"
        else:
            held = f"the database rows of split {about['split']!r}"
        raise InputError(
            f"the residual index at {index} holds {held}, and a search of split {split_.name!r} of {ds.path} needs "
            f"its own rows; build a residual index of them with `split={split_.name!r}`"
        )
    if nprobe is not None:
        searcher.nprobe = check_nprobe(nprobe, searcher.n_lists, index)
    vectors = query_rows(ds, split_)
    started = time.perf_counter()
    distances, nn = searcher.search(vectors, k)
    seconds = time.perf_counter() - started
    measured = None
    if recall:  # before the results are written: a failure here leaves no output
        truth, _, _ = euclidean_groundtruth(ds, split_, top_k=k)
        measured = neighbour_recall(nn, truth)
    if out is not None:
        write_vector_results(out, split_.query, distances, nn, overwrite=overwrite)
    path = None if out is None else str(out)
    return Searched(path, len(vectors), searcher.ntotal, int((nn >= 0).sum()), seconds, (distances, nn), k=k,
                    recall=measured, searched_by=searcher.searched_by)  # fmt: skip


@dataclass(frozen=True)
class Searched:
    """What a search found: ``path`` of the parquet results (None when not written), and the
    FAISS-shaped ``results``: (D, I) of a top-k search, (lims, D, I) of a radius search."""

    path: str | None
    n_queries: int
    n_database: int
    rows: int
    seconds: float
    results: tuple = ()
    k: int | None = None
    recall: float | None = None  # of the exact Euclidean top-k, when asked
    searched_by: str | None = None  # linear scan, multi-index hashing or inverted file


def search_index(
    dataset: Dataset,
    model: Hasher,
    codes: Codes,
    split: Split,
    *,
    index=None,
    nprobe: int | None = None,
    rerank=None,
    candidates=None,
    warm: bool = False,
):
    """The index a search of ``split``'s queries goes through: the linear scan of the
    codes, or the stored index ``index`` (a multi-index, or an inverted file probing
    ``nprobe`` lists, default DEFAULT_NPROBE, its lists kept on the workers when ``warm``),
    minus the split's query rows; wrapped in a Rerank step when ``rerank`` is given
    (``candidates``: its R, None: k_factor x k)."""
    stored = None if index is None else open_stored_index(index, codes)
    if nprobe is not None and not isinstance(stored, StoredLists):
        raise InputError("nprobe sets the lists an inverted file probes; give an index built with `kind='ivf'`")
    if stored is None:
        base = FlatIndex(codes, exclude=split.query, model=model)
    elif isinstance(stored, StoredLists):
        probes = DEFAULT_NPROBE if nprobe is None else nprobe
        base = IVFIndex(stored, probes, exclude=split.query, model=model, warm=warm)
    else:
        base = MIHIndex(stored, exclude=split.query, model=model)
    if rerank is None:
        return base
    source = dataset if rerank == "exact" else codes
    return Rerank(rerank, base, candidates=candidates, source=source, model=model)


def may_search_by_tables(
    index, *, k=None, radius=None, rerank=None, candidates=None, dataset=None, split="default", storage=None
) -> bool:
    """Whether ``search`` through the stored ``index`` (a location), with these arguments
    of its own, may run multi-index hashing: the index is a multi-index whose build's
    calibration does not rule the tables out (indexes.plan). Read before the search's cluster
    starts, so that its workers load the tables' kernels only when a search may use them. The
    split's size counts only for a dataset stored at ``dataset`` (a built-in source is not
    made here); an index or a split that is not there is left for the search to report."""
    loc = resolve(index, storage=storage)
    record = read_commit(loc)
    if record is None or record.get("kind") != MIH_KIND:
        return False
    if radius is not None:
        return True
    depth = check_rerank(rerank, candidates, k) or (DEFAULT_K if k is None else k)  # what the tables search for
    n_queries = None
    if dataset is not None:
        try:  # only the split's recorded size: the search opens and verifies the split itself
            split_loc = child_inside(resolve(dataset, storage=storage), "splits", split, what="split name")
            n_queries = int(read_attrs(split_loc, f"split {split}", "")["n_query"])
        except (InputError, KeyError, TypeError, ValueError):
            pass  # no stored split there (a built-in source not made yet, or a bad name): the search says so
    attrs = read_attrs(loc, f"index {loc}", "build it again with `overwrite=True`")
    return calibrated_choice(attrs, depth, n_queries) is None


@resolves_progress
def search(
    dataset,
    model,
    codes,
    out=None,
    *,
    split: str | Split = "default",
    k: int | None = None,
    radius: int | None = None,
    index=None,
    nprobe: int | None = None,
    rerank: str | None = None,
    candidates: int | None = None,
    recall: bool = False,
    warm: bool = False,
    overwrite: bool = False,
    progress: bool | None = None,
    storage=None,
) -> Searched:
    """Hamming top-``k`` (default 100) or radius search of the split's queries against the
    other rows' codes; results to a parquet file at ``out`` when given, and in
    ``Searched.results`` (FAISS's (D, I) or (lims, D, I)). With ``index`` (made by
    ``index()`` from these codes) the search goes through its substring tables (multi-index
    hashing): the same results, fewer codes compared; or, for an inverted file, through the
    ``nprobe`` lists nearest each query: fewer codes compared, approximate. With ``rerank`` ("exact": squared L2
    to the original vectors; "asymmetric": the queries' real projections against the
    codes) the Hamming top-``candidates`` (default ``indexes.rerank.K_FACTOR`` x k) are
    re-ranked and the top k kept.
    With ``warm`` and an inverted file ``index`` on a distributed cluster, the first search
    leaves the lists on the workers (read and merged once) and later searches of this process
    against the same index and split use them without reading storage
    (``dask_hashcodes.release_resident()`` frees them).
    With ``recall``, ``Searched.recall`` is the mean fraction of each query's exact Euclidean
    top-k found in its k results (the exact neighbours computed once and stored in the
    dataset, as ``groundtruth(top_k=k)``), for the searcher actually used (Hamming order,
    re-ranked, through an index).

    Each location is opened once, here, into its handle (Dataset, Model, Codes, Split, the
    index's tables); the Index objects (dask_hashcodes.indexes.index) do the searching."""

    if k is not None and radius is not None:
        raise InputError("give either `k` (top-k search) or `radius` (radius search), not both")
    if recall and radius is not None:
        raise InputError("`recall` measures a top-k search against the exact top-k; give `k` instead of `radius`")
    candidates = check_rerank(rerank, candidates, k, radius)
    ds, model = load_dataset(dataset, storage=storage), _model(model, storage)
    codes_ = open_codes(_at(codes, storage), model, ds)
    if codes_.n != ds.n:
        raise InputError(f"codes at {codes_.path} have {codes_.n} rows but the dataset has {ds.n}; encode this dataset")
    split_ = ds.get_split(split)
    out = _at(out, storage)
    index = _at(index, storage)
    searcher = search_index(
        ds, model, codes_, split_, index=index, nprobe=nprobe, rerank=rerank, candidates=candidates, warm=warm
    )
    if radius is not None and not searcher.range_searchable:
        raise InputError(
            "an inverted file answers top-k searches only; give `k` instead of `radius`, or an `index` built with "
            "`kind='mih'`"
        )
    if radius is None and k is None:
        k = DEFAULT_K
    searcher.expect(split_.query, k=k, radius=radius)
    # the stored codes of the split's queries, and their rows where the lists or the re-ranking need them
    vectors = query_rows(ds, split_) if searcher.needs_query_vectors else None
    queries = Queries(codes=codes_.take(split_.query, threads=available_cores()), vectors=vectors)
    n_database = ds.n - split_.n_query
    started = time.perf_counter()
    measured = None
    if radius is not None:
        lims, dist, ids = results = searcher.range_search_codes(queries, radius)
        if out is not None:
            write_radius_results(out, split_.query, flat_hits(lims), ids, dist, overwrite=overwrite)
        found = len(ids)
    else:
        found_d, nn = results = searcher.search_codes(queries, k, progress=progress)
        dist, reranked = found_d, None
        if rerank is not None:  # the results file keeps the Hamming distance beside the re-ranked one
            dist, reranked = searcher.candidate_distances, (rerank, candidates, found_d)
        if recall:  # before the results are written: a failure here leaves no output
            searched = time.perf_counter()
            truth, _, _ = euclidean_groundtruth(ds, split_, top_k=k)
            measured = neighbour_recall(nn, truth)
            started += time.perf_counter() - searched  # the search's seconds leave the truth out
        if out is not None:
            write_knn_results(out, split_.query, dist, nn, rerank=reranked, overwrite=overwrite)
        found = int((nn >= 0).sum())
    seconds = time.perf_counter() - started
    path = None if out is None else str(out)
    return Searched(
        path, len(queries), n_database, found, seconds, results, k=k, recall=measured, searched_by=searcher.searched_by
    )


# ------------------------------------------------------------------ evaluation ---------


@resolves_progress
def evaluate(
    dataset,
    *,
    methods=BASELINE_METHODS,
    bits=(32,),
    queries: int = 1000,
    seed: int = 0,
    out=None,
    ground_truth: str | None = None,
    top_k: int | None = None,
    top_percent: float | None = None,
    ks=DEFAULT_KS,
    params: dict | None = None,
    evaluation_options: dict | None = None,
    split_name: str | None = None,
    neighbours: NeighbourSearches | None = None,
    log_lines=None,
    progress: bool | None = None,
    storage=None,
) -> dict:
    """Train, encode, search and score ``methods`` x ``bits`` on a seeded split of
    ``queries`` rows (stored in the dataset as ``split_name``, default ``q{queries}-s{seed}``);
    returns the report, and writes report.json, report.md and plots to ``out`` when given.
    ``log_lines``: a callable receiving one line per trained model. ``evaluation_options``:
    options of how particular methods are scored (``Hasher.evaluation_options``, e.g.
    ``{"dish2_dictionaries": 1}``), each given to the methods that declare it.
    ``neighbours`` (a NeighbourSearches): also measure, for codes every row is encoded
    into, the recall@k of the exact Euclidean top-k (computed once, stored in the dataset)
    of the Hamming order, of exact re-ranking and of an inverted file. ``progress``: a bar of
    the (method, bits) runs, over the ground truth's passes and each training's iterations
    (see the module docstring for None)."""
    unknown = [m for m in methods if m not in METHOD_NAMES]
    if unknown:
        raise InputError(f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(METHOD_NAMES)}")
    check_params_used(methods, params)
    recorded_options = evaluation_protocol(evaluation_options)  # an unknown option fails before any work
    ds = load_dataset(dataset, storage=storage)
    split_ = ds.make_split(queries, seed, name=split_name or f"q{queries}-s{seed}", threads=available_cores())
    if neighbours is not None:  # refused before any ground truth is computed
        neighbours = neighbours.checked(split_.n_database)
    truth = build_truth(ds, split_, ground_truth=ground_truth, top_k=top_k, top_percent=top_percent)
    features = ds.features_dask()
    if neighbours is not None:
        exact, _, _ = euclidean_groundtruth(ds, split_, top_k=neighbours.recall_at)
    options = {"seed": seed, "ks": ks, "params": params, "log": log_lines, "evaluation_options": evaluation_options,
               "neighbours": None if neighbours is None else NeighbourRecall(neighbours, exact, seed)}  # fmt: skip
    runs = [(b, method) for b in bits for method in methods]
    results = []
    with steps_bar(len(runs), "evaluate: (method, bits) runs") as bar:
        for b, method in runs:
            bar.set_postfix_str(f"{method} {b} bits", refresh=False)
            results.extend(evaluate_method(features, split_.query, ds.labels, truth, method, b, **options))
            bar.update(1)
    protocol = {
        "seed": seed,
        "n_queries": queries,
        "methods": list(methods),
        "bits": list(bits),
        "ks": sorted(ks),
        "train_set": "database",
        "method_params": params or {},
        **recorded_options,
        "has_training_plot": has_training_plot(results),
        **({} if neighbours is None else {"neighbour_recall": neighbours.protocol()}),
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
        write_report(_at(out, storage), report)
    return report


DEMO_DATASETS = ("sift-synth", "fashion-mnist")  # the demo's report directories below its out


@resolves_progress
def demo(
    out="runs/demo",
    *,
    n: int = 1_000_000,
    methods=DEMO_METHODS,
    bits=(32, 64),
    top_k: int | None = None,
    top_percent: float | None = None,
    chunk_rows: int | None = None,
    progress: bool | None = None,
    log_lines=None,
    storage=None,
    **evaluate_options,
) -> dict:
    """The end-to-end demo: sift-synth of ``n`` points with Euclidean ground truth (top
    1000 unless ``top_k``/``top_percent``), and Fashion-MNIST with label ground truth when it
    is installed. Returns {dataset name: report}."""

    out = Path(out) if "://" not in str(out) else out
    say = log_lines or (lambda line: None)
    say(f"demo: sift-synth with {n:,} points (generated chunk-parallel, cached in the data directory)")
    seed = evaluate_options.get("seed", 0)
    sift = load_dataset("sift-synth", n=n, seed=seed, chunk_rows=chunk_rows, progress=progress)
    options = {"methods": methods, "bits": bits, "log_lines": log_lines, "progress": progress, "storage": storage}
    options |= evaluate_options
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
        fm = load_dataset("fashion-mnist", chunk_rows=chunk_rows, progress=progress)
        reports["fashion-mnist"] = evaluate(fm, out=f"{out}/{DEMO_DATASETS[1]}", ground_truth="labels", **options)
    else:
        say("demo: Fashion-MNIST skipped (install it with `apt-get install dataset-fashion-mnist`)")
    return reports
