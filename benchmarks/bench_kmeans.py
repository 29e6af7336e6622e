"""k-means on the cluster: our tree-reduced Lloyd (the anchors of AGH and DGH) against
dask-ml's ``KMeans`` (k-means|| initialisation, then Lloyd), side by side in one run.

Both run on the same LocalCluster (processes) and the same dataset's feature chunks. Each
configuration is timed end to end (initialisation included) and its centres are scored by
the same pass: the mean squared distance of a row to its nearest centre (``lloyd_sums``).
The peer's throughput is reported as GFLOP/s of its distance computations (2 n k d per
Lloyd step) so that a slow peer is visible.

    PYTHONPATH=/tmp/dask-ml-packages .venv/bin/python benchmarks/bench_kmeans.py \\
        --data sift-1M.zarr --k 300 --iters 5,20 --out benchmarks/results/kmeans_1M.json

dask-ml is not a dependency (it would replace pandas); install it beside the environment:
``pip install --no-deps --target /tmp/dask-ml-packages dask-ml dask-glm multipledispatch pandas
python-dateutil six tzdata``.
Writes JSON and a Markdown table beside it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import dask
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness.measure import machine_info  # noqa: E402
from dask_hashcodes.distributed.graph import chunk_reads, map_reduce  # noqa: E402
from dask_hashcodes.distributed.kmeans import kmeans  # noqa: E402
from dask_hashcodes.kernels.kmeans import lloyd_sums  # noqa: E402
from dask_hashcodes.kernels.stats import add_partials  # noqa: E402
from dask_hashcodes.storage.datasets import open_dataset  # noqa: E402


def mean_squared_distance(X, centres: np.ndarray) -> float:
    counts, _, total = dask.compute(map_reduce("kmeans-score", lloyd_sums, add_partials, chunk_reads(X), centres))[0]
    return total / counts.sum()


def run_ours(X, k: int, iters: int, seed: int) -> tuple[np.ndarray, float]:
    start = time.perf_counter()
    centres, _ = kmeans(X, k, iters, np.random.default_rng(seed), "bench")
    return centres, time.perf_counter() - start


def run_dask_ml(X, k: int, iters: int, seed: int) -> tuple[np.ndarray, float]:
    from dask_ml.cluster import KMeans

    start = time.perf_counter()
    # tol=0: exactly `iters` Lloyd steps after k-means||, like ours
    model = KMeans(n_clusters=k, init="k-means||", max_iter=iters, tol=0.0, random_state=seed).fit(X)
    return np.asarray(model.cluster_centers_, dtype=np.float64), time.perf_counter() - start


def main(argv=None) -> int:
    from distributed import Client, LocalCluster

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="a dataset made by dhash synth/ingest")
    parser.add_argument("--k", type=int, default=300)
    parser.add_argument("--iters", default="5,20", help="Lloyd steps, comma-separated")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    ds = open_dataset(args.data)
    n, d = ds.features.shape
    rows = []
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        Client(cluster),
    ):
        X = ds.features_dask()
        for iters in (int(i) for i in args.iters.split(",")):
            for name, run in (("ours (tree-reduced Lloyd)", run_ours), ("dask-ml KMeans (k-means||)", run_dask_ml)):
                centres, seconds = run(X, args.k, iters, args.seed)
                score = mean_squared_distance(X, centres)
                gflops = 2.0 * n * args.k * d * iters / seconds / 1e9
                rows.append({"method": name, "lloyd_steps": iters, "seconds": seconds, "msd": score, "gflops": gflops})
                print(rows[-1], flush=True)
    result = {"machine": machine_info(), "n": n, "d": d, "k": args.k, "workers": 2, "rows": rows}
    out = Path(args.out)
    out.write_text(json.dumps(result, indent=1) + "\n")
    lines = [
        f"# k-means on the cluster: {n:,} x {d}, k = {args.k}",
        "",
        f"CPU: {result['machine']['cpu_model']}; LocalCluster with 2 worker processes x 1 thread. Command: "
        f"`benchmarks/bench_kmeans.py --data ... --k {args.k} --iters {args.iters}`.",
        "msd: mean squared distance of a row to its nearest centre (lower is better), the same pass for both. "
        "GFLOP/s counts the Lloyd steps' distance products only (2 n k d per step), over the whole time.",
        "",
        "| method | Lloyd steps | seconds | msd | GFLOP/s | time vs ours |",
        "|---|---|---|---|---|---|",
    ]
    ours = {r["lloyd_steps"]: r["seconds"] for r in rows if r["method"].startswith("ours")}
    for r in rows:
        lines.append(
            f"| {r['method']} | {r['lloyd_steps']} | {r['seconds']:.1f} | {r['msd']:.6g} | {r['gflops']:.1f} "
            f"| {r['seconds'] / ours[r['lloyd_steps']]:.2f}x |"
        )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
