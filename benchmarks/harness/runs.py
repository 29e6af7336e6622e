"""``python -m benchmarks search|groundtruth|train|encode``: our stage and its peer, same
data, same threads, same process, one JSON result (+ a Markdown table beside it).

Peers: search -> ``faiss.IndexBinaryFlat``; ground truth -> ``faiss.IndexFlatL2``;
training -> the floor = the same number of plain passes that only read each chunk and
compute (X - mean) C with the same slabbed float32 projection as the encoder (the cheapest
way we know to touch every row), plus ``faiss.ITQTransform`` for ITQ; encoding -> one
floor pass. Search and ground truth run in-process on in-memory data with dask's threaded
scheduler (FAISS is an in-memory library); training and encoding run on the Dask cluster
reading the zarr dataset, exactly as ``dhash train``/``dhash encode`` do.

Peak memory: in-process phases reset the kernel's high-water mark (/proc/self/clear_refs)
before each phase and read VmHWM after it; cluster phases poll every process of the tree.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import dask
import dask.array as da
import numpy as np
from threadpoolctl import threadpool_limits

from benchmarks.harness.measure import (
    TreeWatcher,
    dish_pass_flops,
    disk_usage,
    gemm_rate,
    machine_info,
    peak_rss_mb,
    reset_peak_rss,
    tree_memory,
)
from dask_hashcodes.errors import InputError
from dask_hashcodes.kernels.stats import add

SEARCH_CHUNK_ROWS = 1 << 20


def _faiss():
    try:
        import faiss
    except ImportError:
        raise InputError(
            "the benchmarks need faiss-cpu and psutil; install them with pip install -e '.[bench]'"
        ) from None
    return faiss


def cpu_jiffies() -> tuple[int, int]:
    """(steal, total) CPU time of the machine from /proc/stat: steal = time the hypervisor
    gave our virtual CPUs to someone else, the main source of noise on a shared host."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return fields[7], sum(fields[:8])
    except (OSError, IndexError, ValueError):
        return 0, 1


def steal_fraction(before, after) -> float:
    return round((after[0] - before[0]) / max(1, after[1] - before[1]), 4)


def _timed_in_process(fn):
    """(result, seconds, peak RSS MB of this process during fn)."""
    reset_peak_rss()
    started = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - started, peak_rss_mb()


def _timed_on_cluster(fn):
    """(result, seconds, memory of the whole process tree: client, scheduler, workers, and
    the fraction of CPU time stolen by the hypervisor meanwhile)."""
    cpu = cpu_jiffies()
    with TreeWatcher(os.getpid(), "client + scheduler") as watch:
        started = time.perf_counter()
        out = fn()
        seconds = time.perf_counter() - started
    return out, seconds, {**tree_memory(watch), "cpu_steal_fraction": steal_fraction(cpu, cpu_jiffies())}


def command_line() -> str:
    """The command this process runs, as a user would type it again from the checkout's root:
    ``python -m benchmarks ...`` for the entry point, the script and its arguments otherwise."""
    if Path(sys.argv[0]).resolve() == Path(__file__).resolve().parents[1] / "__main__.py":
        return " ".join(["python -m benchmarks", *sys.argv[1:]])
    return " ".join(sys.argv)


def _result(kind: str, params: dict, ours: dict, peer: dict, **extra) -> dict:
    return {
        "benchmark": kind,
        "command": command_line(),
        "machine": machine_info(),
        "params": params,
        "ours": ours,
        "peer": peer,
        "ratio_ours_over_peer_seconds": round(ours["seconds"] / peer["seconds"], 4),
        **extra,
    }


# ------------------------------------------------------------------------- search ----


