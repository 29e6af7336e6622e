#!/usr/bin/env python
"""One parameter of one method against a baseline, across the validation sweeps of several
datasets (``sweep_params.py`` results): the shortfall of each value from the baseline, per
dataset, partition and length, and the value with the best mean over all of them.

    .venv/bin/python benchmarks/compare_sweeps.py --parameter rho_scale --label "dish (DisH2)" \
        --metric recall@1000 --out benchmarks/results/dish_rho_validation.md \
        debian-sift=benchmarks/results/sweep_itq_debian-sift.json:benchmarks/results/sweep_dish_debian-sift.json ...

Each positional argument is ``NAME=BASELINE.json:SWEEP.json[:SWEEP.json ...]``; rows of the
sweeps that differ in another parameter (e.g. ``partition``) are compared separately.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path


def _other_params(params: dict, parameter: str) -> str:
    rest = {k: v for k, v in params.items() if k != parameter}
    return ", ".join(f"{k}={v}" for k, v in sorted(rest.items())) or "defaults"


def collect(specs: list[str], parameter: str, label: str, metric: str):
    """{(dataset, other params, bits): {"baseline": value, value_of_parameter: metric}}."""
    table = defaultdict(dict)
    for spec in specs:
        name, _, files = spec.partition("=")
        baseline, *sweeps = files.split(":")
        base_rows = json.loads(Path(baseline).read_text())["rows"]
        base = {r["n_bits"]: r["metrics"][metric] for r in base_rows}
        for sweep in sweeps:
            for r in json.loads(Path(sweep).read_text())["rows"]:
                if r.get("label", r["method"]) != label or parameter not in r["params"]:
                    continue
                key = (name, _other_params(r["params"], parameter), r["n_bits"])
                table[key]["baseline"] = base[r["n_bits"]]
                table[key][r["params"][parameter]] = r["metrics"][metric]
    return table


def markdown(table, parameter: str, label: str, metric: str, baseline_name: str, command: str) -> str:
    values = sorted({v for cells in table.values() for v in cells if v != "baseline"})
    lines = [
        f"# {label}: {parameter} on validation splits, {metric} against {baseline_name}",
        "",
        f"Command: `{command}`",
        "",
        f"Each cell: {label}'s {metric} minus {baseline_name}'s on the same validation queries "
        "(test queries removed before tuning; see each sweep's JSON for its command).",
        "",
        f"| dataset | other parameters | bits | {baseline_name} | "
        + " | ".join(f"{parameter}={v}" for v in values)
        + " |",
        "|" + "---|" * (4 + len(values)),
    ]
    for (name, other, bits), cells in sorted(table.items()):
        deltas = [f"{cells[v] - cells['baseline']:+.4f}" if v in cells else "—" for v in values]
        lines.append(f"| {name} | {other} | {bits} | {cells['baseline']:.4f} | " + " | ".join(deltas) + " |")
    complete = [cells for cells in table.values() if all(v in cells for v in values)]
    lines += ["", f"Mean and worst difference over the {len(complete)} rows where every value ran:", ""]
    lines += [f"| {parameter} | mean | worst |", "|---|---|---|"]
    means = {}
    for v in values:
        deltas = [cells[v] - cells["baseline"] for cells in complete]
        if deltas:
            means[v] = sum(deltas) / len(deltas)
            lines.append(f"| {v} | {means[v]:+.4f} | {min(deltas):+.4f} |")
    if means:
        lines += ["", f"Best mean: {parameter} = {max(means, key=means.get)}."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parameter", required=True)
    ap.add_argument("--label", required=True, help="the sweep rows compared, e.g. 'dish (DisH2)'")
    ap.add_argument("--metric", default="recall@1000")
    ap.add_argument("--baseline-name", default="itq")
    ap.add_argument("--out", required=True, help="Markdown table")
    ap.add_argument("specs", nargs="+", help="NAME=BASELINE.json:SWEEP.json[:SWEEP.json ...]")
    args = ap.parse_args(argv)
    for spec in args.specs:
        name, _, files = spec.partition("=")
        if not name or len(files.split(":")) < 2:
            ap.error(f"{spec!r} is not NAME=BASELINE.json:SWEEP.json[:SWEEP.json ...]")
        missing = [f for f in files.split(":") if not Path(f).is_file()]
        if missing:
            ap.error(f"no such sweep result: {', '.join(missing)} (write it with sweep_params.py)")
    table = collect(args.specs, args.parameter, args.label, args.metric)
    command = " ".join(["benchmarks/compare_sweeps.py", *(argv if argv is not None else sys.argv[1:])])
    text = markdown(table, args.parameter, args.label, args.metric, args.baseline_name, command)
    Path(args.out).write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
