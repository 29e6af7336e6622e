"""A `dhash` command whose fits run their client-side steps on one BLAS thread, or on
OpenBLAS's default (one thread per core).

``Hasher.fit`` runs the client's share of a fit (eigendecompositions, SVDs, rotations) under
a one-thread BLAS limit. This runs one evaluation command on its local cluster both ways,
alternating, in fresh output folders, with none of OMP/OPENBLAS/MKL_NUM_THREADS set (so the
workers have dask's one BLAS thread each in both):

- ``capped``: the command as shipped;
- ``uncapped``: the same command with that limit switched off, as fits ran before it.

Each run's wall seconds and the CPU seconds (user + system) of its whole process tree (the
command and its cluster's worker processes, all waited for) are recorded, with the map of
each method, which must be equal between the two modes.

    .venv/bin/python benchmarks/bench_client_threads.py --repeat 2 \\
        --out benchmarks/results/client_threads.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.harness.measure import machine_info  # noqa: E402 - after the sys.path entry above
from benchmarks.harness.runs import check_result_out, write_pair  # noqa: E402

COMMAND = [
    "evaluate", "--dataset", "fashion-mnist", "--methods", "sgh,usplh,itq", "--bits", "32",
    "--queries", "1000", "--ground-truth", "euclidean", "--top-percent", "2",
]  # fmt: skip
BLAS_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


# the dhash command, optionally with the fits' one-thread limit switched off
DHASH = """
import contextlib, sys
from dask_hashcodes.hashing import base
if sys.argv.pop(1) == "uncapped":
    base.threadpool_limits = lambda **limits: contextlib.nullcontext()
from dask_hashcodes.cli import console_main
sys.argv[0] = "dhash"
sys.exit(console_main())
"""


def run_once(mode: str, out: Path) -> dict:
    env = {name: value for name, value in os.environ.items() if name not in BLAS_VARIABLES}
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", DHASH, mode, *COMMAND, "--out", str(out)], env=env, capture_output=True, text=True
    )
    wall, after = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise SystemExit(f"{mode} run failed: {proc.stderr[-2000:]}")
    report = json.loads((out / "report.json").read_text())
    return {
        "mode": mode,
        "wall_seconds": round(wall, 2),
        "cpu_seconds": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 2),
        "metrics": {f"{r['method']}-{r['n_bits']}": r["metrics"]["map"] for r in report["results"]},
    }


def markdown(result: dict) -> str:
    lines = [
        f"# `dhash {' '.join(COMMAND)}`: fits with the client's BLAS on one thread or on all cores",
        "",
        f"Machine: {result['machine']['cpu_model']}, {result['machine']['cores']} cores. "
        f"Command: `{result['command']}`",
        "",
        "| run | mode | wall s | CPU s (process tree) | map (sgh, usplh, itq) |",
        "|---|---|---|---|---|",
    ]
    for n, run in enumerate(result["runs"], 1):
        maps = ", ".join(f"{v:.4f}" for v in run["metrics"].values())
        lines.append(f"| {n} | {run['mode']} | {run['wall_seconds']:.1f} | {run['cpu_seconds']:.1f} | {maps} |")
    s = result["summary"]
    lines += [
        "",
        f"Median capped / uncapped: wall {s['wall_ratio']:.2f}x, CPU {s['cpu_ratio']:.2f}x; "
        f"metrics equal in every run: {s['metrics_equal']}.",
    ]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=2, help="runs of each mode, alternating")
    parser.add_argument("--out", default="benchmarks/results/client_threads.json")
    parser.add_argument("--overwrite", action="store_true", help="replace a result written before")
    args = parser.parse_args(argv)
    check_result_out(args.out, overwrite=args.overwrite)
    runs = []
    with tempfile.TemporaryDirectory(prefix="dhash-client-threads-") as work:
        for n in range(args.repeat):
            for mode in ("uncapped", "capped"):
                runs.append(run_once(mode, Path(work) / f"{mode}-{n}"))
                print(runs[-1], flush=True)

    def median(mode, key):
        return statistics.median(r[key] for r in runs if r["mode"] == mode)

    result = {
        "schema": "dhash.bench/1",  # what lets a later run with --overwrite replace it
        "command": " ".join(["benchmarks/bench_client_threads.py", *sys.argv[1:]]),
        "machine": machine_info(),
        "runs": runs,
        "summary": {
            "wall_ratio": round(median("capped", "wall_seconds") / median("uncapped", "wall_seconds"), 3),
            "cpu_ratio": round(median("capped", "cpu_seconds") / median("uncapped", "cpu_seconds"), 3),
            "metrics_equal": all(r["metrics"] == runs[0]["metrics"] for r in runs),
        },
    }
    write_pair(result, markdown(result), args.out, overwrite=args.overwrite)
    print(markdown(result))


if __name__ == "__main__":
    main()
