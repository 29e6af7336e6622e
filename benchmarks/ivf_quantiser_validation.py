"""Choosing the inverted file's coarse quantiser on validation queries: how many principal
directions its k-means and assignment need, and how many rows per list k-means learns from.

The inverted file's build is two GEMM-bound passes: k-means over a sample of the features
(rows x lists x dims per step) and the assignment of every row to its nearest centroid
(n x lists x dims). Both scale with the dims the centroids live in. This script measures, on
queries that no benchmark reports (rows held out of the database), the recall of the exact
Hamming top-10 through the inverted file at each nprobe for:

* the quantiser in the full feature space, and in the top ``p`` principal directions of the
  k-means sample (the centroids, the rows and the queries all projected), for several p,
  with the share of the sample's variance those directions hold;
* k-means on 64, 128 and 256 sampled rows per list.

Each setting's k-means and assignment seconds are measured on one thread. Data:
sift-synth (the 128-d generator: database rows 0..n, validation queries rows n..n+1000) and
Fashion-MNIST (784-d: the 60,000 training images, 1,000 of them drawn as validation queries
and left out of the database; the 10,000 test images are never read). Codes: 64-bit ITQ
learned on the database.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/ivf_quantiser_validation.py \
        --out benchmarks/results/ivf_quantiser_validation
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness.measure import machine_info  # noqa: E402

K = 10
NPROBES = (1, 2, 4, 8, 16, 32)
QUERIES = 1000
KMEANS_STEPS = 10


def sift_synth(n: int):
    from dask_hashcodes.data.synth import sift_rows

    return sift_rows(0, 0, n), sift_rows(0, n, n + QUERIES)


def fashion_mnist():
    with gzip.open("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz") as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)
    held = np.zeros(len(images), bool)
    held[np.random.default_rng(0).choice(len(images), QUERIES, replace=False)] = True
    return images[~held], images[held]


def itq_codes(database, queries, bits: int):
    import dask.array as da

    from dask_hashcodes.hashing.linear import ITQ

    model = ITQ(n_bits=bits).fit(da.from_array(database, chunks=(65536, database.shape[1])))
    return np.asarray(model.encode(database)), np.asarray(model.encode(queries))


def exact_hamming_topk(db_codes, query_codes):
    from dask_hashcodes.kernels.hamming import hamming_topk

    return hamming_topk(db_codes, np.arange(len(db_codes)), queries=query_codes, k=K)


def quantiser(database, n_lists: int, rows_per_list: int, dims, seed: int = 0):
    """(project, centroids, kmeans seconds, variance share, dims): k-means as the library runs
    it (distinct random rows as the start, KMEANS_STEPS Lloyd steps) on the sample, in the
    top ``dims`` principal directions of the sample ("all": the features as they are;
    "default": the library's rule, the fewest directions holding QUANTISER_VARIANCE_SHARE of
    the sample's variance)."""
    from dask_hashcodes.indexes.ivf import QUANTISER_VARIANCE_SHARE
    from dask_hashcodes.kernels.ivf import principal_dims
    from dask_hashcodes.kernels.kmeans import lloyd_sums, updated_centres
    from dask_hashcodes.kernels.stats import chunk_moments, covariance, top_eigenvectors

    rng = np.random.default_rng(seed)
    n = len(database)
    rows = min(n, rows_per_list * n_lists)
    sample = database[np.sort(rng.choice(n, rows, replace=False))] if rows < n else database
    started = time.perf_counter()
    share = 1.0
    if dims == "default":
        mean, cov = covariance(chunk_moments(sample))
        dims = principal_dims(top_eigenvectors(cov, cov.shape[0])[0], QUANTISER_VARIANCE_SHARE)
    if dims == "all":
        dims = database.shape[1]

        def project(x):
            return np.asarray(x, np.float64)

    else:
        mean, cov = covariance(chunk_moments(sample))
        values, components = top_eigenvectors(cov, dims)
        share = float(values.sum() / np.trace(cov))

        def project(x):
            return (np.asarray(x, np.float64) - mean) @ components

    points = project(sample)
    centres = points[np.sort(rng.choice(len(points), n_lists, replace=False))]
    for _ in range(KMEANS_STEPS):
        counts, sums, _ = lloyd_sums(points, centres)
        centres = updated_centres(centres, counts, sums)
    return project, centres, time.perf_counter() - started, share, dims


def assign(project, database, centres):
    from dask_hashcodes.kernels.kmeans import nearest_centres

    out = np.empty(len(database), np.int64)
    for start in range(0, len(database), 65536):
        out[start : start + 65536] = nearest_centres(project(database[start : start + 65536]), centres)
    return out


def recalls(project, centres, assignment, db_codes, query_codes, queries, true_d) -> dict:
    from dask_hashcodes.indexes.ivf import InvertedLists
    from dask_hashcodes.kernels.ivf import probed_lists, search_lists

    lists = InvertedLists.assigned(centres, db_codes, np.arange(len(db_codes)), assignment)
    kth = true_d[:, -1:]
    out = {}
    for nprobe in NPROBES:
        probes = probed_lists(project(queries), centres, nprobe)
        found_d, _ = search_lists(query_codes, probes, lists.list_codes, lists.list_ids, lists.offsets, K)
        out[nprobe] = float(((found_d >= 0) & (found_d <= kth)).sum() / true_d.size)
    return out


def run(name, database, queries, settings) -> list[dict]:
    n_lists = int(round(4 * np.sqrt(len(database))))
    db_codes, query_codes = itq_codes(database, queries, 64)
    true_d, _ = exact_hamming_topk(db_codes, query_codes)
    rows = []
    for rows_per_list, dims in settings:
        project, centres, kmeans_seconds, share, kept = quantiser(database, n_lists, rows_per_list, dims)
        started = time.perf_counter()
        assignment = assign(project, database, centres)
        assign_seconds = time.perf_counter() - started
        row = {
            "dataset": name, "n": len(database), "d": database.shape[1], "lists": n_lists,
            "rows_per_list": rows_per_list, "dims": kept, "projected": kept < database.shape[1], "rule": dims,
            "variance_share": share, "kmeans_seconds": kmeans_seconds, "assign_seconds": assign_seconds,
            "recall_by_nprobe": recalls(project, centres, assignment, db_codes, query_codes, queries, true_d),
        }  # fmt: skip
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def render(result) -> str:
    lines = [
        "# The inverted file's coarse quantiser, chosen on validation queries",
        "",
        f"- command: `{result['command']}`",
        f"- machine: {result['machine']['cpu_model']}, {result['machine']['cores']} cores",
        "- queries: 1,000 validation rows held out of each database (sift-synth: generator rows n..n+1000; "
        "Fashion-MNIST: drawn from the training images with seed 0; its test images are never read)",
        "- recall: of the exact Hamming top-10 of 64-bit ITQ codes (ties count as found), through the inverted "
        "file of 4 sqrt(n) lists; seconds on one thread",
        "",
        "| data | rows/list | dims | variance held | k-means s | assign s | "
        + " | ".join(f"nprobe {p}" for p in NPROBES)
        + " |",
        "|---" * (6 + len(NPROBES)) + "|",
    ]
    for r in result["rows"]:
        dims = f"{r['dims']} (PCA)" if r["projected"] else f"{r['dims']} (all)"
        dims += " = default" if r["rule"] == "default" else ""
        lines.append(
            f"| {r['dataset']} | {r['rows_per_list']} | {dims} | {r['variance_share']:.3f} | "
            f"{r['kmeans_seconds']:.1f} | {r['assign_seconds']:.1f} | "
            + " | ".join(f"{r['recall_by_nprobe'][p]:.4f}" for p in NPROBES)
            + " |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sift-n", type=int, default=1_000_000)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    rows = []
    fmnist = [(256, "all"), (256, 256), (256, 128), (256, "default"), (256, 64), (256, 32)]
    rows += run("fashion-mnist", *fashion_mnist(), fmnist)
    sift = [(256, "all"), (256, "default"), (256, 64), (128, "all"), (64, "all"), (64, 64), (64, 32)]
    rows += run("sift-synth", *sift_synth(args.sift_n), sift)
    write_result("benchmarks/ivf_quantiser_validation.py", argv, rows, args.out, render)
    return 0


def write_result(script: str, argv, rows: list, out: str, render) -> dict:
    """The run's command, machine and rows as OUT.json, and ``render``'s table as OUT.md."""
    result = {"command": " ".join([script, *(argv or sys.argv[1:])]), "machine": machine_info(), "rows": rows}
    Path(out + ".json").write_text(json.dumps(result, indent=1) + "\n")
    Path(out + ".md").write_text(render(result))
    return result


if __name__ == "__main__":
    raise SystemExit(main())
