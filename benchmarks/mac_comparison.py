"""The MAC paper's comparison (Figs. 2-3 and 5) on a labelled dataset: ITQ, KSH, the two-step
quad and cut, and MACquad and MACcut, trained on the same ``--labeled`` points, with label
ground truth on the evaluation protocol's test queries; and the time of one MAC iteration
against one whole two-step run (paper Sec. 4.3), in the same run.

    .venv/bin/python benchmarks/mac_comparison.py --dataset fashion-mnist --bits 16 \\
        --labeled 5000 --out benchmarks/results/mac/fashion-mnist-linear-b16

(the committed results run one length per command, so each lands as it finishes;
``--bits 16,32,48`` makes one report of all three).

Writes the evaluation report (report.json, report.md, plots including ``training.png``: the
loss curves) into ``--out`` and a summary ``--out``.md beside it: per length and method map,
precision@1000, the validation precision that early stopping compares (quad, cut and MAC), the
training loss L(h(X)) of the affinity pairs (MAC variants and their two-step starts: the same
pairs, drawn with the seed), training time, and for each MAC variant the mean time of an
iteration that refitted h (Z-step + h-step) divided by the two-step method's whole training
time.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness.measure import machine_info  # noqa: E402
from dask_hashcodes import workflows  # noqa: E402
from dask_hashcodes.distributed.cluster import connect, disconnect  # noqa: E402

TWO_STEP = {"maccut": "cut", "macquad": "quad"}
LOSS_NAMES = {"ksh": "KSH", "esplh": "eSPLH"}
TRUTH_NAMES = {"labels": "label", "euclidean": "Euclidean"}
VALIDATION_DATABASES = {
    "training": "the training points",
    "held-out": "each other (even-numbered rows the queries, odd-numbered the database)",
}


H_STEPS = {
    "refit": "the refitted SVMs (the paper's)",
    "lower-loss": "of the refit and the refit keeping each bit's better-fitting previous SVM, the lower L(h(X))",
}


def svm_c_value(text: str) -> float | None:
    """--svm-c: 'validation' (None: chosen on the validation rows) or a positive number."""
    if text == "validation":
        return None
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"--svm-c must be 'validation' or a positive number, got {text!r}")
    return value


def svm_c_text(args) -> str:
    if args.svm_c is None:
        return "the SVMs' C chosen on the validation rows from 1, 10, 100, 1000 (column C)"
    return f"C = {args.svm_c:g} for every SVM of quad, cut and MAC"


def affinity_text(args) -> str:
    if args.affinity == "labels":
        return "label affinities"
    search = "exact" if args.knn_search == "exact" else "searched among nearby k-means cells (approximate)"
    return f"knn affinities (Euclidean neighbours {search})"


def iteration_seconds(training: dict) -> float | None:
    """Mean seconds of the MAC iterations that ran an h-step (Z-step + h-step)."""
    full = [e["z_seconds"] + e["h_seconds"] for e in training.get("mac_path", [])[1:] if "h_seconds" in e]
    return float(np.mean(full)) if full else None


def validation_rows(report: dict) -> str:
    sizes = sorted({r["training"]["n_validation"] for r in report["results"] if "n_validation" in r["training"]})
    return ", ".join(map(str, sizes)) or "no"


def summary(report: dict, args) -> str:
    rows = {(r["method"], r["n_bits"]): r for r in report["results"]}
    lines = [
        f"# MAC comparison on {report['dataset']['source']} ({args.hash_function} hash functions)",
        "",
        # --summary-only rewrites the summary of the run made by the same command without it
        f"- command: `{' '.join(a for a in sys.argv if a != '--summary-only')}`",
        f"- {args.labeled} training points drawn with the seed from the database rows (every method), "
        f"{affinity_text(args)} ({args.kappa_plus} similar + {args.kappa_minus} dissimilar pairs per point), "
        f"{LOSS_NAMES[args.loss]} loss, {svm_c_text(args)}; MAC's h-step: {H_STEPS[args.h_step]}; test split of "
        f"{report['split']['n_query']} queries, {TRUTH_NAMES[report['ground_truth']['kind']]} ground truth",
        f"- early stopping: {validation_rows(report)} validation rows drawn from the database rows apart from the "
        f"training points, ranked against {VALIDATION_DATABASES[args.validation_database]}; an iteration is kept "
        "only if it lowers no validation precision@kappa+ (the 'validation' column: the kept h's)"
        + (" and raises no L(h(X))" if args.early_stopping == "precision-and-loss" else " (the paper's rule)"),
        f"- seed {args.seed}; machine: {report['machine']['cpu_model']}, cluster {report['cluster']}",
        f"- L(h(X)): the {LOSS_NAMES[args.loss]} loss of the hash function's codes of the training points over the affinity pairs "
        "(lower is better); 'iteration / two-step': mean time of a MAC iteration that refitted h, over the "
        "two-step method's whole training time",
        "",
        "| bits | method | map | precision@1000 | validation | C | L(h(X)) | iterations (kept) | stopped | train s | "
        "iteration / two-step |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (method, bits), r in sorted(rows.items(), key=lambda kv: (kv[0][1], args.methods.index(kv[0][0]))):
        t = r["training"]
        steps = t.get("mac_path", [])
        kept = sum(1 for e in steps[1:] if e.get("kept") and e.get("bits_changed", 0) > 0)
        ratio = "—"
        if method in TWO_STEP and (TWO_STEP[method], bits) in rows and iteration_seconds(t):
            ratio = f"{iteration_seconds(t) / rows[(TWO_STEP[method], bits)]['training']['train_seconds']:.2f}"
        loss = f"{t['loss']:.6g}" if "loss" in t else "—"
        validation = f"{t['validation_precision']:.4f}" if t.get("validation_precision") is not None else "—"
        lines.append(
            f"| {bits} | {method} | {r['metrics']['map']:.4f} | {r['metrics']['precision@1000']:.4f} | "
            f"{validation} | {t.get('svm_c', '—')} | {loss} | "
            f"{max(len(steps) - 1, 0)} ({kept}) | {t.get('stopped', '—')} | {t['train_seconds']:.1f} | {ratio} |"
        )
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="fashion-mnist")
    parser.add_argument("--rows", type=int, default=None, help="rows of a generated dataset (sift-synth)")
    parser.add_argument(
        "--ground-truth",
        default=None,
        choices=("labels", "euclidean"),
        help="the test queries' relevant points (default: labels when the dataset has them)",
    )
    parser.add_argument("--top-k", type=int, default=None, help="Euclidean ground truth: the true top-k")
    parser.add_argument("--bits", default="16,32,48")
    parser.add_argument("--methods", default="itq,ksh,quad,cut,macquad,maccut")
    parser.add_argument("--labeled", type=int, default=5000)
    parser.add_argument("--hash-function", default="linear", choices=("linear", "kernel"))
    parser.add_argument("--loss", default="ksh", choices=sorted(LOSS_NAMES), help="MAC's affinity loss")
    parser.add_argument("--kappa-plus", type=int, default=100, help="similar pairs per point (paper: 100)")
    parser.add_argument("--kappa-minus", type=int, default=500, help="dissimilar pairs per point (paper: 500)")
    parser.add_argument(
        "--affinity", default="labels", choices=("labels", "knn"), help="similar = same class, or Euclidean neighbours"
    )
    parser.add_argument(
        "--knn-search", default="exact", choices=("exact", "cells"), help="knn affinities' neighbour search"
    )
    parser.add_argument("--max-iter", type=int, default=None, help="MAC iterations at most (default: MAC's)")
    parser.add_argument(
        "--svm-c",
        type=svm_c_value,
        default=None,
        help="the SVMs' C for quad, cut and MAC, or 'validation' (the default): chosen on the validation rows",
    )
    parser.add_argument(
        "--mu-start", type=float, default=None, help="MAC's first penalty mu_1 (default: the paper's, by the solver)"
    )
    parser.add_argument("--h-step", default="refit", choices=("refit", "lower-loss"), help="MAC's h-step rule")
    parser.add_argument(
        "--early-stopping",
        default="precision-and-loss",
        choices=("precision", "precision-and-loss"),
        help="MAC discards an iteration that lowers the validation precision (the paper's), or also one that "
        "raises L(h(X))",
    )
    parser.add_argument(
        "--validation-database",
        default="held-out",
        choices=("held-out", "training"),
        help="early stopping ranks half the validation rows against the other half, or against the training points",
    )
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="fixes the test split, the training points, the pairs and every method's start",
    )
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--summary-only",
        action="store_true",
        help="rewrite --out.md from --out/report.json without training (same machine)",
    )
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    args.methods = args.methods.split(",")
    if args.summary_only:
        report = json.loads(Path(args.out, "report.json").read_text())
        report["machine"] = machine_info()
        Path(args.out + ".md").write_text(summary(report, args))
        return 0
    client = connect()
    try:
        report = workflows.evaluate(
            workflows.load_dataset(args.dataset, n=args.rows),
            ground_truth=args.ground_truth,
            top_k=args.top_k,
            methods=args.methods,
            bits=[int(b) for b in args.bits.split(",")],
            queries=args.queries,
            seed=args.seed,
            out=args.out,
            ks=[100, 1000],
            params={
                "n_labeled": args.labeled,
                "mac": {
                    "hash_function": args.hash_function,
                    "n_similar": args.kappa_plus,
                    "n_dissimilar": args.kappa_minus,
                    "affinity": args.affinity,
                    "knn_search": args.knn_search,
                    **({} if args.max_iter is None else {"max_iter": args.max_iter}),
                    "loss": args.loss,
                    "svm_c": args.svm_c,
                    "h_step": args.h_step,
                    "mu_start": args.mu_start,
                    "early_stopping": args.early_stopping,
                    "validation_database": args.validation_database,
                },
            },
        )
    finally:
        disconnect(client)
    report["machine"] = machine_info()
    Path(args.out + ".md").write_text(summary(report, args))
    print(Path(args.out + ".md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
