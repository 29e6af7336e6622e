"""Report directory: report.json (data_schemas/report.schema.json), report.md, PNG plots."""

from __future__ import annotations

import datetime as _dt

from dask_hashcodes import __version__
from dask_hashcodes.hashing.registry import method_class
from dask_hashcodes.storage.atomic import atomic_output
from dask_hashcodes.storage.jsonio import dumps
from dask_hashcodes.storage.location import Location, resolve

REPORT_SCHEMA = "dhash.report/1"
TABLE_KS = (100, 1000)


def build_report(
    *, dataset: dict, split: dict, truth: dict, results: list[dict], cluster: dict, protocol: dict
) -> dict:

    return {
        "schema": REPORT_SCHEMA,
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "library_version": __version__,
        "dataset": dataset,
        "split": split,
        "ground_truth": truth,
        "protocol": protocol,
        "cluster": cluster,
        "results": results,
    }


def quality_table(report: dict) -> str:
    """Markdown table: one row per (method, bits)."""
    ks = [k for k in TABLE_KS if any(f"precision@{k}" in r["metrics"] for r in report["results"])]
    head = (
        ["method", "bits", "map", "map_tie"]
        + [f"P@{k}" for k in ks]
        + ["P@r2", "failed@r2", "train s", "encode s", "search s"]
    )
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in report["results"]:
        m, t = r["metrics"], r["timing"]
        std = r.get("metrics_std", {}).get("map")
        cells = [
            r.get("label", r["method"]),
            str(r["n_bits"]),
            f"{m['map']:.4f}" + (f" ± {std:.4f}" if std is not None else ""),
            f"{m['map_tie']:.4f}",
        ]
        cells += [f"{m[f'precision@{k}']:.4f}" for k in ks]
        cells += [
            f"{m['precision@radius2']:.4f}",
            f"{m['failed_queries@radius2']:.3f}",
            f"{t['train_seconds']:.1f}",
            f"{t['encode_seconds']:.1f}",
            f"{t['search_seconds']:.1f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def search_label(row: dict) -> str:
    """A neighbour-recall search's column name."""
    if row["search"] == "hamming":
        return "Hamming order"
    if row["search"] == "rerank":
        return f"top-{row['candidates']} re-ranked"
    return f"IVF{row['lists']} nprobe {row['nprobe']}, top-{row['candidates']} re-ranked"


def neighbour_table(report: dict) -> str:
    """Markdown table of recall@k of the exact Euclidean neighbours, one row per (method,
    bits) that measured it; empty when none did."""
    measured = [r for r in report["results"] if "neighbour_recall" in r["metrics"]]
    if not measured:
        return ""
    first = measured[0]["metrics"]["neighbour_recall"]
    head = ["method", "bits"] + [search_label(s) for s in first["searches"]]
    lines = [
        f"Recall@{first['k']} of the exact Euclidean top-{first['k']} (exact squared L2 re-ranking of the Hamming "
        "candidates):",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for r in measured:
        cells = [r.get("label", r["method"]), str(r["n_bits"])]
        cells += [f"{s['recall']:.4f}" for s in r["metrics"]["neighbour_recall"]["searches"]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def render_markdown(report: dict) -> str:
    ds, sp, gt, pr, cl = (
        report["dataset"],
        report["split"],
        report["ground_truth"],
        report["protocol"],
        report["cluster"],
    )
    return "\n".join(
        [
            f"# Retrieval report: {ds['source']} ({ds['n']} x {ds['d']} {ds['dtype']})",
            "",
            f"- dataset: `{ds['path']}`",
            f"- split `{sp['name']}`: {sp['n_query']} queries, {sp['n_database']} database points (training set = database), "
            f"seed {sp['seed']}, query sha256 `{sp['query_sha256'][:16]}…`",
            f"- ground truth: {gt['rule']}" + (f" (K = {gt['k']})" if gt.get("k") else ""),
            "- ranking: full Hamming ranking, ties broken by database id ascending (`map`); `map_tie` = expected AP over "
            "random orderings within equal distances; `map@K` normalised by relevant items retrieved in the top K; "
            "precision@radius2 counts a query retrieving nothing as precision 0",
            f"- cluster: {cl.get('workers')} workers, {cl.get('threads')} threads; seed {pr.get('seed')}",
            "",
            quality_table(report),
            "",
            neighbour_table(report),
            "Plots: `precision_at_k.png`, `pr_curve.png`" + (", `training.png`" if pr.get("has_training_plot") else ""),
            "",
        ]
    )


def _plot(report: dict, out: Location) -> list[str]:
    # Figure objects, not pyplot: no global backend switch (inline plots in Jupyter keep working)
    from matplotlib.figure import Figure

    bits = sorted({r["n_bits"] for r in report["results"]})
    files = []
    for kind in ("precision_at_k", "pr_curve"):
        fig = Figure(figsize=(4.5 * len(bits), 3.8))
        axes = fig.subplots(1, len(bits), squeeze=False)
        for ax, b in zip(axes[0], bits):
            for r in (r for r in report["results"] if r["n_bits"] == b):
                m = r["metrics"]
                label = r.get("label", r["method"])
                if kind == "precision_at_k":
                    ks = sorted(
                        int(k.split("@")[1]) for k in m if k.startswith("precision@") and k != "precision@radius2"
                    )
                    ax.plot(ks, [m[f"precision@{k}"] for k in ks], marker="o", label=label)
                    ax.set_xscale("log")
                    ax.set_xlabel("K (retrieved)")
                    ax.set_ylabel("precision@K")
                else:
                    ax.plot(m["pr_curve"]["recall"], m["pr_curve"]["precision"], marker=".", label=label)
                    ax.set_xlabel("recall (Hamming radius 0..bits)")
                    ax.set_ylabel("precision")
            ax.set_title(f"{b} bits")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        fig.tight_layout()
        name = f"{kind}.png"
        _save(fig, out, name)
        files.append(name)
    groups = training_plots(report["results"])
    if groups:
        fig = Figure(figsize=(5 * sum(plot.n_axes for plot in groups), 3.8))
        axes = list(fig.subplots(1, sum(plot.n_axes for plot in groups), squeeze=False)[0])
        for plot, rows in groups.items():
            plot.draw(rows, [axes.pop(0) for _ in range(plot.n_axes)])
        fig.tight_layout()
        _save(fig, out, "training.png")
        files.append("training.png")
    return files


def _training_plot(row: dict):
    """The estimator's training plot for a report row (``Hasher.training_plot``); none for a
    method this version does not know (a report written by another version)."""
    try:
        cls = method_class(row["method"])
    except KeyError:
        return None
    return cls.training_plot(row)


def training_plots(results: list[dict]) -> dict:
    """The panels of ``training.png``: each estimator's training plot with the report rows it
    draws, in the order the rows first name them."""
    groups: dict = {}
    for row in results:
        plot = _training_plot(row)
        if plot is not None:
            groups.setdefault(plot, []).append(row)
    return groups


def has_training_plot(results: list[dict]) -> bool:
    """Whether a report of ``results`` has a ``training.png``."""
    return bool(training_plots(results))


def write_report(out, report: dict, *, overwrite: bool = True) -> Location:
    """Write the report directory atomically (a failed run leaves the previous report)."""
    with atomic_output(out, kind="report", overwrite=overwrite) as tmp:
        report["plots"] = _plot(report, tmp)
        tmp.child("report.json").write_text(dumps(report) + "\n")
        tmp.child("report.md").write_text(render_markdown(report))
    return resolve(out)


def _save(fig, out: Location, name: str) -> None:
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    out.child(name).write_bytes(buffer.getvalue())
