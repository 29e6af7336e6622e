#!/usr/bin/env python
"""Each method paper's comparison table (DisH, SGH, SPLH), reproduced with the rows we implement.

    .venv/bin/python benchmarks/tables.py [--only dish,sgh,splh] [--render-only]

For every table the runs below are evaluated on the test split (1000 queries, seed 0;
training set = database; parameters chosen beforehand on validation splits, `sweep_*.md`)
and stored in ``benchmarks/results/tables/reports/<run>/results.json`` (a method added later is
evaluated alone and merged: the split and ground truth are stored in the dataset); the table
``benchmarks/results/tables/<table>.md`` then shows the metric per method and code length,
and checks each ordering the paper reports: a claim that does not hold is marked and the
table's notes say what was checked. ``--render-only`` rebuilds the tables from the stored
results. Methods not implemented yet are listed as such, never silently dropped.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dask_hashcodes.hashing.registry import METHOD_NAMES  # noqa: E402 - after the sys.path entry above

OUT = REPO / "benchmarks" / "results" / "tables"


@dataclass(frozen=True)
class Run:
    name: str
    dataset: str
    methods: tuple[str, ...]
    bits: tuple[int, ...]
    options: dict = field(default_factory=dict)  # evaluate's protocol options
    n: int | None = None  # built-in source rows


@dataclass(frozen=True)
class Claim:
    """``better`` above ``worse`` in the table's metric at ``bits`` (all lengths when empty)."""

    better: str
    worse: str
    bits: tuple[int, ...] = ()


@dataclass(frozen=True)
class Table:
    name: str
    title: str
    paper_protocol: str
    metric: str
    runs: tuple[Run, ...]
    claims: tuple[Claim, ...]
    notes: tuple[str, ...] = ()
    rising: tuple[str, ...] = ()  # methods the paper shows improving at every longer code


EUCLIDEAN_2PCT = {"ground_truth": "euclidean", "top_percent": 2.0, "ks": [100, 1000]}
LABELS = {"ground_truth": "labels", "ks": [100, 1000]}
DISH_METHODS = ("lsh", "agh", "kmh", "itq", "dish")
SGH_METHODS = ("lsh", "pcah", "sh", "bre", "klsh", "isohash", "agh", "dgh", "itq", "sgh")
SPLH_METHODS = ("lsh", "sh", "sikh", "pcah", "pcah-adjusted", "splh")
USPLH_METHODS = ("lsh", "sh", "sikh", "pcah", "usplh")

