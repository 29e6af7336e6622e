"""Could the inverted file's build skip most of its distance computations and stay exact?

The build is two GEMM-bound passes: Lloyd's k-means on a sample of the features, and the
assignment of every row to its nearest centroid. Both compute every row's distance to every
centroid. The classic exact shortcuts skip a distance when a bound proves it cannot win.
This script measures, in the quantiser's own space (the default principal directions of the
k-means sample), how much each would skip:

* **Hamerly's bounds in k-means**: an upper bound on each row's distance to its centre and
  a lower bound on its distance to any other. Both are carried across Lloyd steps by how far
  the centres moved. A row whose upper bound (tightened once to its exact distance) stays
  under max(lower bound, half its centre's distance to the nearest other centre) keeps its
  centre without a GEMM row. Reported: the share of rows skipped at each step (and a check
  that no skipped row would have changed centre).
* **Partial distances in the assignment**: the squared distance over the leading m
  principal directions is a lower bound of the whole. After scoring only those m
  directions, each centroid whose bound exceeds the full distance of the bound's best
  centroid is ruled out. Reported: how many centroids per row survive, for several m.
* **Two levels with the triangle inequality**: the centroids grouped by k-means into
  sqrt(lists) groups. A row scores the centroids of its ``probes`` nearest groups. A group
  not scored is ruled out exactly when the row's distance to its centre minus the group's
  radius exceeds the best distance found. Reported: the share of rows whose true nearest
  centroid lies in the scored groups, the share certified exact, and the centroids scored.

Data: Fashion-MNIST's 60,000 training images (real), and sift-synth (the 128-d generator).
Lists: 4 sqrt(n), as dhash's default. Single thread: only shares and counts are reported,
no seconds.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/ivf_assignment_pruning.py \
        --out benchmarks/results/ivf_assignment_pruning
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.ivf_quantiser_validation import (  # noqa: E402
    KMEANS_STEPS,
    fashion_mnist,
    quantiser,
    sift_synth,
    write_result,
)

PARTIAL_SHARES = (0.25, 0.5, 0.75)  # leading directions scored first, as a share of the dims
PROBED_GROUPS = (2, 4, 8, 16)
HELD_ROWS = 512  # rows whose partial and two-level bounds are measured (every centroid, float64)


def squared_distances(points: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """float64 squared distances, every row to every centre (|x|^2 + |c|^2 - 2 x.c)."""
    out = (points * points).sum(axis=1)[:, None] + (centres * centres).sum(axis=1)[None] - 2 * points @ centres.T
    return np.maximum(out, 0)


def nearest_two(points: np.ndarray, centres: np.ndarray):
    """(nearest centre, distance to it, distance to the second nearest) of every row."""
    nearest = np.empty(len(points), np.int64)
    first, second = np.empty(len(points)), np.empty(len(points))
    for start in range(0, len(points), 4096):
        d2 = squared_distances(points[start : start + 4096], centres)
        two = np.argsort(d2, axis=1, kind="stable")[:, :2]
        picked = np.take_along_axis(d2, two, axis=1)
        nearest[start : start + 4096] = two[:, 0]
        first[start : start + 4096], second[start : start + 4096] = np.sqrt(picked[:, 0]), np.sqrt(picked[:, 1])
    return nearest, first, second


def hamerly_skips(points: np.ndarray, centres: np.ndarray) -> list[dict]:
    """Per Lloyd step after the first: the share of rows Hamerly's test skips, and how many
    skipped rows would have moved (must be 0)."""
    from dask_hashcodes.kernels.kmeans import updated_centres

    nearest, upper, lower = nearest_two(points, centres)
    steps = []
    for _ in range(KMEANS_STEPS - 1):
        counts = np.bincount(nearest, minlength=len(centres))
        sums = np.zeros_like(centres)
        np.add.at(sums, nearest, points)
        moved_to = updated_centres(centres, counts, sums)
        drift = np.sqrt(((moved_to - centres) ** 2).sum(axis=1))
        centres = moved_to
        largest, runner_up = np.sort(drift)[::-1][:2]
        upper = upper + drift[nearest]
        lower = lower - np.where(nearest == np.argmax(drift), runner_up, largest)
        between = np.sqrt(squared_distances(centres, centres))
        np.fill_diagonal(between, np.inf)
        threshold = np.maximum(lower, between.min(axis=1)[nearest] / 2)
        exact_upper = np.sqrt(((points - centres[nearest]) ** 2).sum(axis=1))  # the test's one tightening
        skipped = np.minimum(upper, exact_upper) <= threshold
        new_nearest, upper, lower = nearest_two(points, centres)
        steps.append(
            {
                "skipped": float(skipped.mean()),
                "moved": float((new_nearest != nearest).mean()),
                "skipped_but_moved": int((skipped & (new_nearest != nearest)).sum()),
            }  # fmt: skip
        )
        nearest = new_nearest
    return steps


def partial_survivors(points: np.ndarray, centres: np.ndarray) -> dict:
    """Per share of leading directions: centroids per row not ruled out by the partial bound."""
    terms = (points[:, None, :] - centres[None]) ** 2
    cumulative = np.cumsum(terms, axis=2)
    full = cumulative[:, :, -1]
    out = {}
    for share in PARTIAL_SHARES:
        m = max(1, int(round(share * points.shape[1])))
        bound = cumulative[:, :, m - 1]
        guess_full = full[np.arange(len(points)), bound.argmin(axis=1)]
        survivors = (bound < guess_full[:, None]).sum(axis=1)
        out[str(m)] = {"mean": float(survivors.mean()), "median": float(np.median(survivors))}
    return out


def two_levels(points: np.ndarray, centres: np.ndarray, seed: int = 0) -> dict:
    """Per probed group count: the true nearest's share in the scored groups, the share
    certified exact by the triangle inequality, and the centroids scored per row."""
    from dask_hashcodes.kernels.kmeans import lloyd_sums, nearest_centres, updated_centres

    rng = np.random.default_rng(seed)
    groups = int(round(np.sqrt(len(centres))))
    tops = centres[np.sort(rng.choice(len(centres), groups, replace=False))]
    for _ in range(20):
        counts, sums, _ = lloyd_sums(centres, tops)
        tops = updated_centres(tops, counts, sums)
    group_of = nearest_centres(centres, tops)
    radius = np.zeros(groups)
    np.maximum.at(radius, group_of, np.sqrt(((centres - tops[group_of]) ** 2).sum(axis=1)))
    sizes = np.bincount(group_of, minlength=groups)
    to_tops = np.sqrt(squared_distances(points, tops))
    order = np.argsort(to_tops, axis=1, kind="stable")
    full = squared_distances(points, centres)
    true_group = group_of[full.argmin(axis=1)]
    out = {}
    for probes in PROBED_GROUPS:
        scored = order[:, :probes]
        allowed = np.zeros((len(points), groups), bool)
        np.put_along_axis(allowed, scored, True, axis=1)
        best = np.sqrt(np.where(allowed[:, group_of], full, np.inf).min(axis=1))
        others = np.where(allowed, np.inf, to_tops - radius[None]).min(axis=1)
        out[str(probes)] = {
            "true_nearest_scored": float((allowed[np.arange(len(points)), true_group]).mean()),
            "certified_exact": float((others >= best).mean()),
            "centroids_scored": float(sizes[scored].sum(axis=1).mean()),
        }
    return {"groups": groups, "by_probes": out}


def study(name: str, database: np.ndarray) -> dict:
    n_lists = int(round(4 * np.sqrt(len(database))))
    project, centres, _, share, dims = quantiser(database, n_lists, 256, "default")
    # the k-means sample and start as ``quantiser`` draws them, so the bounds follow the same steps
    rng, n = np.random.default_rng(0), len(database)
    sample = database[np.sort(rng.choice(n, 256 * n_lists, replace=False))] if 256 * n_lists < n else database
    points = project(sample)
    start = points[np.sort(rng.choice(len(points), n_lists, replace=False))]
    held = project(database[np.sort(np.random.default_rng(1).choice(n, HELD_ROWS, replace=False))])
    row = {
        "dataset": name, "n": len(database), "d": database.shape[1], "lists": n_lists, "dims": dims,
        "variance_share": share, "kmeans_rows": len(points),
        "hamerly_by_step": hamerly_skips(points, start),
        "partial_survivors": partial_survivors(held, centres),
        "two_levels": two_levels(held, centres),
    }  # fmt: skip
    print(json.dumps(row), flush=True)
    return row


def render(result) -> str:
    lines = [
        "# Exact shortcuts for the inverted file's build, measured",
        "",
        f"- command: `{result['command']}`",
        f"- machine: {result['machine']['cpu_model']}, {result['machine']['cores']} cores",
        "- the quantiser's space: the default principal directions of the k-means sample (256 rows per list), "
        "4 sqrt(n) lists; Fashion-MNIST: the 60,000 training images; sift-synth: the generator's first rows",
        "",
        "## Hamerly's bounds in k-means: rows skipped per Lloyd step",
        "",
        "| data | lists | dims | " + " | ".join(f"step {s + 2}" for s in range(KMEANS_STEPS - 1)) + " |",
        "|---" * (3 + KMEANS_STEPS - 1) + "|",
    ]
    for r in result["rows"]:
        cells = [f"{s['skipped']:.3f} ({s['moved']:.3f} moved)" for s in r["hamerly_by_step"]]
        lines.append(f"| {r['dataset']} | {r['lists']} | {r['dims']} | " + " | ".join(cells) + " |")
    bad = sum(s["skipped_but_moved"] for r in result["rows"] for s in r["hamerly_by_step"])
    lines += ["", f"Skipped rows that moved (the bounds' check): {bad}.", ""]
    lines += [
        "## Partial distances in the assignment: centroids per row left after the leading directions",
        "",
        "| data | lists | dims | leading directions: mean (median) survivors |",
        "|---|---|---|---|",
    ]
    for r in result["rows"]:
        cells = ", ".join(f"{m}: {v['mean']:.0f} ({v['median']:.0f})" for m, v in r["partial_survivors"].items())
        lines.append(f"| {r['dataset']} | {r['lists']} | {r['dims']} | {cells} |")
    lines += [
        "",
        "## Two levels with the triangle inequality",
        "",
        "| data | lists | groups | groups scored | true nearest scored | certified exact | centroids scored |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        t = r["two_levels"]
        for probes, v in t["by_probes"].items():
            lines.append(
                f"| {r['dataset']} | {r['lists']} | {t['groups']} | {probes} | {v['true_nearest_scored']:.4f} | "
                f"{v['certified_exact']:.4f} | {v['centroids_scored']:.0f} |"
            )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sift-n", type=int, default=262_144)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    rows = [study("fashion-mnist", fashion_mnist()[0]), study("sift-synth", sift_synth(args.sift_n)[0])]
    result = write_result("benchmarks/ivf_assignment_pruning.py", argv, rows, args.out, render)
    print(render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
