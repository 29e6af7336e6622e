#!/usr/bin/env python
"""The whole 10M pipeline as a user runs it: synth -> split + exact ground truth
-> DisH and LSH training -> encoding -> Hamming ranking -> precision@50..1000 (the DisH
paper's Fig. 5 protocol on SIFT-10M), each step a `dhash` command, timed end to end.

    .venv/bin/python benchmarks/bench_pipeline.py --n 10000000 --out benchmarks/results/pipeline_10M.json

Steps (each one `python -m dask_hashcodes.cli ...`, exactly what `dhash` runs, watched for peak RSS):
1. `dhash synth sift --n N --out WORK/sift.zarr`
2. `dhash evaluate --dataset WORK/sift.zarr --methods lsh,dish --bits 32,64 --queries 1000
   --ground-truth euclidean --top-percent 2 --ks 50,100,200,500,1000`: the seeded split,
   exact top-2% squared-L2 ground truth (ties by id), training, encoding every row, exact
   Hamming ranking and every metric. DisH2 as the paper defines it (one randomly selected
   node's hash functions encode everything: `--dish2-dictionaries 1`, drawn with the seed)
   and DisH1 (each node encodes its rows with its own).

Ground truth: the paper's extracted text for SIFT-10M reads "top 2 nearest neighbors in
Euclidean space", with the unit lost in extraction (its GIST-1M protocol reads "top 2
percentile"). Two neighbours cannot be the reading: precision@1000 could not exceed
0.002, while Fig. 5(d) plots 64-bit precision from 0.5 upwards. So relevant = the exact
top 2% of the database, 199,980 rows per query at 10M (stored as a relevance bitmap, see
pipeline/dask_hashcodes/evaluation/truth.py). `--ground-truth-top-k 1000` reruns with the top 1000 instead
(the criterion of the previous version of this benchmark). The paper samples 2000 queries;
we rank 1000 (the paper's number; `--queries` changes it). Writes JSON + Markdown; deletes
WORK unless --keep.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_memory import fmt_cmd, run_measured  # noqa: E402

from benchmarks.harness.measure import disk_usage, machine_info  # noqa: E402

KS = [50, 100, 200, 500, 1000]
METRICS = [f"precision@{k}" for k in KS] + ["map"]
MARGIN = 0.05  # "well above": at the deep end of the ranking, where precision is far from its ceiling


# a step's command after its module (older results ran `-m jobs`)
STEP_ARGS = re.compile(r" -m (?:jobs|dask_hashcodes\.cli) ")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--bits", default="32,64")
    ap.add_argument("--methods", default="lsh,dish")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--ground-truth-top-k", type=int, help="relevant = exact top K (default: the top 2 percent)")
    ap.add_argument("--workdir", help="where the dataset and report go (default: a temp dir beside the repo)")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/pipeline_10M.json"))
    args = ap.parse_args(argv)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="dhash-pipeline-", dir=REPO.parent))
    work.mkdir(parents=True, exist_ok=True)
    py = [sys.executable, "-m", "dask_hashcodes.cli"]
    truth_args = ["--top-k", str(args.ground_truth_top_k)] if args.ground_truth_top_k else ["--top-percent", "2"]
    truth_text = (
        f"exact top-{args.ground_truth_top_k}" if args.ground_truth_top_k else "exact top 2 percent"
    ) + " squared L2, ties by id"
    steps = {
        "synth": py + ["synth", "sift", "--n", str(args.n), "--out", str(work / "sift.zarr"), "--overwrite", "--quiet"],
        "evaluate": py
        + [
            "evaluate",
            "--dataset",
            str(work / "sift.zarr"),
            "--methods",
            args.methods,
            "--bits",
            args.bits,
            "--queries",
            str(args.queries),
            "--ground-truth",
            "euclidean",
            *truth_args,
            "--ks",
            ",".join(map(str, KS)),
            "--dish2-dictionaries",
            "1",
            "--out",
            str(work / "report"),
            "--quiet",
        ],
    }
    result = {
        "benchmark": "pipeline",
        "command": fmt_cmd([sys.executable, *sys.argv]),
        "machine": machine_info(),
        "params": {
            "n": args.n,
            "bits": args.bits,
            "methods": args.methods,
            "queries": args.queries,
            "ground_truth": truth_text,
            "ks": KS,
        },
        "steps": {},
    }
    started = time.perf_counter()
    try:
        for name, cmd in steps.items():
            print(f"+ {fmt_cmd(cmd)}", file=sys.stderr, flush=True)
            measured = run_measured(cmd, cwd=REPO, log=work / f"{name}.log")
            measured.pop("per_process", None)
            result["steps"][name] = {"command": fmt_cmd(cmd), **measured}
            if measured["returncode"] != 0:
                print((work / f"{name}.log").read_text()[-3000:], file=sys.stderr)
                return 1
        result["total_seconds"] = round(time.perf_counter() - started, 1)
        result["dataset_disk"] = disk_usage(work / "sift.zarr")
        report = json.loads((work / "report" / "report.json").read_text())
        result["results"] = [
            {
                "label": r.get("label", r["method"]),
                "n_bits": r["n_bits"],
                **{f"precision@{k}": round(r["metrics"][f"precision@{k}"], 4) for k in KS},
                "map": round(r["metrics"]["map"], 4),
                **r["timing"],
            }
            for r in report["results"]
        ]
        by = {(r["label"], r["n_bits"]): r for r in result["results"]}
        result["dish_minus_lsh"] = {
            f"{label} {b}": {m: round(row[m] - by[("lsh", b)][m], 4) for m in METRICS}
            for (label, b), row in by.items()
            if label.startswith("dish")
        }
        result["acceptance"] = {
            "target": f"whole pipeline < 30 min; at every bit length DisH (DisH1 and DisH2) above LSH at every "
            f"precision@K and map, by >= {MARGIN} at precision@1000 and map",
            "met": result["total_seconds"] < 1800
            and all(
                all(g > 0 for g in gaps.values()) and gaps["precision@1000"] >= MARGIN and gaps["map"] >= MARGIN
                for gaps in result["dish_minus_lsh"].values()
            ),
        }
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    out = Path(args.out)
    out.write_text(json.dumps(result, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    return 0 if result["acceptance"]["met"] else 1


def markdown(result: dict) -> str:
    m = result["machine"]
    lines = [
        "# Full pipeline at 10M points",
        "",
        f"Command: `{result['command']}`",
        "",
        f"Machine: {m['cores']} cores, {m['cpu_model']}, {m['ram_total_gb']} GB RAM",
        "",
        "| step | seconds | max process RSS MB |",
        "|---|---|---|",
    ]
    for step in result["steps"].values():
        lines.append(
            f"| `{STEP_ARGS.split(step['command'])[-1]}` | {step['wall_seconds']} | {step['max_process_peak_rss_mb']} |"
        )
    lines += [
        "",
        f"Total: **{result['total_seconds']} s** ({result['total_seconds'] / 60:.1f} min); dataset on disk "
        f"{result['dataset_disk']['disk_mb']} MB",
        "",
        "| method | bits | " + " | ".join(f"P@{k}" for k in KS) + " | map | train s | encode s | search s |",
        "|---|---|" + "---|" * (len(KS) + 4),
    ]
    for r in result["results"]:
        lines.append(
            f"| {r['label']} | {r['n_bits']} | "
            + " | ".join(str(r[f"precision@{k}"]) for k in KS)
            + f" | {r['map']} | {r['train_seconds']:.1f} | {r['encode_seconds']:.1f} | {r['search_seconds']:.1f} |"
        )
    lines += [
        "",
        "DisH minus LSH:",
        "",
        "| | " + " | ".join(f"P@{k}" for k in KS) + " | map |",
        "|---|" + "---|" * (len(KS) + 1),
    ]
    for name, gaps in result.get("dish_minus_lsh", {}).items():
        lines.append(f"| {name} bits | " + " | ".join(f"{gaps[m]:+.4f}" for m in METRICS) + " |")
    lines += [
        "",
        f"Ground truth: {result['params']['ground_truth']}; {result['params']['queries']} queries.",
        "",
        f"Acceptance: {result['acceptance']['target']} -> {'met' if result['acceptance']['met'] else 'NOT met'}",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