TABLES = (
    Table(
        "dish",
        "DisH (Leng et al., ICML 2015), Table 1: DisH against ITQ, LSH, KMH and AGH",
        "map; SIFT-10M and GIST-1M with the top 2% as ground truth in the paper; here sift-synth "
        "(100k, top 2%), Fashion-MNIST and debian-minilm (labels); DisH with 10 nodes, DisH2 row",
        "map",
        (
            Run("dish-sift-synth", "sift-synth", DISH_METHODS, (16, 32, 64), EUCLIDEAN_2PCT, n=100_000),
            Run("dish-fashion-mnist", "fashion-mnist", DISH_METHODS, (16, 32, 64), LABELS),
            Run("dish-debian-minilm", "debian-minilm", DISH_METHODS, (16, 32, 64), LABELS),
        ),
        (Claim("dish", "lsh"), Claim("dish", "agh"), Claim("dish", "kmh")),
        (
            "The paper has DisH level with the centralised ITQ (it is ITQ's objective, solved over nodes); the "
            "ITQ row is there to compare, not a claim.",
            "dish below agh at 16 bits on debian-minilm (label ground truth; level at 32, above at 64): AGH's "
            "graph follows the class structure, which label ground truth rewards, and AGH's quality falls with "
            "the bits as in its own paper. On the paper's protocol (Euclidean top 2%, sift-synth) DisH is above "
            "AGH at every length. AGH ran with its paper's settings (m = 300, s = 2).",
        ),
    ),
    Table(
        "sgh",
        "SGH (Jiang & Li, IJCAI 2015), Table 1: top-1000 precision against graph, kernel and linear hashing",
        "precision@1000 with the top 2% nearest neighbours (Euclidean) as ground truth, 32-128 bits",
        "precision@1000",
        (
            Run("sgh-fashion-mnist", "fashion-mnist", SGH_METHODS, (32, 64, 96, 128), EUCLIDEAN_2PCT),
            Run("sgh-sift-synth", "sift-synth", SGH_METHODS, (32, 64, 96, 128), EUCLIDEAN_2PCT, n=100_000),
        ),
        (
            *(Claim("sgh", m) for m in SGH_METHODS if m != "sgh"),
            Claim("agh", "sh", (32,)),
            Claim("agh", "lsh", (32,)),
            Claim("dgh", "agh"),
        ),
        (
            "sgh below itq at every length and below isohash at 32-96 bits on sift-synth, unlike the paper's "
            "SIFT-1M column (on Fashion-MNIST SGH is above both at every length): the SGH defaults (rho_scale 0.5, "
            "bandwidth_scale 0.5, 300 bases) were chosen on a Fashion-MNIST validation split (sweep_sgh_*.md) "
            "and not re-tuned on sift-synth; m = 300 bases and gamma = 1e-6 are the paper's, rho and the "
            "bandwidth (hyper-parameters in the paper) were swept there. A sift-synth validation sweep "
            "(rho_scale 0.25-2 x bandwidth_scale 0.5-2, sweep_sgh_sift-synth-100k.md) finds the same defaults "
            "best there too (precision@1000 0.278 / 0.382 at 32 / 64 bits, the other settings 0.254-0.278 / "
            "0.346-0.379), so the gap to ITQ is not a tuning artefact of Fashion-MNIST; sift-synth is a "
            "generator (SIFT-like histograms around 16384 drawn centres), not the paper's SIFT-1M, and its top-2% "
            "neighbourhoods are well served by ITQ's rotation of the PCA directions.",
            "sgh against agh, the graph method the paper's table is about: above it at every length on both "
            "sets, AGH with its paper's settings (m = 300, s = 2).",
            "agh below sh and lsh on sift-synth at 32 bits with the paper's settings (m = 300, s = 2): s = 3 and "
            "m = 1000 were tried too and do not change it (quality.md notes); on Fashion-MNIST AGH is above both.",
            "dgh against agh (the DGH paper: above AGH, the more so the longer the codes): on Fashion-MNIST "
            "level at 32 bits (-0.005) and above from 64 bits, the gap growing to +0.021 at 128; on sift-synth "
            "above at every length, both below LSH from 64 bits (the 300-anchor graph is coarse for that "
            "generator's clusters, as AGH's row shows). DGH ran with s = 3 anchors per point and rho = 10, the "
            "best of s 2-4 x rho 0.01-10 on a Fashion-MNIST validation split (sweep_dgh_fashion-mnist*.md; "
            "rho = 0.1 lost 0.03-0.05 there); DGH-I initialisation (from AGH's embedding).",
            "sgh against dgh: above it at every length on both sets, as in the paper's table.",
        ),
    ),
    Table(
        "splh",
        "SPLH (Wang, Kumar & Chang, ICML 2010), Figs 3 and 6: S3PLH with 1000 labels, and USPLH",
        "map; MNIST with 1000 labeled points (S3PLH) and SIFT / GIST with Euclidean neighbours (USPLH) in the "
        "paper; here Fashion-MNIST with labels, Fashion-MNIST and sift-synth with the top 2%",
        "map",
        (
            Run("splh-fashion-mnist", "fashion-mnist", SPLH_METHODS, (24, 48), LABELS),
            Run("usplh-fashion-mnist", "fashion-mnist", USPLH_METHODS, (32, 48), EUCLIDEAN_2PCT),
            Run("usplh-sift-synth", "sift-synth", USPLH_METHODS, (32, 48), EUCLIDEAN_2PCT, n=100_000),
        ),
        (
            *(Claim("splh", m) for m in SPLH_METHODS if m != "splh"),
            *(Claim("usplh", m) for m in USPLH_METHODS if m != "usplh"),
            Claim("pcah-adjusted", "pcah"),
            Claim("sh", "lsh", (24, 32)),
            Claim("sikh", "lsh", (24, 32)),
        ),
        (
            "sh below lsh with label ground truth at 24 bits: our LSH projects mean-centred data, which is strong "
            "on images whose pixels are all positive; with Euclidean ground truth SH is above LSH on both sets, "
            "as in the paper.",
            "sikh below lsh at 24-32 bits in every run, and falling from 32 to 48 bits on Fashion-MNIST with the "
            "top 2%: its kernel width is the one parameter (the paper gives none for these data); 1 x the RMS "
            "distance to the mean was the best of 0.25-4 x on a validation split (sweep_sikh_fashion-mnist.md: "
            "map 0.10-0.21 at 24 bits, all below LSH). SIKH's codes approximate the Gaussian kernel only as the "
            "bits grow (Raginsky & Lazebnik); at these short lengths random-projection LSH of centred data "
            "wins. With labels and on sift-synth SIKH does rise with the bits.",
            "pcah-adjusted below pcah on Fashion-MNIST for every eta tried (0.003-100, SPLH docstring): X_l^T S "
            "X_l is about the between-class scatter, whose directions PCA already ranks first on this set. "
            "Checked outside the pipeline: a plain numpy computation of the same method (top eigenvectors of "
            "C + eta s L from 1000 labeled database rows, signs at the mean, label map over 1000 queries) falls "
            "the same way as eta grows, 24 bits 0.281 (eta 0, PCAH) / 0.275 (0.1) / 0.267 (1) / 0.243 (10), "
            "48 bits 0.243 / 0.237 / 0.226 / 0.216: the drop is the method's on this data, not our "
            "implementation's; the sequential S3PLH, whose label updates target the pairs the earlier bits "
            "got wrong, is +0.13 / +0.18 above PCAH.",
            "usplh on sift-synth at 32 bits: below +0.01 over PCAH; eta = 2 is the best of 0.5-4 on validation "
            "splits at 100k and 400k rows (sweep_usplh_*.md).",
        ),
        rising=("sikh",),
    ),
)


