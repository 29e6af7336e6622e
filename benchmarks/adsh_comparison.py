"""The ADSH paper's Table 1 comparison on a labelled dataset: ADSH against ITQ and the
supervised baselines SDH, COSDISH and DPSH (trained on 5000 database rows drawn with the
seed, the paper's protocol for them): map and precision@1000 per code length on the
evaluation protocol's test queries (the rest is the database; ADSH learns its codes),
training time (for ADSH split into the network and the V-step), ADSH's validation map
per outer iteration, and which pairs of methods are in the other order than in the paper's
Table 1 on CIFAR-10.

    .venv/bin/python benchmarks/adsh_comparison.py --dataset fashion-mnist --bits 12,24,32,48 \\
        --out benchmarks/results/adsh/fashion-mnist

Writes the evaluation report into ``--out`` and a summary ``--out``.md beside it;
``--summary-only`` rewrites that summary from ``--out``/report.json without training.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness.measure import machine_info  # noqa: E402
from dask_hashcodes import workflows  # noqa: E402
from dask_hashcodes.distributed.cluster import connect, disconnect  # noqa: E402

# The ADSH paper's Table 1 on CIFAR-10 (map at 12 / 24 / 32 / 48 bits): its single-label
# ten-class set, the closest of its three to Fashion-MNIST
PAPER_CIFAR10 = {
    "itq": (0.2619, 0.2754, 0.2861, 0.2941),
    "sdh": (0.4539, 0.6334, 0.6514, 0.6603),
    "cosdish": (0.5831, 0.6614, 0.6802, 0.7016),
    "dpsh": (0.6818, 0.7204, 0.7341, 0.7464),
    "adsh": (0.8898, 0.9280, 0.9310, 0.9390),
}
PAPER_BITS = (12, 24, 32, 48)


def orderings(report: dict) -> list[str]:
    """Per code length: the methods in our map order and in the paper's (CIFAR-10), and the
    pairs whose order differs."""
    lines = [
        "## Orderings against the ADSH paper (its Table 1, CIFAR-10)",
        "",
        "| bits | ours, by map | the paper's, by map | pairs in the other order |",
        "|---|---|---|---|",
    ]
    for bits in sorted({r["n_bits"] for r in report["results"]}):
        ours = {r["method"]: r["metrics"]["map"] for r in report["results"] if r["n_bits"] == bits}
        if bits not in PAPER_BITS:
            continue
        paper = {m: PAPER_CIFAR10[m][PAPER_BITS.index(bits)] for m in ours if m in PAPER_CIFAR10}
        ranked = sorted(paper, key=lambda m: -ours[m])
        differ = [
            f"{a} > {b} (paper: {b} > {a})"
            for i, a in enumerate(ranked)
            for b in ranked[i + 1 :]
            if ours[a] > ours[b] and paper[b] > paper[a]
        ]
        lines.append(
            f"| {bits} | {' > '.join(ranked)} | {' > '.join(sorted(paper, key=lambda m: -paper[m]))} | "
            f"{'; '.join(differ) or 'none'} |"
        )
    return lines


def summary(report: dict, args) -> str:
    lines = [
        f"# ADSH comparison on {report['dataset']['source']}",
        "",
        # --summary-only rewrites the summary of the run made by the same command without it
        f"- command: `{' '.join(a for a in sys.argv if a != '--summary-only')}`",
        f"- test split of {report['split']['n_query']} queries, the other rows the database (ADSH learns their codes "
        f"and encodes the queries with its network); label ground truth; ADSH parameters {args.params}, DPSH parameters {args.dpsh_params}",
        f"- machine: {report['machine']['cpu_model']}, {report['machine'].get('cores')} cores, cluster {report['cluster']}",
        "",
        "| bits | method | map | precision@1000 | train s | network s | V-step s | validation map by outer iteration |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in report["results"]:
        t = r["training"]
        curve = [p["validation_map"] for p in t.get("adsh_path", []) if "validation_map" in p]
        shown = ", ".join(f"{v:.3f}" for v in curve[:: max(1, len(curve) // 10)]) if curve else "—"
        lines.append(
            f"| {r['n_bits']} | {r['method']} | {r['metrics']['map']:.4f} | {r['metrics']['precision@1000']:.4f} | "
            f"{t['train_seconds']:.1f} | {t.get('network_seconds', '—')} | {t.get('v_step_seconds', '—')} | {shown} |"
        )
    lines += ["", *orderings(report)]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="fashion-mnist")
    parser.add_argument("--bits", default="12,24,32,48")
    parser.add_argument("--methods", default="itq,sdh,cosdish,dpsh,adsh")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--params", default="{}", help="ADSH parameters as JSON, e.g. '{\"outer_iter\": 30}'")
    parser.add_argument("--dpsh-params", default="{}", help="DPSH parameters as JSON, e.g. '{\"n_labeled\": 69000}'")
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--summary-only",
        action="store_true",
        help="rewrite --out.md from --out/report.json without training (same machine)",
    )
    args = parser.parse_args(argv)
    if args.summary_only:
        report = json.loads(Path(args.out, "report.json").read_text())
        report["machine"] = machine_info()
        Path(args.out + ".md").write_text(summary(report, args))
        return 0
    client = connect()
    try:
        report = workflows.evaluate(
            workflows.load_dataset(args.dataset),
            methods=args.methods.split(","),
            bits=[int(b) for b in args.bits.split(",")],
            queries=args.queries,
            seed=0,
            out=args.out,
            ks=[100, 1000],
            params={"adsh": json.loads(args.params), "dpsh": json.loads(args.dpsh_params)},
        )
    finally:
        disconnect(client)
    report["machine"] = machine_info()
    Path(args.out + ".md").write_text(summary(report, args))
    print(Path(args.out + ".md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
