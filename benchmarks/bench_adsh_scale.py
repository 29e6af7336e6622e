#!/usr/bin/env python
"""ADSH's database side at scale: the V-step over a sift-synth database of --n rows (128-d
uint8) with synthetic labels (each row's generating centre, 16384 classes), an MLP network,
on a LocalCluster of 2 worker processes x 1 thread. Reports the time per outer iteration
(network and V-step), the database passes' rows per second, and the peak RSS of every
process (client, scheduler, workers).

The peer is the same per-chunk V-step kernel run in one process with plain numpy over the
same chunks in turn (no Dask, one pass, features never read: it only needs labels and codes),
so the ratio is what the task graph costs over the bare arithmetic. A dense numpy V-step as
the paper writes it (S as an |Omega| x n matrix) would need |Omega| n 8 bytes, 160 GB at 10M
rows: it is not a peer that can run.

    .venv/bin/python benchmarks/bench_adsh_scale.py --n 10000000 --bits 32 --outer-iter 2 \\
        --out benchmarks/results/adsh/scale_10M
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness.measure import TreeWatcher, machine_info, tree_memory  # noqa: E402


def synthetic_labels(X, seed: int):
    """Each row's sift-synth centre as a dask array chunked like X (computed on the workers)."""
    import dask.array as da

    from dask_hashcodes.data.synth import sift_centres
    from dask_hashcodes.distributed.graph import row_bounds

    bounds = row_bounds(X)
    parts = [
        da.from_delayed(_delayed_centres(sift_centres, seed, int(a), int(b)), shape=(int(b - a),), dtype=np.int64)
        for a, b in zip(bounds[:-1], bounds[1:], strict=True)
    ]
    return da.concatenate(parts)


def _delayed_centres(fn, seed, a, b):
    from dask import delayed

    return delayed(fn, pure=True)(seed, a, b)


def numpy_v_step_pass(labels_parts, n_bits: int, m: int, seed: int) -> float:
    """Seconds of one V-step pass of the per-chunk kernel over every chunk in this process."""
    from dask_hashcodes.kernels.adsh import chunk_pass

    rng = np.random.default_rng(seed)
    n = sum(len(p) for p in labels_parts)
    omega = np.sort(rng.choice(n, m, replace=False))
    all_labels = np.concatenate(labels_parts)
    omega_labels = all_labels[omega]
    U = np.tanh(rng.standard_normal((m, n_bits)))
    started, start = time.perf_counter(), 0
    for lab in labels_parts:
        V = np.ones((len(lab), n_bits), dtype=np.int8)
        chunk_pass(V, lab, start, omega, omega_labels, U, weight=0.01, gamma=200.0)
        start += len(lab)
    return time.perf_counter() - started


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--bits", type=int, default=32)
    parser.add_argument("--outer-iter", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    from dask_hashcodes import workflows
    from dask_hashcodes.distributed.cluster import connect, disconnect
    from dask_hashcodes.hashing import ADSH

    client = connect()
    try:
        ds = workflows.load_dataset("sift-synth", n=args.n, seed=args.seed)
        X = ds.features_dask()
        y = synthetic_labels(X, args.seed)
        model = ADSH(args.bits, outer_iter=args.outer_iter, network="mlp", threads=1, random_state=args.seed)
        with TreeWatcher(os.getpid(), "client") as watch:
            started = time.perf_counter()
            model.fit(X, y)
            seconds = time.perf_counter() - started
        memory = tree_memory(watch)
        labels_parts = [np.asarray(p) for p in client.compute(y.to_delayed().ravel().tolist(), sync=True)]
    finally:
        disconnect(client)
    numpy_seconds = numpy_v_step_pass(labels_parts, args.bits, model.n_samples, args.seed)
    stats = model.training_stats_
    passes = args.outer_iter * (model.inner_iter + 1) + 1  # + the first outer iteration's initial V-step
    v_pass = stats["v_step_seconds"] / passes
    result = {
        "n": args.n,
        "bits": args.bits,
        "outer_iter": args.outer_iter,
        "chunks": len(X.chunks[0]),
        "chunk_rows": int(X.chunks[0][0]),
        "train_seconds": round(seconds, 1),
        "seconds_per_outer_iteration": round(seconds / args.outer_iter, 1),
        "network_seconds": stats["network_seconds"],
        "v_step_seconds": stats["v_step_seconds"],
        "database_passes": passes,
        "seconds_per_database_pass": round(v_pass, 2),
        "rows_per_second_per_pass": round(args.n / v_pass),
        "numpy_one_process_v_step_pass_seconds": round(numpy_seconds, 2),
        "pass_ratio_ours_over_numpy": round(v_pass / numpy_seconds, 2),
        "validation_map": [p["validation_map"] for p in stats["adsh_path"] if "validation_map" in p],
        "memory": memory,
        "machine": machine_info(),
        "command": " ".join(sys.argv),
    }
    Path(args.out + ".json").write_text(json.dumps(result, indent=1) + "\n")
    lines = [
        f"# ADSH at scale: {args.n:,} sift-synth rows, {args.bits} bits",
        "",
        f"- command: `{result['command']}`",
        f"- machine: {result['machine']['cpu_model']}, {result['machine']['cores']} cores; LocalCluster 2 workers x 1 "
        f"thread; {result['chunks']} chunks of {result['chunk_rows']:,} rows; labels: each row's generating centre "
        "(16384 classes); MLP network; |Omega| 2000, T_in 3, the paper's gamma",
        "",
        "| measure | value |",
        "|---|---|",
        f"| training, {args.outer_iter} outer iterations | {result['train_seconds']} s |",
        f"| per outer iteration | {result['seconds_per_outer_iteration']} s |",
        f"| network / V-step (all) | {result['network_seconds']} s / {result['v_step_seconds']} s |",
        f"| per database pass ({passes} passes) | {result['seconds_per_database_pass']} s "
        f"({result['rows_per_second_per_pass']:,} rows/s) |",
        f"| same V-step kernel, one process, plain numpy, one pass | {result['numpy_one_process_v_step_pass_seconds']} s "
        f"(ours / numpy {result['pass_ratio_ours_over_numpy']}) |",
        f"| largest process peak RSS | {memory['max_process_peak_rss_mb']} MB |",
        f"| all processes together, peak RSS | {memory['peak_sum_rss_mb']} MB |",
        "",
        "| process | peak RSS MB |",
        "|---|---|",
        *[f"| {p['role']} ({p['pid']}) | {p['peak_rss_mb']} |" for p in memory["per_process"]],
    ]
    Path(args.out + ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
