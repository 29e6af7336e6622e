"""``dhash`` command line: ingest | synth | split | groundtruth | train | encode | search |
evaluate | demo | bench | run. Each command is a thin layer over the pipeline library: parse options
(flags > --config TOML > defaults), connect to the cluster, call the library, print where
outputs went. Bad input exits with status 2 and one line ``error: <problem; fix>``.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import time
from pathlib import Path

import numpy as np

from jobs.options import (OptionParser, json_object, name_list, non_negative_float, non_negative_int, positive_float,
                          positive_int, positive_int_list, topology)
from pipeline.errors import InputError

EXIT_BAD_INPUT = 2


def _date(text) -> str:
    import datetime as dt
    try:
        return dt.date.fromisoformat(str(text)).isoformat()
    except ValueError:
        raise InputError(f"expected a date YYYY-MM-DD, got {text!r}") from None


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ parser -----------

def build_parser() -> argparse.ArgumentParser:
    cluster = OptionParser(add_help=False)
    g = cluster.add_argument_group("cluster")
    g.add_argument("--scheduler", help="address of a running Dask scheduler (else $DASK_SCHEDULER_ADDRESS, else a local cluster)")
    g.add_argument("--workers", type=positive_int, default=2, help="local cluster: worker processes (default 2)")
    g.add_argument("--threads", type=positive_int, default=1, help="local cluster: threads per worker (default 1)")
    g.add_argument("--config", help="TOML file with this command's options (flags given here win)")
    g.add_argument("--quiet", action="store_true", help="no progress bars")
    g.add_argument("--storage-options", type=json_object, metavar="JSON",
                   help="JSON object of fsspec storage options for s3:// gs:// abfs:// locations (endpoint_url, profile, "
                        "anon, ...); else the config's storage-options table, else $DHASH_STORAGE_OPTIONS")
    g.add_argument("--performance-report", metavar="FILE.html",
                   help="save Dask's performance report of this job (task stream, worker profiles, bandwidth)")

    dish = OptionParser(add_help=False)
    g = dish.add_argument_group("DisH (methods dish, dish-allreduce)")
    g.add_argument("--nodes", type=positive_int, help="number of nodes P (default 10)")
    g.add_argument("--topology", type=topology, help="random (default), ring, star, complete")
    g.add_argument("--partition", help="contiguous (default), random, by-label")
    g.add_argument("--rho", type=positive_float, help="ADMM penalty (default: scaled to the data, see docs)")
    g.add_argument("--rho-scale", type=positive_float, help="factor of the data-scaled default rho (default 0.1)")
    g.add_argument("--inner-steps", type=positive_int, help="ADMM steps per outer iteration K (default 5)")
    g.add_argument("--max-iter", type=positive_int, help="outer iterations at most (default 20)")
    g.add_argument("--init", help="random (default) or pca")
    g = dish.add_argument_group("SGH, SPLH, USPLH (methods sgh, splh, usplh, pcah-adjusted)")
    g.add_argument("--n-bases", type=positive_int, help="sgh: kernel bases m (default 300)")
    g.add_argument("--bandwidth-scale", type=positive_float, help="sgh: kernel width = this x RMS distance to the bases (default 0.5)")
    g.add_argument("--sgh-rho-scale", type=positive_float, help="sgh: rho = this x 2 max ||x - mean||^2 (default 0.5)")
    g.add_argument("--kernel-cache", choices=["auto", "memory", "recompute"],
                   help="sgh: keep kernel features on the workers between passes (default auto: when they fit)")
    g.add_argument("--labeled", type=positive_int, help="splh, pcah-adjusted: labeled training points drawn with the seed (default 1000)")
    g.add_argument("--eta", type=non_negative_float, help="splh, usplh: weight of the (pseudo-)label term (default: splh 3, usplh 0.03)")
    g.add_argument("--region-size", type=positive_int, help="usplh: points per boundary region (default 2000)")
    g.add_argument("--decay", type=non_negative_float, help="usplh: decay lambda of earlier pseudo-labels (default 0.5)")

    parser = OptionParser(prog="dhash", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def cmd(name, help_, extra=()):
        return sub.add_parser(name, parents=[cluster, *extra], help=help_, description=help_)

    p = cmd("ingest", "Convert a file (fvecs/bvecs/ivecs, IDX, npy, parquet) or a built-in source into a dataset")
    p.add_argument("source", help="input file, or a built-in source name (fashion-mnist)")
    p.add_argument("--out", required=True, help="dataset directory to create (zarr v3)")
    p.add_argument("--format", default="auto", help="auto (by extension), fvecs, bvecs, ivecs, idx, npy, parquet")
    p.add_argument("--column", help="parquet: the vector column")
    p.add_argument("--labels", help="labels file (IDX labels, .ivecs or .npy of integers)")
    p.add_argument("--label-column", help="parquet: integer label column")
    p.add_argument("--chunk-rows", type=positive_int, help="rows per chunk (default: ~16 MiB per chunk)")
    p.add_argument("--overwrite", action="store_true")

    p = cmd("synth", "Generate a synthetic dataset chunk-parallel on the cluster")
    p.add_argument("kind", choices=["sift"], help="sift: SIFT-like 128-d uint8 (sift-synth)")
    p.add_argument("--n", type=positive_int, default=1_000_000)
    p.add_argument("--seed", type=non_negative_int, default=0)
    p.add_argument("--out", required=True)
    p.add_argument("--chunk-rows", type=positive_int)
    p.add_argument("--overwrite", action="store_true")

    p = cmd("split", "Draw a seeded query/database split and store it in the dataset")
    p.add_argument("--dataset", required=True, help="dataset path or built-in source name")
    p.add_argument("--queries", type=positive_int, default=1000)
    p.add_argument("--seed", type=non_negative_int, default=0)
    p.add_argument("--name", default="default")
    p.add_argument("--overwrite", action="store_true")

    p = cmd("groundtruth", "Exact Euclidean neighbours of a split's queries (computed once, stored in the dataset)")
    p.add_argument("--dataset", required=True)
    p.add_argument("--split", default="default")
    p.add_argument("--top-k", type=positive_int)
    p.add_argument("--top-percent", type=positive_float)

    p = cmd("train", "Learn hash functions on a dataset's database rows and save a model directory", [dish])
    p.add_argument("--dataset", required=True)
    p.add_argument("--method", required=True, help="lsh, pcah, itq, dish, dish-allreduce, sgh, splh, usplh, pcah-adjusted")
    p.add_argument("--dictionary", type=non_negative_int, help="dish: node whose dictionary encodes (DisH2, default 0)")
    p.add_argument("--bits", type=positive_int, default=32)
    p.add_argument("--seed", type=non_negative_int, default=0)
    p.add_argument("--split", help="train on the database rows of this split (default: all rows)")
    p.add_argument("--n-iter", type=positive_int, help="ITQ iterations (default 50)")
    p.add_argument("--out", required=True, help="model directory to create")
    p.add_argument("--overwrite", action="store_true")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted run from OUT.checkpoint (itq, dish: saved after every iteration)")

    p = cmd("encode", "Encode every row of a dataset into packed binary codes (zarr)")
    p.add_argument("--dataset", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True, help="codes array to create (zarr)")
    p.add_argument("--overwrite", action="store_true")

    p = cmd("search", "Hamming top-k (or radius) search of a split's queries; results to parquet")
    p.add_argument("--dataset", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--codes", required=True, help="codes made by `dhash encode` with this model")
    p.add_argument("--split", default="default", help="queries = this split's query rows, database = the rest")
    p.add_argument("--k", type=positive_int, help="neighbours per query (default 100)")
    p.add_argument("--radius", type=non_negative_int, help="radius search instead of top-k")
    p.add_argument("--out", required=True, help="results parquet file (query_id, rank, id, hamming)")
    p.add_argument("--overwrite", action="store_true")

    p = cmd("bench", "Benchmark a stage against its peer (FAISS, or the plain-pass floor); writes JSON + Markdown")
    p.add_argument("stage", choices=["search", "groundtruth", "train", "encode"])
    p.add_argument("--n", type=positive_int, required=True, help="database rows (search: codes; others: sift-synth rows)")
    p.add_argument("--bits", type=positive_int, default=32)
    p.add_argument("--queries", type=positive_int, default=1000)
    p.add_argument("--k", type=positive_int, default=100)
    p.add_argument("--method", default="dish", help="train: dish, dish-allreduce, itq, or itq-vs-faiss (ITQ vs faiss.ITQTransform: time, Fashion-MNIST map)")
    p.add_argument("--iterations", type=positive_int, default=10, help="train: outer iterations (fixed, no early stop)")
    p.add_argument("--nodes", type=positive_int, default=10, help="train: DisH nodes")
    p.add_argument("--floor-repeats", type=int, default=2, choices=[1, 2],
                   help="train: time the floor before and after ours (2, averaged) or only before (1)")
    p.add_argument("--data", help="dataset directory to use (its first --n rows); default: sift-synth of --n rows, cached")
    p.add_argument("--bench-threads", type=positive_int, help="search/groundtruth: threads for both sides (default: all cores)")
    p.add_argument("--seed", type=non_negative_int, default=0)
    p.add_argument("--out", required=True, help="result JSON file (a Markdown table is written beside it)")

    p = cmd("run", "Run a TOML pipeline of dhash steps as one scheduled batch job (lock, skip up-to-date steps, logs)")
    p.add_argument("pipeline", help="pipeline file (see jobs/configs/nightly.toml, weekly.toml)")
    p.add_argument("--force", action="store_true", help="run every step, even those whose inputs and output are unchanged")
    p.add_argument("--date", type=_date, help="the {date} of the run, YYYY-MM-DD (default: today, UTC): backfills")
    p.add_argument("--set", dest="variables", action="append", default=[], metavar="NAME=VALUE",
                   help="override a [vars] entry of the pipeline (repeatable)")
    p.add_argument("--dry-run", action="store_true", help="print the steps and which would be skipped; run nothing")
    p.add_argument("--workdir", help="working directory (default: the pipeline's [pipeline] workdir, relative to its file)")

    for name, help_ in (("evaluate", "Train, encode, search and score methods x bit lengths; write a report directory"),
                        ("demo", "End-to-end demo: sift-synth (and Fashion-MNIST when installed) with LSH, PCAH, ITQ, DisH")):
        p = cmd(name, help_, [dish])
        if name == "evaluate":
            p.add_argument("--dataset", required=True, help="dataset path or built-in source (fashion-mnist, sift-synth)")
        p.add_argument("--methods", type=name_list,
                       default=["lsh", "pcah", "itq"] if name == "evaluate" else ["lsh", "pcah", "itq", "dish"])
        p.add_argument("--bits", type=positive_int_list, default=[32] if name == "evaluate" else [32, 64])
        p.add_argument("--queries", type=positive_int, default=1000)
        p.add_argument("--seed", type=non_negative_int, default=0)
        p.add_argument("--n", type=positive_int, default=1_000_000, help="sift-synth: number of points")
        p.add_argument("--ground-truth", choices=["labels", "euclidean"], help="default: labels when the dataset has them")
        p.add_argument("--top-k", type=positive_int, help="euclidean ground truth: K nearest neighbours")
        p.add_argument("--top-percent", type=positive_float, help="euclidean ground truth: top P percent of the database")
        p.add_argument("--ks", type=positive_int_list, default=[1, 10, 50, 100, 200, 500, 1000], help="K values of precision@K")
        p.add_argument("--chunk-rows", type=positive_int, help="rows per feature chunk when materialising a built-in source")
        p.add_argument("--dish2-dictionaries", type=positive_int,
                       help="DisH2: score this many node dictionaries drawn with the seed (1 = the paper's DisH2, one "
                            "random node); default all nodes, reported as mean and std")
        p.add_argument("--out", required=name == "evaluate", default="runs/demo", help="report directory")
    return parser


def parse_args(argv):
    """Flags > --config TOML > defaults. The config is read before the real parse so that
    options it provides (even required ones such as --dataset) need not be on the command line."""
    parser = build_parser()
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config")
    known, rest = pre.parse_known_args(argv)
    command = next((a for a in rest if not a.startswith("-")), None)
    subparsers = parser._subparsers._group_actions[0].choices
    if known.config and command in subparsers:
        from jobs.config import load_config
        sub = subparsers[command]
        values = load_config(known.config, command, sub, commands=tuple(subparsers))
        for action in sub._actions:
            if action.dest in values:
                action.required = False
        sub.set_defaults(**values)
    return parser.parse_args(argv)


# ------------------------------------------------------------------ commands ---------

def _dataset(args, name=None):
    from pipeline.data.sources import resolve_dataset
    from pipeline.distributed.progress import compute_with_progress
    return resolve_dataset(name or args.dataset, n=getattr(args, "n", None), seed=getattr(args, "seed", 0),
                           chunk_rows=getattr(args, "chunk_rows", None),
                           progress=lambda tasks: compute_with_progress(tasks, show=not args.quiet))


def cmd_ingest(args):
    from pipeline.data.sources import SOURCES, write_fashion_mnist
    from pipeline.distributed.progress import rows_bar
    if args.source == "fashion-mnist":
        ds = write_fashion_mnist(args.out, chunk_rows=args.chunk_rows, overwrite=args.overwrite)
    else:
        if args.source in SOURCES:
            raise InputError(f"{args.source} is generated, not ingested; use `dhash synth sift --out {args.out}`")
        from pipeline.data.ingest import ingest_file
        from pipeline.data.readers import open_reader
        from pipeline.storage.location import resolve
        # a remote file is copied first (ingest_file): its row count is known only then
        n = open_reader(args.source, args.format, args.column).n if resolve(args.source).is_local else None
        with rows_bar(n, "ingest", show=not args.quiet) as bar:
            ds = ingest_file(args.source, args.out, format=args.format, column=args.column, labels=args.labels,
                             label_column=args.label_column, chunk_rows=args.chunk_rows, overwrite=args.overwrite,
                             progress=bar)
    print(f"dataset: {ds.path} ({ds.n} x {ds.d} {ds.dtype}, labels: {ds.has_labels})")


def cmd_synth(args):
    from pipeline.data.synth import write_sift_synth
    from pipeline.distributed.progress import compute_with_progress
    started = time.perf_counter()
    ds = write_sift_synth(args.out, args.n, seed=args.seed, chunk_rows=args.chunk_rows, overwrite=args.overwrite,
                          progress=lambda tasks: compute_with_progress(tasks, show=not args.quiet))
    secs = time.perf_counter() - started
    print(f"dataset: {ds.path} ({ds.n} x {ds.d} {ds.dtype}) in {secs:.1f}s ({ds.n / secs:,.0f} rows/s)")


def cmd_split(args):
    ds = _dataset(args)
    split = ds.make_split(args.queries, args.seed, name=args.name, overwrite=args.overwrite)
    print(f"split {split.name}: {split.n_query} queries, {split.n_database} database rows, "
          f"seed {args.seed}, sha256 {split.manifest['query_sha256'][:16]}")


def cmd_groundtruth(args):
    from pipeline.evaluation.truth import build_truth
    ds = _dataset(args)
    split = ds.get_split(args.split)
    truth = build_truth(ds, split, ground_truth="euclidean", top_k=args.top_k, top_percent=args.top_percent)
    print(f"ground truth: {ds.path}/groundtruth ({split.n_query} queries x {truth.description['k']} neighbours, "
          f"stored as {truth.description['form']})")


def _train_rows(ds, split_name):
    from pipeline.distributed.graph import drop_rows
    X = ds.features_dask()
    if split_name:
        split = ds.get_split(split_name)
        return drop_rows(X, split.query), split.manifest
    return X, {}


DISH_OPTIONS = ("nodes", "topology", "partition", "rho", "rho_scale", "inner_steps", "max_iter", "init", "dictionary")


# flag -> (method or None for every method that takes it, parameter name)
METHOD_OPTIONS = {"n_bases": (None, "n_bases"), "bandwidth_scale": (None, "bandwidth_scale"),
                  "sgh_rho_scale": ("sgh", "rho_scale"), "kernel_cache": (None, "kernel_cache"),
                  "labeled": (None, "n_labeled"), "eta": (None, "eta"), "region_size": (None, "region_size"),
                  "decay": (None, "decay")}


def _method_params(args) -> dict:
    """Method options given on the command line or in the config (None = the default)."""
    params = {k: getattr(args, k) for k in (*DISH_OPTIONS, "n_iter") if getattr(args, k, None) is not None}
    for flag, (method, name) in METHOD_OPTIONS.items():
        value = getattr(args, flag, None)
        if value is None:
            continue
        if method is None:
            params[name] = value
        else:
            params.setdefault(method, {})[name] = value
    return params


def _check_checkpoint(ckpt, args) -> None:
    """A checkpoint beside --out: another live run's is refused; an interrupted run's is
    resumed with --resume, discarded with --overwrite, else refused."""
    from pipeline.hashing.checkpoint import live_writer
    writer = live_writer(ckpt)
    if writer is not None:
        raise InputError(f"another training run (pid {writer['pid']}) is writing {ckpt}; wait for it or train into "
                         "another --out")
    if args.resume:
        return
    if not args.overwrite:
        raise InputError(f"{ckpt} holds the state of an interrupted training run; pass --resume to continue it, "
                         "or --overwrite to start over")
    ckpt.remove()
    _log(f"train: removed the interrupted run's checkpoint {ckpt} (--overwrite); training starts over")


def cmd_train(args):
    from pipeline.hashing import make_hasher
    from pipeline.hashing.checkpoint import checkpoint_path
    from pipeline.storage.datasets import dataset_summary
    ds = _dataset(args)
    model = make_hasher(args.method, args.bits, random_state=args.seed, **_method_params(args))
    ckpt = checkpoint_path(args.out) if model.supports_checkpoint else None
    if ckpt is not None and ckpt.exists():
        _check_checkpoint(ckpt, args)
    X, manifest = _train_rows(ds, args.split)
    y = ds.labels
    if y is not None and args.split:
        y = np.delete(y, ds.get_split(args.split).query, axis=0)
    model.fit(X, model.labels_for_fit(y), checkpoint=ckpt)
    model.save(args.out, dataset={**dataset_summary(ds), "split": manifest}, overwrite=args.overwrite)
    if ckpt is not None:
        ckpt.remove()   # the model holds everything now
    secs = model.training_stats_["train_seconds"]
    passes = model.training_stats_.get("passes", 1)
    print(f"model: {args.out} ({model.method}, {model.n_bits} bits, id {model.model_id}, {secs:.1f}s, "
          f"{passes} passes over {X.shape[0]:,} rows: {passes * X.shape[0] / secs:,.0f} rows/s)")


def cmd_encode(args):
    from pipeline.distributed.progress import compute_with_progress
    from pipeline.hashing import load_model
    from pipeline.storage.codes import encode_to_zarr
    ds = _dataset(args)
    model = load_model(args.model)
    started = time.perf_counter()
    encode_to_zarr(args.out, ds.features_dask(), model, dataset=ds, overwrite=args.overwrite,
                   progress=lambda done: compute_with_progress(done, show=not args.quiet))
    secs = time.perf_counter() - started
    print(f"codes: {args.out} ({ds.n} x {model.code_bytes} bytes) in {secs:.1f}s ({ds.n / secs:,.0f} rows/s)")


def cmd_search(args):
    args.k = 100 if args.k is None else args.k
    from pipeline.distributed.graph import drop_rows, row_numbers
    from pipeline.distributed.progress import compute_with_progress
    from pipeline.hashing import load_model
    from pipeline.search.hamming import knn_search_lazy, radius_search
    from pipeline.storage.codes import codes_dask, open_codes
    from pipeline.storage.results import write_knn_results, write_radius_results
    ds = _dataset(args)
    model = load_model(args.model)
    reader, _ = open_codes(args.codes, model, ds)
    if reader.shape[0] != ds.n:
        raise InputError(f"codes at {args.codes} have {reader.shape[0]} rows but the dataset has {ds.n}; encode this dataset")
    split = ds.get_split(args.split)
    codes = codes_dask(reader)
    queries = reader.take(split.query)
    db, ids = drop_rows(codes, split.query), drop_rows(row_numbers(codes), split.query)
    started = time.perf_counter()
    if args.radius is not None:
        res = radius_search(queries, db, args.radius, ids=ids)
        write_radius_results(args.out, split.query, *res, overwrite=args.overwrite)
        found = len(res[0])
    else:
        dist, nn = compute_with_progress(knn_search_lazy(queries, db, args.k, ids=ids), show=not args.quiet)
        write_knn_results(args.out, split.query, dist, nn, overwrite=args.overwrite)
        found = int((nn >= 0).sum())
    secs = time.perf_counter() - started
    print(f"results: {args.out} ({len(queries)} queries x {db.shape[0]:,} codes, {found} rows) in {secs:.2f}s "
          f"({len(queries) * db.shape[0] / secs / 1e9:.2f} G query-code pairs/s)")


def _evaluate(args, ds, out):
    from pipeline.evaluation.evaluate import run_evaluation
    from pipeline.evaluation.report import quality_table
    report = run_evaluation(ds, methods=args.methods, bits=args.bits, n_queries=args.queries, seed=args.seed,
                            out=out, ground_truth=args.ground_truth, top_k=args.top_k, top_percent=args.top_percent,
                            ks=args.ks, params=_method_params(args), log=None if args.quiet else _log,
                            dish2_count=args.dish2_dictionaries)
    print(f"\n## {ds.source}: {ds.n} points, {args.queries} queries, ground truth {report['ground_truth']['kind']}\n")
    print(quality_table(report))
    print(f"\nreport: {out}/report.json, report.md, " + ", ".join(report["plots"]))
    return report


def cmd_evaluate(args):
    from pipeline.hashing import METHOD_NAMES
    unknown = [m for m in args.methods if m not in METHOD_NAMES]
    if unknown:
        raise InputError(f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(METHOD_NAMES)}")
    _evaluate(args, _dataset(args), args.out)


def cmd_demo(args):
    from pipeline.data.sources import fashion_mnist_available
    out = Path(args.out)
    _log(f"demo: sift-synth with {args.n:,} points (generated chunk-parallel, cached in the data directory)")
    sift = _dataset(args, "sift-synth")
    demo_args = argparse.Namespace(**{**vars(args), "ground_truth": "euclidean",
                                      "top_k": args.top_k or (None if args.top_percent else 1000)})
    _evaluate(demo_args, sift, out / "sift-synth")
    if fashion_mnist_available():
        _log("demo: Fashion-MNIST (label ground truth)")
        fm_args = argparse.Namespace(**{**vars(args), "ground_truth": "labels", "top_k": None, "top_percent": None})
        _evaluate(fm_args, _dataset(args, "fashion-mnist"), out / "fashion-mnist")
    else:
        _log("demo: Fashion-MNIST skipped (install it with `apt-get install dataset-fashion-mnist`)")


def cmd_bench(args):
    from pipeline.bench import runs
    cpu_before = runs.cpu_jiffies()
    for name in ("n", "bits", "queries", "k", "iterations", "nodes"):
        if getattr(args, name) < 1:
            raise InputError(f"--{name} must be a positive integer; got {getattr(args, name)}")
    if args.stage in ("search", "groundtruth"):
        fn = runs.bench_search if args.stage == "search" else runs.bench_groundtruth
        kwargs = {"bits": args.bits} if args.stage == "search" else {"data": args.data}
        result = fn(args.n, queries=args.queries, k=args.k, threads=args.bench_threads, seed=args.seed, **kwargs)
    else:
        from pipeline.distributed.cluster import connect, disconnect
        client = connect(args.scheduler, workers=args.workers, threads=args.threads, quiet=args.quiet)
        try:
            if args.stage == "train" and args.method == "itq-vs-faiss":
                result = runs.bench_itq_vs_faiss(args.n, args.bits, args.seed, args.data, args.bench_threads)
            elif args.stage == "train":
                result = runs.bench_train(args.n, args.bits, args.method, args.iterations, args.nodes, args.seed, args.data,
                                          args.floor_repeats)
            else:
                result = runs.bench_encode(args.n, args.bits, args.seed, args.data)
        finally:
            disconnect(client)
    result["cpu_steal_fraction_during_run"] = runs.steal_fraction(cpu_before, runs.cpu_jiffies())
    runs.write_result(result, args.out)
    _log(runs.markdown(result))
    print(f"bench: {args.out} (ratio ours/peer seconds {result['ratio_ours_over_peer_seconds']})")


def cmd_run(args):
    from jobs.run import run_pipeline
    overrides = {}
    for item in args.variables:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise InputError(f"--set expects NAME=VALUE, got {item!r}")
        overrides[name.strip()] = _toml_value(value)
    return run_pipeline(args.pipeline, scheduler=args.scheduler, workers=args.workers, threads=args.threads,
                        force=args.force, dry_run=args.dry_run, date=args.date, overrides=overrides,
                        workdir=args.workdir, quiet=args.quiet)


def _toml_value(text: str):
    """--set values are TOML scalars when they parse as one (numbers, true/false), else strings."""
    import tomllib
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


COMMANDS = {"ingest": cmd_ingest, "synth": cmd_synth, "split": cmd_split, "groundtruth": cmd_groundtruth,
            "train": cmd_train, "encode": cmd_encode, "search": cmd_search, "evaluate": cmd_evaluate,
            "demo": cmd_demo, "bench": cmd_bench, "run": cmd_run}
NEEDS_CLUSTER = {"synth", "groundtruth", "train", "encode", "search", "evaluate", "demo", "split"}


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is now (``dhash run`` tees it into its log file)."""

    def emit(self, record):
        self.stream = sys.stderr
        super().emit(record)


