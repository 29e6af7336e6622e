#!/usr/bin/env python
"""Batch Hamming search of many queries over 100M codes on the cluster, as a user runs it
(`dask_hashcodes.workflows`), beside FAISS's binary indexes in the same run on the same codes.

    .venv/bin/python benchmarks/bench_batch_search.py --n 100000000 --queries 10000 --bits 64 \\
        --lists 4096 --data /work/bigdata/sift100m-q10k.zarr --work /work/bigdata/batch \\
        --out benchmarks/results/batch_search_100M_64b

Steps (each a library call on a local cluster of 2 worker processes x 1 thread):
1. `synth`: n + queries rows of sift-synth (skipped when --data exists), `split`: the queries
   drawn with the seed, so the database is exactly n rows;
2. ITQ learned on the first --train-rows rows (`head` then `train`; a speed benchmark, so
   the few query rows among them do not matter), `encode` of every row;
3. `index(kind="ivf")`: --lists lists, k-means on 256 rows per list, every row assigned;
   the quantiser in --quantiser-dims principal directions of the k-means rows (default: the
   library's rule); with `--quantiser codes`, k-means of 256 codes per list as +-1 vectors instead (no
   feature read; queries probe by their codes), written beside the other as `ivf-codes`;
4. `search`: the split's queries, top-k, by the linear scan and through the inverted file at
   each --nprobes, on warm workers (a first search of a few queries loads the kernels); each
   worker's peak RSS is reset before each search, so the peak reported is that search's;
5. the same searches with `warm=True`: the first reads and merges the lists into blocks the
   workers keep (reported as "first warm batch", with what each worker holds), and each
   nprobe is then searched against those blocks, as repeated batches of a long-lived job
   are.

FAISS, in a child process per index (its peak RSS is its own), on the same database codes
(every row but the queries) with 2 OpenMP threads: `IndexBinaryFlat` (exhaustive) and
`IndexBinaryIVF` with the same number of lists (k-means on the codes, FAISS's own training
on 256 codes per list) at the same nprobes.

Reported: seconds and queries/s of each search, build seconds, peak RSS per worker (ours) or
of the process (FAISS), and the recall of the exact Hamming top-k (the linear scan's
distances: a returned code within the true k-th distance counts, so ties count as found).
The scan's and IndexBinaryFlat's distance lists must be identical. Writes --out.json and
--out.md; keeps --data and --work for reruns (delete them by hand).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.harness.measure import machine_info, peak_rss_mb, reset_peak_rss  # noqa: E402

FAISS_THREADS = 2
ADD_BLOCK = 1_000_000


def timed(fn):
    started = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - started


def hamming_recall(found_d: np.ndarray, true_d: np.ndarray) -> float:
    """Returned codes within each query's true k-th distance, over k (ties count as found)."""
    kth = true_d[:, -1:]
    return float(((found_d >= 0) & (found_d <= kth)).sum() / true_d.size)


# ------------------------------------------------------------------ FAISS (child) ------


def faiss_child(args) -> int:
    """One FAISS index over the database codes in WORK, its searches; JSON on stdout."""
    import faiss

    faiss.omp_set_num_threads(FAISS_THREADS)
    work = Path(args.work)
    meta = json.loads((work / "faiss_input.json").read_text())
    n, width = meta["n"], meta["code_bytes"]
    queries = np.load(work / "query_codes.npy")
    bits = 8 * width
    started = time.perf_counter()
    if args.faiss_child == "flat":
        index = faiss.IndexBinaryFlat(bits)
    else:
        index = faiss.IndexBinaryIVF(faiss.IndexBinaryFlat(bits), bits, args.lists)
        rng = np.random.default_rng(args.seed)
        sample = np.sort(rng.choice(n, min(n, 256 * args.lists), replace=False))
        codes = np.load(work / "database_codes.npy", mmap_mode="r")
        index.train(np.ascontiguousarray(codes[sample]))
        del codes
    header = np.lib.format.open_memmap(work / "database_codes.npy", mode="r").offset
    with open(work / "database_codes.npy", "rb") as f:
        for start in range(0, n, ADD_BLOCK):  # read into memory block by block: no page cache in RSS
            count = min(ADD_BLOCK, n - start)
            f.seek(header + start * width)
            index.add(np.fromfile(f, np.uint8, count * width).reshape(count, width))
    build = time.perf_counter() - started
    rows = []
    for nprobe in [None] if args.faiss_child == "flat" else args.nprobes:
        if nprobe is not None:
            index.nprobe = nprobe
        started = time.perf_counter()
        dist, ids = index.search(queries, args.k)
        seconds = time.perf_counter() - started
        np.save(work / f"faiss_{args.faiss_child}_{nprobe}_ids.npy", ids)
        np.save(work / f"faiss_{args.faiss_child}_{nprobe}_dist.npy", dist)
        rows.append({"nprobe": nprobe, "seconds": seconds})
    print(json.dumps({"build_seconds": build, "peak_rss_mb": peak_rss_mb(), "searches": rows}))
    return 0


