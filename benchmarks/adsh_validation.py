"""Choices for ADSH and its baselines made on validation splits, never on the test queries.

The evaluation's test split (1000 queries, seed 0) is removed from the dataset first
(benchmarks/harness/tuning.py); each validation seed draws 1000 validation queries from the
remaining rows, the rest of which is the validation database and training set. Every
configuration of one method is scored at every code length on every validation seed; the
best mean validation map per code length is marked. ``--test`` also scores each
configuration on the test split, for information only: those numbers choose nothing.

    .venv/bin/python benchmarks/adsh_validation.py --method sdh --bits 12,24,32,48 \\
        --configs '[{"init": "random"}, {"init": "labels"}]' --seeds 1,2,3 \\
        --out benchmarks/results/adsh/validation_sdh_start

``--rbf-anchors M`` replaces every row's features by Gaussian kernel features against M
anchors drawn with seed 0 from the rows left after removing the test split (SDH's features:
pipeline/dask_hashcodes/kernels/sdh.py, the bandwidth the mean distance to the anchors), so that a method
with a linear hash function gets SDH's kernel hash function. Writes ``--out``.json and
``--out``.md.
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


def rbf_dataset(ds, n_anchors: int, out):
    """``ds`` with its features replaced by RBF features against ``n_anchors`` of its rows
    (drawn with seed 0; the bandwidth as SDH's: the mean distance from 2000 rows to the
    anchors), written at ``out`` (reused when it was made from the same rows)."""
    import numpy as np

    from dask_hashcodes.kernels.l2 import squared_distances
    from dask_hashcodes.kernels.rbf import rbf_features
    from dask_hashcodes.storage.datasets import open_dataset, write_dataset

    out = Path(out)
    tag = {"rbf_of": str(ds.path), "n": ds.n, "anchors": n_anchors}
    if (out / ".dhash-commit.json").exists() and open_dataset(out).attrs.get("rbf") == tag:
        return open_dataset(out)
    rng = np.random.default_rng(0)
    X = ds.features_dask()
    anchors = np.asarray(X[np.sort(rng.choice(ds.n, n_anchors, replace=False))].compute(), dtype=np.float64)
    probe = np.asarray(X[np.sort(rng.choice(ds.n, min(ds.n, 2000), replace=False))].compute(), dtype=np.float64)
    bandwidth = float(np.sqrt(squared_distances(probe, anchors)).mean())
    blocks = (
        rbf_features(np.asarray(X.blocks[i].compute(), dtype=np.float64), anchors, bandwidth).astype(np.float32)
        for i in range(X.numblocks[0])
    )
    return write_dataset(
        out,
        blocks,
        n=ds.n,
        d=n_anchors,
        dtype=np.float32,
        source=f"rbf features of {ds.source}",
        labels=None if ds.labels is None else np.asarray(ds.labels[:]),
        attrs={"rbf": tag, **({"holdout_of": ds.attrs["holdout_of"]} if "holdout_of" in ds.attrs else {})},
        overwrite=True,
    )


def markdown(result: dict) -> str:
    seeds = result["seeds"]
    test = result["test"]
    lines = [
        f"# Validation: {result['method']} on {result['dataset']}",
        "",
        f"Command: `{result['command']}`",
        "",
        f"Library at commit {result['commit']}. Validation map on the validation queries of seeds "
        f"{', '.join(map(str, seeds))} (test queries removed first); the best mean per code length is marked"
        + ("; the test map is for information only (it chose nothing)." if test else "."),
        "",
        "| bits | configuration | "
        + "".join(f"map seed {s} | " for s in seeds)
        + "mean | "
        + ("test map | " if test else "")
        + "train s | best |",
        "|" + "---|" * (len(seeds) + 5 + bool(test)),
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['n_bits']} | `{json.dumps(row['params'])}` | "
            + "".join(f"{row['validation_map'][str(s)]:.4f} | " for s in seeds)
            + f"{row['mean']:.4f} | "
            + (f"{row['test_map']:.4f} | " if test else "")
            + f"{row['train_seconds']:.1f} | {'**best**' if row['best'] else ''} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="fashion-mnist")
    ap.add_argument("--method", required=True)
    ap.add_argument("--bits", default="32")
    ap.add_argument("--configs", required=True, help="JSON list of parameter sets")
    ap.add_argument("--seeds", default="1", help="validation seeds")
    ap.add_argument("--test", action="store_true", help="also the test map of each configuration, for information")
    ap.add_argument("--rbf-anchors", type=int, help="replace the features by RBF features against this many anchors")
    ap.add_argument("--workdir", default=str(REPO.parent / "dhash-sweeps"))
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)

    import subprocess

    import numpy as np

    from benchmarks.harness.tuning import holdout_dataset, sweep
    from dask_hashcodes import workflows
    from dask_hashcodes.data.sources import resolve_dataset
    from dask_hashcodes.distributed.cluster import connect

    bits = [int(b) for b in args.bits.split(",")]
    configs = json.loads(args.configs)
    seeds = [int(s) for s in args.seeds.split(",")]
    started = time.perf_counter()
    scores: dict = {}
    with connect(quiet=True) as client:
        ds = resolve_dataset(args.dataset)
        work = Path(args.workdir)
        held = holdout_dataset(ds, 1000, 0, work / f"{Path(str(ds.path)).name}-holdout.zarr")
        if args.rbf_anchors:
            held = rbf_dataset(
                held, args.rbf_anchors, work / f"{Path(str(ds.path)).name}-holdout-rbf{args.rbf_anchors}.zarr"
            )
            if args.test:
                ds = rbf_dataset(ds, args.rbf_anchors, work / f"{Path(str(ds.path)).name}-rbf{args.rbf_anchors}.zarr")
        for seed in seeds:
            for row in sweep(held, args.method, bits, configs, seed=seed, ground_truth="labels", ks=[1000]):
                key = (json.dumps(row["params"], sort_keys=True), row["n_bits"])
                entry = scores.setdefault(key, {"params": row["params"], "n_bits": row["n_bits"], "validation_map": {}})
                entry["validation_map"][str(seed)] = row["metrics"]["map"]
                entry["train_seconds"] = row["train_seconds"]
                print(json.dumps({"seed": seed, **entry}), file=sys.stderr, flush=True)
        if args.test:
            for config in configs:
                report = workflows.evaluate(
                    ds, methods=[args.method], bits=bits, queries=1000, seed=0, params={args.method: config}, ks=[1000]
                )
                for r in report["results"]:
                    scores[(json.dumps(config, sort_keys=True), r["n_bits"])]["test_map"] = r["metrics"]["map"]
        client.cluster.close()
    rows = sorted(scores.values(), key=lambda r: r["n_bits"])
    for row in rows:
        row["mean"] = float(np.mean(list(row["validation_map"].values())))
    for b in bits:
        best = max((r for r in rows if r["n_bits"] == b), key=lambda r: r["mean"])
        for r in rows:
            if r["n_bits"] == b:
                r["best"] = r is best
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    result = {
        "benchmark": "validation",
        "command": " ".join(["benchmarks/adsh_validation.py", *(argv if argv is not None else sys.argv[1:])]),
        "commit": commit.stdout.strip(),
        "machine": machine_info(),
        "dataset": args.dataset,
        "method": args.method,
        "rbf_anchors": args.rbf_anchors,
        "seeds": seeds,
        "test": args.test,
        "protocol": {
            "test_split": "1000 queries, seed 0, removed before validation",
            "validation_split": "1000 queries per seed, drawn from the remaining rows; label ground truth",
        },
        "seconds": round(time.perf_counter() - started, 1),
        "rows": rows,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    text = markdown(result)
    out.with_suffix(".md").write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
