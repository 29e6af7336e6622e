#!/usr/bin/env python
"""Every MAC setting tried, with its validation and its test numbers, in one table.

    .venv/bin/python benchmarks/mac_settings.py benchmarks/results/mac/settings

reads the ``report.json`` of every ``benchmarks/mac_comparison.py`` run under the directory
(one sub-directory per run) and writes ``<directory>/README.md``: per run the code length, seed and
MAC's settings (the SVMs' C, chosen on the validation rows or fixed; the h-step rule; the
early-stopping rule), then cut's and MACcut's validation precision (the held-out validation
rows, drawn from the database rows apart from the training points, never the test queries)
and their test map. cut does not depend on MAC's rules, so a run of MACcut alone is set
beside the cut of another run with the same length, seed and C. A default is chosen by the
validation columns; the test columns only report.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# the rules and their value in runs made before the parameter existed
RULES = {"h_step": "refit", "early_stopping": "precision-and-loss"}


def _rows(directory: Path) -> list[dict]:
    rows = []
    for report_path in sorted(directory.glob("*/report.json")):
        report = json.loads(report_path.read_text())
        for r in report["results"]:
            t, p = r["training"], r["params"]
            rows.append(
                {
                    "run": report_path.parent.name,
                    "method": r["method"],
                    "bits": r["n_bits"],
                    "seed": p["random_state"],
                    "labeled": p["n_labeled"],
                    "C": t.get("svm_c"),
                    "C_rule": "validation" if p["svm_c"] is None else "fixed",
                    **{k: p.get(k, before) for k, before in RULES.items()},
                    "validation": t.get("validation_precision"),
                    "map": r["metrics"]["map"],
                    "iterations": len(t.get("mac_path", [])) - 1,
                    "seconds": t["train_seconds"],
                }
            )
    return rows


def table(directory: Path) -> str:
    rows = _rows(directory)
    cuts = {(r["bits"], r["seed"], r["labeled"], r["C"]): r for r in rows if r["method"] == "cut"}
    lines = [
        f"# MAC settings tried ({directory.name})",
        "",
        f"- command: `{' '.join(sys.argv)}`; each run's own command is in its summary `<run>.md` beside "
        "its report directory",
        "- Fashion-MNIST, label affinities, KSH loss, linear h; 'validation': precision@kappa+ of the "
        "held-out validation rows (2000 database rows apart from the training points: half rank the "
        "other half; never the test queries); 'map': the 1000 test queries against the database",
        "- C: the SVMs' C at the two-step start, chosen on the validation rows among 1, 10, 100, 1000 "
        "('validation') or fixed to the value a validation run chose",
        "",
        "| run | bits | seed | training rows | C | h-step | early stopping | cut validation | MACcut validation | "
        "cut map | MACcut map | MACcut - cut map | iterations | MACcut s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(
        (r for r in rows if r["method"] == "maccut"), key=lambda r: (r["bits"], r["seed"], r["labeled"], r["run"])
    ):
        cut = cuts.get((r["bits"], r["seed"], r["labeled"], r["C"]))
        cut_cells = (
            ("—", "—", "—")
            if cut is None
            else (
                f"{cut['validation']:.4f}",
                f"{cut['map']:.4f}",
                f"{r['map'] - cut['map']:+.4f}",
            )
        )
        lines.append(
            f"| {r['run']} | {r['bits']} | {r['seed']} | {r['labeled']} | {r['C']:g} ({r['C_rule']}) | {r['h_step']} | "
            f"{r['early_stopping']} | {cut_cells[0]} | {r['validation']:.4f} | {cut_cells[1]} | {r['map']:.4f} | "
            f"{cut_cells[2]} | {r['iterations']} | {r['seconds']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path)
    args = parser.parse_args(argv)
    out = args.directory / "README.md"
    out.write_text(table(args.directory))
    print(out.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