def run_faiss(kind: str, args) -> dict:
    cmd = [sys.executable, __file__, "--faiss-child", kind, "--work", args.work, "--lists", str(args.lists)]
    cmd += ["--nprobes", ",".join(map(str, args.nprobes)), "--k", str(args.k), "--seed", str(args.seed)]
    cmd += ["--n", str(args.n), "--data", args.data, "--out", args.out]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------ ours ---------------


def worker_peaks(client) -> list[float]:
    """Peak RSS (MB) of each worker process since its peak was last reset."""
    peaks = client.run(peak_rss_mb)
    return [round(v, 1) for v in peaks.values()]


def our_search(client, data, model, codes, k, **kw) -> dict:
    from dask_hashcodes import workflows

    client.run(reset_peak_rss)  # warm workers, as in a long-lived cluster; their peak from here
    found, wall = timed(lambda: workflows.search(data, model, codes, k=k, **kw))
    return {"searched": found, "wall_seconds": wall, "worker_peak_rss_mb": worker_peaks(client)}


def build(args, client) -> dict:
    """The dataset, split, model, codes and inverted file (each made only when missing)."""
    from dask_hashcodes import workflows

    work, steps = Path(args.work), {}
    work.mkdir(parents=True, exist_ok=True)
    if not Path(args.data).exists():
        _, steps["synth"] = timed(lambda: workflows.synth("sift", args.data, n=args.n + args.queries, seed=args.seed))
        _, steps["split"] = timed(lambda: workflows.split(args.data, queries=args.queries, seed=args.seed))
    model = work / "itq.model"
    if not model.exists():
        train = work / "train.zarr"
        _, steps["head"] = timed(lambda: workflows.head(args.data, args.train_rows, train, overwrite=True))
        _, steps["train"] = timed(
            lambda: workflows.train(train, "itq", model, bits=args.bits, seed=args.seed, overwrite=True)
        )
    codes = work / "codes.zarr"
    if not codes.exists():
        _, steps["encode"] = timed(lambda: workflows.encode(args.data, model, codes))
    ivf = ivf_location(args)
    if not ivf.exists():
        _, steps[build_step(args)] = timed(
            lambda: workflows.index(
                codes,
                ivf,
                kind="ivf",
                dataset=args.data,
                lists=args.lists,
                quantiser=args.quantiser,
                seed=args.seed,
                quantiser_dims=args.quantiser_dims,
            )  # fmt: skip
        )
    if not (work / "database_codes.npy").exists():
        _, steps["faiss_input"] = timed(lambda: write_faiss_input(args.data, codes, work))
    # a rerun reuses what an earlier run built: its build seconds are kept beside them
    record = work / "build_seconds.json"
    built = json.loads(record.read_text()) if record.exists() else {}
    built.update(steps)
    record.write_text(json.dumps(built))
    return built


def ivf_location(args) -> Path:
    """Our inverted file in the work directory: one per quantiser, so both can be kept."""
    return Path(args.work) / ("ivf" if args.quantiser == "features" else "ivf-codes")


def build_step(args) -> str:
    """The build-seconds key of our inverted file with --quantiser."""
    return "ivf_build" if args.quantiser == "features" else "ivf_build_codes"


def held_by_worker(data, codes, ivf) -> dict:
    """What each worker keeps for the warm batches: {worker: {"blocks", "bytes"}}."""
    from dask_hashcodes import workflows
    from dask_hashcodes.indexes.ivf import resident_lists
    from dask_hashcodes.storage.codes import open_codes
    from dask_hashcodes.storage.ivf_index import open_ivf

    query = workflows.load_dataset(data).get_split("default").query
    held = resident_lists(open_ivf(ivf, open_codes(codes)), query, create=False)
    return {} if held is None else held.by_worker()


