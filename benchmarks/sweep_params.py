#!/usr/bin/env python
"""Parameter sweep of one method on a validation split (never the test queries).

    .venv/bin/python benchmarks/sweep_params.py --dataset fashion-mnist --method sgh --bits 32,64,128 \
        --grid '{"n_bases": [300, 1000], "bandwidth_scale": [0.5, 1, 2], "rho_scale": [0.5, 1, 2]}' \
        --ground-truth euclidean --top-percent 2 --out benchmarks/results/sweep_sgh_fashion-mnist.json

The evaluation's test split (1000 queries, seed 0) is removed from the dataset first
(benchmarks/harness/tuning.py); validation queries (1000, seed 1) come from the remaining
rows, the rest of which is the validation database and training set. Writes JSON + a
Markdown table (one row per configuration x bits, best per bits marked).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.harness.measure import machine_info  # noqa: E402 - after the sys.path entry above


def markdown(result: dict, keys: list[str], best: dict) -> str:
    """The sweep's table: one row per configuration x bits (x DisH2/DisH1), best per bits marked;
    the selection metric gets a column of its own when it is not one of the usual three."""
    shown = {"precision@100": "P@100", "precision@1000": "P@1000", "map": "map"}
    metric = result["protocol"]["selection_metric"]
    if metric not in shown:
        shown[metric] = metric
    lines = [
        f"# Sweep: {result['method']} on {result['dataset']} (validation split)",
        "",
        f"Command: `{result['command']}`",
        "",
        f"Selection metric: {metric}; test queries removed before tuning.",
        "",
        "| bits | row | " + "".join(f"{k} | " for k in [*keys, *shown.values()]) + "train s | best |",
        "|" + "---|" * (len(keys) + len(shown) + 4),
    ]
    for row in result["rows"]:
        mark = "**best**" if best[row["n_bits"]] is row else ""
        lines.append(
            f"| {row['n_bits']} | {row.get('label', row['method'])} | "
            + "".join(f"{row['params'].get(k, 'default')} | " for k in keys)
            + "".join(f"{row['metrics'][m]:.4f} | " for m in shown)
            + f"{row['train_seconds']:.1f} | {mark} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", required=True, help="dataset path or built-in source (fashion-mnist, sift-synth)")
    ap.add_argument("--n", type=int, help="sift-synth rows")
    ap.add_argument("--method", required=True)
    ap.add_argument("--bits", default="32")
    ap.add_argument(
        "--grid",
        required=True,
        help="JSON object: parameter -> list of values (every combination), or a list of such objects (their union)",
    )
    ap.add_argument("--ground-truth", choices=["labels", "euclidean"])
    ap.add_argument("--top-percent", type=float)
    ap.add_argument("--top-k", type=int, help="euclidean ground truth: the exact top-K neighbours")
    ap.add_argument("--metric", default="precision@1000", help="metric that picks the best configuration")
    ap.add_argument("--workdir", default=str(REPO.parent / "dhash-sweeps"))
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)

    from benchmarks.harness.tuning import grid, holdout_dataset, sweep
    from dask_hashcodes.data.sources import resolve_dataset
    from dask_hashcodes.distributed.cluster import connect

    bits = [int(b) for b in args.bits.split(",")]
    grids = json.loads(args.grid)
    configs = [c for g in (grids if isinstance(grids, list) else [grids]) for c in grid(**g)]
    started = time.perf_counter()
    with connect(quiet=True) as client:
        ds = resolve_dataset(args.dataset, n=args.n)
        held = holdout_dataset(ds, 1000, 0, Path(args.workdir) / f"{Path(str(ds.path)).name}-holdout.zarr")
        rows = sweep(
            held,
            args.method,
            bits,
            configs,
            ground_truth=args.ground_truth,
            top_percent=args.top_percent,
            top_k=args.top_k,
            ks=[100, 1000],
            progress=lambda row: print(json.dumps(row), file=sys.stderr, flush=True),
        )
        client.cluster.close()
    best = {}
    for row in rows:
        if row["n_bits"] not in best or row["metrics"][args.metric] > best[row["n_bits"]]["metrics"][args.metric]:
            best[row["n_bits"]] = row
    result = {
        "benchmark": "sweep",
        "command": " ".join([sys.executable, *sys.argv]),
        "machine": machine_info(),
        "dataset": str(args.dataset),
        "method": args.method,
        "bits": bits,
        "grid": json.loads(args.grid),
        "protocol": {
            "test_split": "1000 queries, seed 0, removed before tuning",
            "validation_split": "1000 queries, seed 1, drawn from the remaining rows",
            "ground_truth": args.ground_truth,
            "top_percent": args.top_percent,
            "top_k": args.top_k,
            "selection_metric": args.metric,
        },
        "seconds": round(time.perf_counter() - started, 1),
        "rows": rows,
        "best": {str(b): r["params"] for b, r in best.items()},
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    text = markdown(result, list(dict.fromkeys(k for c in configs for k in c)), best)
    out.with_suffix(".md").write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