def run_results(run: Run, folder: Path, compute: bool) -> dict | None:
    """The run's stored results (``folder/results.json``), first evaluating the methods it
    lacks when ``compute``: methods added later (or newly implemented) are evaluated alone
    and merged; the split and ground truth are stored in the dataset, so every batch is
    scored on the same queries and relevance."""
    path = folder / "results.json"
    stored = json.loads(path.read_text()) if path.exists() else None
    have = {r["method"] for r in stored["results"]} if stored else set()
    missing = [m for m in run.methods if m in METHOD_NAMES and m not in have]
    if not compute or not missing:
        return stored
    from dask_hashcodes import workflows

    options = {k: v for k, v in run.options.items() if v is not None}
    ds = workflows.load_dataset(run.dataset, n=run.n)
    report = workflows.evaluate(ds, methods=missing, bits=list(run.bits), queries=1000, seed=0, **options)
    stored = stored or {"dataset": report["dataset"], "ground_truth": report["ground_truth"], "results": []}
    stored["results"] += report["results"]
    folder.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(stored, indent=1) + "\n")
    tmp.replace(path)
    return stored


def _values(report: dict, metric: str) -> dict[tuple[str, int], float]:
    """(method, bits) -> metric; DisH's DisH2 row stands for dish (the paper's DisH2)."""
    out = {}
    for r in report["results"]:
        label = r.get("label", r["method"])
        if label == "dish (DisH1)":
            continue
        out[(r["method"], r["n_bits"])] = r["metrics"][metric]
    return out


def render(table: Table, reports: dict[str, dict]) -> tuple[str, int]:
    """The table's markdown and the number of failed claims."""
    lines = [f"# {table.title}", "", f"Paper's protocol: {table.paper_protocol}.", ""]
    lines += [f"Metric: **{table.metric}**; test split, 1000 queries, seed 0; `benchmarks/tables.py`.", ""]
    failed = 0
    for run in table.runs:
        report = reports.get(run.name)
        lines += [f"## {run.name}: {run.dataset}" + (f" ({run.n:,} rows)" if run.n else ""), ""]
        if report is None:
            lines += ["not run yet", ""]
            continue
        values = _values(report, table.metric)
        lines += ["| method | " + " | ".join(f"{b} bits" for b in run.bits) + " |", "|" + "---|" * (len(run.bits) + 1)]
        for method in run.methods:
            if method not in METHOD_NAMES:
                lines.append(f"| {method} | " + " | ".join("not implemented" for _ in run.bits) + " |")
                continue
            cells = [f"{values[(method, b)]:.4f}" if (method, b) in values else "not run yet" for b in run.bits]
            lines.append(f"| {method} | " + " | ".join(cells) + " |")
        lines += ["", "| paper's ordering | " + " | ".join(f"{b} bits" for b in run.bits) + " |"]
        lines.append("|" + "---|" * (len(run.bits) + 1))
        for claim in table.claims:
            if claim.better not in run.methods or claim.worse not in run.methods:
                continue
            cells = []
            for b in run.bits:
                a, c = values.get((claim.better, b)), values.get((claim.worse, b))
                if (claim.bits and b not in claim.bits) or a is None or c is None:
                    cells.append("")
                    continue
                ok = a > c
                failed += not ok
                cells.append(f"yes (+{a - c:.4f})" if ok else f"**NO** ({a - c:+.4f})")
            if any(cells):
                lines.append(f"| {claim.better} > {claim.worse} | " + " | ".join(cells) + " |")
        for method in (m for m in table.rising if m in run.methods):
            series = [values[(method, b)] for b in run.bits if (method, b) in values]
            ok = all(b > a for a, b in zip(series, series[1:]))
            failed += not ok
            lines.append(f"| {method} rises with the bits | {'yes' if ok else '**NO**'} |" + " |" * (len(run.bits) - 1))
        lines.append("")
    lines += ["## Cells where our ordering differs from the paper's", ""]
    lines += [f"- {note}" for note in table.notes] + [""]
    return "\n".join(lines), failed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="comma-separated table names (default: all)")
    ap.add_argument("--render-only", action="store_true", help="rebuild the tables from the stored reports")
    args = ap.parse_args(argv)
    wanted = set(args.only.split(",")) if args.only else {t.name for t in TABLES}
    tables = [t for t in TABLES if t.name in wanted]
    runs = {run.name: run for t in tables for run in t.runs}
    compute = not args.render_only
    reports = {}
    cluster = None
    if compute:
        from distributed import Client, LocalCluster

        cluster = LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None)
        client = Client(cluster)
    try:
        for name, run in runs.items():
            started = time.perf_counter()
            reports[name] = run_results(run, OUT / "reports" / name, compute)
            print(f"{name}: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    finally:
        if cluster is not None:
            client.close()
            cluster.close()
    reports = {name: r for name, r in reports.items() if r is not None}
    for table in tables:
        text, failed = render(table, reports)
        (OUT / f"{table.name}.md").write_text(text)
        print(f"{table.name}.md: {failed} paper orderings not reproduced (see its notes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