def write_faiss_input(data, codes, work: Path) -> None:
    """The database codes (every row but the split's queries) and the query codes as .npy,
    with the database's row numbers, for the FAISS children."""
    from dask_hashcodes import workflows
    from dask_hashcodes.storage.codes import open_codes

    ds = workflows.load_dataset(data)
    query = np.sort(ds.get_split("default").query)
    every = open_codes(codes).reader[:]
    keep = np.ones(len(every), bool)
    keep[query] = False
    np.save(work / "query_codes.npy", every[query])
    np.save(work / "database_rows.npy", np.flatnonzero(keep))
    np.save(work / "database_codes.npy", every[keep])
    meta = {"n": int(keep.sum()), "code_bytes": int(every.shape[1])}
    (work / "faiss_input.json").write_text(json.dumps(meta))


# ------------------------------------------------------------------ report -------------


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000_000, help="database rows")
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--bits", type=int, default=64)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--lists", type=int, default=4096)
    ap.add_argument("--nprobes", default="1,4,8,16,64")
    ap.add_argument("--train-rows", type=int, default=1_000_000)
    ap.add_argument(
        "--quantiser-dims",
        type=int,
        default=None,
        help="principal directions of our inverted file's quantiser (default: the library's rule)",
    )
    ap.add_argument(
        "--quantiser",
        choices=["features", "codes"],
        default="features",
        help="where our inverted file's centroids live: k-means on the features, or k-means of the codes",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--data",
        required=True,
        help="a dataset with a default split of --queries queries, or sift-synth's (made when missing)",
    )
    ap.add_argument("--work", required=True, help="model, codes, inverted file and FAISS inputs (kept)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--faiss-child", choices=["flat", "ivf"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.nprobes = [int(v) for v in args.nprobes.split(",")]
    if args.faiss_child:
        return faiss_child(args)

    from dask_hashcodes.distributed.cluster import connect

    command = "benchmarks/bench_batch_search.py " + " ".join(argv if argv is not None else sys.argv[1:])
    client = connect(workers=2, threads=1, quiet=True, memory_limit="10GB")
    steps = build(args, client)
    work = Path(args.work)
    data, model, codes, ivf = args.data, work / "itq.model", work / "codes.zarr", ivf_location(args)
    database_rows = np.load(work / "database_rows.npy")
    rows = []

    from dask_hashcodes import workflows

    workflows.split(data, queries=10, seed=args.seed, name="warm-up", overwrite=True)
    for warm_up in ({}, {"index": ivf, "nprobe": 1}):  # loads the kernels on every worker
        workflows.search(data, model, codes, k=args.k, split="warm-up", **warm_up)
    scan = our_search(client, data, model, codes, args.k)
    true_d = scan["searched"].results[0]
    scan_ids = scan["searched"].results[1]
    rows.append(our_row("dhash linear scan (2 workers x 1 thread)", scan, true_d, None))
    for nprobe in args.nprobes:
        found = our_search(client, data, model, codes, args.k, index=ivf, nprobe=nprobe)
        rows.append(our_row(f"dhash IVF{args.lists}, nprobe {nprobe}", found, true_d, nprobe))
    first_warm = our_search(client, data, model, codes, args.k, index=ivf, nprobe=args.nprobes[0], warm=True)
    rows.append(our_row(f"dhash IVF{args.lists}, nprobe {args.nprobes[0]}, first warm batch (reads and keeps the lists)",
                        first_warm, true_d, args.nprobes[0]))  # fmt: skip
    held = held_by_worker(data, codes, ivf)
    for nprobe in args.nprobes:
        found = our_search(client, data, model, codes, args.k, index=ivf, nprobe=nprobe, warm=True)
        rows.append(our_row(f"dhash IVF{args.lists}, nprobe {nprobe}, warm (lists kept on the workers)", found,
                            true_d, nprobe))  # fmt: skip
    client.close()

    flat = run_faiss("flat", args)
    f_dist = np.load(work / "faiss_flat_None_dist.npy")
    f_ids = database_rows[np.load(work / "faiss_flat_None_ids.npy")]
    identical = bool(np.array_equal(f_dist, true_d))
    same_ids = float((f_ids == scan_ids).mean())
    rows.append(faiss_row("faiss.IndexBinaryFlat (2 threads)", flat, flat["searches"][0], f_dist, true_d, args))
    ivf_faiss = run_faiss("ivf", args)
    for search in ivf_faiss["searches"]:
        dist = np.load(work / f"faiss_ivf_{search['nprobe']}_dist.npy")
        name = f"faiss.IndexBinaryIVF{args.lists}, nprobe {search['nprobe']} (2 threads)"
        rows.append(faiss_row(name, ivf_faiss, search, dist, true_d, args))

    result = {
        "command": command,
        "params": {k: v for k, v in vars(args).items() if k != "faiss_child"},
        "machine": machine_info(),
        "build_steps_seconds": steps,
        "ours_ivf_build_seconds": steps.get(build_step(args)),
        "faiss_build_seconds": {"flat": flat["build_seconds"], "ivf": ivf_faiss["build_seconds"]},
        "scan_equals_faiss_flat": {"identical_distances": identical, "same_id_fraction": same_ids},
        "resident_lists_by_worker": held,
        "quantiser": quantiser_words(codes, ivf),
        "data_source": workflows.load_dataset(data).source,
        "rows": rows,
    }
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    out.with_suffix(".md").write_text(render(result))
    print(render(result))
    return 0


def our_row(name, measured, true_d, nprobe) -> dict:
    found = measured["searched"]
    dist = found.results[0]
    return {
        "system": name,
        "nprobe": nprobe,
        "seconds": found.seconds,
        "wall_seconds": measured["wall_seconds"],
        "queries_per_second": found.n_queries / found.seconds,
        "peak_rss_mb": measured["worker_peak_rss_mb"],
        "hamming_recall": hamming_recall(dist, true_d),
    }


def faiss_row(name, built, search, dist, true_d, args) -> dict:
    return {
        "system": name,
        "nprobe": search["nprobe"],
        "seconds": search["seconds"],
        "wall_seconds": search["seconds"],
        "queries_per_second": args.queries / search["seconds"],
        "peak_rss_mb": [round(built["peak_rss_mb"], 1)],
        "hamming_recall": hamming_recall(dist, true_d),
    }


def quantiser_words(codes, ivf) -> str:
    """Where the stored inverted file's centroids live, in words."""
    from dask_hashcodes.storage.codes import open_codes
    from dask_hashcodes.storage.ivf_index import open_ivf

    lists = open_ivf(ivf, open_codes(codes))
    if lists.quantiser == "codes":
        return f"k-means of the codes as +-1 vectors ({8 * lists.code_size}-bit centroid codes; queries probe by their codes)"
    if lists.projection is None:
        return f"k-means in the features ({lists.d}-d)"
    return f"k-means in the top {lists.projection.dims} principal directions of its sample (of {lists.d})"


def render(result: dict) -> str:
    p, m = result["params"], result["machine"]
    lines = [
        f"# Batch search: {p['queries']:,} queries, top-{p['k']}, over {p['n']:,} {p['bits']}-bit ITQ codes of "
        f"{result.get('data_source', 'sift-synth')}",
        "",
        f"- command: `{result['command']}`",
        f"- machine: {m.get('cpu_model')}, {m.get('cores')} cores, {m.get('ram_total_gb')} GB RAM;"
        " ours on a local cluster of 2 worker processes x 1 thread, FAISS with 2 OpenMP threads",
        "- recall: of the exact Hamming top-k (the linear scan's k-th distance; ties count as found)",
        f"- build seconds: ours {json.dumps({k: round(v, 1) for k, v in result['build_steps_seconds'].items()})};"
        f" FAISS IndexBinaryFlat {result['faiss_build_seconds']['flat']:.1f},"
        f" IndexBinaryIVF (train on the codes + add) {result['faiss_build_seconds']['ivf']:.1f}",
        f"- our inverted file's quantiser: {result.get('quantiser', 'k-means in the features (128-d)')}",
        f"- linear scan vs IndexBinaryFlat: {result['scan_equals_faiss_flat']}",
        f"- lists kept on the workers for the warm batches: {result.get('resident_lists_by_worker')}",
        "",
        "| search | seconds | queries/s | peak RSS MB (per worker / process) | recall of the Hamming top-k |",
        "|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        rss = " / ".join(f"{v:,.0f}" for v in r["peak_rss_mb"])
        lines.append(
            f"| {r['system']} | {r['seconds']:.1f} | {r['queries_per_second']:,.0f} | {rss} | {r['hamming_recall']:.4f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