def random_codes(n: int, n_bits: int, seed: int) -> np.ndarray:
    """Uniform random packed codes (the standard Hamming-search workload), made in blocks."""
    rng = np.random.default_rng(seed)
    out = np.empty((n, (n_bits + 7) // 8), np.uint8)
    for start in range(0, n, 1 << 22):
        out[start : start + (1 << 22)] = rng.integers(0, 256, out[start : start + (1 << 22)].shape, np.uint8)
    return out


def _true_hamming(queries, codes, ids):
    from dask_hashcodes.kernels.hamming import hamming_distances

    return np.stack([hamming_distances(queries[q : q + 1], codes[ids[q]])[0] for q in range(len(queries))])


def topk_agreement(D_peer, I_peer, D_ours, I_ours, true_distances) -> dict:
    """Identical distance lists; ids identical except where the k-th distance is tied, and
    every id we return really lies at the distance we report."""
    same_d = bool(np.array_equal(np.asarray(D_peer, np.float64), np.asarray(D_ours, np.float64)))
    kth = np.asarray(D_ours)[:, -1:]
    strict = [set(I_peer[q][D_peer[q] < kth[q]]) == set(I_ours[q][D_ours[q] < kth[q]]) for q in range(len(D_ours))]
    ours_true = bool(np.array_equal(np.asarray(true_distances, np.float64), np.asarray(D_ours, np.float64)))
    return {
        "identical_distances": same_d,
        "ids_equal_up_to_ties": bool(all(strict) and ours_true),
        "same_id_same_rank_fraction": round(float(np.mean(I_peer == I_ours)), 6),
        "our_ids_at_reported_distance": ours_true,
    }


def bench_search(
    n: int, bits: int, queries: int = 1000, k: int = 100, threads: int | None = None, seed: int = 0
) -> dict:
    from dask_hashcodes.indexes.hamming import knn_search

    faiss = _faiss()
    threads = threads or os.cpu_count()
    codes, query_codes = random_codes(n, bits, seed), random_codes(queries, bits, seed + 1)
    knn_search(query_codes[:2], codes[:10_000], k)  # compile the numba kernels outside the timing
    array = da.from_array(codes, chunks=(SEARCH_CHUNK_ROWS, codes.shape[1]))
    with dask.config.set(scheduler="threads", num_workers=threads):
        (d_ours, i_ours), ours_s, ours_mb = _timed_in_process(lambda: knn_search(query_codes, array, k))
    faiss.omp_set_num_threads(threads)
    index = faiss.IndexBinaryFlat(bits)
    index.add(codes)
    (d_peer, i_peer), peer_s, peer_mb = _timed_in_process(lambda: index.search(query_codes, k))
    index = None  # free FAISS's copy of the data before the checks
    pairs = n * queries
    agreement = topk_agreement(d_peer, i_peer, d_ours, i_ours, _true_hamming(query_codes, codes, i_ours))
    return _result(
        "search",
        {
            "n": n,
            "bits": bits,
            "queries": queries,
            "k": k,
            "threads": threads,
            "seed": seed,
            "data": "uniform random codes",
            "chunk_rows": SEARCH_CHUNK_ROWS,
        },
        {
            "name": "dhash knn_search (tiled numba kernel, dask threads)",
            "seconds": round(ours_s, 6),
            "pairs_per_second": round(pairs / ours_s),
            "peak_rss_mb": ours_mb,
        },
        {
            "name": "faiss.IndexBinaryFlat.search",
            "seconds": round(peer_s, 6),
            "pairs_per_second": round(pairs / peer_s),
            "peak_rss_mb": peer_mb,
        },
        speedup_pairs_per_second=round(peer_s / ours_s, 3),
        agreement=agreement,
        acceptance={
            "target": "pairs/s >= 1.2x faiss.IndexBinaryFlat, identical distance lists",
            "met": bool(peer_s / ours_s >= 1.2 and agreement["identical_distances"]),
        },
    )


# ------------------------------------------------------------------ ground truth ----


def _sift_rows(n: int, seed: int, data: str | None) -> np.ndarray:
    if data:
        from dask_hashcodes.storage.datasets import open_dataset

        ds = open_dataset(data)
        if n > ds.n:
            raise InputError(f"--n {n} exceeds the {ds.n} rows of {data}; lower --n")
        return ds.features[:n]
    from dask_hashcodes.data.synth import sift_rows

    return sift_rows(seed, 0, n)


def bench_groundtruth(
    n: int, queries: int = 1000, k: int = 100, threads: int | None = None, seed: int = 0, data: str | None = None
) -> dict:
    from dask_hashcodes.data.synth import sift_rows
    from dask_hashcodes.evaluation.truth import euclidean_neighbours
    from dask_hashcodes.kernels.l2 import squared_distances

    faiss = _faiss()
    threads = threads or os.cpu_count()
    X = _sift_rows(n, seed, data)
    Q = sift_rows(seed + 1, 0, queries)  # another generator stream: not database rows
    euclidean_neighbours(da.from_array(X[:5000], chunks=(2500, X.shape[1])), Q[:2], 10)  # compile
    array = da.from_array(X, chunks=(131072, X.shape[1]))

    def ours():
        # one BLAS thread per Dask thread, as on the cluster's workers (dask's nanny caps
        # them): a multithreaded BLAS inside each thread's task oversubscribes the cores
        with dask.config.set(scheduler="threads", num_workers=threads), threadpool_limits(1, user_api="blas"):
            return euclidean_neighbours(array, Q, k)

    def peer():
        return index.search(Q.astype(np.float32), k)

    # Best of two runs each, alternating (ours, peer, ours, peer): a shared VM's speed drifts
    # by up to 2x within minutes (FAISS alone: 3.4 to 6.4 s for the same 2M search). Our
    # first run comes before FAISS's index exists, so its peak RSS is our own.
    ours_runs = [_timed_in_process(ours)]
    faiss.omp_set_num_threads(threads)
    index = faiss.IndexFlatL2(X.shape[1])
    index.add(X.astype(np.float32))
    peer_runs = [_timed_in_process(peer)]
    ours_runs.append(_timed_in_process(ours))
    peer_runs.append(_timed_in_process(peer))
    (i_ours, d_ours), ours_s, _ = min(ours_runs, key=lambda run: run[1])
    ours_mb = ours_runs[0][2]
    (d_peer, i_peer), peer_s, peer_mb = min(peer_runs, key=lambda run: run[1])
    index = None  # free FAISS's copy of the data before the checks
    true_d = np.stack([squared_distances(Q[q : q + 1], X[i_ours[q]])[0] for q in range(len(Q))])
    agreement = topk_agreement(d_peer, i_peer, d_ours, i_ours, true_d)
    return _result(
        "groundtruth",
        {
            "n": n,
            "d": X.shape[1],
            "dtype": str(X.dtype),
            "queries": queries,
            "k": k,
            "threads": threads,
            "seed": seed,
            "data": data or "sift_rows(seed)",
        },
        {
            "name": "dhash euclidean_neighbours (float32-exact GEMM + numba heap, dask threads)",
            "seconds": round(ours_s, 3),
            "all_seconds": [round(run[1], 3) for run in ours_runs],
            "peak_rss_mb": ours_mb,
        },
        {
            "name": "faiss.IndexFlatL2.search (float32 copy of the data)",
            "seconds": round(peer_s, 3),
            "all_seconds": [round(run[1], 3) for run in peer_runs],
            "gflops": round(2 * n * queries * X.shape[1] / peer_s / 1e9, 1),
            "peak_rss_mb": peer_mb,
        },
        agreement=agreement,
        acceptance={
            "target": "time <= 1.2x faiss.IndexFlatL2, identical neighbours up to ties",
            "met": bool(ours_s <= 1.2 * peer_s and agreement["ids_equal_up_to_ties"]),
        },
    )


# --------------------------------------------------------------- training/encode ----


def _project_only(block, mean, C):
    """The floor of a pass: read the chunk (done by the task's input) and project it."""
    from dask_hashcodes.kernels.codes import project_slabs

    total = 0.0
    for _, projected in project_slabs(block, mean, C):
        total += float(projected[0, 0])
    return total


def floor_passes(X, mean, C, passes: int) -> float:
    from dask_hashcodes.distributed.graph import chunk_reads, map_reduce

    started = time.perf_counter()
    for _ in range(passes):
        dask.compute(map_reduce("floor-pass", _project_only, add, chunk_reads(X), mean, C))
    return time.perf_counter() - started


def _warm_kernels() -> None:
    """Load every numba kernel a pass uses (from the on-disk cache) before anything is timed."""
    from dask_hashcodes.kernels.codes import encode_linear
    from dask_hashcodes.kernels.gram import gram_chunk, row_sums

    block = np.zeros((8, 4), np.uint8)
    C = np.eye(4, 2)
    gram_chunk(block, np.zeros(4), C)
    encode_linear(block, np.zeros(4), C)
    row_sums(block)


def _warm_cluster() -> None:
    from distributed import get_client

    _warm_kernels()
    get_client().run(_warm_kernels)


def _training_rows(n: int, data: str | None, seed: int):
    from dask_hashcodes.data.sources import resolve_dataset

    ds = resolve_dataset(data or "sift-synth", n=n, seed=seed)
    if n > ds.n:
        raise InputError(f"--n {n} exceeds the {ds.n} rows of {ds.path}; lower --n or give a larger --data")
    return ds, ds.features_dask()[:n]


def _train_model(method: str, bits: int, iterations: int, nodes: int, seed: int):
    from dask_hashcodes.hashing import ITQ, DisH

    if method == "dish":
        return DisH(
            bits, consensus="admm", nodes=nodes, max_iter=iterations, tol=0.0, consensus_tol=0.0, random_state=seed
        )
    if method == "dish-allreduce":
        return DisH(bits, consensus="allreduce", max_iter=iterations, tol=0.0, random_state=seed)
    if method == "itq":
        return ITQ(bits, n_iter=iterations, random_state=seed)
    raise InputError(f"unknown --method {method!r} for the train benchmark; use dish, dish-allreduce or itq")


def bench_train(
    n: int,
    bits: int,
    method: str = "dish",
    iterations: int = 10,
    nodes: int = 10,
    seed: int = 0,
    data: str | None = None,
    floor_repeats: int = 2,
) -> dict:
    from dask_hashcodes.distributed.cluster import cluster_shape
    from dask_hashcodes.kernels.dish import random_orthonormal

    ds, X = _training_rows(n, data, seed)
    model = _train_model(method, bits, iterations, nodes, seed)
    C = random_orthonormal(X.shape[1], bits, np.random.default_rng(seed))
    mean = np.full(X.shape[1], 30.0)
    _warm_cluster()
    # floor before and after ours, averaged: the host's load drifts over minutes
    _, floor_before, floor_mem = _timed_on_cluster(lambda: floor_passes(X, mean, C, iterations))
    _, ours_s, ours_mem = _timed_on_cluster(lambda: model.fit(X))
    floor_after = floor_before
    if floor_repeats > 1:
        _, floor_after, floor_mem_after = _timed_on_cluster(lambda: floor_passes(X, mean, C, iterations))
        floor_mem["cpu_steal_fraction_after"] = floor_mem_after["cpu_steal_fraction"]
    floor_s = (floor_before + floor_after) / 2
    stats = model.training_stats_
    ours = {
        "name": f"dhash {method} fit ({iterations} iterations, all passes included)",
        "seconds": round(ours_s, 2),
        "passes": stats.get("passes"),
        "memory": ours_mem,
    }
    for key in ("pass_seconds", "admm_seconds", "objective", "consensus_residual", "quantization_loss"):
        if key in stats:
            ours[key] = stats[key]
    if "pass_seconds" in stats:
        ours["seconds_in_iteration_passes"] = round(sum(stats["pass_seconds"]), 2)
        ours["seconds_in_admm"] = round(sum(stats["admm_seconds"]), 2)
    if "node_rows_held" in stats:  # resident on the nodes' workers, or streamed from storage
        ours["node_rows_held"] = stats["node_rows_held"]
    ratio = ours_s / floor_s
    out = _result(
        "train",
        {
            "n": n,
            "d": int(X.shape[1]),
            "bits": bits,
            "method": method,
            "iterations": iterations,
            "nodes": nodes if method == "dish" else None,
            "seed": seed,
            "data": str(ds.path),
            "cluster": cluster_shape(),
        },
        ours,
        {
            "name": f"floor: {iterations} plain passes (read chunk + slabbed float32 (X - mean) C)",
            "seconds": round(floor_s, 2),
            "seconds_before_and_after": [round(floor_before, 2), round(floor_after, 2)],
            "memory": floor_mem,
        },
        dataset_disk=disk_usage(Path(ds.path)),
    )
    if method == "dish":
        out["compute_floor"] = _dish_compute_floor(n, int(X.shape[1]), bits, iterations, ours_s)
        out["acceptance"] = {
            "target": "<= 391 s wall (paper, 10 nodes) at 100M and <= 1.5x the floor",
            "met": bool(ours_s <= 391 and ratio <= 1.5),
        }
    return out


def _dish_compute_floor(n: int, d: int, r: int, iterations: int, seconds: float) -> dict:
    """DisH's arithmetic at the cluster's float32 GEMM rate: every iteration's pass on every
    worker thread at one thread's measured rate."""
    from dask_hashcodes.distributed.cluster import cluster_shape

    rate, threads = gemm_rate(d, r), cluster_shape()["threads"]  # summed over the workers
    flops = dish_pass_flops(n, d, r) * iterations
    floor = flops / (rate * threads)
    return {
        "flops": flops,
        "gemm_flops_per_thread": round(rate),
        "threads": threads,
        "seconds": round(floor, 2),
        "ours_over_compute_floor": round(seconds / floor, 2),
    }


def bench_encode(n: int, bits: int, seed: int = 0, data: str | None = None, out_codes: str | None = None) -> dict:
    import shutil
    import tempfile

    from dask_hashcodes.distributed.cluster import cluster_shape
    from dask_hashcodes.distributed.encode import encode_to_zarr
    from dask_hashcodes.distributed.progress import compute_with_progress
    from dask_hashcodes.hashing import LSH

    ds, X = _training_rows(n, data, seed)
    model = LSH(bits, random_state=seed).fit(X)  # encoding cost is the same for every linear model
    _warm_cluster()
    _, floor_before, floor_mem = _timed_on_cluster(lambda: floor_passes(X, model.mean_, model.components_, 1))
    target = Path(out_codes or tempfile.mkdtemp(prefix="dhash-bench-codes-", dir=Path(ds.path).parent)) / "codes.zarr"
    try:
        _, ours_s, ours_mem = _timed_on_cluster(
            lambda: encode_to_zarr(
                target,
                X,
                model,
                dataset=ds,
                overwrite=True,
                progress=lambda done: compute_with_progress(done, show=False),
            )
        )
        codes_disk = disk_usage(target)
    finally:
        if out_codes is None:
            shutil.rmtree(target.parent, ignore_errors=True)
    _, floor_after, _ = _timed_on_cluster(lambda: floor_passes(X, model.mean_, model.components_, 1))
    floor_s = (floor_before + floor_after) / 2
    ratio = ours_s / floor_s
    return _result(
        "encode",
        {"n": n, "bits": bits, "seed": seed, "data": str(ds.path), "cluster": cluster_shape()},
        {
            "name": "dhash encode (read, project, sign, pack, write codes zarr)",
            "seconds": round(ours_s, 2),
            "rows_per_second": round(n / ours_s),
            "memory": ours_mem,
            "codes_disk": codes_disk,
        },
        {
            "name": "floor: one plain pass (read chunk + slabbed float32 (X - mean) W)",
            "seconds": round(floor_s, 2),
            "seconds_before_and_after": [round(floor_before, 2), round(floor_after, 2)],
            "memory": floor_mem,
        },
        dataset_disk=disk_usage(Path(ds.path)),
        acceptance={"target": "<= 1.3x one floor pass", "met": bool(ratio <= 1.3)},
    )


# ------------------------------------------------------------------------ output ----


def markdown(result: dict) -> str:
    m = result["machine"]
    ours, peer = result["ours"], result["peer"]
    lines = [
        f"# Benchmark {result['benchmark']}: ours against its peer",
        "",
        f"Command: `{result['command']}`",
        "",
        f"Machine: {m['cores']} cores, {m['cpu_model']}, {m['ram_total_gb']} GB RAM",
        "",
        "| | seconds | notes |",
        "|---|---|---|",
    ]
    for who in (ours, peer):
        notes = ", ".join(
            f"{k} {v}" for k, v in who.items() if k in ("pairs_per_second", "rows_per_second", "passes", "peak_rss_mb")
        )
        if "memory" in who:
            notes += f"{', ' if notes else ''}max process RSS {who['memory']['max_process_peak_rss_mb']} MB"
        lines.append(f"| {who['name']} | {who['seconds']} | {notes} |")
    lines += ["", f"Ratio ours / peer (seconds): **{result['ratio_ours_over_peer_seconds']}**"]
    if "speedup_pairs_per_second" in result:
        lines.append(f"Pairs/s ours / peer: **{result['speedup_pairs_per_second']}**")
    if "agreement" in result:
        lines.append(f"Agreement: {result['agreement']}")
    if "compute_floor" in result:
        f = result["compute_floor"]
        lines.append(
            f"Compute floor: {f['flops'] / 1e12:.2f} TFLOP at {f['gemm_flops_per_thread'] / 1e9:.1f} GFLOP/s per "
            f"thread (float32 GEMM) x {f['threads']} threads = {f['seconds']} s; ours / compute floor: "
            f"**{f['ours_over_compute_floor']}**"
        )
    if "node_rows_held" in ours:
        lines.append(f"Node rows: {'held on the workers' if ours['node_rows_held'] else 'streamed from storage'}")
    if "acceptance" in result:
        lines.append(
            f"Acceptance: {result['acceptance']['target']} -> {'met' if result['acceptance']['met'] else 'NOT met'}"
        )
    lines.append(f"Params: {result['params']}")
    if "cpu_steal_fraction_during_run" in result:
        lines.append(
            f"CPU time stolen by the hypervisor during the run: {100 * result['cpu_steal_fraction_during_run']:.1f}%"
        )
    return "\n".join(lines) + "\n"


BENCH_KIND = "bench"


RESULT_SUFFIXES = (".json", ".md")


def result_paths(out) -> tuple:
    """(JSON, Markdown) locations of the result written at ``out``: BASE.json and BASE.md,
    BASE being ``out`` without a .json or .md suffix, so ``x``, ``x.json`` and ``x.md`` all
    give x.json and x.md, and neither file is ever written over the other."""
    from dask_hashcodes.storage.location import resolve

    loc = resolve(out)
    base = loc.name
    for suffix in RESULT_SUFFIXES:
        if base.endswith(suffix) and len(base) > len(suffix):
            base = base[: -len(suffix)]
            break
    return tuple(loc.sibling(base + suffix) for suffix in RESULT_SUFFIXES)


def check_result_out(out, *, overwrite: bool, flag: str | None = None) -> None:
    """Refuse, before any work, a result we may not write: an ``out`` that exists and is
    neither BASE.json nor BASE.md (a file or directory named BASE, so the results never land
    beside something pointed at by mistake), or an existing BASE.json or BASE.md that these
    benchmarks did not write, that was edited since, or that ``overwrite`` does not allow
    replacing (``flag``: how the refusal names that setting)."""
    from dask_hashcodes.storage.atomic import OVERWRITE, check_file_output
    from dask_hashcodes.storage.location import resolve

    paths = result_paths(out)
    if resolve(out).exists() and resolve(out) not in paths:
        raise InputError(
            f"--out {out} exists and is not a benchmark result; the benchmarks write BASE.json and BASE.md, so "
            "name a new BASE (or BASE.json, BASE.md)"
        )
    for path in paths:  # both checked before either is written
        check_file_output(path, kind=BENCH_KIND, overwrite=overwrite, flag=flag or OVERWRITE)


def write_pair(result: dict, text: str, out, *, overwrite: bool = False) -> None:
    """The result JSON and its Markdown ``text`` beside it (``result_paths``), each marked as
    a bench file dhash wrote, so that a later run with ``overwrite`` may replace them."""
    from dask_hashcodes.storage.atomic import FILE_MARK, write_file_output
    from dask_hashcodes.storage.jsonio import dumps

    json_path, md_path = result_paths(out)
    write_file_output(json_path, (dumps(result) + "\n").encode(), kind=BENCH_KIND, overwrite=overwrite)
    text = text + "\n" + FILE_MARK.format(kind=BENCH_KIND) + "\n"
    write_file_output(md_path, text.encode(), kind=BENCH_KIND, overwrite=overwrite)


def write_result(result: dict, out, *, overwrite: bool = False) -> Path:
    """The result JSON (schema dhash.bench/1) and its Markdown table beside it
    (``result_paths``); an existing file is replaced only with ``overwrite`` and only when it
    is a bench result dhash wrote. Returns the JSON's path."""
    check_result_out(out, overwrite=overwrite)
    result = {"schema": f"dhash.{BENCH_KIND}/1", **{k: v for k, v in result.items() if k != "schema"}}
    write_pair(result, markdown(result), out, overwrite=overwrite)
    return Path(str(result_paths(out)[0]))


# ----------------------------------------------------------- ITQ vs faiss.ITQTransform ----


def _faiss_itq(X: np.ndarray, bits: int, threads: int):
    """Train faiss.ITQTransform (PCA + 50 ITQ iterations) on every row of X (its default
    subsamples to max_train_per_dim * d rows; we lift that so both sides see the same data)."""
    faiss = _faiss()
    faiss.omp_set_num_threads(threads)
    transform = faiss.ITQTransform(X.shape[1], bits, True)
    transform.max_train_per_dim = len(X) // X.shape[1] + 1
    transform.train(np.ascontiguousarray(X, dtype=np.float32))
    return transform


def _faiss_itq_codes(transform, X: np.ndarray) -> np.ndarray:
    from dask_hashcodes.kernels.codes import pack_signs

    out = []
    for start in range(0, len(X), 1 << 16):
        out.append(pack_signs(transform.apply(np.ascontiguousarray(X[start : start + (1 << 16)], dtype=np.float32))))
    return np.concatenate(out)


def bench_itq_vs_faiss(n: int, bits: int, seed: int = 0, data: str | None = None, threads: int | None = None) -> dict:
    """Our ITQ (cluster, 50 iterations) vs faiss.ITQTransform (in memory): training time on
    the first n sift-synth rows, and map on Fashion-MNIST (labels, 1000 queries)."""
    from dask_hashcodes.data.sources import resolve_dataset
    from dask_hashcodes.distributed.graph import drop_rows
    from dask_hashcodes.evaluation.evaluate import evaluate_method, score_codes
    from dask_hashcodes.evaluation.truth import build_truth
    from dask_hashcodes.hashing import ITQ

    threads = threads or os.cpu_count()
    _, X = _training_rows(n, data, seed)
    _warm_cluster()
    _, ours_s, ours_mem = _timed_on_cluster(lambda: ITQ(bits, n_iter=50, random_state=seed).fit(X))
    rows = X.compute()
    _, peer_s, peer_mb = _timed_in_process(lambda: _faiss_itq(rows, bits, threads))
    rows = None

    fm = resolve_dataset("fashion-mnist")
    split = fm.make_split(1000, seed, name=f"q1000-s{seed}")
    truth = build_truth(fm, split)
    features, labels = fm.features_dask(), fm.labels
    ours_row = evaluate_method(features, split.query, labels, truth, "itq", bits, seed=seed)[0]
    database = drop_rows(features, split.query).compute()
    transform = _faiss_itq(database, bits, threads)
    all_codes = _faiss_itq_codes(transform, fm.features[:])
    peer_metrics, _ = score_codes(all_codes, split.query, truth, bits)  # the same protocol as ours
    return _result(
        "train-itq-vs-faiss",
        {
            "n": n,
            "bits": bits,
            "seed": seed,
            "iterations": 50,
            "threads": threads,
            "time_data": str(data or "sift-synth"),
            "map_data": "fashion-mnist, 1000 queries, labels",
        },
        {
            "name": "dhash ITQ fit (cluster, zarr chunks)",
            "seconds": round(ours_s, 2),
            "memory": ours_mem,
            "fashion_mnist_map": round(ours_row["metrics"]["map"], 4),
            "fashion_mnist_precision@1000": round(ours_row["metrics"]["precision@1000"], 4),
        },
        {
            "name": "faiss.ITQTransform.train (in memory, all rows)",
            "seconds": round(peer_s, 2),
            "peak_rss_mb": peer_mb,
            "fashion_mnist_map": round(peer_metrics["map"], 4),
            "fashion_mnist_precision@1000": round(peer_metrics["precision@1000"], 4),
        },
    )


STAGES_ON_A_CLUSTER = ("train", "encode")  # search and groundtruth time single-process kernels


def run_stage(
    stage: str,
    out,
    *,
    n: int,
    bits: int = 32,
    queries: int = 1000,
    k: int = 100,
    method: str = "dish",
    iterations: int = 10,
    nodes: int = 10,
    floor_repeats: int = 2,
    data=None,
    threads: int | None = None,
    seed: int = 0,
    overwrite: bool = False,
) -> dict:
    """Benchmark one stage against its peer (FAISS, or the plain-pass floor) and write the
    result JSON and its Markdown table (``result_paths``: ``overwrite`` replaces a previous result).
    ``python -m benchmarks`` calls this in a checkout of the repository."""
    cpu_before = cpu_jiffies()
    if stage in ("search", "groundtruth"):
        fn = bench_search if stage == "search" else bench_groundtruth
        kwargs = {"bits": bits} if stage == "search" else {"data": data}
        result = fn(n, queries=queries, k=k, threads=threads, seed=seed, **kwargs)
    elif stage == "train" and method == "itq-vs-faiss":
        result = bench_itq_vs_faiss(n, bits, seed, data, threads)
    elif stage == "train":
        result = bench_train(n, bits, method, iterations, nodes, seed, data, floor_repeats)
    elif stage == "encode":
        result = bench_encode(n, bits, seed, data)
    else:
        raise InputError(f"unknown bench stage {stage!r}; use search, groundtruth, train or encode")
    result["cpu_steal_fraction_during_run"] = steal_fraction(cpu_before, cpu_jiffies())
    write_result(result, out, overwrite=overwrite)
    result["markdown"] = markdown(result)
    return result
