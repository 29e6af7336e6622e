"""Report directory: report.json (data_schemas/report.schema.json), report.md, PNG plots."""

from __future__ import annotations

import datetime as _dt

import numpy as np

from dhash import __version__
from dhash.storage.atomic import atomic_output
from dhash.storage.jsonio import dumps
from dhash.storage.location import Location, resolve

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
    dish = [r for r in report["results"] if "objective" in r["training"] and "DisH1" not in r.get("label", "")]
    mac = [r for r in report["results"] if has_mac_path(r["training"])]
    adsh = [r for r in report["results"] if r["training"].get("adsh_path")]
    panels = 2 * bool(dish) + 2 * bool(mac) + 2 * bool(adsh)
    if panels:
        fig = Figure(figsize=(5 * panels, 3.8))
        axes = list(fig.subplots(1, panels, squeeze=False)[0])
        if dish:
            _plot_dish(dish, axes.pop(0), axes.pop(0))
        if mac:
            _plot_mac(mac, axes.pop(0), axes.pop(0))
        if adsh:
            _plot_adsh(adsh, axes.pop(0), axes.pop(0))
        fig.tight_layout()
        _save(fig, out, "training.png")
        files.append("training.png")
    return files


def has_mac_path(training: dict) -> bool:
    """A MAC fit that ran iterations (its training stats list them; ITQ's count is an int)."""
    steps = training.get("mac_path")
    return isinstance(steps, list) and len(steps) > 1


def _plot_dish(results: list, objective_ax, residual_ax) -> None:
    for r in results:
        label = f"{r.get('label', r['method'])} {r['n_bits']}b"
        obj = np.asarray(r["training"]["objective"])
        objective_ax.plot(np.arange(1, len(obj) + 1), obj / obj[0], marker=".", label=label)
        if "consensus_residual" in r["training"]:
            residual_ax.semilogy(
                np.arange(1, len(obj) + 1), r["training"]["consensus_residual"], marker=".", label=label
            )
    objective_ax.set(xlabel="outer iteration", ylabel="objective (3) / first value", title="DisH objective")
    residual_ax.set(
        xlabel="outer iteration", ylabel="max over edges ||C_i - C_j|| / ||C_i||", title="consensus residual"
    )
    for ax in (objective_ax, residual_ax):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)


def _plot_mac(results: list, loss_ax, precision_ax) -> None:
    """MAC per iteration: L(h(X)) of the hash function kept so far (solid; discarded candidates
    as x), L(Z) of the auxiliary codes (dotted), both relative to the two-step start; the
    validation precision of the kept function (discarded candidates as x)."""
    for r in results:
        label = f"{r.get('label', r['method'])} {r['n_bits']}b"
        steps = r["training"]["mac_path"]
        start = steps[0]["loss_h"]
        kept_loss, kept_precision, current = [], [], (start, steps[0].get("validation_precision"))
        for e in steps:
            if e.get("kept", True):
                current = (e["loss_h"], e.get("validation_precision", current[1]) or current[1])
            kept_loss.append(current[0] / start)
            kept_precision.append(current[1])
        it = [e["iteration"] for e in steps]
        line = loss_ax.plot(it, kept_loss, marker=".", label=f"{label} L(h(X))")[0]
        colour = line.get_color()
        loss_ax.plot(it, [e["loss_z"] / start for e in steps], ls=":", color=colour, label=f"{label} L(Z)")
        dropped = [e for e in steps if not e.get("kept", True)]
        loss_ax.plot([e["iteration"] for e in dropped], [e["loss_h"] / start for e in dropped], "x", color=colour)
        if kept_precision[0] is not None:
            precision_ax.plot(it, kept_precision, marker=".", color=colour, label=label)
            precision_ax.plot(
                [e["iteration"] for e in dropped], [e["validation_precision"] for e in dropped], "x", color=colour
            )
    loss_ax.set(xlabel="MAC iteration (0: two-step start)", ylabel="loss / L(h(X)) of the start", title="MAC loss")
    precision_ax.set(xlabel="MAC iteration (x: discarded)", ylabel="validation precision", title="early stopping")
    for ax in (loss_ax, precision_ax):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)


def _plot_adsh(results: list, loss_ax, map_ax) -> None:
    """ADSH: the network's loss per epoch (per pair, up to a constant) and the validation map
    after each outer iteration."""
    for r in results:
        label = f"{r.get('label', r['method'])} {r['n_bits']}b"
        path = r["training"]["adsh_path"]
        line = loss_ax.plot(np.arange(1, len(path) + 1), [e["loss"] for e in path], label=label)[0]
        scored = [e for e in path if "validation_map" in e]
        if scored:
            map_ax.plot(
                [e["outer"] for e in scored],
                [e["validation_map"] for e in scored],
                marker=".",
                color=line.get_color(),
                label=label,
            )
    loss_ax.set(xlabel="epoch (T_in per outer iteration)", ylabel="loss per pair + const", title="ADSH network loss")
    map_ax.set(xlabel="outer iteration", ylabel="validation map", title="ADSH validation")
    for ax in (loss_ax, map_ax):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)


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
