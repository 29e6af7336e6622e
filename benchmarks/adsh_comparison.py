"""The ADSH paper's Table 1 comparison on a labelled dataset: ADSH against ITQ and the
supervised baselines SDH, COSDISH and DPSH (trained on 5000 database rows drawn with the
seed, the paper's protocol for them): map and precision@1000 per code length on the
evaluation protocol's test queries (the rest is the database; ADSH learns its codes),
training time (for ADSH split into the network and the V-step) and ADSH's validation map
per outer iteration.

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
from dhash import workflows  # noqa: E402
from dhash.distributed.cluster import connect, disconnect  # noqa: E402


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
            workflows.dataset(args.dataset),
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
