#!/usr/bin/env python
"""MACcut's cost as the training set grows: time per iteration and quality, in one table.

    .venv/bin/python benchmarks/mac_scale.py benchmarks/results/mac/scale

reads the ``report.json`` of every ``benchmarks/mac_comparison.py`` run under the directory
(one sub-directory per run, MACcut at one training size each) and writes
``<directory>/README.md``: per run the training rows and affinity pairs, the two-step start's
seconds (free codes, then the SVMs' C grid), the mean seconds of a MAC iteration's Z-step and
h-step, the iterations, the whole training time, the validation precision that early stopping
compares and the test map. The validation precision is what a size would be chosen by; the
map only reports.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.mac_settings import _shown, write_table  # noqa: E402


def _rows(directory: Path) -> list[dict]:
    rows = []
    for report_path in sorted(directory.glob("*/report.json")):
        report = json.loads(report_path.read_text())
        for r in report["results"]:
            if r["method"] != "maccut":
                continue
            t, p = r["training"], r["params"]
            start, iterations = t["mac_path"][0], t["mac_path"][1:]
            refitted = [e for e in iterations if "h_seconds" in e]
            rows.append(
                {
                    "run": report_path.parent.name,
                    "dataset": report["dataset"]["source"],
                    "bits": r["n_bits"],
                    "labeled": p["n_labeled"],
                    "affinities": _affinities(p),
                    "affinity_s": t.get("affinity_seconds"),
                    "knn_recall": t.get("knn_recall"),
                    "pairs": p["n_labeled"] * (p["n_similar"] + p["n_dissimilar"]),
                    "start_z": start["z_seconds"],
                    "start_h": start["h_seconds"],
                    "z": float(np.mean([e["z_seconds"] for e in iterations])) if iterations else float("nan"),
                    "h": float(np.mean([e["h_seconds"] for e in refitted])) if refitted else float("nan"),
                    "iterations": len(iterations),
                    "seconds": t["train_seconds"],
                    "validation": t.get("validation_precision"),
                    "map": r["metrics"]["map"],
                }
            )
    return sorted(rows, key=lambda r: (r["dataset"], r["bits"], r["labeled"]))


def _affinities(params: dict) -> str:
    if params.get("affinity", "labels") == "labels":
        return "labels"
    return f"knn ({params.get('knn_search', 'exact')})"


def _number(value, digits: int) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def table(directory: Path) -> str:
    rows = _rows(directory)
    lines = [
        "# MACcut as the training set grows",
        "",
        f"- command: `.venv/bin/python benchmarks/mac_scale.py {_shown(directory)}`; each run's own command is in "
        "its summary `<run>.md` beside its report directory; one run at a time on the machine",
        "- machine: in each run's summary; 2 cores, a local Dask cluster of 2 worker processes",
        "- affinities: labels (kappa+ similar and kappa- dissimilar pairs per training point drawn by class) or "
        "knn (the kappa+ Euclidean neighbours, searched exactly or among nearby k-means cells, and kappa- "
        "drawn among the other points); 'affinity s': building them (neighbour search, draws, GraphCut "
        "blocks, the pair pattern); 'knn recall': the share of the exact neighbours of 256 training points "
        "that an approximate search found. KSH loss, linear h, "
        "GraphCut Z-step; 'start Z s': the free codes (spectral start and GraphCut, every bit, then passes "
        "until nothing changes); 'start h s': the SVMs at every C of the grid; 'Z s' and 'h s': mean seconds "
        "of one MAC iteration's Z-step and h-step",
        "- 'validation': precision@kappa+ of the 2000 held-out validation rows (half rank the other half), "
        "which early stopping compares; 'map': the 1000 test queries against the database (label ground truth, "
        "or the true top 1000 Euclidean neighbours for sift-synth), which only reports",
        "",
        "| run | data | bits | training rows | affinities | pairs | affinity s | knn recall | start Z s | start h s | "
        "iterations | Z s / iteration | h s / iteration | train s | validation | map |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        validation = "—" if r["validation"] is None else f"{r['validation']:.4f}"
        lines.append(
            f"| {r['run']} | {r['dataset']} | {r['bits']} | {r['labeled']} | {r['affinities']} | {r['pairs']:,} | "
            f"{_number(r['affinity_s'], 0)} | {_number(r['knn_recall'], 3)} | {r['start_z']:.0f} | "
            f"{r['start_h']:.0f} | {r['iterations']} | {r['z']:.1f} | {r['h']:.1f} | {r['seconds']:.0f} | "
            f"{validation} | {r['map']:.4f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    return write_table(table, __doc__, argv)


if __name__ == "__main__":
    raise SystemExit(main())
