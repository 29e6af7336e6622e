#!/usr/bin/env python
"""SGH training time vs n: linear in n, side by side with a plain numpy SGH.

For n in --sizes (the first n rows of one sift-synth dataset, 128-d uint8), train SGH
(--bits bits, m = 300 bases, refinement sweep: 3 + 2c passes) on a LocalCluster of 2 worker
processes x 1 thread, then run the same Algorithm 1 in one process with plain numpy on
the whole n x m kernel matrix held in memory (what the paper's single-machine code does),
with the same bases, bandwidth and rho. Reports both times, their ratio, the linearity
of our time in n (least-squares line t = a + b n, max relative deviation), and the
agreement of the learned hash functions (max |W_ours - W_numpy|).

    .venv/bin/python benchmarks/bench_sgh_scaling.py --out benchmarks/results/sgh_scaling.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_dish_scaling import summarize  # noqa: E402 - after the sys.path entry above

from benchmarks.harness.measure import machine_info  # noqa: E402 - after the sys.path entry above


def numpy_sgh_run(X, n_bits, bases, bandwidth, rho, order, gamma=1e-6):
    """First sweep then the refinement sweep in ``order`` (add the bit's term back, refit)."""
    from dask_hashcodes.kernels.rbf import rbf_features
    from dask_hashcodes.kernels.sgh import (
        initial_residual,
        top_generalized_eigenvector,
        transformed_head,
    )

    mean = X.mean(axis=0, dtype=np.float64)
    phi = rbf_features(X, bases, bandwidth).astype(np.float64)
    K = phi - phi.mean(axis=0)
    head = transformed_head(X - mean, rho)
    Z = K.T @ K + gamma * np.eye(K.shape[1])
    A = initial_residual(K.T @ head, K.sum(axis=0), n_bits)
    W = np.empty((K.shape[1], n_bits))
    U = np.empty_like(W)

    def fit_bit(t):
        W[:, t] = top_generalized_eigenvector(A, Z)
        U[:, t] = K.T @ np.where(K @ W[:, t] >= 0, 1.0, -1.0)
        return np.outer(U[:, t], U[:, t])

    for t in range(n_bits):
        A = A - fit_bit(t)
    for t in order:
        A = A + np.outer(U[:, t], U[:, t])
        A = A - fit_bit(t)
    return W


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="250000,500000,1000000")
    ap.add_argument("--bits", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/sgh_scaling.json"))
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]

    import dask
    from distributed import Client, LocalCluster

    from dask_hashcodes.data.synth import write_sift_synth
    from dask_hashcodes.distributed.cluster import worker_environ
    from dask_hashcodes.hashing import SGH

    work = Path(tempfile.mkdtemp(prefix="dhash-sgh-", dir=REPO.parent))
    runs = []
    try:
        ds = write_sift_synth(work / "sift.zarr", max(sizes), seed=args.seed)
        with (
            dask.config.set({"distributed.nanny.pre-spawn-environ": worker_environ()}),
            LocalCluster(
                n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40
            ) as cluster,
            Client(cluster),
        ):
            for n in sizes:
                X = ds.features_dask()[:n]
                started = time.perf_counter()
                model = SGH(args.bits, random_state=args.seed).fit(X)
                ours = time.perf_counter() - started
                rows = np.asarray(ds.features[:n])
                started = time.perf_counter()
                W = numpy_sgh_run(
                    rows, args.bits, model.bases_, model.bandwidth_, model.rho_, model.training_stats_["refine_order"]
                )
                peer = time.perf_counter() - started
                del rows
                runs.append(
                    {
                        "n": n,
                        "workers": 2,
                        "seconds": round(ours, 2),
                        "numpy_seconds": round(peer, 2),
                        "ratio_ours_over_numpy": round(ours / peer, 3),
                        "passes": model.training_stats_["passes"],
                        "kernel_cache": model.training_stats_["kernel_cache"],
                        "max_abs_w_difference": float(np.abs(W - model.components_).max()),
                    }
                )
                print(runs[-1], flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "benchmark": "sgh_scaling",
        "command": " ".join([sys.executable, *sys.argv]),
        "machine": machine_info(),
        "params": {
            "sizes": sizes,
            "bits": args.bits,
            "n_bases": 300,
            "data": "sift-synth 128-d uint8",
            "cluster": "LocalCluster 2 workers x 1 thread",
            "peer": "plain numpy Algorithm 1 in one process, n x m kernel matrix in memory",
        },
        "runs": runs,
        "summary": summarize(runs),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    s = result["summary"]["2w"]
    lines = [
        "# SGH training time vs n",
        "",
        f"Command: `{result['command']}`",
        "",
        f"Machine: {result['machine'].get('cores')} cores, {result['machine'].get('cpu_model')}",
        "",
        "| n | ours s | numpy s | ours / numpy | passes | kernel features | max abs W diff |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['n']:,} | {r['seconds']} | {r['numpy_seconds']} | {r['ratio_ours_over_numpy']} | {r['passes']} "
        f"| {r['kernel_cache']} | {r['max_abs_w_difference']:.2e} |"
        for r in runs
    ]
    lines += [
        "",
        (
            f"Linear fit t = a + b n: a = {s['fixed_seconds']} s, b = {s['seconds_per_million_rows_marginal']} s per "
            f"million rows, max deviation {s['affine_max_deviation']:.1%}."
        ),
    ]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
