"""DisH training time vs n and vs workers, with a plain-numpy floor in the same run.

For n in --sizes (rows of one sift-synth dataset, 128-d uint8), train DisH (ADMM, --nodes
nodes, random topology, 32 bits, exactly --iters outer iterations: tol=0) on 1 and 2
worker processes, and time the floor: the same number of passes that only read every
chunk and compute X C (plain numpy inside dask tasks, same cluster). Reports seconds,
seconds per million rows, the linearity of time in n (max deviation of s/Mrow from the
mean, target <= 15%), the speed-up 1 -> 2 workers, and bytes of dictionaries exchanged
per iteration per node (independent of n).

    .venv/bin/python benchmarks/bench_dish_scaling.py --out benchmarks/results/dish_scaling.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def summarize(runs: list[dict]) -> dict:
    """Linearity of time in n per worker count, and the speed-up from 1 to 2 workers.

    ``affine_max_deviation``: largest |t - (a + b n)| / t over the sizes for the
    least-squares line t = a + b n (the paper's "time increases linearly"); ``a`` is the
    fixed cost of a run (scheduling, ADMM rounds: independent of n). ``proportional_max_
    deviation``: the stricter t / n = const reading, for transparency.
    """
    summary = {}
    worker_counts = sorted({r["workers"] for r in runs})
    for workers in worker_counts:
        pts = sorted((r["n"], r["seconds"]) for r in runs if r["workers"] == workers)
        n = np.array([p[0] for p in pts], float)
        t = np.array([p[1] for p in pts], float)
        b, a = np.polyfit(n, t, 1)
        per = t / n
        summary[f"{workers}w"] = {
            "fixed_seconds": round(float(a), 3),
            "seconds_per_million_rows_marginal": round(float(b * 1e6), 3),
            "affine_max_deviation": round(float(np.max(np.abs(t - (a + b * n)) / t)), 4),
            "proportional_max_deviation": round(float(np.max(np.abs(per / per.mean() - 1))), 4),
        }
    if 1 in worker_counts and 2 in worker_counts:
        sizes = sorted({r["n"] for r in runs})
        summary["speedup_1_to_2_workers"] = {
            str(n): round(
                next(r["seconds"] for r in runs if r["n"] == n and r["workers"] == 1)
                / next(r["seconds"] for r in runs if r["n"] == n and r["workers"] == 2),
                3,
            )
            for n in sizes
        }
    return summary


def write_result(result: dict, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    p, m = result["params"], result["machine"]
    lines = [
        "# DisH training time vs n and workers",
        "",
        f"Command: `{result['command']}`",
        "",
        f"Machine: {m['cores']} cores, {m['cpu']}. DisH ADMM, {p['nodes']} nodes, {p['topology']} topology, "
        f"{p['bits']} bits, {p['iterations']} outer iterations (K = 5 ADMM steps each), {p['data']}, "
        f"{p.get('chunk_rows')}-row chunks. Floor = {p['iterations'] + 1} plain passes that read every chunk and "
        "compute (X - mean) C, same cluster, same run.",
        "",
        "| workers | n | DisH s | s per M rows | floor s | DisH / floor | bytes exchanged per iteration per node |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result["runs"]:
        lines.append(
            f"| {r['workers']} | {r['n']:,} | {r['seconds']:.1f} | {r['seconds_per_million_rows']:.2f} | "
            f"{r['floor_seconds']:.1f} | {r['ratio_to_floor']:.2f} | {r['bytes_exchanged_per_iteration_per_node']} |"
        )
    lines += [
        "",
        "Summary (see `summarize` in the script for the definitions):",
        "",
        "```",
        json.dumps(result["summary"], indent=2),
        "```",
        "",
    ]
    out.with_suffix(".md").write_text("\n".join(lines + [f"![training time vs n]({out.with_suffix('.png').name})", ""]))
    plot(result, out.with_suffix(".png"))


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for workers in sorted({r["workers"] for r in result["runs"]}):
        pts = sorted((r["n"], r["seconds"], r["floor_seconds"]) for r in result["runs"] if r["workers"] == workers)
        n = np.array([p[0] for p in pts]) / 1e6
        fit = result["summary"][f"{workers}w"]
        ax.plot(n, [p[1] for p in pts], "o-", label=f"DisH, {workers} worker(s)")
        ax.plot(n, fit["fixed_seconds"] + fit["seconds_per_million_rows_marginal"] * n, ":", color="grey")
        ax.plot(n, [p[2] for p in pts], "x--", label=f"floor passes, {workers} worker(s)")
    ax.set(
        xlabel="training points (millions)",
        ylabel="seconds",
        title="DisH training time (10 nodes, 32 bits, 5 iterations)",
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000000,2000000,4000000,8000000")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--bits", type=int, default=32)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument(
        "--chunk-rows",
        type=int,
        default=32768,
        help="feature chunk rows: small enough that even 1M rows give every node several chunks",
    )
    parser.add_argument("--workdir")
    parser.add_argument("--out", default="benchmarks/results/dish_scaling.json")
    parser.add_argument("--resummarize", action="store_true", help="recompute the summary of an existing --out")
    args = parser.parse_args(argv)
    if args.resummarize:
        result = json.loads(Path(args.out).read_text())
        result["summary"] = summarize(result["runs"])
        write_result(result, Path(args.out), overwrite=True)
        return print(json.dumps(result["summary"]))
    sizes = [int(v) for v in args.sizes.split(",")]
    worker_counts = [int(v) for v in args.workers.split(",")]

    from distributed import Client, LocalCluster

    from benchmarks.harness.runs import floor_passes
    from dask_hashcodes.data.synth import write_sift_synth
    from dask_hashcodes.hashing import DisH
    from dask_hashcodes.kernels.dish import random_orthonormal

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="dhash-bench-dish-"))
    runs = []
    try:
        with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None, silence_logs=40) as c, Client(c):
            ds = write_sift_synth(workdir / "sift.zarr", max(sizes), seed=0, chunk_rows=args.chunk_rows)
        for workers in worker_counts:
            with (
                LocalCluster(
                    n_workers=workers, threads_per_worker=1, dashboard_address=None, silence_logs=40
                ) as cluster,
                Client(cluster),
            ):
                for n in sizes:
                    X = ds.features_dask()[:n]
                    started = time.perf_counter()
                    model = DisH(
                        args.bits, nodes=args.nodes, topology="random", max_iter=args.iters, tol=0, random_state=0
                    ).fit(X)
                    seconds = time.perf_counter() - started
                    C = random_orthonormal(128, args.bits, np.random.default_rng(0))
                    floor = floor_passes(X, model.mean_, C, args.iters + 1)  # +1: the mean pass
                    stats = model.training_stats_
                    runs.append(
                        {
                            "n": n,
                            "workers": workers,
                            "seconds": round(seconds, 3),
                            "pass_seconds": stats["pass_seconds"],
                            "admm_seconds": stats["admm_seconds"],
                            "floor_seconds": round(floor, 3),
                            "ratio_to_floor": round(seconds / floor, 3),
                            "seconds_per_million_rows": round(seconds / n * 1e6, 3),
                            "iterations": stats["iterations"],
                            "bytes_exchanged_per_iteration_per_node": stats["bytes_exchanged_per_node"][0],
                            "final_consensus_residual": stats["consensus_residual"][-1],
                        }
                    )
                    print(json.dumps(runs[-1]), flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    summary = summarize(runs)
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "")
    result = {
        "command": " ".join([sys.executable.rsplit("/", 1)[-1], *sys.argv]),
        "machine": {"cores": os.cpu_count(), "cpu": cpu, "python": platform.python_version()},
        "params": {
            "nodes": args.nodes,
            "bits": args.bits,
            "iterations": args.iters,
            "topology": "random",
            "data": "sift-synth 128-d uint8, prefixes of one 8M dataset",
            "chunk_rows": args.chunk_rows,
        },
        "runs": runs,
        "summary": summary,
    }
    write_result(result, Path(args.out), overwrite=True)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
