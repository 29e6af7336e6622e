#!/usr/bin/env python
"""Collect the quality reports (benchmarks/run_quality.sh quality) into one Markdown
file with the acceptance comparisons computed from the numbers.

    .venv/bin/python benchmarks/summarize_quality.py benchmarks/results/quality --out benchmarks/results/quality.md
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dask_hashcodes.evaluation.report import quality_table  # noqa: E402 - after the sys.path entry above

# (report directory, method, metric, bits, baselines that must be lower by at least the
# margin, reference reported only, margin)
CHECKS = [
    ("fashion-mnist-euclidean", "sgh", "precision@1000", [32, 64, 128], ["lsh", "pcah"], "itq", 0.0),
    ("sift-synth-100k-euclidean", "sgh", "precision@1000", [32, 64, 128], ["lsh", "pcah"], "itq", 0.0),
    ("fashion-mnist-labels", "splh", "map", [24, 48], ["lsh", "sh", "sikh", "pcah", "pcah-adjusted"], "itq", 0.0),
    ("fashion-mnist-labels", "pcah-adjusted", "map", [24, 48], ["pcah"], "itq", 0.0),
    ("fashion-mnist-euclidean", "usplh", "map", [32, 48], ["pcah"], "itq", 0.01),
    ("sift-synth-100k-euclidean", "usplh", "map", [32, 48], ["pcah"], "itq", 0.01),
    ("debian-minilm-splh", "splh", "map", [24, 48], ["lsh", "sh", "sikh", "pcah"], "itq", 0.0),
]
# (report directory, method, metric, bits, reference, largest shortfall as a fraction of it)
WITHIN = [
    ("fashion-mnist-dish-random-partition", "dish", "map", [32], "itq", 0.03),
    ("debian-minilm-labels", "dish", "map", [16, 32, 64], "itq", 0.03),
]

# What was checked where a comparison fails or our ordering differs from the paper's.
NOTES = [
    "pcah-adjusted below PCAH (Fashion-MNIST, labels): the single-shot adjusted covariance approaches PCAH as "
    "eta -> 0 and is above it for no eta from 0.003 to 100 (SPLH docstring). With class labels, X_l^T S X_l is "
    "about the between-class scatter, whose directions PCA already ranks first on this set; the gain of S3PLH "
    "comes from its sequential label updates.",
    "usplh on sift-synth at 32 bits: +0.007 over PCAH, not +0.01. eta = 2 is the best of 0.5 / 1 / 2 / 4 on the "
    "validation splits at 100k and 400k rows (sweep_usplh_sift-synth-*.md); region size, pair weights and decay "
    "were measured too (USPLH docstring). At 48 bits and on Fashion-MNIST the margin holds.",
    "sh and sikh below lsh on Fashion-MNIST with labels at 24 bits, unlike the SPLH paper's MNIST figure: our LSH "
    "projects mean-centred data, which makes it strong on images whose pixels are all positive. With Euclidean "
    "ground truth SH is above LSH up to 64 bits and SIKH rises with the bits, as in the paper.",
    "splh below itq (Fashion-MNIST: 0.413 / 0.428 vs 0.486 / 0.497 at 24 / 48 bits; debian-minilm: 0.175 / "
    "0.197 vs 0.177 / 0.202): the SPLH paper predates ITQ and does not compare with it. Its eta = 1 is the "
    "best over validation splits of both sets (sweep_splh_*.md); on debian-minilm the earlier eta = 0.1 left "
    "S3PLH level with PCAH.",
    "agh below lsh on sift-synth (above it on Fashion-MNIST, as in the DisH and SGH papers), with the paper's "
    "defaults (m = 300, s = 2, 5 k-means steps): s = 3 gives map 0.087 and m = 1000 gives 0.077 at 32 bits (LSH "
    "0.094), so neither setting explains it; the generator's many small clusters are a suspect, not yet checked.",
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("reports", help="directory holding one report directory per run")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    root = Path(args.reports)
    reports = {p.parent.name: json.loads(p.read_text()) for p in sorted(root.glob("*/report.json"))}
    lines = [
        "# Quality: SGH, S3PLH, USPLH and DisH against their papers' baselines, on the papers' protocols",
        "",
        "Test split: 1000 queries, seed 0; training set = database. Commands: `benchmarks/run_quality.sh quality`;",
        "parameters chosen on a validation split beforehand (`sweep_*.md`).",
        "",
        "## Acceptance",
        "",
        "| run | method | metric | bits | value | must beat (by the margin) | beaten? | reported against |",
        "|---|---|---|---|---|---|---|---|",
    ]
    all_ok = True
    for run, method, metric, bits_list, baselines, reference, margin in CHECKS:
        if run not in reports:
            lines.append(f"| {run} | {method} | {metric} | - | missing | | | |")
            all_ok = False
            continue
        rows = {(r["method"], r["n_bits"]): r["metrics"] for r in reports[run]["results"]}
        for bits in bits_list:
            if (method, bits) not in rows:
                continue
            value = rows[(method, bits)][metric]
            lower = {b: rows[(b, bits)][metric] for b in baselines if (b, bits) in rows}
            ok = all(value > v + margin for v in lower.values())
            all_ok &= ok
            ref = rows.get((reference, bits), {}).get(metric)
            ref_cell = f"{reference} {ref:.4f}" if ref is not None else ""
            beaten = ", ".join(f"{b} {v:.4f}" for b, v in lower.items()) + (f" (+{margin})" if margin else "")
            lines.append(
                f"| {run} | {method} | {metric} | {bits} | {value:.4f} | {beaten} | {'yes' if ok else 'NO'} | {ref_cell} |"
            )
    for run, method, metric, bits_list, reference, fraction in WITHIN:
        rows = {(r["method"], r["n_bits"]): r["metrics"] for r in reports.get(run, {"results": []})["results"]}
        for bits in bits_list:
            if (method, bits) not in rows or (reference, bits) not in rows:
                lines.append(f"| {run} | {method} | {metric} | {bits} | missing | | | |")
                all_ok = False
                continue
            value, ref = rows[(method, bits)][metric], rows[(reference, bits)][metric]
            ok = value >= (1 - fraction) * ref
            all_ok &= ok
            lines.append(
                f"| {run} | {method} | {metric} | {bits} | {value:.4f} | within {fraction:.0%} of {reference} "
                f"({(1 - fraction) * ref:.4f}) | {'yes' if ok else 'NO'} | {reference} {ref:.4f} |"
            )
    lines += ["", f"All acceptance comparisons hold: **{'yes' if all_ok else 'no'}**", "", "Notes:", ""]
    lines += [f"- {note}" for note in NOTES] + [""]
    for run, report in reports.items():
        gt = report["ground_truth"]
        lines += [
            f"## {run}",
            "",
            f"{report['dataset']['source']}, {report['dataset']['n']} points; ground truth: "
            f"{gt['rule']}" + (f" (K = {gt['k']})" if gt.get("k") else ""),
            "",
            quality_table(report),
            "",
        ]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
