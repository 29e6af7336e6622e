"""DisH's ADMM penalty: consensus residual and objective for several ``rho_scale`` values.

The default rho = rho_scale x mean node size x RMS distance to the mean ties the penalty to
the data's scale (the paper's rho = 100 is tied to its data). This measures how far apart the
nodes' dictionaries stay, in the hardest non-iid case: Fashion-MNIST (all 70k rows), 10
nodes, one class per node (partition by-label), 32 bits, 20 outer iterations (tol = 0). The
default itself was chosen by retrieval quality on validation splits
(benchmarks/results/dish_rho_validation.md, from sweep_params.py and compare_sweeps.py).

    python benchmarks/bench_dish_rho.py --out benchmarks/results/dish_rho_scale.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.harness.measure import machine_info  # noqa: E402 - after the sys.path entry above
from dask_hashcodes import DisH, connect, disconnect, workflows  # noqa: E402

SCALES = (0.01, 0.03, 0.1, 0.3, 1.0)


def run(scale: float, X, y) -> dict:
    model = DisH(32, nodes=10, partition="by-label", rho_scale=scale, max_iter=20, tol=0.0, random_state=0)
    stats = model.fit(X, y).training_stats_
    objective = stats["objective"]
    return {
        "rho_scale": scale,
        "residual_after_10": stats["consensus_residual"][9],
        "residual_after_20": stats["consensus_residual"][19],
        "objective_change_after_20": (objective[19] - objective[0]) / abs(objective[0]),
        "train_seconds": stats["train_seconds"],
    }


def markdown(result: dict) -> str:
    lines = [
        f"DisH rho_scale on {result['data']} ({result['machine']['cpu_model']}): relative consensus residual "
        "(max over edges of ||C_i - C_j|| / ||C_i||) and objective change since iteration 1.",
        "",
        "| rho_scale | residual after 10 | residual after 20 | objective change after 20 | train s |",
        "|---|---|---|---|---|",
    ]
    for r in result["runs"]:
        lines.append(
            f"| {r['rho_scale']} | {r['residual_after_10']:.2g} | {r['residual_after_20']:.2g} | "
            f"{100 * r['objective_change_after_20']:+.2f}% | {r['train_seconds']:.0f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="result JSON (a Markdown table is written beside it)")
    args = parser.parse_args()
    client = connect(quiet=True)
    try:
        ds = workflows.load_dataset("fashion-mnist")
        runs = [run(scale, ds.features_dask(), ds.labels) for scale in SCALES]
    finally:
        disconnect(client)
    result = {
        "data": "Fashion-MNIST 70000 x 784, 10 nodes (one class each), 32 bits, 20 iterations",
        "machine": machine_info(),
        "runs": runs,
    }
    out = Path(args.out)
    out.write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