def _configure_logging(quiet: bool) -> None:
    """Per-iteration training figures from the library's loggers go to stderr."""
    logger = logging.getLogger("pipeline")
    if not any(getattr(h, "_dhash", False) for h in logger.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler._dhash = True
        logger.addHandler(handler)
    logger.setLevel(logging.WARNING if quiet else logging.INFO)


@contextlib.contextmanager
def _performance_report(path):
    """Dask's performance report of everything the job computes, written atomically: a
    failed job leaves no report (and no half-written file) behind."""
    if not path:
        yield
        return
    from distributed import performance_report

    from pipeline.storage.atomic import atomic_output
    with atomic_output(path, kind="file", overwrite=True, file=True) as tmp, performance_report(filename=str(tmp)):
        yield
    _log(f"performance report: {path}")


# what each command writes at --out: an existing path is replaced only if it is this kind
OUTPUT_KINDS = {"ingest": "dataset", "synth": "dataset", "train": "model", "encode": "codes",
                "search": "search-results", "evaluate": "report"}   # demo: one report per dataset below --out
EXIT_TERMINATED = 143   # 128 + SIGTERM, what a shell reports for a process killed by TERM


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so every ``atomic_output`` removes its temporary."""


def _raise_terminated(signum, frame):
    raise Terminated()


@contextlib.contextmanager
def _sigterm_cleans_up():
    import signal
    import threading
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _check_before_work(args) -> None:
    """Checks that need no data, before any cluster starts or any computation runs: option
    combinations, and where this command will write (writable, replaceable when it exists)."""
    from pipeline.storage.atomic import check_output
    from pipeline.storage.location import set_storage_options
    set_storage_options(getattr(args, "storage_options", None))
    if args.command == "search" and args.radius is not None and args.k is not None:
        raise InputError("give either --k (top-k search) or --radius (radius search), not both")
    kind = OUTPUT_KINDS.get(args.command)
    if kind is not None and getattr(args, "out", None):
        # evaluate and demo replace their own previous report; the others need --overwrite
        check_output(args.out, kind=kind, overwrite=getattr(args, "overwrite", True))
    if getattr(args, "performance_report", None):
        check_output(args.performance_report, kind="file", overwrite=True)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    with _sigterm_cleans_up():
        return _main(argv)


def _main(argv) -> int:
    client = None
    try:
        args = parse_args(argv)
        _configure_logging(args.quiet)
        _check_before_work(args)
        if args.command in NEEDS_CLUSTER:
            from pipeline.distributed.cluster import connect
            client = connect(args.scheduler, workers=args.workers, threads=args.threads, quiet=args.quiet)
        with _performance_report(getattr(args, "performance_report", None)):
            status = COMMANDS[args.command](args)
        return status or 0
    except Terminated:
        print("error: terminated by SIGTERM; unfinished outputs were removed", file=sys.stderr)
        return EXIT_TERMINATED
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return getattr(exc, "exit_code", EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    finally:
        if client is not None:
            from pipeline.distributed.cluster import disconnect
            disconnect(client)
